//! `/jobs/{job}/tasks`: add one or a collection, get, list, update, terminate, reactivate, delete.

use std::collections::{HashMap, HashSet};

use axum::body::Bytes;
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::jobs::{check_retry_count, env_json, find as find_job};
use crate::api::error::{ApiError, ApiResult};
use crate::api::json::{parse, AzureJson};
use crate::api::Ctx;
use crate::api::{
    etag, header_value, odata, resource_headers, rfc3339, BaseUrl, Conditions, ListQuery, Select,
};
use crate::domain::ids::check_id;
use crate::domain::job::{ExitConditions, JobState, TaskState};
use crate::domain::pool::EnvironmentSetting;
use crate::domain::IsoDuration;
use crate::ops;
use crate::store::{self, jobs::JobRow, tasks::Ending, tasks::NewTask, tasks::TaskRow};

/// Azure's limits on one addtaskcollection request.
const MAX_TASKS_PER_COLLECTION: usize = 100;
const MAX_COLLECTION_BYTES: usize = 1024 * 1024;
/// Azure's default retentionTime: 7 days.
const DEFAULT_RETENTION_SECS: i64 = 7 * 24 * 3600;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TaskConstraints {
    max_wall_clock_time: Option<IsoDuration>,
    retention_time: Option<IsoDuration>,
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    max_task_retry_count: Option<i32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DependsOn {
    #[serde(default)]
    task_ids: Vec<String>,
    #[serde(default)]
    task_id_ranges: Vec<IdRange>,
}

#[derive(Deserialize)]
pub struct IdRange {
    start: i64,
    end: i64,
}

/// A task's dependencies, checked: ids as sent, and ranges merged (sorted, disjoint). A range is
/// never expanded: a few bytes can name billions of ids.
struct Dependencies {
    ids: Vec<String>,
    ranges: Vec<(i64, i64)>,
}

/// Azure's rules for `taskIdRanges`: start and end not negative, start <= end.
fn dependencies(raw: &Value) -> ApiResult<Dependencies> {
    let deps: DependsOn = serde_json::from_value(raw.clone())
        .map_err(|e| ApiError::invalid_property("dependsOn", raw.to_string(), e.to_string()))?;
    let mut ranges = Vec::with_capacity(deps.task_id_ranges.len());
    for (i, r) in deps.task_id_ranges.iter().enumerate() {
        for (end, value) in [("start", r.start), ("end", r.end)] {
            if value < 0 {
                return Err(ApiError::invalid_property(
                    &format!("dependsOn.taskIdRanges[{i}].{end}"),
                    value.to_string(),
                    "must not be negative",
                ));
            }
        }
        if r.start > r.end {
            return Err(ApiError::invalid_property(
                &format!("dependsOn.taskIdRanges[{i}]"),
                format!("{}-{}", r.start, r.end),
                "start must not be greater than end",
            ));
        }
        ranges.push((r.start, r.end));
    }
    ranges.sort_unstable();
    let mut merged: Vec<(i64, i64)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match merged.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    Ok(Dependencies {
        ids: deps.task_ids,
        ranges: merged,
    })
}

/// The number a task id stands for in a range: decimal, without sign or leading zeros (the
/// `task_number` of the migrations).
fn task_number(id: &str) -> Option<i64> {
    let canonical = id.len() <= 18
        && id.bytes().all(|b| b.is_ascii_digit())
        && (id == "0" || !id.starts_with('0'));
    canonical.then(|| id.parse().ok()).flatten()
}

fn in_ranges(ranges: &[(i64, i64)], id: &str) -> bool {
    task_number(id).is_some_and(|n| ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&n)))
}

