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

/// Over every task the account ran: those of its jobs that exist, and what [`keep`] kept of
/// the ones deleted (Azure's lifetime job statistics).
pub async fn of_account(db: &sqlx::PgPool, account: &str) -> sqlx::Result<UsageTotals> {
    let live = totals!(
        "WHERE job_pk IN (SELECT pk FROM jobs WHERE account = $1)",
        account
    )
    .fetch_one(db)
    .await?;
    let kept = sqlx::query_as!(
        UsageTotals,
        "SELECT wall_ms, user_ms, kernel_ms, read_bytes, write_bytes, wait_ms, succeeded, failed, retries \
         FROM account_task_totals WHERE account = $1",
        account
    )
    .fetch_optional(db)
    .await?
    .unwrap_or_default();
    Ok(live.plus(&kept))
}

impl UsageTotals {
    fn plus(&self, o: &UsageTotals) -> UsageTotals {
        UsageTotals {
            wall_ms: self.wall_ms.saturating_add(o.wall_ms),
            user_ms: self.user_ms.saturating_add(o.user_ms),
            kernel_ms: self.kernel_ms.saturating_add(o.kernel_ms),
            read_bytes: self.read_bytes.saturating_add(o.read_bytes),
            write_bytes: self.write_bytes.saturating_add(o.write_bytes),
            wait_ms: self.wait_ms.saturating_add(o.wait_ms),
            succeeded: self.succeeded.saturating_add(o.succeeded),
            failed: self.failed.saturating_add(o.failed),
            retries: self.retries.saturating_add(o.retries),
        }
    }
}

/// Keeps, in the account's lifetime totals, what the tasks about to be deleted used: the job
/// `job_pk`'s, or only its task `task_pk`. In the deleting transaction, so nothing is counted
/// twice or lost. An internal account (the BES classic environment's `.classic`, which no one
/// signs in as) keeps none: it is no row of `accounts`, which the totals must name.
pub async fn keep(
    tx: &mut sqlx::PgConnection,
    account: &str,
    job_pk: i64,
    task_pk: Option<i64>,
) -> sqlx::Result<()> {
    let t = match task_pk {
        Some(pk) => of_task(&mut *tx, pk).await?,
        None => of_job(&mut *tx, job_pk).await?,
    };
    sqlx::query!(
        r#"INSERT INTO account_task_totals AS a (account, wall_ms, user_ms, kernel_ms, read_bytes, write_bytes, wait_ms, succeeded, failed, retries, first_job)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, (SELECT creation_time FROM jobs WHERE pk = $11)
         WHERE EXISTS (SELECT 1 FROM accounts WHERE name = $1)
         ON CONFLICT (account) DO UPDATE SET
            wall_ms = a.wall_ms + EXCLUDED.wall_ms, user_ms = a.user_ms + EXCLUDED.user_ms,
            kernel_ms = a.kernel_ms + EXCLUDED.kernel_ms, read_bytes = a.read_bytes + EXCLUDED.read_bytes,
            write_bytes = a.write_bytes + EXCLUDED.write_bytes, wait_ms = a.wait_ms + EXCLUDED.wait_ms,
            succeeded = a.succeeded + EXCLUDED.succeeded, failed = a.failed + EXCLUDED.failed,
            retries = a.retries + EXCLUDED.retries, first_job = LEAST(a.first_job, EXCLUDED.first_job)"#,
        account,
        t.wall_ms,
        t.user_ms,
        t.kernel_ms,
        t.read_bytes,
        t.write_bytes,
        t.wait_ms,
        t.succeeded,
        t.failed,
        t.retries,
        job_pk,
    )
    .execute(&mut *tx)
    .await
    .map(drop)
}

/// When the account's first job was made, deleted ones included.
pub async fn first_job(
    db: impl PgExecutor<'_>,
    account: &str,
) -> sqlx::Result<Option<chrono::DateTime<chrono::Utc>>> {
    sqlx::query_scalar!(
        "SELECT LEAST((SELECT min(creation_time) FROM jobs WHERE account = $1), \
                      (SELECT first_job FROM account_task_totals WHERE account = $1))",
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
