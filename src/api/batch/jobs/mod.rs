//! `/jobs`: create, get, list, update, replace, disable, enable, terminate, delete, task counts.

mod auto_pool;
mod manager;
mod prep;
mod props;
mod state;
mod write;

use std::collections::HashMap;

use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::api::error::{ApiError, ApiResult};
use crate::api::Ctx;
use crate::api::{etag, odata, resource_headers, rfc3339, BaseUrl, Conditions, ListQuery, Select};
use crate::domain::job::JobState;
use crate::domain::IsoDuration;
use crate::store::{self, jobs::JobRow};
pub use state::{disable, enable, terminate};
pub(crate) use write::insert as insert_job;
pub use write::{check_specification, create, patch, replace, specification};

pub async fn get(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(job_id): Path<String>,
    (select, expand): (Select, crate::api::Expand),
    conditions: Conditions,
) -> ApiResult<Response> {
    let job = app.job(&job_id).await?;
    conditions.check(job.last_modified, true)?;
    let mut v = job_json(&job, &base);
    let one = std::slice::from_mut(&mut v);
    crate::api::batch::waits::add_to_jobs(&app.db, std::slice::from_ref(&job), one).await?;
    if expand.stats {
        let totals = store::tasks::stats::of_job(&app.db, job.pk).await?;
        let url = format!("{base}/jobs/{}/stats", job.id);
        v["stats"] = crate::api::batch::stats::job_stats(&url, job.creation_time, &totals);
        crate::api::batch::stats::add_cost(&app, &mut v["stats"], &job, None).await?;
    }
    Ok((resource_headers(job.last_modified), Json(select.shape(v))).into_response())
}

/// `GET /jobs/{job}/jobpreparationandreleasetaskstatus`: where the job's preparation task ran,
/// and its release task after it, one entry per node.
pub async fn preparation_status(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(job_id): Path<String>,
) -> ApiResult<Json<Value>> {
    let job = app.job(&job_id).await?;
    if job.preparation_task.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "JobPreparationTaskNotSpecified",
            format!("The job {:?} has no job preparation task.", job.id),
        ));
    }
    // At most one entry per node of the job's pool: bounded by the pool's size.
    let rows = store::preparations::list(&app.db, job.pk, 100_000).await?;
    let value: Vec<Value> = rows
        .into_iter()
        .map(|r| {
            let node_url = format!("{base}/pools/{}/nodes/{}", r.pool_id, r.node_id);
            let with_url = |mut info: Value| {
                if let Some(root) = info["taskRootDirectory"].as_str() {
                    // The directory below the node's root, as the node files API serves it.
                    let below = root.find("/jobprep/").map(|at| &root[at + 1..]);
                    if let Some(below) = below {
                        info["taskRootDirectoryUrl"] = json!(format!("{node_url}/files/{below}"));
                    }
                }
                info
            };
            let mut entry = json!({"poolId": r.pool_id, "nodeId": r.node_id, "nodeUrl": node_url,
                "jobPreparationTaskExecutionInfo": with_url(r.preparation)});
            if let Some(release) = r.release {
                entry["jobReleaseTaskExecutionInfo"] = with_url(release);
            }
            entry
        })
        .collect();
    Ok(Json(json!({ "value": value })))
}

pub async fn list(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let list = ListQuery::from_query(&query, odata::JOB_PROPERTIES)?;
    let page = list
        .page_from(&base, "/jobs", |after, limit| {
            let (db, account, base) = (app.db.clone(), app.account.clone(), base.clone());
            async move {
                let jobs = store::jobs::list(&db, &account, after.as_deref(), limit).await?;
                let mut values: Vec<Value> = jobs.iter().map(|j| job_json(j, &base)).collect();
                crate::api::batch::waits::add_to_jobs(&db, &jobs, &mut values).await?;
                Ok(jobs.iter().map(|j| j.id.clone()).zip(values).collect())
            }
        })
        .await?;
    Ok(Json(page))
}

/// The job, locked for a change, if it is not completed, terminating or being deleted.
async fn lock_open_job(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    app: &Ctx,
    job_id: &str,
) -> ApiResult<JobRow> {
    let job = store::jobs::get(&mut **tx, &app.account, job_id, store::jobs::Lock::Update)
        .await?
        .ok_or_else(|| ApiError::job_not_found(job_id))?;
    refuse_if_finished(&job)?;
    Ok(job)
}

