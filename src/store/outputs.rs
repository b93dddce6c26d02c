//! Tasks' kept output (`task_outputs`, migration 56): stdout.txt and stderr.txt as each attempt
//! ended, for reading after the task's node is gone.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

pub use crate::domain::kept_output::KeptFile;

/// A kept file as read back.
pub struct KeptRow {
    pub name: String,
    pub attempt: i32,
    pub len: i64,
    pub cut: bool,
    pub gzip: bool,
    pub data: Vec<u8>,
    pub kept_at: DateTime<Utc>,
}

/// Keeps the files of the attempts `(task_pk, attempt, files)` in one statement, each
/// replacing what an earlier attempt left (never what a later one did).
pub async fn keep(db: impl PgExecutor<'_>, kept: &[(i64, i32, &[KeptFile])]) -> sqlx::Result<()> {
    let (mut pks, mut attempts, mut names, mut lens, mut cuts, mut gzips, mut datas) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for (pk, attempt, files) in kept {
        for f in *files {
            pks.push(*pk);
            attempts.push(*attempt);
            names.push(f.name.to_string());
            lens.push(f.len as i64);
            cuts.push(f.cut);
            gzips.push(f.gzip);
            datas.push(f.data.clone());
        }
    }
    if pks.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "INSERT INTO task_outputs (task_pk, attempt, name, len, cut, gzip, data, kept_at)
         SELECT k.*, now() FROM unnest($1::bigint[], $2::int[], $3::text[], $4::bigint[], $5::bool[], $6::bool[], $7::bytea[])
             AS k(task_pk, attempt, name, len, cut, gzip, data)
         ON CONFLICT (task_pk, name) DO UPDATE SET attempt = EXCLUDED.attempt, len = EXCLUDED.len,
             cut = EXCLUDED.cut, gzip = EXCLUDED.gzip, data = EXCLUDED.data, kept_at = EXCLUDED.kept_at
         WHERE task_outputs.attempt <= EXCLUDED.attempt",
        &pks,
        &attempts,
        &names,
        &lens,
        &cuts,
        &gzips,
        &datas,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The task's kept files (both, or the one named).
pub async fn of_task(
    db: impl PgExecutor<'_>,
    task_pk: i64,
    name: Option<&str>,
) -> sqlx::Result<Vec<KeptRow>> {
    sqlx::query_as!(
        KeptRow,
        "SELECT name, attempt, len, cut, gzip, data, kept_at FROM task_outputs
         WHERE task_pk = $1 AND ($2::text IS NULL OR name = $2) ORDER BY name",
        task_pk,
        name,
    )
    .fetch_all(db)
    .await
}

/// Forgets the task's kept file `name` (it was deleted).
pub async fn forget(db: impl PgExecutor<'_>, task_pk: i64, name: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "DELETE FROM task_outputs WHERE task_pk = $1 AND name = $2",
        task_pk,
        name
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Where a followed task is now (`GET .../files/stdout.txt?follow=true`).
pub struct FollowView {
    pub state: crate::domain::job::TaskState,
    pub attempt: i32,
    pub node_id: Option<String>,
    /// None once its node has left its pool.
    pub node_pk: Option<i64>,
    /// Its job ends without running it: the job is completing, or gone.
    pub job_ending: bool,
}

/// The task `task_pk` as a follow of its output sees it; None once it is deleted.
pub async fn follow_view(
    db: impl PgExecutor<'_>,
    task_pk: i64,
) -> sqlx::Result<Option<FollowView>> {
    sqlx::query_as!(
        FollowView,
        r#"SELECT t.state AS "state: _", t.attempt, t.node_id, t.node_pk,
                  j.state IN ('terminating', 'completed', 'deleting') AS "job_ending!"
           FROM tasks t JOIN jobs j ON j.pk = t.job_pk WHERE t.pk = $1"#,
        task_pk,
    )
    .fetch_optional(db)
    .await
}
