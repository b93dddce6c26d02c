//! Web services (what BES jobs run), BES jobs, and the Pool Service's account settings.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;

use crate::domain::bes::Phase;

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
        "\
         WHERE account = $1 AND lower(namespace) = lower($2) AND lower(id) = lower($3)",
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
    if secondary {
        sqlx::query_scalar!(
            "UPDATE services SET secondary_key = replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), \
                last_modified = now() WHERE pk = $1 RETURNING secondary_key",
            pk,
        )
        .fetch_one(db)
        .await
    } else {
        sqlx::query_scalar!(
            "UPDATE services SET primary_key = replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), \
                last_modified = now() WHERE pk = $1 RETURNING primary_key",
            pk,
        )
        .fetch_one(db)
        .await
    }
}

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct BesJobRow {
    pub pk: i64,
    pub id: String,
    pub service_pk: i64,
    pub run_account: String,
    pub pool_id: Option<String>,
    pub request: Value,
    pub phase: String,
    pub results: Option<Value>,
    pub details: Option<String>,
    pub creation_time: DateTime<Utc>,
    pub start_time: Option<DateTime<Utc>>,
    pub end_time: Option<DateTime<Utc>>,
    pub last_modified: DateTime<Utc>,
}

/// Reads whole `BesJobRow`s: `select_bes_jobs!("WHERE ...", args)` is the checked query over every column.
macro_rules! select_bes_jobs {
    ($rest:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            BesJobRow,
            r#"SELECT pk, id, service_pk, run_account, pool_id, request, phase AS "phase: _", results, details, creation_time, start_time, end_time, last_modified FROM bes_jobs "# + $rest
            $(, $arg)*
        )
    };
}

impl BesJobRow {
    /// The job's phase (None for a phase this build does not know).
    pub fn job_phase(&self) -> Option<Phase> {
        Phase::parse(&self.phase)
    }

    /// BES's StatusCode for the job's phase.
    pub fn status_code(&self) -> &'static str {
        self.job_phase().map_or("Running", Phase::status_code)
    }
}

pub async fn insert_job(
    db: impl PgExecutor<'_>,
    id: &str,
    service_pk: i64,
    run_account: &str,
    pool_id: Option<&str>,
    request: &Value,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO bes_jobs (id, service_pk, run_account, pool_id, request, phase) VALUES ($1, $2, $3, $4, $5, $6)",
        id,
        service_pk,
        run_account,
        pool_id,
        request,
        Phase::NotStarted.as_str(),
    )
    .execute(db)
    .await?;
    Ok(())
}

pub async fn get_job(
    db: impl PgExecutor<'_>,
    service_pk: i64,
    id: &str,
) -> sqlx::Result<Option<BesJobRow>> {
    select_bes_jobs!(
        "WHERE service_pk = $1 AND lower(id) = lower($2)",
        service_pk,
        id,
    )
    .fetch_optional(db)
    .await
}

pub async fn get_job_by_pk(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<Option<BesJobRow>> {
    select_bes_jobs!("WHERE pk = $1", pk,)
        .fetch_optional(db)
        .await
}

pub async fn list_jobs(db: impl PgExecutor<'_>, service_pk: i64) -> sqlx::Result<Vec<BesJobRow>> {
    select_bes_jobs!(
        "WHERE service_pk = $1 ORDER BY creation_time, pk",
        service_pk,
    )
    .fetch_all(db)
    .await
}

/// Moves a job from one phase to another; false when it was not in `from` any more (a cancel
/// won the race).
pub async fn set_phase(
    db: impl PgExecutor<'_>,
    pk: i64,
    from: &[Phase],
    to: Phase,
) -> sqlx::Result<bool> {
    let from: Vec<&str> = from.iter().map(|p| p.as_str()).collect();
    let done = sqlx::query!(
        "UPDATE bes_jobs SET phase = $3, last_modified = now(), \
            start_time = CASE WHEN $3 = 'staging' THEN now() ELSE start_time END, \
            end_time = CASE WHEN $3 IN ('finished', 'failed', 'cancelled') THEN now() ELSE end_time END \
         WHERE pk = $1 AND phase = ANY($2)",
        pk,
        &from as _,
        to.as_str(),
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Ends a job with its results or the reason it failed, unless it was cancelled meanwhile.
pub async fn finish(
    db: impl PgExecutor<'_>,
    pk: i64,
    to: Phase,
    results: Option<&Value>,
    details: Option<&str>,
) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "UPDATE bes_jobs SET phase = $2, results = $3, details = $4, end_time = now(), last_modified = now() \
         WHERE pk = $1 AND phase NOT IN ('finished', 'failed', 'cancelled')",
        pk,
        to.as_str(),
        results,
        details,
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Jobs the driver has work for, oldest start first (first in, first out).
pub async fn in_flight(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<BesJobRow>> {
    select_bes_jobs!("WHERE phase IN ('staging', 'running', 'uploading') ORDER BY start_time, pk",)
        .fetch_all(db)
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

/// Running BES jobs whose task (`task_id`) has completed, or whose Batch job is gone.
pub async fn running_jobs_ended(db: impl PgExecutor<'_>, task_id: &str) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        "SELECT b.pk FROM bes_jobs b \
         LEFT JOIN jobs j ON j.account = b.run_account AND lower(j.id) = lower(b.id) \
         LEFT JOIN tasks t ON t.job_pk = j.pk AND t.id = $1 \
         WHERE b.phase = 'running' AND (t.pk IS NULL OR t.state = 'completed')",
        task_id,
    )
    .fetch_all(db)
    .await
}

/// A BES job's phase, if the job still exists.
pub async fn job_phase(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!("SELECT phase FROM bes_jobs WHERE pk = $1", pk,)
        .fetch_optional(db)
        .await
}

/// A BES job's phase, if the job still exists, locking its row.
pub async fn lock_job_phase(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!("SELECT phase FROM bes_jobs WHERE pk = $1 FOR UPDATE", pk,)
        .fetch_optional(db)
        .await
}

/// BES jobs waiting for or running on a pool that is gone or being deleted.
pub async fn jobs_without_pool(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!("SELECT b.pk FROM bes_jobs b \
         WHERE b.phase IN ('staging', 'running') AND b.pool_id IS NOT NULL AND NOT EXISTS ( \
            SELECT 1 FROM pools p WHERE p.account = b.run_account AND lower(p.id) = lower(b.pool_id) \
              AND p.state = 'active')")
    .fetch_all(db)
    .await
}
