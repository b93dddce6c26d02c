//! The job_schedules table (Azure's /jobschedules).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;

use crate::domain::schedule::{JobScheduleState, Timing};

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ScheduleRow {
    pub pk: i64,
    pub account: String,
    pub id: String,
    pub display_name: Option<String>,
    pub state: JobScheduleState,
    pub state_transition_time: DateTime<Utc>,
    pub previous_state: Option<JobScheduleState>,
    pub previous_state_transition_time: Option<DateTime<Utc>>,
    pub do_not_run_until: Option<DateTime<Utc>>,
    pub do_not_run_after: Option<DateTime<Utc>>,
    pub start_window_ms: Option<i64>,
    pub recurrence_ms: Option<i64>,
    /// As given, checked: a job add body without its id.
    pub job_specification: Value,
    pub metadata: Value,
    pub next_run_time: Option<DateTime<Utc>>,
    pub jobs_made: i32,
    pub recent_job: Option<String>,
    pub end_time: Option<DateTime<Utc>>,
    pub creation_time: DateTime<Utc>,
    pub last_modified: DateTime<Utc>,
}

impl ScheduleRow {
    pub fn timing(&self) -> Timing {
        let ms = |v: Option<i64>| v.map(chrono::Duration::milliseconds);
        Timing {
            do_not_run_until: self.do_not_run_until,
            do_not_run_after: self.do_not_run_after,
            start_window: ms(self.start_window_ms),
            recurrence: ms(self.recurrence_ms),
        }
    }
}

macro_rules! select_schedules {
    ($rest:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            ScheduleRow,
            r#"SELECT pk, account, id, display_name, state AS "state: _", state_transition_time, previous_state AS "previous_state: _", previous_state_transition_time, do_not_run_until, do_not_run_after, start_window_ms, recurrence_ms, job_specification, metadata, next_run_time, jobs_made, recent_job, end_time, creation_time, last_modified FROM job_schedules "# + $rest
            $(, $arg)*
        )
    };
}

/// What a create, PATCH or PUT sets.
pub struct ScheduleProps {
    pub timing: Timing,
    pub job_specification: Value,
    pub metadata: Value,
    pub next_run_time: Option<DateTime<Utc>>,
}

fn ms(d: Option<chrono::Duration>) -> Option<i64> {
    d.map(|d| d.num_milliseconds())
}

pub async fn insert(
    db: impl PgExecutor<'_>,
    account: &str,
    id: &str,
    display_name: Option<&str>,
    p: &ScheduleProps,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO job_schedules (account, id, display_name, do_not_run_until, do_not_run_after, \
            start_window_ms, recurrence_ms, job_specification, metadata, next_run_time) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        account,
        id,
        display_name,
        p.timing.do_not_run_until,
        p.timing.do_not_run_after,
        ms(p.timing.start_window),
        ms(p.timing.recurrence),
        &p.job_specification,
        &p.metadata,
        p.next_run_time,
    )
    .execute(db)
    .await
    .map(drop)
}

pub async fn set_props(db: impl PgExecutor<'_>, pk: i64, p: &ScheduleProps) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE job_schedules SET do_not_run_until = $2, do_not_run_after = $3, start_window_ms = $4, \
            recurrence_ms = $5, job_specification = $6, metadata = $7, next_run_time = $8, \
            last_modified = now() \
         WHERE pk = $1",
        pk,
        p.timing.do_not_run_until,
        p.timing.do_not_run_after,
        ms(p.timing.start_window),
        ms(p.timing.recurrence),
        &p.job_specification,
        &p.metadata,
        p.next_run_time,
    )
    .execute(db)
    .await
    .map(drop)
}

/// The schedule `id` of `account`; with `lock`, locked for a change.
pub async fn get(
    db: impl PgExecutor<'_>,
    account: &str,
    id: &str,
    lock: bool,
) -> sqlx::Result<Option<ScheduleRow>> {
    if lock {
        select_schedules!(
            "WHERE account = $1 AND lower(id) = lower($2) FOR UPDATE",
            account,
            id
        )
        .fetch_optional(db)
        .await
    } else {
        select_schedules!("WHERE account = $1 AND lower(id) = lower($2)", account, id)
            .fetch_optional(db)
            .await
    }
}

/// A page of the account's schedules in id order, after `after`.
pub async fn list(
    db: impl PgExecutor<'_>,
    account: &str,
    after: Option<&str>,
    limit: i64,
) -> sqlx::Result<Vec<ScheduleRow>> {
    select_schedules!(
        "WHERE account = $1 AND ($2::text IS NULL OR lower(id) > lower($2)) ORDER BY lower(id) LIMIT $3",
        account,
        after,
        limit,
    )
    .fetch_all(db)
    .await
}

