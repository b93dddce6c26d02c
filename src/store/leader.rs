//! The scheduler's leader epoch (see the leader_epoch migration): bumped by each new leader,
//! checked by every statement a scheduler writes.

use sqlx::PgExecutor;

/// The setting a scheduler's connections carry their epoch in; the fence trigger reads it.
pub const EPOCH_SETTING: &str = "batchpool.leader_epoch";

/// The SQLSTATE the fence raises when a write comes from a stale leader.
const STALE: &str = "BP001";

/// Starts a new term: bumps the epoch (after every transaction of the previous leader still in
/// flight has ended) and returns it, and says where other servers reach this one (`peer_url`).
/// Call it holding the advisory lock.
pub async fn take(db: impl PgExecutor<'_>, holder: &str, peer_url: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        "UPDATE leader SET epoch = epoch + 1, holder = $1, since = now(), peer_url = $2
         RETURNING epoch",
        holder,
        peer_url,
    )
    .fetch_one(db)
    .await
}

/// Where the leading server takes other servers' questions about its nodes' files, once one led.
pub async fn peer_url(db: impl PgExecutor<'_>) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!("SELECT peer_url FROM leader")
        .fetch_one(db)
        .await
}

/// The current epoch.
pub async fn epoch(db: impl PgExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar!("SELECT epoch FROM leader")
        .fetch_one(db)
        .await
}

/// Whether an error is the fence refusing a stale leader's write.
pub fn is_stale(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(e) if e.code().as_deref() == Some(STALE))
}

/// The advisory lock key the leading scheduler holds ("batchpol" in ASCII); the fence in the
/// leader_epoch migration names it too.
const LEADER_LOCK: i64 = 0x6261_7463_6870_6f6c;

/// Takes the leader's advisory lock on this connection if no other session holds it; returns
/// whether it did.
pub async fn try_lock(db: impl PgExecutor<'_>) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT pg_try_advisory_lock($1) AS "locked!""#,
        LEADER_LOCK,
    )
    .fetch_one(db)
    .await
}

/// Releases the leader's advisory lock held by this connection.
pub async fn unlock(db: impl PgExecutor<'_>) -> sqlx::Result<()> {
    sqlx::query!("SELECT pg_advisory_unlock($1) AS unlocked", LEADER_LOCK,)
        .fetch_one(db)
        .await?;
    Ok(())
}

/// A connection of its own listening on `channel` (the scheduler's wake-ups).
pub async fn listen(db: &sqlx::PgPool, channel: &str) -> sqlx::Result<sqlx::postgres::PgListener> {
    let mut listener = sqlx::postgres::PgListener::connect_with(db).await?;
    listener.listen(channel).await?;
    Ok(listener)
}
