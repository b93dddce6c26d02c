//! Creating a job schedule (POST), changing it (PATCH, PUT), and its state by request:
//! disable, enable, terminate. And [`SpecJobs`], which makes each job when it is due.

use std::sync::Arc;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::lock_open;
use crate::api::batch::jobs::{check_specification, insert_job, specification};
use crate::api::batch::pools::MetadataItem;
use crate::api::error::{ApiError, ApiResult};
use crate::api::json::AzureJson;
use crate::api::state::{AppState, Settings};
use crate::api::{created, resource_headers, BaseUrl, Conditions, Ctx};
use crate::domain::ids::check_id;
use crate::domain::schedule::{JobScheduleState, Timing, MIN_INTERVAL};
use crate::domain::IsoDuration;
use crate::ops;
use crate::ops::schedules::JobMaker;
use crate::store::{self, schedules::ScheduleProps};
use futures_util::future::BoxFuture;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleCreate {
    id: Option<String>,
    display_name: Option<String>,
    schedule: Option<ScheduleBody>,
    job_specification: Option<Value>,
    metadata: Option<Vec<MetadataItem>>,
}

/// PATCH changes what is given; PUT sets all of it (`schedule` and `jobSpecification` are
/// required) and resets the metadata it leaves out.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleUpdate {
    schedule: Option<ScheduleBody>,
    job_specification: Option<Value>,
    metadata: Option<Vec<MetadataItem>>,
    /// PUT's body is a whole `BatchJobSchedule`: what it cannot change is left as it is.
    #[serde(flatten)]
    _rest: Map<String, Value>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleBody {
    do_not_run_until: Option<DateTime<Utc>>,
    do_not_run_after: Option<DateTime<Utc>>,
    start_window: Option<IsoDuration>,
    recurrence_interval: Option<IsoDuration>,
}

impl ScheduleBody {
    fn timing(self) -> ApiResult<Timing> {
        let interval = |name: &str, d: Option<IsoDuration>| -> ApiResult<_> {
            let Some(d) = d else { return Ok(None) };
            let d = chrono::Duration::milliseconds(d.ticks() / 10_000);
            if d < MIN_INTERVAL {
                return Err(ApiError::invalid_property(
                    &format!("schedule.{name}"),
                    IsoDuration::from_ticks(d.num_milliseconds() * 10_000).to_string(),
                    "must be at least PT1S",
                ));
            }
            Ok(Some(d))
        };
        let timing = Timing {
            do_not_run_until: self.do_not_run_until,
            do_not_run_after: self.do_not_run_after,
            start_window: interval("startWindow", self.start_window)?,
            recurrence: interval("recurrenceInterval", self.recurrence_interval)?,
        };
        if let (Some(from), Some(until)) = (timing.do_not_run_until, timing.do_not_run_after) {
            if until < from {
                return Err(ApiError::invalid_property(
                    "schedule.doNotRunAfter",
                    crate::domain::rfc3339(until),
                    "must not be before schedule.doNotRunUntil",
                ));
            }
        }
        Ok(timing)
    }
}

fn metadata_json(m: Option<Vec<MetadataItem>>) -> Value {
    serde_json::to_value(m.unwrap_or_default()).expect("metadata serializes")
}

fn checked_spec(spec: Option<Value>, settings: &Settings) -> ApiResult<Value> {
    let spec = spec.ok_or_else(|| ApiError::missing_property("jobSpecification"))?;
    check_specification(&spec, settings)?;
    Ok(spec)
}

pub async fn create(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    AzureJson(body): AzureJson<ScheduleCreate>,
) -> ApiResult<Response> {
    let id = body.id.ok_or_else(|| ApiError::missing_property("id"))?;
    check_id(&id).map_err(|why| ApiError::invalid_property("id", &id, why))?;
    let timing = body
        .schedule
        .ok_or_else(|| ApiError::missing_property("schedule"))?
        .timing()?;
    let props = ScheduleProps {
        next_run_time: timing.first_run(Utc::now()),
        timing,
        job_specification: checked_spec(body.job_specification, &app.settings)?,
        metadata: metadata_json(body.metadata),
    };
    let name = body.display_name.as_deref();
    match store::schedules::insert(&app.db, &app.account, &id, name, &props).await {
        Err(e) if store::is_unique_violation(&e) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "JobScheduleExists",
                format!("The specified job schedule {id:?} already exists."),
            ))
        }
        other => other?,
    }
    let s = super::find(&app, &id).await?;
    app.wake_dispatcher();
    Ok(created(
        &format!("{base}/jobschedules/{}", s.id),
        s.last_modified,
    ))
}