/// What a batch's dependencies may name: the ids of the job's tasks and of the batch, and for
/// each range the first number in it that is no such id.
struct Known {
    ids: HashSet<String>,
    missing_in_range: HashMap<(i64, i64), Option<i64>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskCreate {
    id: Option<String>,
    display_name: Option<String>,
    command_line: Option<String>,
    environment_settings: Option<Vec<EnvironmentSetting>>,
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    required_slots: Option<i32>,
    constraints: Option<TaskConstraints>,
    depends_on: Option<Value>,
    exit_conditions: Option<Value>,
    multi_instance_settings: Option<Value>,
    /// Accepted and echoed back (resourceFiles, outputFiles, containerSettings, userIdentity, ...).
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// Fields kept as sent and echoed back.
const ECHOED: &[&str] = &[
    "resourceFiles",
    "outputFiles",
    "containerSettings",
    "userIdentity",
    "affinityInfo",
    "applicationPackageReferences",
    "authenticationTokenSettings",
];

/// Checks one task against its job and pool; `batch_ids` are the ids added with it.
fn validate(
    t: TaskCreate,
    job: &JobRow,
    pool_slots: Option<i32>,
    known: &Known,
) -> ApiResult<NewTask> {
    let id = t.id.ok_or_else(|| ApiError::missing_property("id"))?;
    check_id(&id).map_err(|why| ApiError::invalid_property("id", &id, why))?;
    let command_line = t
        .command_line
        .ok_or_else(|| ApiError::missing_property("commandLine"))?;
    if command_line.trim().is_empty() {
        return Err(ApiError::invalid_property(
            "commandLine",
            &command_line,
            "must not be empty",
        ));
    }
    if t.multi_instance_settings.is_some() {
        return Err(ApiError::invalid_property(
            "multiInstanceSettings",
            "",
            "multi-instance (MPI) tasks are not supported",
        ));
    }
    let required_slots = t.required_slots.unwrap_or(1);
    if required_slots < 1 {
        return Err(ApiError::invalid_property(
            "requiredSlots",
            required_slots.to_string(),
            "must be at least 1",
        ));
    }
    if let Some(slots) = pool_slots {
        if required_slots > slots {
            return Err(ApiError::invalid_property(
                "requiredSlots",
                required_slots.to_string(),
                format!(
                    "the pool {:?} has {slots} task slots per node; a task cannot need more",
                    job.pool_id
                ),
            ));
        }
    }
    let c = t.constraints.unwrap_or_default();
    let max_task_retry_count = check_retry_count(
        "constraints.maxTaskRetryCount",
        c.max_task_retry_count.unwrap_or(job.max_task_retry_count),
    )?;
    let (depends_on, deps) = match t.depends_on {
        None => (
            None,
            Dependencies {
                ids: Vec::new(),
                ranges: Vec::new(),
            },
        ),
        Some(raw) => {
            if !job.uses_task_dependencies {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "TaskDependenciesNotSpecifiedOnJob",
                    format!("The task {id:?} has dependsOn, but its job {:?} was not created with usesTaskDependencies.", job.id),
                )
                .with("PropertyName", "dependsOn"));
            }
            let deps = dependencies(&raw)?;
            if deps.ids.contains(&id) || in_ranges(&deps.ranges, &id) {
                return Err(ApiError::invalid_property(
                    "dependsOn",
                    &id,
                    "a task cannot depend on itself",
                ));
            }
            if let Some(missing) = deps.ids.iter().find(|d| !known.ids.contains(*d)) {
                return Err(ApiError::invalid_property(
                    "dependsOn",
                    missing,
                    format!("the job has no task {missing:?}"),
                ));
            }
            let missing = deps
                .ranges
                .iter()
                .find_map(|r| known.missing_in_range.get(r).copied().flatten());
            if let Some(missing) = missing {
                return Err(ApiError::invalid_property(
                    "dependsOn.taskIdRanges",
                    missing.to_string(),
                    format!("the job has no task {:?}", missing.to_string()),
                ));
            }
            (Some(raw), deps)
        }
    };
    let exit_conditions = match t.exit_conditions {
        None => None,
        Some(raw) => {
            let parsed: ExitConditions = serde_json::from_value(raw.clone()).map_err(|e| {
                ApiError::invalid_property("exitConditions", raw.to_string(), e.to_string())
            })?;
            parsed.check().map_err(|(name, value)| {
                ApiError::invalid_property(&name, value, "not a known value")
            })?;
            Some(raw)
        }
    };
    let extra: Map<String, Value> = t
        .rest
        .into_iter()
        .filter(|(k, _)| ECHOED.contains(&k.as_str()))
        .collect();
    Ok(NewTask {
        id,
        display_name: t.display_name,
        command_line,
        environment: env_json("environmentSettings", t.environment_settings)?,
        required_slots,
        max_wall_clock_ticks: c.max_wall_clock_time.map(IsoDuration::ticks),
        retention_ticks: c
            .retention_time
            .map(IsoDuration::ticks)
            .unwrap_or(DEFAULT_RETENTION_SECS * 10_000_000),
        max_task_retry_count,
        depends_on,
        dependency_ids: deps.ids,
        dependency_ranges: deps.ranges,
        exit_conditions,
        extra: Value::Object(extra),
    })
}

