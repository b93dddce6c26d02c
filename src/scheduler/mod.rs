//! The control loops. One server leads per database (a Postgres advisory lock); the leader
//! reconciles pools to nodes. API writes wake the loops; a slow timer only backs them up.

pub mod allocate;
pub mod start_task;

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::runtime::Runtime;

/// The advisory lock key the leading scheduler holds ("batchpol" in ASCII).
const LEADER_LOCK: i64 = 0x6261_7463_6870_6f6c;
/// How often the loops look even when nobody woke them.
pub const BACKUP_TICK: Duration = Duration::from_secs(2);

/// Waits to lead, then runs the allocator until `cancel`.
pub async fn run(
    db: PgPool,
    runtime: Arc<Runtime>,
    server_id: String,
    wake: Arc<Notify>,
    concurrency: usize,
    cancel: CancellationToken,
) {
    // The lock lives as long as this connection, which is kept out of the pool for that reason.
    let mut conn = loop {
        match try_lead(&db).await {
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
    let allocator =
        allocate::Allocator::new(db, runtime, server_id, wake, concurrency, cancel.clone());
    allocator.run().await;
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