pub async fn patch(
    app: Ctx,
    Path(id): Path<String>,
    conditions: Conditions,
    AzureJson(body): AzureJson<ScheduleUpdate>,
) -> ApiResult<Response> {
    update(&app, &id, &conditions, body, false).await
}

pub async fn replace(
    app: Ctx,
    Path(id): Path<String>,
    conditions: Conditions,
    AzureJson(body): AzureJson<ScheduleUpdate>,
) -> ApiResult<Response> {
    update(&app, &id, &conditions, body, true).await
}

/// A changed schedule makes its next job by the new timing, from now; a changed job
/// specification is used for the jobs made from now on (a job that runs keeps its own).
async fn update(
    app: &Ctx,
    id: &str,
    conditions: &Conditions,
    body: ScheduleUpdate,
    replace: bool,
) -> ApiResult<Response> {
    let mut tx = app.db.begin().await?;
    let s = lock_open(&mut tx, app, id, conditions).await?;
    let (timing, next_run_time) = match body.schedule {
        Some(given) => {
            let timing = given.timing()?;
            (timing.clone(), timing.first_run(Utc::now()))
        }
        None if replace => return Err(ApiError::missing_property("schedule")),
        None => (s.timing(), s.next_run_time),
    };
    let job_specification = match body.job_specification {
        None if !replace => s.job_specification.clone(),
        given => checked_spec(given, &app.settings)?,
    };
    let metadata = match body.metadata {
        None if !replace => s.metadata.clone(),
        given => metadata_json(given),
    };
    let props = ScheduleProps {
        timing,
        job_specification,
        metadata,
        next_run_time,
    };
    store::schedules::set_props(&mut *tx, s.pk, &props).await?;
    tx.commit().await?;
    app.wake_dispatcher();
    let s = super::find(app, id).await?;
    Ok((StatusCode::OK, resource_headers(s.last_modified)).into_response())
}

/// Moves a schedule from `from` to `to` by request, or says why not.
async fn change_state(
    app: &Ctx,
    id: &str,
    conditions: &Conditions,
    (from, to): (JobScheduleState, JobScheduleState),
) -> ApiResult<Response> {
    let mut tx = app.db.begin().await?;
    let s = lock_open(&mut tx, app, id, conditions).await?;
    if s.state != from {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "JobScheduleNotInRequiredState",
            format!(
                "The job schedule {:?} is {}; it must be {from}.",
                s.id, s.state
            ),
        ));
    }
    store::schedules::set_state(&mut *tx, s.pk, to).await?;
    tx.commit().await?;
    let s = super::find(app, id).await?;
    Ok((StatusCode::NO_CONTENT, resource_headers(s.last_modified)).into_response())
}

/// No more jobs until it is enabled; the job that runs goes on.
pub async fn disable(
    app: Ctx,
    Path(id): Path<String>,
    conditions: Conditions,
) -> ApiResult<Response> {
    let states = (JobScheduleState::Active, JobScheduleState::Disabled);
    change_state(&app, &id, &conditions, states).await
}

/// Jobs again; an occurrence missed while disabled is made if its start window is still open.
pub async fn enable(
    app: Ctx,
    Path(id): Path<String>,
    conditions: Conditions,
) -> ApiResult<Response> {
    let states = (JobScheduleState::Disabled, JobScheduleState::Active);
    change_state(&app, &id, &conditions, states).await
}

/// Completes the schedule at once: no more jobs, and the job that runs is terminated.
pub async fn terminate(
    app: Ctx,
    Path(id): Path<String>,
    conditions: Conditions,
) -> ApiResult<Response> {
    let mut tx = app.db.begin().await?;
    let s = lock_open(&mut tx, &app, &id, &conditions).await?;
    ops::schedules::terminate(&mut tx, s.pk).await?;
    tx.commit().await?;
    app.wake_dispatcher();
    let s = super::find(&app, &id).await?;
    Ok((StatusCode::ACCEPTED, resource_headers(s.last_modified)).into_response())
}

/// Makes a schedule's jobs through the job add's own checks and inserts, with the server's
/// settings (for auto pools).
pub struct SpecJobs(pub Arc<AppState>);

impl JobMaker for SpecJobs {
    fn make<'a, 'c: 'a>(
        &'a self,
        tx: &'a mut sqlx::Transaction<'c, sqlx::Postgres>,
        account: &'a str,
        (job_id, schedule): (&'a str, i64),
        spec: &'a Value,
    ) -> BoxFuture<'a, Result<i64, String>> {
        Box::pin(async move {
            let why = |e: ApiError| format!("{}: {}", e.code, e.message);
            let body = specification(spec).map_err(why)?;
            let at = (job_id.to_string(), Some(schedule));
            let job = insert_job(tx, (&self.0.settings, account), at, body).await;
            job.map(|row| row.pk).map_err(why)
        })
    }
}
