//! Task directories to remove (the task_dir_removals table): queued by whichever server
//! deletes a task, removed by the leader, whose nodes' agents connect to it, through the agent
//! of the node the directory is on.

use sqlx::PgExecutor;

#[derive(Debug)]
pub struct TaskDirRemoval {
    pub pk: i64,
    pub account: String,
    pub job_id: String,
    pub task_id: String,
    /// The node the directory is on.
    pub node_id: String,
}

pub async fn queue(
    db: impl PgExecutor<'_>,
    account: &str,
    (job_id, task_id): (&str, &str),
    node_id: &str,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO task_dir_removals (account, job_id, task_id, node_id) VALUES ($1, $2, $3, $4)",
        account,
        job_id,
        task_id,
        node_id
    )
    .execute(db)
    .await
    .map(drop)
}

/// Queued removals, the oldest first. Those whose task exists again (a task added since with
/// the same id, in the same job) are dropped: its directory is the new task's now.
pub async fn take(db: &sqlx::PgPool, limit: i64) -> sqlx::Result<Vec<TaskDirRemoval>> {
    sqlx::query!(
        "DELETE FROM task_dir_removals r WHERE EXISTS (SELECT 1 FROM tasks t JOIN jobs j ON j.pk = t.job_pk \
           WHERE j.account = r.account AND lower(j.id) = lower(r.job_id) AND lower(t.id) = lower(r.task_id))"
    )
    .execute(db)
    .await?;
    sqlx::query_as!(
        TaskDirRemoval,
        "SELECT pk, account, job_id, task_id, node_id FROM task_dir_removals ORDER BY pk LIMIT $1",
        limit
    )
    .fetch_all(db)
    .await
}

pub async fn done(db: impl PgExecutor<'_>, pks: &[i64]) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM task_dir_removals WHERE pk = ANY($1)", pks)
        .execute(db)
        .await
        .map(drop)
}
