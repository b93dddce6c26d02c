//! Recording application package versions, for `batchpool account package` and the upload route
//! alike: the package file is put in place first, then recorded here.

use sqlx::PgPool;

use crate::store;

/// The application's id as it was first created (ids match without regard to case), or `id`
/// for a new one: the package file is named after it.
pub async fn canonical_id(db: &PgPool, account: &str, id: &str) -> sqlx::Result<String> {
    let existing = store::applications::list(db, account, Some(id)).await?;
    Ok(existing.first().map_or(id.to_string(), |a| a.id.clone()))
}

/// Records a package version whose file is in place. The application's first version becomes
/// its default, and so does one given `make_default`. Returns whether it is the default now.
pub async fn record_package(
    db: &PgPool,
    account: &str,
    id: &str,
    version: &str,
    size: i64,
    make_default: bool,
    display_name: Option<&str>,
) -> sqlx::Result<bool> {
    let mut tx = db.begin().await?;
    let existing = store::applications::list(&mut *tx, account, Some(id)).await?;
    let first = existing.first().is_none_or(|a| a.default_version.is_none());
    let default = (make_default || first).then_some(version);
    let id = store::applications::upsert(&mut *tx, account, id, display_name, default).await?;
    store::applications::add_package(&mut *tx, account, &id, version, size).await?;
    tx.commit().await?;
    Ok(default.is_some())
}
