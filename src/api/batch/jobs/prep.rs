//! A job's `jobPreparationTask` and `jobReleaseTask` as a create request sends them, checked.

use serde_json::Value;

use crate::api::batch::support::{refuse_unsupported, JOB_PREPARATION_TASK, JOB_RELEASE_TASK};
use crate::api::batch::tasks::check_resource_files;
use crate::api::error::{ApiError, ApiResult};
use crate::domain::container::ContainerSettings;
use crate::domain::ids::check_id;
use crate::domain::job_prep::{JobPreparationTask, JobReleaseTask};
use crate::domain::pool::EnvironmentSetting;

/// The preparation and release tasks of a new job; a release task needs a preparation task, as
/// on Azure.
pub(super) fn check(
    preparation: Option<Value>,
    release: Option<Value>,
) -> ApiResult<(Option<JobPreparationTask>, Option<JobReleaseTask>)> {
    let preparation = given(preparation).map(preparation_task).transpose()?;
    let release = given(release).map(release_task).transpose()?;
    if release.is_some() && preparation.is_none() {
        return Err(ApiError::invalid_property(
            "jobReleaseTask",
            "",
            "a job release task needs a job preparation task",
        ));
    }
    if let (Some(p), Some(r)) = (&preparation, &release) {
        if p.id.eq_ignore_ascii_case(&r.id) {
            return Err(ApiError::invalid_property(
                "jobReleaseTask.id",
                &r.id,
                "must differ from the job preparation task's id",
            ));
        }
    }
    Ok((preparation, release))
}

/// A value that asks for something (null and `{}` ask for nothing).
pub(super) fn given(v: Option<Value>) -> Option<Value> {
    v.filter(|v| !v.is_null() && v.as_object().is_none_or(|o| !o.is_empty()))
}

fn preparation_task(raw: Value) -> ApiResult<JobPreparationTask> {
    const AT: &str = "jobPreparationTask";
    if let Some(fields) = raw.as_object() {
        refuse_unsupported(JOB_PREPARATION_TASK, "jobPreparationTask.", fields)?;
    }
    let mut task: JobPreparationTask = serde_json::from_value(raw.clone())
        .map_err(|e| ApiError::invalid_property(AT, raw.to_string(), e.to_string()))?;
    task.user_identity = user_identity(&raw, "jobPreparationTask.")?;
    common(AT, &task.id, &task.command_line, &task.environment_settings)?;
    check_resource_files("jobPreparationTask.resourceFiles", &task.resource_files)?;
    check_container(AT, task.container_settings.as_ref())?;
    if let Some(n) = task.constraints.max_task_retry_count.filter(|n| *n < -1) {
        return Err(ApiError::invalid_property(
            "jobPreparationTask.constraints.maxTaskRetryCount",
            n.to_string(),
            "must be -1 (no limit) or more",
        ));
    }
    Ok(task)
}

fn release_task(raw: Value) -> ApiResult<JobReleaseTask> {
    const AT: &str = "jobReleaseTask";
    if let Some(fields) = raw.as_object() {
        refuse_unsupported(JOB_RELEASE_TASK, "jobReleaseTask.", fields)?;
    }
    let mut task: JobReleaseTask = serde_json::from_value(raw.clone())
        .map_err(|e| ApiError::invalid_property(AT, raw.to_string(), e.to_string()))?;
    task.user_identity = user_identity(&raw, "jobReleaseTask.")?;
    common(AT, &task.id, &task.command_line, &task.environment_settings)?;
    check_resource_files("jobReleaseTask.resourceFiles", &task.resource_files)?;
    check_container(AT, task.container_settings.as_ref())?;
    Ok(task)
}

/// The task's userIdentity, checked (`api::batch::identity`).
fn user_identity(raw: &Value, prefix: &str) -> ApiResult<Option<Value>> {
    match raw.as_object() {
        Some(fields) => crate::api::batch::identity::checked(fields, prefix),
        None => Ok(None),
    }
}

fn check_container(at: &str, settings: Option<&ContainerSettings>) -> ApiResult<()> {
    match settings {
        Some(s) => s
            .check(&format!("{at}.containerSettings"))
            .map_err(|(property, value, why)| ApiError::invalid_property(&property, value, why)),
        None => Ok(()),
    }
}

/// Preparation and release tasks run in containers of their own only on a pool that runs
/// containers, as on Azure; a pool that does not exist yet is not checked.
pub(super) async fn refuse_containers_off_container_pools(
    db: impl sqlx::PgExecutor<'_>,
    account: &str,
    pool_id: &str,
    tasks: [(&str, Option<&ContainerSettings>); 2],
) -> ApiResult<()> {
    let Some((at, _)) = tasks.iter().find(|(_, s)| s.is_some()) else {
        return Ok(());
    };
    let Some(pool) = crate::store::pools::get(db, account, pool_id).await? else {
        return Ok(());
    };
    if crate::domain::container::PoolContainers::of(pool.vm_config.as_ref()).is_none() {
        return Err(ApiError::invalid_property(
            &format!("{at}.containerSettings"),
            "",
            format!("the pool {pool_id:?} has no virtualMachineConfiguration.containerConfiguration; a task runs in a container of its own only on a pool that has one, as on Azure"),
        ));
    }
    Ok(())
}

/// What both share: an id as task ids are, a command line, environment names.
fn common(at: &str, id: &str, command_line: &str, env: &[EnvironmentSetting]) -> ApiResult<()> {
    check_id(id).map_err(|why| ApiError::invalid_property(&format!("{at}.id"), id, why))?;
    if command_line.trim().is_empty() {
        return Err(ApiError::invalid_property(
            &format!("{at}.commandLine"),
            command_line,
            "must not be empty",
        ));
    }
    if let Some(bad) = env
        .iter()
        .find(|e| e.name.is_empty() || e.name.contains('='))
    {
        return Err(ApiError::invalid_property(
            &format!("{at}.environmentSettings"),
            &bad.name,
            "a name must be non-empty and contain no '='",
        ));
    }
    Ok(())
}
