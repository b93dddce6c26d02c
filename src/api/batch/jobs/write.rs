//! Creating a job (POST) and changing its properties (PATCH, PUT).

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::auto_pool::AutoPool;
use super::props::{
    check_max_parallel, check_pool_info, check_priority, metadata_json, on_all_tasks_complete,
    on_task_failure, updated_pool_info, Constraints, JobPool, PoolInfo,
};
use super::{check_write, lock_open_job};
use crate::api::batch::pools::MetadataItem;
use crate::api::batch::support::{refuse_unsupported, JOB_ADD, JOB_UPDATE};
use crate::api::batch::tasks::{check_retry_count, env_json};
use crate::api::error::{ApiError, ApiResult};
use crate::api::json::AzureJson;
use crate::api::state::Settings;
use crate::api::{created, resource_headers, BaseUrl, Conditions, Ctx};
use crate::domain::ids::check_id;
use crate::domain::pool::EnvironmentSetting;
use crate::domain::IsoDuration;
use crate::store::auto_pools::Owner;
use crate::store::{self, jobs::JobProps, jobs::JobRow, jobs::NewJob};

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
    allow_task_preemption: Option<bool>,
    job_preparation_task: Option<Value>,
    job_release_task: Option<Value>,
    job_manager_task: Option<Value>,
    /// The properties above are those that work; any other is refused or ignored by `JOB_ADD`.
    #[serde(flatten)]
    rest: Map<String, Value>,
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
    allow_task_preemption: Option<bool>,
    /// Refused or ignored by `JOB_UPDATE`.
    #[serde(flatten)]
    rest: Map<String, Value>,
}

pub async fn create(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    AzureJson(body): AzureJson<JobCreate>,
) -> ApiResult<Response> {
    let mut body = body;
    let id = body
        .id
        .take()
        .ok_or_else(|| ApiError::missing_property("id"))?;
    check_id(&id).map_err(|why| ApiError::invalid_property("id", &id, why))?;
    let mut tx = app.db.begin().await?;
    let row = insert(&mut tx, (&app.settings, &app.account), (id, None), body).await?;
    tx.commit().await?;
    // Its auto pool, if it made one, is to be allocated.
    app.wake_allocator();
    Ok(created(
        &format!("{base}/jobs/{}", row.id),
        row.last_modified,
    ))
}

/// A job schedule's `jobSpecification` as a job add body. Its jobs are made from it later,
/// named by the schedule.
pub fn specification(spec: &Value) -> ApiResult<JobCreate> {
    let at = "jobSpecification";
    if !spec.is_object() {
        return Err(ApiError::invalid_property(
            at,
            spec.to_string(),
            "must be an object",
        ));
    }
    if spec.get("id").is_some() {
        return Err(ApiError::invalid_property(
            "jobSpecification.id",
            "",
            "a job schedule names its jobs {scheduleId}:job-{N}",
        ));
    }
    serde_json::from_value(spec.clone())
        .map_err(|e| ApiError::invalid_property(at, "", e.to_string()))
}

/// Checks a job schedule's `jobSpecification` as a job add's body is checked, before the
/// database: what the pool decides is checked as each job is made.
pub fn check_specification(spec: &Value, settings: &Settings) -> ApiResult<()> {
    let prefixed = |e: ApiError| e.prefixed("jobSpecification.");
    let mut body = specification(spec)?;
    super::manager::parse(body.job_manager_task.take()).map_err(prefixed)?;
    new_job(settings, ("", String::new(), true), body).map_err(prefixed)?;
    Ok(())
}

/// Makes, in `tx`, the job `id` that `body` describes, with its job manager task and its auto
/// pool, if it asks for one; `schedule`: the job schedule that makes it, if one does.
pub(crate) async fn insert(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    (settings, account): (&Settings, &str),
    (id, schedule): (String, Option<i64>),
    mut body: JobCreate,
) -> ApiResult<JobRow> {
    let manager = super::manager::parse(body.job_manager_task.take())?;
    let (mut job, auto) = new_job(settings, (account, id, schedule.is_some()), body)?;
    job.manager_task = manager.as_ref().map(|m| m.shown.clone());
    if let Some(auto) = &auto {
        job.props.pool_id = auto.pool_for(tx, (settings, account), schedule).await?;
    }
    super::prep::refuse_containers_off_container_pools(
        &mut **tx,
        account,
        &job.props.pool_id,
        [
            (
                "jobPreparationTask",
                job.preparation_task
                    .as_ref()
                    .and_then(|p| p.container_settings.as_ref()),
            ),
            (
                "jobReleaseTask",
                job.release_task
                    .as_ref()
                    .and_then(|r| r.container_settings.as_ref()),
            ),
        ],
    )
    .await?;
    match store::jobs::insert(&mut **tx, &job).await {
        Err(e) if store::is_unique_violation(&e) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "JobExists",
                format!("The specified job {:?} already exists.", job.id),
            ))
        }
        other => other?,
    }
    let row = store::jobs::get(&mut **tx, account, &job.id, store::jobs::Lock::None)
        .await?
        .ok_or_else(|| ApiError::internal("job vanished"))?;
    if let Some(auto) = auto {
        auto.own(tx, (account, &row.pool_id), row.pk).await?;
    }
    if let Some(m) = manager {
        let task = crate::api::batch::tasks::manager_task(
            tx,
            &row,
            m.task,
            (m.run_exclusive, m.kills_job, m.low_priority),
        )
        .await?;
        store::tasks::insert_many(tx, row.pk, &[task]).await?;
    }
    // As on Azure: a job told to end when all its tasks are done, created without tasks, is done.
    store::jobs::complete_if_all_tasks_done(&mut **tx, row.pk).await?;
    Ok(row)
}

