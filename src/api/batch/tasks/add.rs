//! Adding tasks: one (`POST /jobs/{job}/tasks`) or a collection (`addtaskcollection`).

use std::collections::HashSet;

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::deps::in_ranges;
use super::task_url;
use super::validate::{known_ids, validate, TaskCreate};
use crate::api::error::{ApiError, ApiResult};
use crate::api::json::{parse, AzureJson};
use crate::api::{created, etag, rfc3339, BaseUrl, Ctx};
use crate::domain::job::JobState;
use crate::store::{self, jobs::JobRow, tasks::NewTask};

/// Azure's limits on one addtaskcollection request.
const MAX_TASKS_PER_COLLECTION: usize = 100;
const MAX_COLLECTION_BYTES: usize = 1024 * 1024;

type Tx<'c> = sqlx::Transaction<'c, sqlx::Postgres>;

/// The job, locked, if tasks may be added to it now.
async fn open_job(tx: &mut Tx<'_>, app: &Ctx, job_id: &str) -> ApiResult<JobRow> {
    let job = store::jobs::get(&mut **tx, &app.account, job_id, store::jobs::Lock::Share)
        .await?
        .ok_or_else(|| ApiError::job_not_found(job_id))?;
    match job.state {
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
    let row = store::tasks::get(&app.db, job.pk, &task.id)
        .await?
        .ok_or_else(|| ApiError::internal("task vanished"))?;
    Ok(created(
        &task_url(&base, &job.id, &task.id),
        row.last_modified,
    ))
}

/// The task a job's jobManagerTask becomes, checked as any task of the job; with runExclusive it
/// needs every slot of a node of the pool, which must exist.
pub(crate) async fn manager_task(
    tx: &mut Tx<'_>,
    job: &JobRow,
    body: TaskCreate,
    (run_exclusive, kills_job, low_priority): (bool, bool, bool),
) -> ApiResult<NewTask> {
    let pool = store::pools::get(&mut **tx, &job.account, &job.pool_id).await?;
    let slots = pool.as_ref().map(|p| p.task_slots_per_node);
    if run_exclusive && slots.is_none() {
        return Err(ApiError::invalid_property(
            "jobManagerTask.runExclusive",
            "true",
            format!("the pool {:?} must exist for a job manager task to run exclusively (it takes every slot of a node)", job.pool_id),
        ));
    }
    let bodies = vec![body];
    let known = known_ids(tx, job, &bodies).await?;
    let mut task = validate(bodies.into_iter().next().expect("one"), job, slots, &known)
        .map_err(|e| e.prefixed("jobManagerTask."))?;
    if run_exclusive {
        task.required_slots = slots.unwrap_or(1);
    }
    task.kills_job = kills_job;
    task.dedicated_only = !low_priority;
    Ok(task)
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
    let raw = collection(&body)?;
    let mut tx = app.db.begin().await?;
    let job = open_job(&mut tx, &app, &job_id).await?;
    let slots = pool_slots(&app, &job).await?;
    let mut results = Results(vec![None; raw.len()]);
    let bodies = parse_each(raw, &mut results);
    let (valid, existing) = validate_each(&mut tx, &job, slots, bodies, &mut results).await?;
    let ok = without_broken_dependencies(valid, &existing, &mut results);
    let tasks: Vec<NewTask> = ok.iter().map(|(_, t)| t.clone()).collect();
    let inserted: HashSet<String> = store::tasks::insert_many(&mut tx, job.pk, &tasks)
        .await?
        .into_iter()
        .collect();
    tx.commit().await?;
    if !inserted.is_empty() {
        app.wake_dispatcher();
    }
    results.added(&base, &job, ok, &inserted);
    Ok(Json(results.into_json()))
}

/// The request's tasks as sent, within Azure's limits; each is parsed on its own later.
fn collection(body: &[u8]) -> ApiResult<Vec<Value>> {
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
    let collection: TaskCollection = parse(body)?;
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
    Ok(raw)
}

/// Each task of a collection with its place in the request; a task that does not parse fails
/// alone.
fn parse_each(raw: Vec<Value>, results: &mut Results) -> Vec<(usize, TaskCreate)> {
    let mut bodies = Vec::new();
    for (i, value) in raw.into_iter().enumerate() {
        let id = value
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        match parse::<TaskCreate>(value.to_string().as_bytes()) {
            Ok(t) => bodies.push((i, t)),
            Err(e) => results.refuse(i, &id, e),
        }
    }
    bodies
}

/// The tasks that pass `validate` and are new (to the job and earlier in the request), and the
/// ids the job has already.
async fn validate_each(
    tx: &mut Tx<'_>,
    job: &JobRow,
    slots: Option<i32>,
    bodies: Vec<(usize, TaskCreate)>,
    results: &mut Results,
) -> ApiResult<(Vec<(usize, NewTask)>, HashSet<String>)> {
    let ids: Vec<String> = bodies.iter().filter_map(|(_, b)| b.id.clone()).collect();
    let existing: HashSet<String> = store::tasks::existing_ids(&mut **tx, job.pk, &ids)
        .await?
        .into_iter()
        .collect();
    let (indexes, creates): (Vec<usize>, Vec<TaskCreate>) = bodies.into_iter().unzip();
    let known = known_ids(tx, job, &creates).await?;
    let mut seen = HashSet::new();
    let mut valid: Vec<(usize, NewTask)> = Vec::new();
    for (i, t) in indexes.into_iter().zip(creates) {
        let id = t.id.clone().unwrap_or_default();
        if existing.contains(&id) || !seen.insert(id.clone()) {
            results.refuse(i, &id, task_exists(&id));
            continue;
        }
        match validate(t, job, slots, &known) {
            Ok(task) => valid.push((i, task)),
            Err(e) => results.refuse(i, &id, e),
        }
    }
    Ok((valid, existing))
}

/// A task whose dependency was refused in this request cannot be added either (unless the job
/// has a task of that id already).
fn without_broken_dependencies(
    valid: Vec<(usize, NewTask)>,
    existing: &HashSet<String>,
    results: &mut Results,
) -> Vec<(usize, NewTask)> {
    let failed = results.refused_ids();
    let (ok, broken): (Vec<_>, Vec<_>) = valid.into_iter().partition(|(_, t)| {
        !failed.iter().any(|d| {
            !existing.contains(d)
                && (t.dependency_ids.contains(d) || in_ranges(&t.dependency_ranges, d))
        })
    });
    for (i, t) in broken {
        let why = "a task it depends on was not added";
        results.refuse(
            i,
            &t.id,
            ApiError::invalid_property("dependsOn", &t.id, why),
        );
    }
    ok
}

/// Each task's result in an addtaskcollection answer, in request order.
struct Results(Vec<Option<Value>>);

impl Results {
    fn refuse(&mut self, i: usize, task_id: &str, e: ApiError) {
        self.0[i] = Some(client_error(task_id, e));
    }

    fn refused_ids(&self) -> HashSet<String> {
        self.0
            .iter()
            .flatten()
            .filter_map(|r| r["taskId"].as_str().map(String::from))
            .collect()
    }

    /// Success for each task the insert added; one it skipped (its id taken meanwhile) exists.
    fn added(
        &mut self,
        base: &str,
        job: &JobRow,
        ok: Vec<(usize, NewTask)>,
        inserted: &HashSet<String>,
    ) {
        let now = chrono::Utc::now();
        for (i, t) in ok {
            self.0[i] = Some(if inserted.contains(&t.id) {
                json!({"status": "success", "taskId": t.id, "eTag": etag(now), "lastModified": rfc3339(now),
                       "location": task_url(base, &job.id, &t.id)})
            } else {
                client_error(&t.id, task_exists(&t.id))
            });
        }
    }

    fn into_json(self) -> Value {
        json!({"value": self.0.into_iter().map(|r| r.unwrap_or(Value::Null)).collect::<Vec<_>>()})
    }
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
