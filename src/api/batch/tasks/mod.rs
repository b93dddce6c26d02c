//! `/jobs/{job}/tasks`: add one or a collection, get, list, update, terminate, reactivate, delete.

mod add;
mod deps;
mod files;
mod json;
mod validate;

use std::collections::HashMap;

use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;

use crate::api::error::{ApiError, ApiResult};
use crate::api::json::AzureJson;
use crate::api::Ctx;
use crate::api::{odata, resource_headers, BaseUrl, Conditions, ListQuery, Select};
use crate::domain::job::{JobState, TaskState};
use crate::ops;
use crate::store::{self, jobs::JobRow, tasks::Ending, tasks::TaskRow};
pub(crate) use add::manager_task;
pub use add::{add, add_collection};
pub(crate) use files::{check_resource_files, checked_packages, refuse_auto_storage};
pub use json::task_json;
use validate::TaskConstraints;
pub use validate::{check_retry_count, env_json, TaskCreate};

fn task_url(base: &str, job_id: &str, task_id: &str) -> String {
    format!("{base}/jobs/{job_id}/tasks/{task_id}")
}

pub async fn find(app: &Ctx, job: &JobRow, task_id: &str) -> ApiResult<TaskRow> {
    store::tasks::get(&app.db, job.pk, task_id)
        .await?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "TaskNotFound",
                format!(
                    "The specified task {task_id:?} does not exist in job {:?}.",
                    job.id
                ),
            )
        })
}

pub async fn get(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path((job_id, task_id)): Path<(String, String)>,
    (select, expand): (Select, crate::api::Expand),
    conditions: Conditions,
) -> ApiResult<Response> {
    let job = app.job(&job_id).await?;
    let task = find(&app, &job, &task_id).await?;
    conditions.check(task.last_modified, true)?;
    let mut v = task_json(&job, &task, &base);
    let one = std::slice::from_mut(&mut v);
    crate::api::batch::waits::add_to_tasks(&app.db, &job, std::slice::from_ref(&task), one).await?;
    if expand.stats {
        let totals = store::tasks::stats::of_task(&app.db, task.pk).await?;
        let url = format!("{base}/jobs/{}/tasks/{}/stats", job.id, task.id);
        v["stats"] = crate::api::batch::stats::task_stats(&url, task.creation_time, &totals);
        crate::api::batch::stats::add_cost(&app, &mut v["stats"], &job, Some(&task.id)).await?;
    }
    Ok((resource_headers(task.last_modified), Json(select.shape(v))).into_response())
}

