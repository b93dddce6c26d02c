//! The scheduler's leader epoch (see the leader_epoch migration): bumped by each new leader,
//! checked by every statement a scheduler writes.

use sqlx::PgExecutor;

/// The setting a scheduler's connections carry their epoch in; the fence trigger reads it.
pub const EPOCH_SETTING: &str = "batchpool.leader_epoch";

/// The SQLSTATE the fence raises when a write comes from a stale leader.
const STALE: &str = "BP001";

/// Starts a new term: bumps the epoch (after every transaction of the previous leader still in
/// flight has ended) and returns it. Call it holding the advisory lock.
pub async fn take(db: impl PgExecutor<'_>, holder: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "UPDATE leader SET epoch = epoch + 1, holder = $1, since = now() RETURNING epoch",
    )
    .bind(holder)
    .fetch_one(db)
    .await
}

/// The current epoch.
pub async fn epoch(db: impl PgExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT epoch FROM leader")
        .fetch_one(db)
        .await
}

/// Whether an error is the fence refusing a stale leader's write.
pub fn is_stale(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(e) if e.code().as_deref() == Some(STALE))
}
