//! The control loops. One server leads per database (a Postgres advisory lock); the leader runs
//! the allocator (pools -> nodes) and the dispatcher (tasks -> slots, with the executor that runs
//! them). API writes wake the loops; a slow timer only backs them up.

pub mod allocate;
pub mod complete;
pub mod dispatch;
pub mod execute;
pub mod start_task;

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::runtime::Runtime;
use crate::store;

/// The advisory lock key the leading scheduler holds ("batchpol" in ASCII).
const LEADER_LOCK: i64 = 0x6261_7463_6870_6f6c;
/// How often the loops look even when nobody woke them.
pub const BACKUP_TICK: Duration = Duration::from_secs(2);

/// What the API pokes when it changes something a loop acts on.
#[derive(Clone, Default)]
pub struct Wakeups {
    /// Pools changed: nodes to add or remove.
    pub allocate: Arc<Notify>,
    /// Tasks or slots changed: placements to make, attempts to kill.
    pub dispatch: Arc<Notify>,
}

pub struct Scheduler {
    pub db: PgPool,
    pub runtime: Arc<Runtime>,
    pub server_id: String,
    pub wake: Wakeups,
    pub node_concurrency: usize,
}

/// Waits to lead, then runs the loops until `cancel`.
pub async fn run(s: Scheduler, cancel: CancellationToken) {
    // The lock lives as long as this connection, which is kept out of the pool for that reason.
    let mut conn = loop {
        match try_lead(&s.db).await {
            Ok(Some(conn)) => break conn,
            Ok(None) => tracing::info!("another server leads the scheduler; waiting"),
            Err(e) => tracing::warn!(error = %e, "cannot take the scheduler lock"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(BACKUP_TICK) => {}
        }
    };
    tracing::info!("this server leads the scheduler");
    let allocator = allocate::Allocator::new(
        s.db.clone(),
        s.runtime.clone(),
        s.server_id.clone(),
        s.wake.clone(),
        s.node_concurrency,
        cancel.clone(),
    );
    let executor = execute::Executor::new(
        s.db.clone(),
        s.runtime.clone(),
        s.server_id.clone(),
        s.wake.clone(),
        cancel.clone(),
    );
    tokio::join!(allocator.run(), dispatch_loop(&s, executor, &cancel));
    let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(LEADER_LOCK)
        .execute(&mut conn)
        .await;
}

async fn try_lead(db: &PgPool) -> sqlx::Result<Option<sqlx::PgConnection>> {
    let mut conn = db.acquire().await?.detach();
    let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(LEADER_LOCK)
        .fetch_one(&mut conn)
        .await?;
    Ok(locked.then_some(conn))
}

async fn dispatch_loop(
    s: &Scheduler,
    executor: Arc<execute::Executor>,
    cancel: &CancellationToken,
) {
    while let Err(e) = executor.recover().await {
        tracing::error!(error = %e, "recovering running attempts failed; retrying");
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(BACKUP_TICK) => {}
        }
    }
    loop {
        if let Err(e) = housekeeping(s).await {
            tracing::error!(error = %e, "job housekeeping failed");
        }
        if let Err(e) = executor.reap().await {
            tracing::error!(error = %e, "reaping ended attempts failed");
        }
        loop {
            match dispatch::pass(&s.db).await {
                Ok(placed) if placed.is_empty() => break,
                Ok(placed) => {
                    if let Err(e) = executor.start_placed(&placed).await {
                        tracing::error!(error = %e, "starting placed attempts failed");
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "dispatch pass failed");
                    break;
                }
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = s.wake.dispatch.notified() => {}
            _ = tokio::time::sleep(BACKUP_TICK) => {}
        }
    }
}

/// Jobs past their maxWallClockTime end; deleted jobs go with their tasks and files; task
/// directories past their retentionTime are removed.
async fn housekeeping(s: &Scheduler) -> anyhow::Result<()> {
    for pk in store::jobs::past_wall_clock(&s.db).await? {
        let mut tx = s.db.begin().await?;
        complete::terminate_job(&mut tx, pk, "MaxWallClockTimeExpiry").await?;
        tx.commit().await?;
        s.wake.dispatch.notify_one();
    }
    for job in store::jobs::deleting(&s.db).await? {
        let mut tx = s.db.begin().await?;
        complete::end_running_tasks(&mut tx, job.pk, "its job was deleted").await?;
        store::jobs::delete(&mut *tx, job.pk).await?;
        tx.commit().await?;
        remove_dir(&s.runtime.layout_ref().job_dir(&job.account, &job.id)).await;
        tracing::info!(job = %job.id, "job deleted");
        s.wake.dispatch.notify_one();
    }
    for (account, job_id, task_id) in store::tasks::take_expired_files(&s.db, 500).await? {
        remove_dir(
            &s.runtime
                .layout_ref()
                .job_dir(&account, &job_id)
                .join("job-1")
                .join(task_id),
        )
        .await;
    }
    Ok(())
}

async fn remove_dir(path: &std::path::Path) {
    if let Err(e) = tokio::fs::remove_dir_all(path).await {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "removing a directory failed");
        }
    }
}
