//! The accounts table: names and their two Shared Key keys.

use sqlx::PgExecutor;

#[derive(Clone, sqlx::FromRow)]
pub struct AccountKeys {
    pub name: String,
    pub primary_key: String,
    pub secondary_key: String,
}

impl std::fmt::Debug for AccountKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccountKeys")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

pub async fn get(db: impl PgExecutor<'_>, name: &str) -> sqlx::Result<Option<AccountKeys>> {
    sqlx::query_as!(
        AccountKeys,
        r#"SELECT name, primary_key, secondary_key FROM accounts WHERE name = $1"#,
        name,
    )
    .fetch_optional(db)
    .await
}

/// The account's linked storage account (a connection string), if one is linked.
pub async fn storage(db: impl PgExecutor<'_>, name: &str) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!("SELECT storage FROM accounts WHERE name = $1", name)
        .fetch_optional(db)
        .await
        .map(Option::flatten)
}

/// Links a storage account to the account (a connection string), or unlinks it (None); false if
/// there is no such account.
pub async fn set_storage(
    db: impl PgExecutor<'_>,
    name: &str,
    storage: Option<&str>,
) -> sqlx::Result<bool> {
    sqlx::query!(
        "UPDATE accounts SET storage = $2 WHERE name = $1",
        name,
        storage
    )
    .execute(db)
    .await
    .map(|r| r.rows_affected() == 1)
}

pub async fn names(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!("SELECT name FROM accounts ORDER BY name")
        .fetch_all(db)
        .await
}

/// Creates the account unless it exists; returns whether it did.
pub async fn create(
    db: impl PgExecutor<'_>,
    name: &str,
    primary: &str,
    secondary: &str,
) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "INSERT INTO accounts (name, primary_key, secondary_key) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        name,
        primary,
        secondary,
    )
        .execute(db)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Replaces one key; returns whether the account exists.
pub async fn rotate(
    db: impl PgExecutor<'_>,
    name: &str,
    secondary: bool,
    key: &str,
) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "UPDATE accounts SET primary_key = CASE WHEN $3 THEN primary_key ELSE $2 END, \
            secondary_key = CASE WHEN $3 THEN $2 ELSE secondary_key END, keys_rotated_at = now() \
         WHERE name = $1",
        name,
        key,
        secondary,
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}