/// Moves the schedule to `state` (a request's change: `last_modified` moves too). A schedule
/// that completes makes no more jobs.
pub async fn set_state(
    db: impl PgExecutor<'_>,
    pk: i64,
    state: JobScheduleState,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE job_schedules SET previous_state = state, previous_state_transition_time = state_transition_time, \
            state = $2, state_transition_time = now(), last_modified = now(), \
            end_time = CASE WHEN $2 = 'completed' THEN now() ELSE end_time END, \
            next_run_time = CASE WHEN $2 = 'completed' THEN NULL ELSE next_run_time END \
         WHERE pk = $1 AND state <> $2",
        pk,
        state as JobScheduleState,
    )
    .execute(db)
    .await
    .map(drop)
}

pub async fn delete(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM job_schedules WHERE pk = $1", pk)
        .execute(db)
        .await
        .map(drop)
}

/// Active schedules with something to do at `now`: a job due (or no more to make), and no job
/// of theirs still open. At most `limit`, the longest due first.
pub async fn due(
    db: impl PgExecutor<'_>,
    now: DateTime<Utc>,
    limit: i64,
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        "SELECT s.pk FROM job_schedules s \
         WHERE s.state = 'active' AND (s.next_run_time IS NULL OR s.next_run_time <= $1) \
           AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.job_schedule_pk = s.pk \
                           AND j.state NOT IN ('completed', 'deleting')) \
         ORDER BY s.next_run_time NULLS FIRST, s.pk LIMIT $2",
        now,
        limit,
    )
    .fetch_all(db)
    .await
}

/// The schedule, locked, if it is still active with no job open (what [`due`] found may have
/// changed since).
pub async fn lock_due(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<Option<ScheduleRow>> {
    select_schedules!(
        "WHERE pk = $1 AND state = 'active' AND NOT EXISTS (SELECT 1 FROM jobs j \
           WHERE j.job_schedule_pk = job_schedules.pk AND j.state NOT IN ('completed', 'deleting')) \
         FOR UPDATE",
        pk
    )
    .fetch_optional(db)
    .await
}

/// Records the job a schedule made (None: its number was used by a job that could not be
/// made) and when the next is due.
pub async fn made_job(
    db: impl PgExecutor<'_>,
    pk: i64,
    job_id: Option<&str>,
    next: Option<DateTime<Utc>>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE job_schedules SET jobs_made = jobs_made + 1, recent_job = COALESCE($2, recent_job), \
            next_run_time = $3 WHERE pk = $1",
        pk,
        job_id,
        next,
    )
    .execute(db)
    .await
    .map(drop)
}

/// Moves the next run on without a job (an occurrence lost past its start window).
pub async fn set_next_run(
    db: impl PgExecutor<'_>,
    pk: i64,
    next: Option<DateTime<Utc>>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE job_schedules SET next_run_time = $2 WHERE pk = $1",
        pk,
        next
    )
    .execute(db)
    .await
    .map(drop)
}

/// Completes a schedule that makes no more jobs (not a request's change: `last_modified` stays).
pub async fn complete(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE job_schedules SET previous_state = state, previous_state_transition_time = state_transition_time, \
            state = 'completed', state_transition_time = now(), end_time = now(), next_run_time = NULL \
         WHERE pk = $1 AND state = 'active'",
        pk
    )
    .execute(db)
    .await
    .map(drop)
}

/// Completes the `terminating` schedules whose jobs have all completed (or gone).
pub async fn complete_terminated(db: impl PgExecutor<'_>) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE job_schedules s SET previous_state = state, previous_state_transition_time = state_transition_time, \
            state = 'completed', state_transition_time = now(), last_modified = now(), end_time = now(), \
            next_run_time = NULL \
         WHERE state = 'terminating' AND NOT EXISTS (SELECT 1 FROM jobs j \
            WHERE j.job_schedule_pk = s.pk AND j.state NOT IN ('completed', 'deleting'))"
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// The pks of the schedule's jobs that have not completed (at most one, unless a job was
/// re-enabled by hand).
pub async fn open_jobs(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        "SELECT pk FROM jobs WHERE job_schedule_pk = $1 AND state NOT IN ('completed', 'deleting')",
        pk
    )
    .fetch_all(db)
    .await
}

/// Every job the schedule made.
pub async fn jobs(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!("SELECT pk FROM jobs WHERE job_schedule_pk = $1", pk)
        .fetch_all(db)
        .await
}

/// Ties a job to the schedule that made it.
pub async fn adopt_job(db: impl PgExecutor<'_>, pk: i64, job_pk: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE jobs SET job_schedule_pk = $1 WHERE pk = $2",
        pk,
        job_pk
    )
    .execute(db)
    .await
    .map(drop)
}
