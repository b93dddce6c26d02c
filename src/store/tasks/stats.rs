//! What tasks used, summed for the `stats` of a task or a job (read only when asked for:
//! `$expand=stats`).

use sqlx::PgExecutor;

/// Totals over some tasks. Wall clock time counts every attempt, a running one up to now;
/// wait time is each task's creation to its last attempt's start.
#[derive(Debug, Default)]
pub struct UsageTotals {
    pub wall_ms: i64,
    pub user_ms: i64,
    pub kernel_ms: i64,
    pub read_bytes: i64,
    pub write_bytes: i64,
    pub wait_ms: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub retries: i64,
}

macro_rules! totals {
    ($where:literal, $arg:expr) => {
        sqlx::query_as!(
            UsageTotals,
            r#"SELECT
                COALESCE(SUM(wall_clock_ms + CASE WHEN state IN ('preparing', 'running') AND start_time IS NOT NULL
                    THEN GREATEST(0, (extract(epoch FROM now() - start_time) * 1000)::bigint) ELSE 0 END), 0)::bigint AS "wall_ms!",
                COALESCE(SUM(user_cpu_ms), 0)::bigint AS "user_ms!",
                COALESCE(SUM(kernel_cpu_ms), 0)::bigint AS "kernel_ms!",
                COALESCE(SUM(read_bytes), 0)::bigint AS "read_bytes!",
                COALESCE(SUM(write_bytes), 0)::bigint AS "write_bytes!",
                COALESCE(SUM(CASE WHEN start_time IS NOT NULL
                    THEN GREATEST(0, (extract(epoch FROM start_time - creation_time) * 1000)::bigint) ELSE 0 END), 0)::bigint AS "wait_ms!",
                COUNT(*) FILTER (WHERE state = 'completed' AND result = 'success') AS "succeeded!",
                COUNT(*) FILTER (WHERE state = 'completed' AND result = 'failure') AS "failed!",
                COALESCE(SUM(retry_count), 0)::bigint AS "retries!"
             FROM tasks "# + $where,
            $arg
        )
    };
}

pub async fn of_task(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<UsageTotals> {
    totals!("WHERE pk = $1", pk).fetch_one(db).await
}

pub async fn of_job(db: impl PgExecutor<'_>, job_pk: i64) -> sqlx::Result<UsageTotals> {
    totals!("WHERE job_pk = $1", job_pk).fetch_one(db).await
}

/// Over every task of the account's jobs (Azure's lifetime job statistics, for the jobs that
/// exist).
pub async fn of_account(db: impl PgExecutor<'_>, account: &str) -> sqlx::Result<UsageTotals> {
    totals!(
        "WHERE job_pk IN (SELECT pk FROM jobs WHERE account = $1)",
        account
    )
    .fetch_one(db)
    .await
}

/// A task on a node, for the node's `recentTasks`.
#[derive(Debug)]
pub struct TaskOnNode {
    pub job_id: String,
    pub task_id: String,
    pub state: crate::domain::job::TaskState,
    pub start_time: Option<chrono::DateTime<chrono::Utc>>,
    pub retry_count: i32,
    pub requeue_count: i32,
}

/// The tasks on the node now, the latest started first (at most 100).
pub async fn on_node(db: impl PgExecutor<'_>, node_pk: i64) -> sqlx::Result<Vec<TaskOnNode>> {
    sqlx::query_as!(
        TaskOnNode,
        r#"SELECT j.id AS job_id, t.id AS task_id, t.state AS "state: _", t.start_time, t.retry_count, t.requeue_count
         FROM tasks t JOIN jobs j ON j.pk = t.job_pk
         WHERE t.node_pk = $1 AND t.state IN ('preparing', 'running')
         ORDER BY t.start_time DESC NULLS LAST LIMIT 100"#,
        node_pk
    )
    .fetch_all(db)
    .await
}
