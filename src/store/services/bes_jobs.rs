//! BES jobs: their rows, their phases, and what the driver asks of them.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::PgExecutor;

use crate::domain::bes::{JobRequest, Phase};

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct BesJobRow {
    pub pk: i64,
    pub id: String,
    pub service_pk: i64,
    pub run_account: String,
    pub pool_id: Option<String>,
    /// What to run and move, as the API checked it.
    pub request: Json<JobRequest>,
    pub phase: Phase,
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
            r#"SELECT pk, id, service_pk, run_account, pool_id, request AS "request: _", phase AS "phase: _", results, details, creation_time, start_time, end_time, last_modified FROM bes_jobs "# + $rest
            $(, $arg)*
        )
    };
}

pub async fn insert_job(
    db: impl PgExecutor<'_>,
    id: &str,
    service_pk: i64,
    run_account: &str,
    pool_id: Option<&str>,
    request: &JobRequest,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO bes_jobs (id, service_pk, run_account, pool_id, request, phase) VALUES ($1, $2, $3, $4, $5, $6)",
        id,
        service_pk,
        run_account,
        pool_id,
        Json(request) as _,
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

/// The running BES job whose Batch job `job_id` runs in `account`, if there is one.
pub async fn running_job_of(
    db: impl PgExecutor<'_>,
    account: &str,
    job_id: &str,
) -> sqlx::Result<Option<BesJobRow>> {
    select_bes_jobs!(
        "WHERE run_account = $1 AND id = $2 AND phase = 'running'",
        account,
        job_id,
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
pub async fn lock_job_phase(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<Option<Phase>> {
    sqlx::query_scalar!(
        r#"SELECT phase AS "phase: Phase" FROM bes_jobs WHERE pk = $1 FOR UPDATE"#,
        pk
    )
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
