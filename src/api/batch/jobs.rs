//! `/jobs`: create, get, list, update, replace, disable, enable, terminate, delete, task counts.

use std::collections::HashMap;

use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::pools::MetadataItem;
use crate::api::error::{ApiError, ApiResult};
use crate::api::json::AzureJson;
use crate::api::Ctx;
use crate::api::{
    etag, header_value, odata, resource_headers, rfc3339, BaseUrl, Conditions, ListQuery, Select,
};
use crate::domain::ids::check_id;
use crate::domain::job::{AllTasksComplete, DisableTasks, JobState, TaskFailureMode};
use crate::domain::pool::EnvironmentSetting;
use crate::domain::IsoDuration;
use crate::ops;
use crate::store::{self, jobs::JobProps, jobs::JobRow};

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Constraints {
    max_wall_clock_time: Option<IsoDuration>,
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    max_task_retry_count: Option<i32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolInfo {
    pool_id: Option<String>,
    auto_pool_specification: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobCreate {
    id: Option<String>,
    display_name: Option<String>,
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    priority: Option<i32>,
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    max_parallel_tasks: Option<i32>,
    constraints: Option<Constraints>,
    pool_info: Option<PoolInfo>,
    on_all_tasks_complete: Option<String>,
    on_task_failure: Option<String>,
    uses_task_dependencies: Option<bool>,
    common_environment_settings: Option<Vec<EnvironmentSetting>>,
    metadata: Option<Vec<MetadataItem>>,
    job_manager_task: Option<Value>,
    job_preparation_task: Option<Value>,
    job_release_task: Option<Value>,
}

/// PATCH and PUT share these fields; PATCH changes what is given, PUT resets what is not.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobUpdate {
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    priority: Option<i32>,
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    max_parallel_tasks: Option<i32>,
    constraints: Option<Constraints>,
    pool_info: Option<PoolInfo>,
    on_all_tasks_complete: Option<String>,
    on_task_failure: Option<String>,
    metadata: Option<Vec<MetadataItem>>,
}

fn check_priority(p: i32) -> ApiResult<i32> {
    if (-1000..=1000).contains(&p) {
        Ok(p)
    } else {
        Err(ApiError::invalid_property(
            "priority",
            p.to_string(),
            "must be between -1000 and 1000",
        ))
    }
}

fn check_max_parallel(n: i32) -> ApiResult<i32> {
    if n == -1 || n >= 1 {
        Ok(n)
    } else {
        Err(ApiError::invalid_property(
            "maxParallelTasks",
            n.to_string(),
            "must be -1 (no limit) or at least 1",
        ))
    }
}

pub fn check_retry_count(name: &str, n: i32) -> ApiResult<i32> {
    if n >= -1 {
        Ok(n)
    } else {
        Err(ApiError::invalid_property(
            name,
            n.to_string(),
            "must be -1 (unlimited) or more",
        ))
    }
}

fn check_pool_info(info: Option<PoolInfo>) -> ApiResult<String> {
    let info = info.ok_or_else(|| ApiError::missing_property("poolInfo"))?;
    if info.auto_pool_specification.is_some() {
        return Err(ApiError::invalid_property(
            "poolInfo.autoPoolSpecification",
            "",
            "auto pools are not supported; create a pool and give its poolId",
        ));
    }
    let pool_id = info
        .pool_id
        .ok_or_else(|| ApiError::missing_property("poolInfo.poolId"))?;
    check_id(&pool_id)
        .map_err(|why| ApiError::invalid_property("poolInfo.poolId", &pool_id, why))?;
    Ok(pool_id)
}

fn enum_value<T>(
    name: &str,
    value: Option<String>,
    parse: fn(&str) -> Option<T>,
    default: &str,
    allowed: &str,
) -> ApiResult<String> {
    match value {
        None => Ok(default.to_string()),
        Some(v) if parse(&v).is_some() => Ok(v),
        Some(v) => Err(ApiError::invalid_property(
            name,
            &v,
            format!("must be one of: {allowed}"),
        )),
    }
}

pub fn env_json(name: &str, settings: Option<Vec<EnvironmentSetting>>) -> ApiResult<Value> {
    let settings = settings.unwrap_or_default();
    if let Some(bad) = settings
        .iter()
        .find(|e| e.name.is_empty() || e.name.contains('='))
    {
        return Err(ApiError::invalid_property(
            name,
            &bad.name,
            "a name must be non-empty and contain no '='",
        ));
    }
    Ok(Value::Array(
        settings
            .into_iter()
            .map(|e| json!({"name": e.name, "value": e.value.unwrap_or_default()}))
            .collect(),
    ))
}

fn metadata_json(m: Option<Vec<MetadataItem>>) -> Value {
    serde_json::to_value(m.unwrap_or_default()).expect("metadata serializes")
}

pub async fn create(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    AzureJson(body): AzureJson<JobCreate>,
) -> ApiResult<Response> {
    let id = body.id.ok_or_else(|| ApiError::missing_property("id"))?;
    check_id(&id).map_err(|why| ApiError::invalid_property("id", &id, why))?;
    for (name, given) in [
        ("jobManagerTask", &body.job_manager_task),
        ("jobPreparationTask", &body.job_preparation_task),
        ("jobReleaseTask", &body.job_release_task),
    ] {
        if given.is_some() {
            return Err(ApiError::invalid_property(
                name,
                "",
                "not supported by this server; add ordinary tasks instead",
            ));
        }
    }
    let constraints = body.constraints.unwrap_or_default();
    let props = JobProps {
        priority: check_priority(body.priority.unwrap_or(0))?,
        max_parallel_tasks: check_max_parallel(body.max_parallel_tasks.unwrap_or(-1))?,
        max_wall_clock_ticks: constraints.max_wall_clock_time.map(IsoDuration::ticks),
        max_task_retry_count: check_retry_count(
            "constraints.maxTaskRetryCount",
            constraints.max_task_retry_count.unwrap_or(0),
        )?,
        pool_id: check_pool_info(body.pool_info)?,
        on_all_tasks_complete: enum_value(
            "onAllTasksComplete",
            body.on_all_tasks_complete,
            AllTasksComplete::parse,
            "noaction",
            "noaction, terminatejob",
        )?,
        on_task_failure: enum_value(
            "onTaskFailure",
            body.on_task_failure,
            TaskFailureMode::parse,
            "noaction",
            "noaction, performexitoptionsjobaction",
        )?,
        metadata: metadata_json(body.metadata),
    };
    let job = store::jobs::NewJob {
        account: app.account.clone(),
        id: id.clone(),
        display_name: body.display_name,
        uses_task_dependencies: body.uses_task_dependencies.unwrap_or(false),
        common_environment: env_json(
            "commonEnvironmentSettings",
            body.common_environment_settings,
        )?,
        props,
    };
    let mut tx = app.db.begin().await?;
    match store::jobs::insert(&mut *tx, &job).await {
        Err(e) if store::is_unique_violation(&e) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "JobExists",
                format!("The specified job {id:?} already exists."),
            ))
        }
        other => other?,
    }
    let row = store::jobs::get(&mut *tx, &app.account, &id, store::jobs::Lock::None)
        .await?
        .ok_or_else(|| ApiError::internal("job vanished"))?;
    // As on Azure: a job told to end when all its tasks are done, created without tasks, is done.
    store::jobs::complete_if_all_tasks_done(&mut *tx, row.pk).await?;
    tx.commit().await?;
    let url = format!("{base}/jobs/{}", row.id);
    let mut headers = resource_headers(row.last_modified);
    headers.insert("Location", header_value(&url));
    headers.insert("DataServiceId", header_value(&url));
    Ok((StatusCode::CREATED, headers).into_response())
}

