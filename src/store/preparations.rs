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

/// Records (or replaces) the preparation task's state on a node; once it has completed, its
/// directory may go `retention_ticks` later ([`take_expired_dirs`]).
pub async fn record_preparation(
    db: impl PgExecutor<'_>,
    (job_pk, node_pk): (i64, i64),
    (pool_id, node_id): (&str, &str),
    info: &Value,
    retention_ticks: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO job_node_tasks (job_pk, node_pk, pool_id, node_id, preparation, preparation_expires) \
         VALUES ($1, $2, $3, $4, $5, CASE WHEN $5::jsonb->>'state' = 'completed' \
            THEN now() + make_interval(secs => least($6, 31536000000000000) / 1e7) END) \
         ON CONFLICT (job_pk, node_pk) DO UPDATE SET preparation = excluded.preparation, \
            preparation_expires = excluded.preparation_expires",
        job_pk,
        node_pk,
        pool_id,
        node_id,
        info,
        retention_ticks,
    )
    .execute(db)
    .await
    .map(|_| ())
}

/// Records the release task's state on a node; once it has completed, its directory may go
/// `retention_ticks` later ([`take_expired_dirs`]).
pub async fn record_release(
    db: impl PgExecutor<'_>,
    (job_pk, node_pk): (i64, i64),
    info: &Value,
    retention_ticks: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE job_node_tasks SET release = $3, release_expires = CASE WHEN $3::jsonb->>'state' = 'completed' \
            THEN now() + make_interval(secs => least($4, 31536000000000000) / 1e7) END \
         WHERE job_pk = $1 AND node_pk = $2",
        job_pk,
        node_pk,
        info,
        retention_ticks,
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
           AND n.state IN ('idle', 'running', 'offline')
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

/// The directory of a job's preparation or release task on a node, whose retentionTime is over.
pub struct ExpiredDir {
    pub node_id: String,
    pub job_id: String,
    pub task_id: String,
}

/// Takes (at most `limit` of each kind) the preparation and release task directories whose
/// retention is over: each is taken once, to be removed from its node.
pub async fn take_expired_dirs(
    db: &mut sqlx::PgConnection,
    limit: i64,
) -> sqlx::Result<Vec<ExpiredDir>> {
    let mut dirs = sqlx::query_as!(
        ExpiredDir,
        r#"UPDATE job_node_tasks x SET preparation_expires = NULL FROM jobs j
         WHERE j.pk = x.job_pk AND (x.job_pk, x.node_pk) IN (SELECT job_pk, node_pk FROM job_node_tasks
                WHERE preparation_expires < now() ORDER BY preparation_expires LIMIT $1)
         RETURNING x.node_id, j.id AS job_id, j.preparation_task->>'id' AS "task_id!""#,
        limit,
    )
    .fetch_all(&mut *db)
    .await?;
    dirs.extend(
        sqlx::query_as!(
            ExpiredDir,
            r#"UPDATE job_node_tasks x SET release_expires = NULL FROM jobs j
             WHERE j.pk = x.job_pk AND (x.job_pk, x.node_pk) IN (SELECT job_pk, node_pk FROM job_node_tasks
                    WHERE release_expires < now() ORDER BY release_expires LIMIT $1)
             RETURNING x.node_id, j.id AS job_id, j.release_task->>'id' AS "task_id!""#,
            limit,
        )
        .fetch_all(&mut *db)
        .await?,
    );
    Ok(dirs)
}
