//! Web services (what BES jobs run) and the Pool Service's account settings; BES jobs are in
//! bes_jobs.rs.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;

mod bes_jobs;

pub use bes_jobs::*;

#[derive(Clone, sqlx::FromRow)]
pub struct ServiceRow {
    pub pk: i64,
    pub account: String,
    pub namespace: String,
    pub id: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub image: Option<String>,
    pub command: String,
    pub inputs: Value,
    pub outputs: Value,
    pub global_parameters: Value,
    pub billing_plan: String,
    pub primary_key: String,
    pub secondary_key: String,
    pub creation_time: DateTime<Utc>,
    pub last_modified: DateTime<Utc>,
}

/// Reads whole `ServiceRow`s: `select_services!("WHERE ...", args)` is the checked query over every column.
macro_rules! select_services {
    ($rest:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            ServiceRow,
            r#"SELECT pk, account, namespace, id, title, description, image, command, inputs, outputs, global_parameters, billing_plan, primary_key, secondary_key, creation_time, last_modified FROM services "# + $rest
            $(, $arg)*
        )
    };
}

impl std::fmt::Debug for ServiceRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceRow")
            .field("namespace", &self.namespace)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// A service's definition, validated.
#[derive(Debug, Clone)]
pub struct ServiceDef {
    pub title: Option<String>,
    pub description: Option<String>,
    pub image: Option<String>,
    pub command: String,
    pub inputs: Value,
    pub outputs: Value,
    pub global_parameters: Value,
    pub billing_plan: String,
}

/// Creates or replaces a service of `account`; replacing keeps its keys. Returns the row and
/// whether it is new. Names are per account: another account's service of the same name is
/// neither touched nor revealed.
pub async fn upsert(
    db: &sqlx::PgPool,
    account: &str,
    namespace: &str,
    id: &str,
    d: &ServiceDef,
) -> sqlx::Result<(ServiceRow, bool)> {
    let mut tx = db.begin().await?;
    let up = sqlx::query!(
        r#"INSERT INTO services (account, namespace, id, title, description, image, command, inputs, outputs,
            global_parameters, billing_plan)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         ON CONFLICT (account, lower(namespace), lower(id)) DO UPDATE SET title = $4, description = $5,
            image = $6, command = $7, inputs = $8, outputs = $9, global_parameters = $10,
            billing_plan = $11, last_modified = now()
         RETURNING pk, (xmax = 0) AS "created!""#,
        account,
        namespace,
        id,
        d.title.as_deref(),
        d.description.as_deref(),
        d.image.as_deref(),
        &d.command,
        &d.inputs,
        &d.outputs,
        &d.global_parameters,
        &d.billing_plan,
    )
    .fetch_one(&mut *tx)
    .await?;
    let row = select_services!("WHERE pk = $1", up.pk)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok((row, up.created))
}

/// `account`'s service of that name.
pub async fn get(
    db: impl PgExecutor<'_>,
    account: &str,
    namespace: &str,
    id: &str,
) -> sqlx::Result<Option<ServiceRow>> {
    select_services!(
        "WHERE account = $1 AND lower(namespace) = lower($2) AND lower(id) = lower($3)",
        account,
        namespace,
        id,
    )
    .fetch_optional(db)
    .await
}

/// Every account's service of that name: a BES request tells which one by its Bearer key.
pub async fn named(
    db: impl PgExecutor<'_>,
    namespace: &str,
    id: &str,
) -> sqlx::Result<Vec<ServiceRow>> {
    select_services!(
        "WHERE lower(namespace) = lower($1) AND lower(id) = lower($2)",
        namespace,
        id,
    )
    .fetch_all(db)
    .await
}

pub async fn get_by_pk(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<Option<ServiceRow>> {
    select_services!("WHERE pk = $1", pk,)
        .fetch_optional(db)
        .await
}

pub async fn list(
    db: impl PgExecutor<'_>,
    account: &str,
    namespace: &str,
) -> sqlx::Result<Vec<ServiceRow>> {
    select_services!(
        "WHERE account = $1 AND lower(namespace) = lower($2) ORDER BY lower(id)",
        account,
        namespace,
    )
    .fetch_all(db)
    .await
}

pub async fn delete(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM services WHERE pk = $1", pk,)
        .execute(db)
        .await?;
    Ok(())
}

/// Replaces one of a service's keys; returns the new key.
pub async fn regenerate_key(
    db: impl PgExecutor<'_>,
    pk: i64,
    secondary: bool,
) -> sqlx::Result<String> {
    // New keys are made in SQL so they never pass through a log line or a bind parameter.
    sqlx::query_scalar!(
        r#"UPDATE services s SET primary_key = CASE WHEN $2 THEN s.primary_key ELSE k.key END,
            secondary_key = CASE WHEN $2 THEN k.key ELSE s.secondary_key END, last_modified = now()
         FROM (SELECT replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '') AS key) k
         WHERE s.pk = $1 RETURNING k.key AS "key!""#,
        pk,
        secondary,
    )
    .fetch_one(db)
    .await
}

/// The Pool Service's view of an account: its key and quotas.
#[derive(Clone, sqlx::FromRow)]
pub struct PoolServiceAccount {
    pub name: String,
    pub pool_service_key: String,
    pub max_pools: i32,
    pub max_vms_per_pool: i32,
}

pub async fn pool_service_accounts(
    db: impl PgExecutor<'_>,
) -> sqlx::Result<Vec<PoolServiceAccount>> {
    sqlx::query_as!(
        PoolServiceAccount,
        r#"SELECT name, pool_service_key, max_pools, max_vms_per_pool FROM accounts"#,
    )
    .fetch_all(db)
    .await
}

pub async fn pool_service_account(
    db: impl PgExecutor<'_>,
    name: &str,
) -> sqlx::Result<Option<PoolServiceAccount>> {
    sqlx::query_as!(
        PoolServiceAccount,
        r#"SELECT name, pool_service_key, max_pools, max_vms_per_pool FROM accounts WHERE name = $1"#,
        name,
    )
    .fetch_optional(db)
    .await
}

/// Sets an account's Pool Service quotas (the operator's job, as Azure's support did it).
pub async fn set_quotas(
    db: impl PgExecutor<'_>,
    name: &str,
    max_pools: Option<i32>,
    max_vms_per_pool: Option<i32>,
) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "UPDATE accounts SET max_pools = coalesce($2, max_pools), max_vms_per_pool = coalesce($3, max_vms_per_pool) \
         WHERE name = $1",
        name,
        max_pools,
        max_vms_per_pool,
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub async fn rotate_pool_service_key(
    db: impl PgExecutor<'_>,
    name: &str,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!(
        "UPDATE accounts SET pool_service_key = replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '') \
         WHERE name = $1 RETURNING pool_service_key",
        name,
    )
    .fetch_optional(db)
    .await
}
