//! The dashboard's sessions and read-only tokens, kept as SHA-256 digests of their secrets.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

/// A signed-in browser: whose it is and whether it may change anything.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Session {
    pub account: String,
    pub read_only: bool,
}

pub async fn open_session(
    db: impl PgExecutor<'_>,
    digest: &[u8],
    who: &Session,
    token_pk: Option<i64>,
    expires_at: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO ui_sessions (digest, account, read_only, token_pk, expires_at)
         VALUES ($1, $2, $3, $4, $5)",
        digest,
        who.account,
        who.read_only,
        token_pk,
        expires_at,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The live session with this digest.
pub async fn session(db: impl PgExecutor<'_>, digest: &[u8]) -> sqlx::Result<Option<Session>> {
    sqlx::query_as!(
        Session,
        "SELECT account, read_only FROM ui_sessions WHERE digest = $1 AND expires_at > now()",
        digest,
    )
    .fetch_optional(db)
    .await
}

pub async fn close_session(db: impl PgExecutor<'_>, digest: &[u8]) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM ui_sessions WHERE digest = $1", digest)
        .execute(db)
        .await?;
    Ok(())
}

/// Forgets sessions past their time (at each sign-in, so the table holds only live ones).
pub async fn drop_expired(db: impl PgExecutor<'_>) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM ui_sessions WHERE expires_at <= now()")
        .execute(db)
        .await?;
    Ok(())
}

#[derive(Debug, sqlx::FromRow)]
pub struct Token {
    pub pk: i64,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub last_used: Option<DateTime<Utc>>,
}

pub async fn add_token(
    db: impl PgExecutor<'_>,
    account: &str,
    name: &str,
    digest: &[u8],
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO ui_tokens (account, name, digest) VALUES ($1, $2, $3)",
        account,
        name,
        digest,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The token of `account` with this digest, marked used now.
pub async fn use_token(
    db: impl PgExecutor<'_>,
    account: &str,
    digest: &[u8],
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        "UPDATE ui_tokens SET last_used = now() WHERE account = $1 AND digest = $2 RETURNING pk",
        account,
        digest,
    )
    .fetch_optional(db)
    .await
}

pub async fn tokens(db: impl PgExecutor<'_>, account: &str) -> sqlx::Result<Vec<Token>> {
    sqlx::query_as!(
        Token,
        "SELECT pk, name, created_at, last_used FROM ui_tokens WHERE account = $1 ORDER BY pk",
        account,
    )
    .fetch_all(db)
    .await
}

/// Revokes a token and ends the sessions opened with it; false if the account has no such token.
pub async fn revoke_token(db: impl PgExecutor<'_>, account: &str, pk: i64) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "DELETE FROM ui_tokens WHERE account = $1 AND pk = $2",
        account,
        pk,
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The BES jobs of the account's web services, newest first.
#[derive(Debug, sqlx::FromRow)]
pub struct BesJobLine {
    pub service: String,
    pub id: String,
    pub pool_id: Option<String>,
    pub phase: crate::domain::bes::Phase,
    pub details: Option<String>,
    pub creation_time: DateTime<Utc>,
    pub end_time: Option<DateTime<Utc>>,
}

pub async fn bes_jobs(
    db: impl PgExecutor<'_>,
    account: &str,
    limit: i64,
) -> sqlx::Result<Vec<BesJobLine>> {
    sqlx::query_as!(
        BesJobLine,
        r#"SELECT s.id AS service, b.id, b.pool_id, b.phase AS "phase: _", b.details, b.creation_time, b.end_time
         FROM bes_jobs b JOIN services s ON s.pk = b.service_pk
         WHERE s.account = $1 ORDER BY b.creation_time DESC, b.pk DESC LIMIT $2"#,
        account,
        limit,
    )
    .fetch_all(db)
    .await
}