/// The job, locked, if tasks may be added to it now.
async fn open_job(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    app: &Ctx,
    job_id: &str,
) -> ApiResult<JobRow> {
    let job = store::jobs::get(&mut **tx, &app.account, job_id, store::jobs::Lock::Share)
        .await?
        .ok_or_else(|| super::jobs::job_not_found(job_id))?;
    match job.job_state() {
        JobState::Completed | JobState::Terminating => Err(ApiError::new(
            StatusCode::CONFLICT,
            "JobCompleted",
            format!("The job {job_id:?} has completed; no tasks can be added."),
        )),
        JobState::Deleting => Err(ApiError::new(
            StatusCode::CONFLICT,
            "JobBeingDeleted",
            format!("The job {job_id:?} is being deleted."),
        )),
        _ => Ok(job),
    }
}

async fn pool_slots(app: &Ctx, job: &JobRow) -> ApiResult<Option<i32>> {
    Ok(store::pools::get(&app.db, &app.account, &job.pool_id)
        .await?
        .map(|p| p.task_slots_per_node))
}

/// What a batch's dependencies may name: the job's existing tasks and the batch's own. Nothing
/// is looked up for a job without usesTaskDependencies (its tasks' dependsOn is refused) or for
/// dependencies that do not pass `dependencies` (refused in `validate`).
async fn known_ids(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    job: &JobRow,
    bodies: &[TaskCreate],
) -> ApiResult<Known> {
    let mut known = Known {
        ids: bodies.iter().filter_map(|b| b.id.clone()).collect(),
        missing_in_range: HashMap::new(),
    };
    if !job.uses_task_dependencies {
        return Ok(known);
    }
    let (mut wanted, mut ranges) = (Vec::new(), Vec::new());
    for deps in bodies
        .iter()
        .filter_map(|b| b.depends_on.as_ref())
        .filter_map(|raw| dependencies(raw).ok())
    {
        wanted.extend(deps.ids);
        ranges.extend(deps.ranges);
    }
    if !wanted.is_empty() {
        known
            .ids
            .extend(store::tasks::existing_ids(&mut **tx, job.pk, &wanted).await?);
    }
    if !ranges.is_empty() {
        ranges.sort_unstable();
        ranges.dedup();
        let numbered: Vec<i64> = bodies
            .iter()
            .filter_map(|b| b.id.as_deref().and_then(task_number))
            .collect();
        let missing =
            store::tasks::first_missing_in_ranges(&mut **tx, job.pk, &ranges, &numbered).await?;
        known.missing_in_range = ranges.into_iter().zip(missing).collect();
    }
    Ok(known)
}

