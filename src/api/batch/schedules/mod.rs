//! `/jobschedules`: jobs made on a schedule from one job specification (docs/schedules.md).
//! Get, list, exists (HEAD), delete, the jobs a schedule made; `write` creates and changes.

mod write;

use std::collections::HashMap;

use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::api::error::{ApiError, ApiResult};
use crate::api::{
    etag, odata, resource_headers, rfc3339, BaseUrl, Conditions, Ctx, ListQuery, Select,
};
use crate::domain::schedule::JobScheduleState;
use crate::domain::IsoDuration;
use crate::ops;
use crate::store::{self, schedules::ScheduleRow};
pub use write::{create, disable, enable, patch, replace, terminate, SpecJobs};

pub fn not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "JobScheduleNotFound",
        format!("The specified job schedule {id:?} does not exist."),
    )
}

async fn find(app: &Ctx, id: &str) -> ApiResult<ScheduleRow> {
    store::schedules::get(&app.db, &app.account, id, false)
        .await?
        .ok_or_else(|| not_found(id))
}

/// The schedule, locked for a change by a request, if it is not completed or being deleted.
async fn lock_open(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    app: &Ctx,
    id: &str,
    conditions: &Conditions,
) -> ApiResult<ScheduleRow> {
    let s = store::schedules::get(&mut **tx, &app.account, id, true)
        .await?
        .ok_or_else(|| not_found(id))?;
    conditions.check(s.last_modified, false)?;
    let refuse = |code, what: &str| {
        Err(ApiError::new(
            StatusCode::CONFLICT,
            code,
            format!("The job schedule {:?} {what}.", s.id),
        ))
    };
    match s.state {
        JobScheduleState::Completed => refuse("JobScheduleCompleted", "has completed"),
        JobScheduleState::Deleting => refuse("JobScheduleBeingDeleted", "is being deleted"),
        JobScheduleState::Terminating => {
            refuse("JobScheduleBeingTerminated", "is being terminated")
        }
        _ => Ok(s),
    }
}

pub async fn get(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(id): Path<String>,
    select: Select,
    conditions: Conditions,
) -> ApiResult<Response> {
    let s = find(&app, &id).await?;
    conditions.check(s.last_modified, true)?;
    Ok((
        resource_headers(s.last_modified),
        Json(select.shape(schedule_json(&s, &base))),
    )
        .into_response())
}

pub async fn list(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let list = ListQuery::from_query(&query, odata::JOB_SCHEDULE_PROPERTIES)?;
    let page = list
        .page_from(&base, "/jobschedules", |after, limit| {
            let (db, account, base) = (app.db.clone(), app.account.clone(), base.clone());
            async move {
                let rows = store::schedules::list(&db, &account, after.as_deref(), limit).await?;
                Ok(rows
                    .iter()
                    .map(|s| (s.id.clone(), schedule_json(s, &base)))
                    .collect())
            }
        })
        .await?;
    Ok(Json(page))
}

/// `GET /jobschedules/{id}/jobs`: the jobs the schedule made, as `GET /jobs` lists them.
pub async fn jobs(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let s = find(&app, &id).await?;
    let list = ListQuery::from_query(&query, odata::JOB_PROPERTIES)?;
    let page = list
        .page_from(
            &base,
            &format!("/jobschedules/{}/jobs", s.id),
            |after, limit| {
                let (db, base) = (app.db.clone(), base.clone());
                async move {
                    let jobs =
                        store::jobs::list_of_schedule(&db, s.pk, after.as_deref(), limit).await?;
                    Ok(jobs
                        .iter()
                        .map(|j| (j.id.clone(), crate::api::batch::jobs::job_json(j, &base)))
                        .collect())
                }
            },
        )
        .await?;
    Ok(Json(page))
}

/// Deletes the schedule and every job it made, at once (the SDK's poller then finds 404).
pub async fn delete(
    app: Ctx,
    Path(id): Path<String>,
    conditions: Conditions,
) -> ApiResult<Response> {
    let mut tx = app.db.begin().await?;
    let s = store::schedules::get(&mut *tx, &app.account, &id, true)
        .await?
        .ok_or_else(|| not_found(&id))?;
    conditions.check(s.last_modified, false)?;
    ops::schedules::delete(&mut tx, s.pk).await?;
    tx.commit().await?;
    app.wake_dispatcher();
    Ok(StatusCode::ACCEPTED.into_response())
}

/// A schedule as Azure's `BatchJobSchedule` JSON.
pub fn schedule_json(s: &ScheduleRow, base: &str) -> Value {
    let timing = s.timing();
    let duration = |d: Option<chrono::Duration>| {
        d.map(|d| IsoDuration::from_ticks(d.num_milliseconds() * 10_000).to_string())
    };
    let mut schedule = json!({});
    let mut put = |name: &str, v: Option<String>| {
        if let Some(v) = v {
            schedule[name] = json!(v);
        }
    };
    put("doNotRunUntil", timing.do_not_run_until.map(rfc3339));
    put("doNotRunAfter", timing.do_not_run_after.map(rfc3339));
    put("startWindow", duration(timing.start_window));
    put("recurrenceInterval", duration(timing.recurrence));
    let mut execution = json!({});
    if let Some(next) = s
        .next_run_time
        .filter(|_| s.state == JobScheduleState::Active)
    {
        execution["nextRunTime"] = json!(rfc3339(next));
    }
    if let Some(job) = &s.recent_job {
        execution["recentJob"] = json!({"id": job, "url": format!("{base}/jobs/{job}")});
    }
    if let Some(end) = s.end_time {
        execution["endTime"] = json!(rfc3339(end));
    }
    let mut v = json!({
        "id": s.id,
        "url": format!("{base}/jobschedules/{}", s.id),
        "eTag": etag(s.last_modified),
        "lastModified": rfc3339(s.last_modified),
        "creationTime": rfc3339(s.creation_time),
        "state": s.state,
        "stateTransitionTime": rfc3339(s.state_transition_time),
        "schedule": schedule,
        "jobSpecification": s.job_specification,
        "executionInfo": execution,
        "metadata": s.metadata,
    });
    if let Some(name) = &s.display_name {
        v["displayName"] = json!(name);
    }
    if let Some(prev) = s.previous_state {
        v["previousState"] = json!(prev);
        v["previousStateTransitionTime"] = json!(s.previous_state_transition_time.map(rfc3339));
    }
    v
}