/// The job a create request describes, checked (its id already is), and the auto pool it
/// asks for, if it does (its `pool_id` is left to be filled in). `in_schedule`: whether a job
/// schedule makes it.
fn new_job(
    settings: &Settings,
    (account, id, in_schedule): (&str, String, bool),
    body: JobCreate,
) -> ApiResult<(NewJob, Option<Box<AutoPool>>)> {
    refuse_unsupported(JOB_ADD, "", &body.rest)?;
    let constraints = body.constraints.unwrap_or_default();
    let (pool_id, auto) = match check_pool_info(body.pool_info, settings, in_schedule)? {
        JobPool::Named(id) => (id, None),
        JobPool::Auto(auto) => (String::new(), Some(auto)),
    };
    let props = JobProps {
        priority: check_priority(body.priority.unwrap_or(0))?,
        max_parallel_tasks: check_max_parallel(body.max_parallel_tasks.unwrap_or(-1))?,
        max_wall_clock_ticks: constraints.max_wall_clock_time.map(IsoDuration::ticks),
        max_task_retry_count: check_retry_count(
            "constraints.maxTaskRetryCount",
            constraints.max_task_retry_count.unwrap_or(0),
        )?,
        allow_task_preemption: body.allow_task_preemption.unwrap_or(false),
        pool_id,
        auto_pool: auto.as_ref().map(|a| a.shown.clone()),
        on_all_tasks_complete: on_all_tasks_complete(body.on_all_tasks_complete)?,
        on_task_failure: on_task_failure(body.on_task_failure)?,
        metadata: metadata_json(body.metadata),
    };
    let (preparation_task, release_task) =
        super::prep::check(body.job_preparation_task, body.job_release_task)?;
    let job = NewJob {
        account: account.to_string(),
        id,
        display_name: body.display_name,
        uses_task_dependencies: body.uses_task_dependencies.unwrap_or(false),
        common_environment: env_json(
            "commonEnvironmentSettings",
            body.common_environment_settings,
        )?,
        props,
        preparation_task,
        release_task,
        manager_task: None,
    };
    Ok((job, auto))
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
    refuse_unsupported(JOB_UPDATE, "", &body.rest)?;
    let mut tx = app.db.begin().await?;
    let job = lock_open_job(&mut tx, app, job_id).await?;
    let (props, keep_alive) = updated_props(&job, body, replace)?;
    store::jobs::set_props(&mut *tx, job.pk, &props).await?;
    if let Some(keep_alive) = keep_alive {
        store::auto_pools::set_keep_alive(&mut *tx, Owner::Job(job.pk), keep_alive).await?;
    }
    store::jobs::complete_if_all_tasks_done(&mut *tx, job.pk).await?;
    tx.commit().await?;
    app.wake_dispatcher();
    let job = app.job(job_id).await?;
    Ok((StatusCode::OK, resource_headers(job.last_modified)).into_response())
}

/// The job's properties after a PATCH (`replace` false) or a PUT, and its auto pool's
/// keepAlive, if that changes.
fn updated_props(
    job: &JobRow,
    body: JobUpdate,
    replace: bool,
) -> ApiResult<(JobProps, Option<bool>)> {
    let keep = |current: i32, default: i32| if replace { default } else { current };
    let constraints = body.constraints;
    let (pool_id, auto_pool, keep_alive) = match body.pool_info {
        Some(info) => updated_pool_info(info, job)?,
        None if replace => return Err(ApiError::missing_property("poolInfo")),
        None => (job.pool_id.clone(), job.auto_pool.clone(), None),
    };
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
        allow_task_preemption: body
            .allow_task_preemption
            .unwrap_or(!replace && job.allow_task_preemption),
        pool_id,
        auto_pool,
        on_all_tasks_complete: match body.on_all_tasks_complete {
            None if !replace => job.on_all_tasks_complete,
            v => on_all_tasks_complete(v)?,
        },
        on_task_failure: match body.on_task_failure {
            None if !replace => job.on_task_failure,
            v => on_task_failure(v)?,
        },
        metadata: match body.metadata {
            None if !replace => job.metadata.clone(),
            m => metadata_json(m),
        },
    };
    Ok((props, keep_alive))
}