pub async fn add(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(job_id): Path<String>,
    AzureJson(body): AzureJson<TaskCreate>,
) -> ApiResult<Response> {
    let mut tx = app.db.begin().await?;
    let job = open_job(&mut tx, &app, &job_id).await?;
    let slots = pool_slots(&app, &job).await?;
    let bodies = vec![body];
    let mut known = known_ids(&mut tx, &job, &bodies).await?;
    if let Some(own) = &bodies[0].id {
        known.ids.remove(own);
    }
    let task = validate(bodies.into_iter().next().expect("one"), &job, slots, &known)?;
    let inserted = store::tasks::insert_many(&mut tx, job.pk, std::slice::from_ref(&task)).await?;
    if inserted.is_empty() {
        return Err(task_exists(&task.id));
    }
    tx.commit().await?;
    app.wake_dispatcher();
    let url = format!("{base}/jobs/{}/tasks/{}", job.id, task.id);
    let row = store::tasks::get(&app.db, job.pk, &task.id)
        .await?
        .ok_or_else(|| ApiError::internal("task vanished"))?;
    let mut headers = resource_headers(row.last_modified);
    headers.insert("Location", header_value(&url));
    headers.insert("DataServiceId", header_value(&url));
    Ok((StatusCode::CREATED, headers).into_response())
}

fn task_exists(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "TaskExists",
        format!("The specified task {id:?} already exists."),
    )
}

#[derive(Deserialize)]
pub struct TaskCollection {
    value: Option<Vec<Value>>,
}

/// Up to 100 tasks (and 1 MB) in one request, each with its own result: all valid tasks are
/// added in one transaction; invalid or duplicate ones get a clienterror.
pub async fn add_collection(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(job_id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    if body.len() > MAX_COLLECTION_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestBodyTooLarge",
            format!(
                "The request body is {} bytes; at most {MAX_COLLECTION_BYTES} are accepted.",
                body.len()
            ),
        ));
    }
    let collection: TaskCollection = parse(&body)?;
    let raw = collection
        .value
        .ok_or_else(|| ApiError::missing_property("value"))?;
    if raw.len() > MAX_TASKS_PER_COLLECTION {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "TooManyTasksInCollection",
            format!(
                "{} tasks were sent; at most {MAX_TASKS_PER_COLLECTION} fit in one request.",
                raw.len()
            ),
        )
        .with("PropertyName", "value"));
    }
    let mut tx = app.db.begin().await?;
    let job = open_job(&mut tx, &app, &job_id).await?;
    let slots = pool_slots(&app, &job).await?;

    // Parse each; a task that does not parse fails alone.
    let mut results: Vec<Option<Value>> = vec![None; raw.len()];
    let mut bodies: Vec<(usize, TaskCreate)> = Vec::new();
    for (i, value) in raw.into_iter().enumerate() {
        let id = value
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        match parse::<TaskCreate>(value.to_string().as_bytes()) {
            Ok(t) => bodies.push((i, t)),
            Err(e) => results[i] = Some(client_error(&id, e)),
        }
    }
    let ids: Vec<String> = bodies.iter().filter_map(|(_, b)| b.id.clone()).collect();
    let existing: HashSet<String> = store::tasks::existing_ids(&mut *tx, job.pk, &ids)
        .await?
        .into_iter()
        .collect();
    let (indexes, creates): (Vec<usize>, Vec<TaskCreate>) = bodies.into_iter().unzip();
    let known = known_ids(&mut tx, &job, &creates).await?;
    let mut seen = HashSet::new();
    let mut valid: Vec<(usize, NewTask)> = Vec::new();
    for (i, t) in indexes.into_iter().zip(creates) {
        let id = t.id.clone().unwrap_or_default();
        if existing.contains(&id) || !seen.insert(id.clone()) {
            results[i] = Some(client_error(&id, task_exists(&id)));
            continue;
        }
        match validate(t, &job, slots, &known) {
            Ok(task) => valid.push((i, task)),
            Err(e) => results[i] = Some(client_error(&id, e)),
        }
    }
    // A task whose dependency failed validation in this batch cannot be added either.
    let failed: HashSet<String> = results
        .iter()
        .flatten()
        .filter_map(|r| r["taskId"].as_str().map(String::from))
        .collect();
    let (ok, broken): (Vec<_>, Vec<_>) = valid.into_iter().partition(|(_, t)| {
        !failed.iter().any(|d| {
            !existing.contains(d)
                && (t.dependency_ids.contains(d) || in_ranges(&t.dependency_ranges, d))
        })
    });
    for (i, t) in broken {
        results[i] = Some(client_error(
            &t.id,
            ApiError::invalid_property("dependsOn", &t.id, "a task it depends on was not added"),
        ));
    }
    let tasks: Vec<NewTask> = ok.iter().map(|(_, t)| t.clone()).collect();
    let inserted: HashSet<String> = store::tasks::insert_many(&mut tx, job.pk, &tasks)
        .await?
        .into_iter()
        .collect();
    tx.commit().await?;
    if !inserted.is_empty() {
        app.wake_dispatcher();
    }
    let now = chrono::Utc::now();
    for (i, t) in ok {
        results[i] = Some(if inserted.contains(&t.id) {
            json!({"status": "success", "taskId": t.id, "eTag": etag(now), "lastModified": rfc3339(now),
                   "location": format!("{base}/jobs/{}/tasks/{}", job.id, t.id)})
        } else {
            client_error(&t.id, task_exists(&t.id))
        });
    }
    Ok(Json(
        json!({"value": results.into_iter().map(|r| r.unwrap_or(Value::Null)).collect::<Vec<_>>()}),
    ))
}