pub async fn find(app: &Ctx, job_id: &str) -> ApiResult<JobRow> {
    store::jobs::get(&app.db, &app.account, job_id, store::jobs::Lock::None)
        .await?
        .ok_or_else(|| job_not_found(job_id))
}

pub fn job_not_found(job_id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "JobNotFound",
        format!("The specified job {job_id:?} does not exist."),
    )
}

pub async fn get(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(job_id): Path<String>,
    select: Select,
    conditions: Conditions,
) -> ApiResult<Response> {
    let job = find(&app, &job_id).await?;
    conditions.check(job.last_modified, true)?;
    Ok((
        resource_headers(job.last_modified),
        Json(select.shape(job_json(&job, &base))),
    )
        .into_response())
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
                Ok(jobs
                    .iter()
                    .map(|j| (j.id.clone(), job_json(j, &base)))
                    .collect())
            }
        })
        .await?;
    Ok(Json(page))
}

pub async fn patch(
    app: Ctx,
    Path(job_id): Path<String>,
    conditions: Conditions,
    AzureJson(body): AzureJson<JobUpdate>,
) -> ApiResult<Response> {
    check_write(&app, &job_id, &conditions).await?;
    update(&app, &job_id, body, false).await
}

pub async fn replace(
    app: Ctx,
    Path(job_id): Path<String>,
    conditions: Conditions,
    AzureJson(body): AzureJson<JobUpdate>,
) -> ApiResult<Response> {
    check_write(&app, &job_id, &conditions).await?;
    update(&app, &job_id, body, true).await
}

