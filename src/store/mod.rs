//! SQL, in small functions over `impl PgExecutor` so they run on the pool or in a transaction.

pub mod accounts;
pub mod applications;
pub mod auto_pools;
pub mod autoscale;
pub mod budgets;
pub mod contact;
pub mod hosts;
pub mod jobs;
pub mod leader;
pub mod metrics;
pub mod nodes;
pub mod outputs;
pub mod pools;
pub mod preemption;
pub mod preparations;
pub mod prices;
pub mod removals;
pub mod schedules;
pub mod servers;
pub mod services;
pub mod tasks;
mod text_enum;
pub mod ui;
pub mod usage;
pub mod waits;

use sqlx::PgPool;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The identity this installation labels its nodes with.
pub async fn server_id(db: &PgPool) -> sqlx::Result<String> {
    sqlx::query_scalar!("SELECT server_id FROM installation")
        .fetch_one(db)
        .await
}

/// The secret the installation's servers prove themselves to each other with.
pub async fn peer_secret(db: &PgPool) -> sqlx::Result<String> {
    sqlx::query_scalar!("SELECT peer_secret FROM installation")
        .fetch_one(db)
        .await
}

/// The operator's credential for the routes under `/batchpool/operator`.
pub async fn operator_token(db: &PgPool) -> sqlx::Result<String> {
    sqlx::query_scalar!("SELECT operator_token FROM installation")
        .fetch_one(db)
        .await
}

/// Whether an error is a unique-constraint violation (an id taken twice).
pub fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(e) if e.is_unique_violation())
}

/// Whether a database error means the database cannot be reached or used right now (no
/// connection within the acquire timeout, a refused or dropped connection, a server shutting
/// down or out of connections), rather than something wrong with what was asked of it.
pub fn unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // Class 08: connection exception; 53300: too many connections; 57P01-57P03: the
            // server is shutting down or starting.
            code.starts_with("08") || code == "53300" || code.starts_with("57P0")
        }),
        _ => false,
    }
}

/// Whether the database answers (readiness).
pub async fn ping(db: impl sqlx::PgExecutor<'_>) -> sqlx::Result<()> {
    sqlx::query!("SELECT 1 AS one").fetch_one(db).await?;
    Ok(())
}

/// Sends `payload` on the NOTIFY `channel` (delivered when the transaction, if any, commits).
pub async fn notify(
    db: impl sqlx::PgExecutor<'_>,
    channel: &str,
    payload: &str,
) -> sqlx::Result<()> {
    sqlx::query!("SELECT pg_notify($1, $2)", channel, payload,)
        .execute(db)
        .await?;
    Ok(())
}
