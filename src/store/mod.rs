//! SQL, in small functions over `impl PgExecutor` so they run on the pool or in a transaction.

pub mod nodes;
pub mod pools;
pub mod services;
pub mod usage;

use sqlx::PgPool;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The identity this installation labels its nodes with.
pub async fn server_id(db: &PgPool) -> sqlx::Result<String> {
    sqlx::query_scalar("SELECT server_id FROM installation")
        .fetch_one(db)
        .await
}

/// Whether an error is a unique-constraint violation (an id taken twice).
pub fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(e) if e.is_unique_violation())
}
pub mod accounts;
pub mod jobs;
pub mod leader;
pub mod tasks;