async fn update(app: &Ctx, job_id: &str, body: JobUpdate, replace: bool) -> ApiResult<Response> {
    let mut tx = app.db.begin().await?;
    let job = lock_open_job(&mut tx, app, job_id).await?;
    let keep = |current: i32, default: i32| if replace { default } else { current };
    let constraints = body.constraints;
    let props = JobProps {
        priority: check_priority(body.priority.unwrap_or(keep(job.priority, 0)))?,
        max_parallel_tasks: check_max_parallel(
            body.max_parallel_tasks
                .unwrap_or(keep(job.max_parallel_tasks, -1)),
        )?,
        // PATCH keeps what it does not name, inside constraints too; PUT resets it.
        max_wall_clock_ticks: match constraints.as_ref().and_then(|c| c.max_wall_clock_time) {
            Some(limit) => Some(limit.ticks()),
            None if replace => None,
            None => job.max_wall_clock_ticks,
        },
        max_task_retry_count: check_retry_count(
            "constraints.maxTaskRetryCount",
            constraints
                .as_ref()
                .and_then(|c| c.max_task_retry_count)
                .unwrap_or(keep(job.max_task_retry_count, 0)),
        )?,
        pool_id: match body.pool_info {
            Some(info) => check_pool_info(Some(info))?,
            None if replace => return Err(ApiError::missing_property("poolInfo")),
            None => job.pool_id.clone(),
        },
        on_all_tasks_complete: match body.on_all_tasks_complete {
            None if !replace => job.on_all_tasks_complete.clone(),
            v => enum_value(
                "onAllTasksComplete",
                v,
                AllTasksComplete::parse,
                "noaction",
                "noaction, terminatejob",
            )?,
        },
        on_task_failure: match body.on_task_failure {
            None if !replace => job.on_task_failure.clone(),
            v => enum_value(
                "onTaskFailure",
                v,
                TaskFailureMode::parse,
                "noaction",
                "noaction, performexitoptionsjobaction",
            )?,
        },
        metadata: match body.metadata {
            None if !replace => job.metadata.clone(),
            m => metadata_json(m),
        },
    };
    store::jobs::set_props(&mut *tx, job.pk, &props).await?;
    store::jobs::complete_if_all_tasks_done(&mut *tx, job.pk).await?;
    tx.commit().await?;
    app.wake_dispatcher();
    let job = find(app, job_id).await?;
    Ok((StatusCode::OK, resource_headers(job.last_modified)).into_response())
}

/// The job, locked for a change, if it is not completed, terminating or being deleted.
async fn lock_open_job(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    app: &Ctx,
    job_id: &str,
) -> ApiResult<JobRow> {
    let job = store::jobs::get(&mut **tx, &app.account, job_id, store::jobs::Lock::Update)
        .await?
        .ok_or_else(|| job_not_found(job_id))?;
    refuse_if_finished(&job)?;
    Ok(job)
}

