//! Usage records: the intervals compute hours are summed from.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::domain::metering::UsageInterval;

/// Opens the node's record unless one is open already (an adopted node keeps its record).
pub async fn open(db: impl PgExecutor<'_>, node_pk: i64, at: DateTime<Utc>) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO usage_records (account, pool_pk, pool_id, node_id, vm_size, vcpus, billing_plan, started_at, is_dedicated) \
         SELECT p.account, p.pk, p.id, n.id, p.vm_size, p.vcpus, p.billing_plan, $2, n.is_dedicated \
         FROM nodes n JOIN pools p ON p.pk = n.pool_pk WHERE n.pk = $1 \
         ON CONFLICT (node_id) WHERE ended_at IS NULL DO NOTHING",
        node_pk,
        at,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Closes the node's open record, if any.
pub async fn close(db: impl PgExecutor<'_>, node_id: &str, at: DateTime<Utc>) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE usage_records SET ended_at = greatest($2, started_at) WHERE node_id = $1 AND ended_at IS NULL",
        node_id,
        at,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// A pool's usage rows that touch `[from, to)`.
#[derive(Debug, sqlx::FromRow)]
pub struct PoolUsageRow {
    pub pool_id: String,
    pub node_id: String,
    pub billing_plan: Option<String>,
    pub vm_size: String,
    pub vcpus: f64,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    /// False for a low-priority node's record: billed apart.
    pub is_dedicated: bool,
}

impl PoolUsageRow {
    pub fn interval(&self) -> UsageInterval {
        UsageInterval {
            started: self.started_at,
            ended: self.ended_at,
        }
    }
}

pub async fn in_range(
    db: impl PgExecutor<'_>,
    account: &str,
    pool_id: Option<&str>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> sqlx::Result<Vec<PoolUsageRow>> {
    sqlx::query_as!(
        PoolUsageRow,
        r#"SELECT pool_id, node_id, billing_plan, vm_size, vcpus, started_at, ended_at, is_dedicated FROM usage_records
         WHERE account = $1 AND ($2::text IS NULL OR lower(pool_id) = lower($2))
           AND started_at < $4 AND (ended_at IS NULL OR ended_at > $3)
         ORDER BY pool_id, started_at"#,
        account,
        pool_id,
        from,
        to,
    )
    .fetch_all(db)
    .await
}

/// Slot use of a job's task attempts: ended ones from `slot_usage`, running ones from the tasks.
/// A BES job counts for its service's account and, off a plan's pool, its service's plan.
#[derive(Debug, sqlx::FromRow)]
pub struct SlotUsageRow {
    pub job_id: String,
    pub pool_id: String,
    pub billing_plan: Option<String>,
    pub slots: i32,
    pub slots_per_node: i32,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    /// The node it ran on (None for attempts recorded before nodes were).
    pub node_id: Option<String>,
}

pub async fn slots_in_range(
    db: impl PgExecutor<'_>,
    account: &str,
    pool_id: Option<&str>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> sqlx::Result<Vec<SlotUsageRow>> {
    sqlx::query_as!(
        SlotUsageRow,
        r#"SELECT job_id AS "job_id!", pool_id AS "pool_id!", billing_plan, slots AS "slots!", slots_per_node AS "slots_per_node!",
                started_at AS "started_at!", ended_at, node_id FROM slot_usage
         WHERE account = $1 AND ($2::text IS NULL OR lower(pool_id) = lower($2)) AND started_at < $4 AND ended_at > $3
         UNION ALL
         SELECT j.id, t.pool_id, coalesce(p.billing_plan, s.billing_plan), t.required_slots,
            coalesce(p.task_slots_per_node, 1), t.start_time, NULL, t.node_id
         FROM tasks t JOIN jobs j ON j.pk = t.job_pk
         LEFT JOIN pools p ON p.account = j.account AND lower(p.id) = lower(t.pool_id)
         LEFT JOIN bes_jobs b ON b.id = j.id AND b.run_account = j.account
         LEFT JOIN services s ON s.pk = b.service_pk
         WHERE coalesce(s.account, j.account) = $1 AND t.state IN ('preparing', 'running') AND t.start_time IS NOT NULL AND t.start_time < $4
           AND ($2::text IS NULL OR lower(t.pool_id) = lower($2))
         ORDER BY 1, 2"#,
        account,
        pool_id,
        from,
        to,
    )
    .fetch_all(db)
    .await
}

/// Closes the open records whose node row is gone.
pub async fn close_orphaned(db: impl PgExecutor<'_>, at: DateTime<Utc>) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE usage_records SET ended_at = greatest($1, started_at) WHERE ended_at IS NULL AND node_id NOT IN (SELECT id FROM nodes)",
        at,
    )
        .execute(db)
        .await?;
    Ok(())
}

/// The attempts of a job's tasks (or of one of them) since `since` (the job's creation: a job id
/// used again counts only the new job's): ended ones from `slot_usage`, running ones from the
/// tasks.
pub async fn attempts_of(
    db: impl PgExecutor<'_>,
    account: &str,
    (job_id, task_id): (&str, Option<&str>),
    since: DateTime<Utc>,
) -> sqlx::Result<Vec<SlotUsageRow>> {
    sqlx::query_as!(
        SlotUsageRow,
        r#"SELECT job_id AS "job_id!", pool_id AS "pool_id!", billing_plan, slots AS "slots!", slots_per_node AS "slots_per_node!",
                started_at AS "started_at!", ended_at, node_id FROM slot_usage
         WHERE account = $1 AND job_id = $2 AND ($3::text IS NULL OR task_id = $3) AND started_at >= $4
         UNION ALL
         SELECT j.id, t.pool_id, NULL, t.required_slots, coalesce(p.task_slots_per_node, 1), t.start_time, NULL, t.node_id
         FROM tasks t JOIN jobs j ON j.pk = t.job_pk
         LEFT JOIN pools p ON p.account = j.account AND lower(p.id) = lower(t.pool_id)
         WHERE j.account = $1 AND j.id = $2 AND ($3::text IS NULL OR t.id = $3)
           AND t.state IN ('preparing', 'running') AND t.start_time IS NOT NULL"#,
        account,
        job_id,
        task_id,
        since,
    )
    .fetch_all(db)
    .await
}

/// The usage records of the nodes named.
pub async fn of_nodes(
    db: impl PgExecutor<'_>,
    account: &str,
    nodes: &[String],
) -> sqlx::Result<Vec<PoolUsageRow>> {
    sqlx::query_as!(
        PoolUsageRow,
        r#"SELECT pool_id, node_id, billing_plan, vm_size, vcpus, started_at, ended_at, is_dedicated FROM usage_records
         WHERE account = $1 AND node_id = ANY($2) ORDER BY node_id, started_at"#,
        account,
        nodes,
    )
    .fetch_all(db)
    .await
}
