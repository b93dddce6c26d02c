//! What `/metrics` reads from the database at each scrape: counts by state, targets and compute
//! hours, across accounts (the route is the operator's, behind its own token).

use sqlx::PgPool;

/// Tasks of the jobs not completed yet, by account, job and state.
pub struct TaskCount {
    pub account: String,
    pub job: String,
    pub state: String,
    pub count: i64,
}

pub async fn task_counts(db: &PgPool) -> sqlx::Result<Vec<TaskCount>> {
    sqlx::query_as!(
        TaskCount,
        r#"SELECT j.account AS "account!", j.id AS "job!", t.state AS "state!", count(*) AS "count!"
           FROM tasks t JOIN jobs j ON j.pk = t.job_pk
           WHERE j.state <> 'completed'
           GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"#
    )
    .fetch_all(db)
    .await
}

/// Nodes by account, pool and state.
pub struct NodeCount {
    pub account: String,
    pub pool: String,
    /// Its Docker engine's URL, `local`, or empty while it has not started.
    pub host: String,
    pub state: String,
    pub count: i64,
}

pub async fn node_counts(db: &PgPool) -> sqlx::Result<Vec<NodeCount>> {
    sqlx::query_as!(
        NodeCount,
        r#"SELECT p.account AS "account!", p.id AS "pool!", coalesce(n.host, '') AS "host!",
                  n.state AS "state!", count(*) AS "count!"
           FROM nodes n JOIN pools p ON p.pk = n.pool_pk
           GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"#
    )
    .fetch_all(db)
    .await
}

/// Each pool's target.
pub struct PoolTarget {
    pub account: String,
    pub pool: String,
    pub target: i32,
}

pub async fn pool_targets(db: &PgPool) -> sqlx::Result<Vec<PoolTarget>> {
    sqlx::query_as!(
        PoolTarget,
        r#"SELECT account AS "account!", id AS "pool!", target_dedicated_nodes AS "target!"
           FROM pools ORDER BY 1, 2"#
    )
    .fetch_all(db)
    .await
}

/// Compute hours (node-hours) so far, by account, pool and billing plan (empty: none).
pub struct Hours {
    pub account: String,
    pub pool: String,
    pub billing_plan: String,
    pub hours: f64,
}

pub async fn compute_hours(db: &PgPool) -> sqlx::Result<Vec<Hours>> {
    sqlx::query_as!(
        Hours,
        r#"SELECT account AS "account!", pool_id AS "pool!",
                  coalesce(billing_plan, '') AS "billing_plan!",
                  sum(extract(epoch FROM coalesce(ended_at, now()) - started_at))::float8 / 3600
                      AS "hours!"
           FROM usage_records GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"#
    )
    .fetch_all(db)
    .await
}
