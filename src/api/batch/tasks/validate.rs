//! A task as a request sends it (`BatchTaskCreateContent`), checked against its job and pool.

use std::collections::{HashMap, HashSet};

use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::deps::{dependencies, in_ranges, task_number, Dependencies};
use super::files::{container_settings, refuse_auto_storage, task_files, FileContext};
use crate::api::batch::support::{refuse_unsupported, EXIT_CONDITIONS, TASK_ADD};
use crate::api::error::{ApiError, ApiResult};
use crate::domain::files::{OutputFile, PackageReference, ResourceFile};
use crate::domain::ids::check_id;
use crate::domain::job::ExitConditions;
use crate::domain::pool::EnvironmentSetting;
use crate::domain::IsoDuration;
use crate::store::{self, jobs::JobRow, tasks::NewTask};

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

impl TaskConstraints {
    /// The task's own retry limit, else its job's.
    pub(super) fn retry_count(&self, job: &JobRow) -> ApiResult<i32> {
        check_retry_count(
            "constraints.maxTaskRetryCount",
            self.max_task_retry_count
                .unwrap_or(job.max_task_retry_count),
        )
    }

    pub(super) fn max_wall_clock_ticks(&self) -> Option<i64> {
        self.max_wall_clock_time.map(IsoDuration::ticks)
    }

    pub(super) fn retention_ticks(&self) -> i64 {
        self.retention_time
            .map(IsoDuration::ticks)
            .unwrap_or(DEFAULT_RETENTION_SECS * 10_000_000)
    }
}

/// What a batch may name: for its dependencies, the ids of the job's tasks and of the batch, and
/// for each range the first number in it that is no such id; for its resource files, whether the
/// account has a linked storage account.
pub(super) struct Known {
    pub(super) ids: HashSet<String>,
    missing_in_range: HashMap<(i64, i64), Option<i64>>,
    files: FileContext,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskCreate {
    pub(super) id: Option<String>,
    display_name: Option<String>,
    command_line: Option<String>,
    environment_settings: Option<Vec<EnvironmentSetting>>,
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    required_slots: Option<i32>,
    constraints: Option<TaskConstraints>,
    depends_on: Option<Value>,
    exit_conditions: Option<Value>,
    resource_files: Option<Vec<ResourceFile>>,
    output_files: Option<Vec<OutputFile>>,
    application_package_references: Option<Vec<PackageReference>>,
    container_settings: Option<Value>,
    affinity_info: Option<super::json::AffinityInfo>,
    authentication_token_settings: Option<Value>,
    /// The properties above are those that work; any other is refused or ignored by `TASK_ADD`.
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// Checks one task against its job and pool; `known` is what its dependencies may name.
pub(super) fn validate(
    t: TaskCreate,
    job: &JobRow,
    pool_slots: Option<i32>,
    known: &Known,
) -> ApiResult<NewTask> {
    let id = t.id.ok_or_else(|| ApiError::missing_property("id"))?;
    check_id(&id).map_err(|why| ApiError::invalid_property("id", &id, why))?;
    not_a_job_task_id(&id, job)?;
    let container = t
        .container_settings
        .map(|raw| container_settings(raw, &known.files))
        .transpose()?;
    let command_line = command_line(t.command_line, container.is_some())?;
    refuse_unsupported(TASK_ADD, "", &t.rest)?;
    let identity = crate::api::batch::identity::checked(&t.rest, "")?;
    let job_token = super::json::token_access(t.authentication_token_settings)?;
    let required_slots = required_slots(t.required_slots, job, pool_slots)?;
    let c = t.constraints.unwrap_or_default();
    let max_task_retry_count = c.retry_count(job)?;
    let (depends_on, deps) = match t.depends_on {
        None => (None, Dependencies::default()),
        Some(raw) => {
            let deps = checked_dependencies(&id, &raw, job, known)?;
            (Some(raw), deps)
        }
    };
    let exit_conditions = t.exit_conditions.map(exit_conditions).transpose()?;
    if !known.files.linked_storage {
        refuse_auto_storage(
            "resourceFiles",
            t.resource_files.as_deref().unwrap_or_default(),
        )?;
    }
    let files = task_files(
        t.resource_files,
        t.output_files,
        t.application_package_references,
        container,
        &known.files,
    )?;
    Ok(NewTask {
        id,
        display_name: t.display_name,
        command_line,
        environment: env_json("environmentSettings", t.environment_settings)?,
        required_slots,
        max_wall_clock_ticks: c.max_wall_clock_ticks(),
        retention_ticks: c.retention_ticks(),
        max_task_retry_count,
        depends_on,
        dependency_ids: deps.ids,
        dependency_ranges: deps.ranges,
        exit_conditions,
        extra: super::json::extra(t.affinity_info, identity, job_token),
        files,
        kills_job: false,
        dedicated_only: false,
        job_token,
    })
}

/// A task may not take the id of its job's preparation or release task (Azure's codes).
fn not_a_job_task_id(id: &str, job: &JobRow) -> ApiResult<()> {
    let taken = [
        (
            job.preparation_task.as_ref().map(|p| p.id.as_str()),
            "TaskIdSameAsJobPreparationTask",
            "job preparation task",
        ),
        (
            job.release_task.as_ref().map(|r| r.id.as_str()),
            "TaskIdSameAsJobReleaseTask",
            "job release task",
        ),
    ];
    for (other, code, what) in taken {
        if other.is_some_and(|o| o.eq_ignore_ascii_case(id)) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                code,
                format!("The task id {id:?} is the id of the job's {what}."),
            ));
        }
    }
    Ok(())
}