fn refuse_if_finished(job: &JobRow) -> ApiResult<()> {
    match job.job_state() {
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

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TerminateBody {
    terminate_reason: Option<String>,
}

pub async fn terminate(
    app: Ctx,
    Path(job_id): Path<String>,
    conditions: Conditions,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    check_write(&app, &job_id, &conditions).await?;
    // The SDKs send no body, an empty one, or {"terminateReason": ...}.
    let body: TerminateBody = if body.is_empty() {
        TerminateBody::default()
    } else {
        crate::api::json::parse(&body)?
    };
    let mut tx = app.db.begin().await?;
    let job = lock_open_job(&mut tx, &app, &job_id).await?;
    ops::jobs::terminate_job(
        &mut tx,
        job.pk,
        body.terminate_reason.as_deref().unwrap_or("UserTerminate"),
    )
    .await?;
    tx.commit().await?;
    app.wake_dispatcher();
    accepted(&app, &job_id).await
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisableBody {
    disable_tasks: Option<String>,
}

pub async fn disable(
    app: Ctx,
    Path(job_id): Path<String>,
    conditions: Conditions,
    AzureJson(body): AzureJson<DisableBody>,
) -> ApiResult<Response> {
    check_write(&app, &job_id, &conditions).await?;
    let mode = body
        .disable_tasks
        .ok_or_else(|| ApiError::missing_property("disableTasks"))?;
    let mode = DisableTasks::parse(&mode).ok_or_else(|| {
        ApiError::invalid_property("disableTasks", &mode, "must be requeue, terminate or wait")
    })?;
    let mut tx = app.db.begin().await?;
    let job = lock_open_job(&mut tx, &app, &job_id).await?;
    if job.job_state() != JobState::Active {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "JobNotActive",
            format!(
                "The job {job_id:?} is {}; only an active job can be disabled.",
                job.state
            ),
        ));
    }
    ops::jobs::disable_job(&mut tx, job.pk, mode).await?;
    tx.commit().await?;
    app.wake_dispatcher();
    accepted(&app, &job_id).await
}

pub async fn enable(
    app: Ctx,
    Path(job_id): Path<String>,
    conditions: Conditions,
) -> ApiResult<Response> {
    check_write(&app, &job_id, &conditions).await?;
    let mut tx = app.db.begin().await?;
    let job = lock_open_job(&mut tx, &app, &job_id).await?;
    if job.job_state() != JobState::Disabled {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "JobNotDisabled",
            format!(
                "The job {job_id:?} is {}; only a disabled job can be enabled.",
                job.state
            ),
        ));
    }
    store::jobs::set_state(&mut *tx, job.pk, JobState::Active).await?;
    tx.commit().await?;
    app.wake_dispatcher();
    accepted(&app, &job_id).await
}

pub async fn delete(
    app: Ctx,
    Path(job_id): Path<String>,
    conditions: Conditions,
) -> ApiResult<Response> {
    check_write(&app, &job_id, &conditions).await?;
    let job = find(&app, &job_id).await?;
    store::jobs::set_state(&app.db, job.pk, JobState::Deleting).await?;
    app.wake_dispatcher();
    Ok(StatusCode::ACCEPTED.into_response())
}

pub async fn task_counts(app: Ctx, Path(job_id): Path<String>) -> ApiResult<Json<Value>> {
    let job = find(&app, &job_id).await?;
    let c = store::tasks::counts(&app.db, job.pk).await?;
    Ok(Json(json!({
        "taskCounts": {"active": c.active, "running": c.running, "completed": c.completed, "succeeded": c.succeeded, "failed": c.failed},
        "taskSlotCounts": {"active": c.active_slots, "running": c.running_slots, "completed": c.completed_slots, "succeeded": c.succeeded_slots, "failed": c.failed_slots},
    })))
}

async fn accepted(app: &Ctx, job_id: &str) -> ApiResult<Response> {
    let job = find(app, job_id).await?;
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
        "allowTaskPreemption": false,
        "usesTaskDependencies": j.uses_task_dependencies,
        "constraints": constraints,
        "poolInfo": {"poolId": j.pool_id},
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
    job
}

/// A write's conditional headers, checked against the job as it is.
async fn check_write(app: &Ctx, job_id: &str, conditions: &Conditions) -> ApiResult<()> {
    if conditions.is_empty() {
        return Ok(());
    }
    conditions.check(find(app, job_id).await?.last_modified, false)
}
