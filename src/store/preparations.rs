//! Where a job's preparation task ran and how, and its release task after it, one row per job
//! and node (`job_node_tasks`).

use serde_json::Value;
use sqlx::types::Json;
use sqlx::PgExecutor;

use crate::domain::files::PoolPackage;
use crate::domain::job_prep::JobReleaseTask;

/// A job's preparation task on one node: Azure's JobPreparationTaskExecutionInformation.
pub async fn get(
    db: impl PgExecutor<'_>,
    job_pk: i64,
    node_pk: i64,
) -> sqlx::Result<Option<Value>> {
    sqlx::query_scalar!(
        "SELECT preparation FROM job_node_tasks WHERE job_pk = $1 AND node_pk = $2",
        job_pk,
        node_pk,
    )
    .fetch_optional(db)
    .await
}

/// Records (or replaces) the preparation task's state on a node.
pub async fn record_preparation(
    db: impl PgExecutor<'_>,
    job_pk: i64,
    node_pk: i64,
    pool_id: &str,
    node_id: &str,
    info: &Value,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO job_node_tasks (job_pk, node_pk, pool_id, node_id, preparation) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (job_pk, node_pk) DO UPDATE SET preparation = excluded.preparation",
        job_pk,
        node_pk,
        pool_id,
        node_id,
        info,
    )
    .execute(db)
    .await
    .map(|_| ())
}

/// Records the release task's state on a node.
pub async fn record_release(
    db: impl PgExecutor<'_>,
    job_pk: i64,
    node_pk: i64,
    info: &Value,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE job_node_tasks SET release = $3 WHERE job_pk = $1 AND node_pk = $2",
        job_pk,
        node_pk,
        info,
    )
    .execute(db)
    .await
    .map(|_| ())
}

/// After a node reboots, the preparation tasks of jobs that ask for it
/// (rerunOnNodeRebootAfterSuccess, the default) run again before their next task there.
pub async fn forget_for_reboot(db: impl PgExecutor<'_>, node_pk: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "DELETE FROM job_node_tasks x USING jobs j WHERE x.node_pk = $1 AND j.pk = x.job_pk \
            AND x.release IS NULL \
            AND coalesce((j.preparation_task->>'rerunOnNodeRebootAfterSuccess')::boolean, true)",
        node_pk,
    )
    .execute(db)
    .await
    .map(|_| ())
}

/// A job's row of the status list.
pub struct NodeTasksRow {
    pub pool_id: String,
    pub node_id: String,
    pub preparation: Value,
    pub release: Option<Value>,
}

/// The job's nodes, by id, at most `limit` of them.
pub async fn list(
    db: impl PgExecutor<'_>,
    job_pk: i64,
    limit: i64,
) -> sqlx::Result<Vec<NodeTasksRow>> {
    sqlx::query_as!(
        NodeTasksRow,
        "SELECT pool_id, node_id, preparation, release FROM job_node_tasks \
         WHERE job_pk = $1 ORDER BY node_id LIMIT $2",
        job_pk,
        limit,
    )
    .fetch_all(db)
    .await
}

/// A release task that is due: its job has ended (terminating, or being deleted), the
/// preparation task has finished on the node, and the node is still there and up.
pub struct DueRelease {
    pub job_pk: i64,
    pub account: String,
    pub job_id: String,
    pub node_pk: i64,
    pub node_id: String,
    pub pool_id: String,
    pub release_task: Json<JobReleaseTask>,
    pub common_environment: Value,
    /// The application packages installed on the node.
    pub node_packages: Option<Json<Vec<PoolPackage>>>,
}

pub async fn due_releases(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<DueRelease>> {
    sqlx::query_as!(
        DueRelease,
        r#"SELECT x.job_pk, j.account, j.id AS job_id, x.node_pk, x.node_id, x.pool_id,
                j.release_task AS "release_task!: _", j.common_environment,
                n.application_packages AS "node_packages: _"
         FROM job_node_tasks x JOIN jobs j ON j.pk = x.job_pk JOIN nodes n ON n.pk = x.node_pk
         WHERE x.release IS NULL AND x.preparation->>'state' = 'completed'
           AND j.release_task IS NOT NULL AND j.state IN ('terminating', 'completed', 'deleting')
           AND n.state IN ('idle', 'running')
         ORDER BY x.job_pk, x.node_pk"#,
    )
    .fetch_all(db)
    .await
}

/// Takes a due release task to run it: false if it is no longer due (another pass took it).
pub async fn claim_release(
    db: impl PgExecutor<'_>,
    job_pk: i64,
    node_pk: i64,
) -> sqlx::Result<bool> {
    sqlx::query!(
        r#"UPDATE job_node_tasks SET release = '{"state": "running"}'
         WHERE job_pk = $1 AND node_pk = $2 AND release IS NULL"#,
        job_pk,
        node_pk,
    )
    .execute(db)
    .await
    .map(|r| r.rows_affected() == 1)
}

/// After a restart: release tasks a previous server left running are due again (their
/// processes went with their nodes' commands; they run once more).
pub async fn retry_running_releases(db: impl PgExecutor<'_>) -> sqlx::Result<()> {
    sqlx::query!("UPDATE job_node_tasks SET release = NULL WHERE release->>'state' = 'running'")
        .execute(db)
        .await
        .map(|_| ())
}

/// Whether the job still has release tasks to run (or running) before it may be deleted (the
/// function that also keeps an ended job `terminating`).
pub async fn releases_pending(db: impl PgExecutor<'_>, job_pk: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar!(r#"SELECT job_releases_pending($1) AS "pending!""#, job_pk,)
        .fetch_one(db)
        .await
}