fn refuse_if_finished(job: &JobRow) -> ApiResult<()> {
    match job.state {
        JobState::Completed => Err(ApiError::new(
            StatusCode::CONFLICT,
            "JobCompleted",
            format!("The job {:?} has completed.", job.id),
        )),
        JobState::Deleting => Err(ApiError::new(
            StatusCode::CONFLICT,
            "JobBeingDeleted",
            format!("The job {:?} is being deleted.", job.id),
        )),
        JobState::Terminating => Err(ApiError::new(
            StatusCode::CONFLICT,
            "JobBeingTerminated",
            format!("The job {:?} is being terminated.", job.id),
        )),
        _ => Ok(()),
    }
}

pub async fn delete(
    app: Ctx,
    Path(job_id): Path<String>,
    conditions: Conditions,
) -> ApiResult<Response> {
    check_write(&app, &job_id, &conditions).await?;
    let job = app.job(&job_id).await?;
    store::jobs::set_state(&app.db, job.pk, JobState::Deleting).await?;
    app.wake_dispatcher();
    Ok(StatusCode::ACCEPTED.into_response())
}

pub async fn task_counts(app: Ctx, Path(job_id): Path<String>) -> ApiResult<Json<Value>> {
    let job = app.job(&job_id).await?;
    let c = store::tasks::counts(&app.db, job.pk).await?;
    Ok(Json(json!({
        "taskCounts": {"active": c.active, "running": c.running, "completed": c.completed, "succeeded": c.succeeded, "failed": c.failed},
        "taskSlotCounts": {"active": c.active_slots, "running": c.running_slots, "completed": c.completed_slots, "succeeded": c.succeeded_slots, "failed": c.failed_slots},
    })))
}

async fn accepted(app: &Ctx, job_id: &str) -> ApiResult<Response> {
    let job = app.job(job_id).await?;
    Ok((StatusCode::ACCEPTED, resource_headers(job.last_modified)).into_response())
}

/// A job as Azure's `BatchJob` JSON.
pub fn job_json(j: &JobRow, base: &str) -> Value {
    let mut constraints = json!({"maxTaskRetryCount": j.max_task_retry_count});
    constraints["maxWallClockTime"] =
        json!(IsoDuration::from_ticks(j.max_wall_clock_ticks.unwrap_or(i64::MAX)).to_string());
    let mut execution = json!({"startTime": rfc3339(j.start_time), "poolId": j.pool_id});
    if let Some(end) = j.end_time {
        execution["endTime"] = json!(rfc3339(end));
    }
    if let Some(reason) = &j.terminate_reason {
        execution["terminateReason"] = json!(reason);
    }
    let mut job = json!({
        "id": j.id,
        "url": format!("{base}/jobs/{}", j.id),
        "eTag": etag(j.last_modified),
        "lastModified": rfc3339(j.last_modified),
        "creationTime": rfc3339(j.creation_time),
        "state": j.state,
        "stateTransitionTime": rfc3339(j.state_transition_time),
        "priority": j.priority,
        "maxParallelTasks": j.max_parallel_tasks,
        "allowTaskPreemption": j.allow_task_preemption,
        "usesTaskDependencies": j.uses_task_dependencies,
        "constraints": constraints,
        "poolInfo": match &j.auto_pool {
            Some(spec) => json!({"autoPoolSpecification": spec}),
            None => json!({"poolId": j.pool_id}),
        },
        "onAllTasksComplete": j.on_all_tasks_complete,
        "onTaskFailure": j.on_task_failure,
        "executionInfo": execution,
    });
    if let Some(name) = &j.display_name {
        job["displayName"] = json!(name);
    }
    if let Some(prev) = &j.previous_state {
        job["previousState"] = json!(prev);
        job["previousStateTransitionTime"] = json!(j.previous_state_transition_time.map(rfc3339));
    }
    if j.common_environment
        .as_array()
        .is_some_and(|e| !e.is_empty())
    {
        job["commonEnvironmentSettings"] = j.common_environment.clone();
    }
    if j.metadata.as_array().is_some_and(|m| !m.is_empty()) {
        job["metadata"] = j.metadata.clone();
    }
    if let Some(m) = &j.manager_task {
        job["jobManagerTask"] = m.clone();
    }
    if let Some(p) = &j.preparation_task {
        job["jobPreparationTask"] = json!(p.0);
    }
    if let Some(r) = &j.release_task {
        job["jobReleaseTask"] = json!(r.0);
    }
    job
}

/// A write's conditional headers, checked against the job as it is.
async fn check_write(app: &Ctx, job_id: &str, conditions: &Conditions) -> ApiResult<()> {
    if conditions.is_empty() {
        return Ok(());
    }
    conditions.check(app.job(job_id).await?.last_modified, false)
}