pub async fn list(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(job_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let list = ListQuery::from_query(&query, odata::TASK_PROPERTIES)?;
    let job = app.job(&job_id).await?;
    // A state filter narrows the scan itself (the queue of a big job is mostly one state).
    let state = list
        .filter()
        .and_then(|f| f.required_eq("state"))
        .map(String::from);
    let path = format!("/jobs/{}/tasks", job.id);
    let page = list
        .page_from(&base, &path, |after, limit| {
            let (db, job, base, state) = (app.db.clone(), job.clone(), base.clone(), state.clone());
            async move {
                let after = match after.as_deref() {
                    None => 0,
                    Some(t) => t.parse::<i64>().map_err(|_| {
                        ApiError::invalid_query("$skiptoken", t, "not a token this server issued")
                    })?,
                };
                let tasks = store::tasks::list(&db, job.pk, after, limit, state.as_deref()).await?;
                let mut values: Vec<Value> =
                    tasks.iter().map(|t| task_json(&job, t, &base)).collect();
                crate::api::batch::waits::add_to_tasks(&db, &job, &tasks, &mut values).await?;
                Ok(tasks.iter().map(|t| t.pk.to_string()).zip(values).collect())
            }
        })
        .await?;
    Ok(Json(page))
}

#[derive(Deserialize)]
pub struct TaskUpdate {
    constraints: Option<TaskConstraints>,
}

/// PUT: replaces the task's constraints.
pub async fn update(
    app: Ctx,
    Path((job_id, task_id)): Path<(String, String)>,
    conditions: Conditions,
    AzureJson(body): AzureJson<TaskUpdate>,
) -> ApiResult<Response> {
    check_write(&app, &job_id, &task_id, &conditions).await?;
    let job = app.job(&job_id).await?;
    let task = find(&app, &job, &task_id).await?;
    let c = body.constraints.unwrap_or_default();
    let retries = c.retry_count(&job)?;
    store::tasks::update_constraints(
        &app.db,
        task.pk,
        c.max_wall_clock_ticks(),
        c.retention_ticks(),
        retries,
    )
    .await?;
    let task = find(&app, &job, &task_id).await?;
    Ok((StatusCode::OK, resource_headers(task.last_modified)).into_response())
}

/// Ends an active or running task as failed; a running one is killed.
pub async fn terminate(
    app: Ctx,
    Path((job_id, task_id)): Path<(String, String)>,
    conditions: Conditions,
) -> ApiResult<Response> {
    check_write(&app, &job_id, &task_id, &conditions).await?;
    let job = app.job(&job_id).await?;
    let task = find(&app, &job, &task_id).await?;
    let info = ops::jobs::ended_by("terminated by a user");
    let mut tx = app.db.begin().await?;
    let ending = Ending::stopped(&info);
    let ended = store::tasks::end_attempt(
        &mut tx,
        task.pk,
        None,
        &[TaskState::Active, TaskState::Preparing, TaskState::Running],
        ending,
    )
    .await?;
    if ended.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "TaskCompleted",
            format!("The task {task_id:?} has already completed."),
        ));
    }
    store::jobs::complete_if_all_tasks_done(&mut *tx, job.pk).await?;
    tx.commit().await?;
    app.wake_dispatcher();
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A failed task may run again, with its retries counted afresh.
pub async fn reactivate(
    app: Ctx,
    Path((job_id, task_id)): Path<(String, String)>,
    conditions: Conditions,
) -> ApiResult<Response> {
    check_write(&app, &job_id, &task_id, &conditions).await?;
    let job = app.job(&job_id).await?;
    if matches!(
        job.state,
        JobState::Completed | JobState::Terminating | JobState::Deleting
    ) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "JobCompleted",
            format!("The job {job_id:?} has completed; its tasks cannot be reactivated."),
        ));
    }
    let task = find(&app, &job, &task_id).await?;
    let mut tx = app.db.begin().await?;
    // A failure that satisfied its dependants (dependencyAction satisfy) no longer does once the
    // task runs again: they count it as unmet until it ends anew.
    let done = store::tasks::reactivate(&mut *tx, task.pk).await?;
    if done == Some(true) {
        store::tasks::unsatisfy_dependants(&mut *tx, task.pk).await?;
    }
    tx.commit().await?;
    if done.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "TaskNotFailed",
            format!(
                "Only a task that completed with a failure can be reactivated; {task_id:?} is {}.",
                task.state
            ),
        ));
    }
    app.wake_dispatcher();
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Deletes a task (killing it if it runs) and its files.
pub async fn delete(
    app: Ctx,
    Path((job_id, task_id)): Path<(String, String)>,
    conditions: Conditions,
) -> ApiResult<Response> {
    check_write(&app, &job_id, &task_id, &conditions).await?;
    let job = app.job(&job_id).await?;
    let task = find(&app, &job, &task_id).await?;
    let mut tx = app.db.begin().await?;
    let info = ops::jobs::ended_by("the task was deleted");
    let ending = Ending::stopped(&info);
    let was_running = store::tasks::end_attempt(&mut tx, task.pk, None, TaskState::ON_NODE, ending)
        .await?
        .is_some();
    store::tasks::stats::keep(&mut tx, &job.account, job.pk, Some(task.pk)).await?;
    store::tasks::delete(&mut *tx, task.pk).await?;
    store::jobs::complete_if_all_tasks_done(&mut *tx, job.pk).await?;
    // A running task's files go once the scheduler has killed its process; a finished task's
    // go through the leader, whose nodes' agents connect to it (this server may not lead). A
    // task whose node left took them with it.
    if let (false, Some(_), Some(node)) = (was_running, task.node_pk, &task.node_id) {
        store::removals::queue(&mut *tx, &job.account, (&job.id, &task.id), node).await?;
    }
    tx.commit().await?;
    app.wake_dispatcher();
    Ok(StatusCode::OK.into_response())
}

/// A write's conditional headers, checked against the task as it is.
async fn check_write(
    app: &Ctx,
    job_id: &str,
    task_id: &str,
    conditions: &Conditions,
) -> ApiResult<()> {
    if conditions.is_empty() {
        return Ok(());
    }
    let job = app.job(job_id).await?;
    conditions.check(find(app, &job, task_id).await?.last_modified, false)
}