fn client_error(task_id: &str, e: ApiError) -> Value {
    let mut error = json!({"code": e.code, "message": {"lang": "en-US", "value": e.message}});
    if !e.values.is_empty() {
        error["values"] = e
            .values
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect();
    }
    json!({"status": "clienterror", "taskId": task_id, "error": error})
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
    select: Select,
    conditions: Conditions,
) -> ApiResult<Response> {
    let job = find_job(&app, &job_id).await?;
    let task = find(&app, &job, &task_id).await?;
    conditions.check(task.last_modified, true)?;
    Ok((
        resource_headers(task.last_modified),
        Json(select.shape(task_json(&job, &task, &base))),
    )
        .into_response())
}

pub async fn list(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(job_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let list = ListQuery::from_query(&query, odata::TASK_PROPERTIES)?;
    let job = find_job(&app, &job_id).await?;
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
                Ok(tasks
                    .iter()
                    .map(|t| (t.pk.to_string(), task_json(&job, t, &base)))
                    .collect())
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
    let job = find_job(&app, &job_id).await?;
    let task = find(&app, &job, &task_id).await?;
    let c = body.constraints.unwrap_or_default();
    let retries = check_retry_count(
        "constraints.maxTaskRetryCount",
        c.max_task_retry_count.unwrap_or(job.max_task_retry_count),
    )?;
    store::tasks::update_constraints(
        &app.db,
        task.pk,
        c.max_wall_clock_time.map(IsoDuration::ticks),
        c.retention_time
            .map(IsoDuration::ticks)
            .unwrap_or(DEFAULT_RETENTION_SECS * 10_000_000),
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
    let job = find_job(&app, &job_id).await?;
    let task = find(&app, &job, &task_id).await?;
    let info = ops::jobs::ended_by("terminated by a user");
    let mut tx = app.db.begin().await?;
    let ending = Ending::Completed {
        exit_code: None,
        result: "failure",
        failure_info: Some(&info),
        satisfies_dependants: false,
    };
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
    let job = find_job(&app, &job_id).await?;
    if matches!(
        job.job_state(),
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
    let job = find_job(&app, &job_id).await?;
    let task = find(&app, &job, &task_id).await?;
    let mut tx = app.db.begin().await?;
    let info = ops::jobs::ended_by("the task was deleted");
    let ending = Ending::Completed {
        exit_code: None,
        result: "failure",
        failure_info: Some(&info),
        satisfies_dependants: false,
    };
    let was_running =
        store::tasks::end_attempt(&mut tx, task.pk, None, &[TaskState::Running], ending)
            .await?
            .is_some();
    store::tasks::delete(&mut *tx, task.pk).await?;
    store::jobs::complete_if_all_tasks_done(&mut *tx, job.pk).await?;
    tx.commit().await?;
    app.wake_dispatcher();
    // A running task's files go once the scheduler has killed its process (which may run on
    // another server); removed here, the process would go on writing beside nothing.
    if !was_running {
        app.layout
            .task_dir(&job.account, &job.id, &task.id)
            .remove()
            .await;
    }
    Ok(StatusCode::OK.into_response())
}

/// A task as Azure's `BatchTask` JSON.
pub fn task_json(job: &JobRow, t: &TaskRow, base: &str) -> Value {
    let url = format!("{base}/jobs/{}/tasks/{}", job.id, t.id);
    let mut constraints = json!({
        "maxWallClockTime": IsoDuration::from_ticks(t.max_wall_clock_ticks.unwrap_or(i64::MAX)).to_string(),
        "retentionTime": IsoDuration::from_ticks(t.retention_ticks).to_string(),
        "maxTaskRetryCount": t.max_task_retry_count,
    });
    if t.max_wall_clock_ticks.is_none() {
        constraints["maxWallClockTime"] = json!(IsoDuration::MAX.to_string());
    }
    let mut task = json!({
        "id": t.id,
        "url": url,
        "eTag": etag(t.last_modified),
        "lastModified": rfc3339(t.last_modified),
        "creationTime": rfc3339(t.creation_time),
        "state": t.state,
        "stateTransitionTime": rfc3339(t.state_transition_time),
        "commandLine": t.command_line,
        "requiredSlots": t.required_slots,
        "constraints": constraints,
    });
    let obj = task.as_object_mut().expect("object");
    if let Some(name) = &t.display_name {
        obj.insert("displayName".into(), json!(name));
    }
    if let Some(prev) = &t.previous_state {
        obj.insert("previousState".into(), json!(prev));
        obj.insert(
            "previousStateTransitionTime".into(),
            json!(t.previous_state_transition_time.map(rfc3339)),
        );
    }
    if t.environment.as_array().is_some_and(|e| !e.is_empty()) {
        obj.insert("environmentSettings".into(), t.environment.clone());
    }
    if let Some(d) = &t.depends_on {
        obj.insert("dependsOn".into(), d.clone());
    }
    if let Some(e) = &t.exit_conditions {
        obj.insert("exitConditions".into(), e.clone());
    }
    if let Some(extra) = t.extra.as_object() {
        for (k, v) in extra {
            obj.insert(k.clone(), v.clone());
        }
    }
    let mut execution = json!({"retryCount": t.retry_count, "requeueCount": t.requeue_count});
    for (key, value) in [
        ("startTime", t.start_time.map(rfc3339)),
        ("endTime", t.end_time.map(rfc3339)),
        ("lastRetryTime", t.last_retry_time.map(rfc3339)),
        ("lastRequeueTime", t.last_requeue_time.map(rfc3339)),
    ] {
        if let Some(v) = value {
            execution[key] = json!(v);
        }
    }
    if let Some(code) = t.exit_code {
        execution["exitCode"] = json!(code);
    }
    if let Some(result) = &t.result {
        execution["result"] = json!(result);
    }
    if let Some(f) = &t.failure_info {
        execution["failureInfo"] = f.clone();
    }
    obj.insert("executionInfo".into(), execution);
    if let (Some(node_id), Some(pool_id)) = (&t.node_id, &t.pool_id) {
        obj.insert(
            "nodeInfo".into(),
            json!({
                "affinityId": format!("TVM:{node_id}"),
                "nodeUrl": format!("{base}/pools/{pool_id}/nodes/{node_id}"),
                "poolId": pool_id,
                "nodeId": node_id,
                "taskRootDirectory": format!("workitems/{}/job-1/{}", job.id, t.id),
                "taskRootDirectoryUrl": format!("{base}/pools/{pool_id}/nodes/{node_id}/files/workitems/{}/job-1/{}", job.id, t.id),
            }),
        );
    }
    task
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
    let job = find_job(app, job_id).await?;
    conditions.check(find(app, &job, task_id).await?.last_modified, false)
}