/// A command line; a container task's may be empty (its image's own command runs, as on Azure).
fn command_line(given: Option<String>, in_container: bool) -> ApiResult<String> {
    let command_line = given.ok_or_else(|| ApiError::missing_property("commandLine"))?;
    if command_line.trim().is_empty() && !in_container {
        return Err(ApiError::invalid_property(
            "commandLine",
            &command_line,
            "must not be empty",
        ));
    }
    Ok(command_line)
}

/// A task may need no more slots than a node of its pool has, or it would never run.
fn required_slots(given: Option<i32>, job: &JobRow, pool_slots: Option<i32>) -> ApiResult<i32> {
    let required_slots = given.unwrap_or(1);
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
    Ok(required_slots)
}

/// A task's dependsOn, refused unless its job uses dependencies, it does not name the task itself
/// and every task it names exists (in the job, or in `known` from the same request).
fn checked_dependencies(
    id: &str,
    raw: &Value,
    job: &JobRow,
    known: &Known,
) -> ApiResult<Dependencies> {
    if !job.uses_task_dependencies {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "TaskDependenciesNotSpecifiedOnJob",
            format!("The task {id:?} has dependsOn, but its job {:?} was not created with usesTaskDependencies.", job.id),
        )
        .with("PropertyName", "dependsOn"));
    }
    let deps = dependencies(raw)?;
    if deps.ids.iter().any(|d| d == id) || in_ranges(&deps.ranges, id) {
        return Err(ApiError::invalid_property(
            "dependsOn",
            id,
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
    Ok(deps)
}

/// exitConditions are stored as sent, once they parse and name only known actions.
fn exit_conditions(raw: Value) -> ApiResult<Value> {
    if let Some(fields) = raw.as_object() {
        refuse_unsupported(EXIT_CONDITIONS, "exitConditions.", fields)?;
    }
    let parsed: ExitConditions = serde_json::from_value(raw.clone()).map_err(|e| {
        ApiError::invalid_property("exitConditions", raw.to_string(), e.to_string())
    })?;
    parsed
        .check()
        .map_err(|(name, value)| ApiError::invalid_property(&name, value, "not a known value"))?;
    Ok(raw)
}

/// What a batch's dependencies may name: the job's existing tasks and the batch's own. Nothing
/// is looked up for a job without usesTaskDependencies (its tasks' dependsOn is refused) or for
/// dependencies that do not pass `dependencies` (refused in `validate`).
pub(super) async fn known_ids(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    job: &JobRow,
    bodies: &[TaskCreate],
) -> ApiResult<Known> {
    let mut known = Known {
        ids: bodies.iter().filter_map(|b| b.id.clone()).collect(),
        missing_in_range: HashMap::new(),
        files: FileContext::default(),
    };
    let names_linked_storage = bodies
        .iter()
        .flat_map(|b| b.resource_files.iter().flatten())
        .any(|r| r.auto_storage_container_name.is_some());
    let names_packages = bodies.iter().any(|b| {
        b.application_package_references
            .as_ref()
            .is_some_and(|p| !p.is_empty())
    });
    let names_containers = bodies.iter().any(|b| b.container_settings.is_some());
    known.files = FileContext::read(
        tx,
        job,
        names_linked_storage,
        names_packages,
        names_containers,
    )
    .await?;
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
/// A retry count: -1 (without limit) or more.
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

/// Environment settings as stored: each name non-empty and without '='.
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
