//! Checks that pool creation and pool updates share.

use axum::http::StatusCode;
use serde_json::{Map, Value};

use super::DEFAULT_RESIZE_TIMEOUT_SECS;
use crate::api::batch::support::{refuse_unsupported, START_TASK};
use crate::api::error::{ApiError, ApiResult};
use crate::api::Ctx;
use crate::domain::pool::{NodeCommunicationMode, NodeDeallocationOption, StartTask, Targets};
use crate::domain::IsoDuration;
use crate::store;
use crate::store::pools::ResourceTags;

/// A target of either kind (`name`: `targetDedicatedNodes` or `targetLowPriorityNodes`): not
/// negative, and within the most nodes a pool may have of each.
pub(super) fn check_target(name: &str, target: i32, quota: i32) -> ApiResult<()> {
    if target < 0 {
        return Err(ApiError::invalid_property(
            name,
            target.to_string(),
            "must not be negative",
        ));
    }
    if target > quota {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "AccountQuotaExceeded",
            format!("{name} {target} exceeds the quota of {quota} nodes per pool."),
        )
        .with("PropertyName", name)
        .with("PropertyValue", target.to_string())
        .with("Quota", quota.to_string()));
    }
    Ok(())
}

/// Both targets of a request, checked; an omitted one is 0.
pub(super) fn check_targets(
    dedicated: Option<i32>,
    low_priority: Option<i32>,
    quota: i32,
) -> ApiResult<Targets> {
    let targets = Targets {
        dedicated: dedicated.unwrap_or(0),
        low_priority: low_priority.unwrap_or(0),
    };
    check_target("targetDedicatedNodes", targets.dedicated, quota)?;
    check_target("targetLowPriorityNodes", targets.low_priority, quota)?;
    Ok(targets)
}

pub(super) fn check_resize_timeout(timeout: Option<IsoDuration>) -> ApiResult<i64> {
    let timeout = timeout.unwrap_or(IsoDuration::from_secs(DEFAULT_RESIZE_TIMEOUT_SECS));
    if timeout.ticks() == 0 {
        return Err(ApiError::invalid_property(
            "resizeTimeout",
            timeout.to_string(),
            "must be longer than zero",
        ));
    }
    Ok(timeout.ticks())
}

pub(super) fn deallocation_option(o: &str) -> ApiResult<NodeDeallocationOption> {
    NodeDeallocationOption::parse(o).ok_or_else(|| {
        ApiError::invalid_property(
            "nodeDeallocationOption",
            o,
            "must be requeue, terminate, taskcompletion or retaineddata",
        )
    })
}

/// A start task's resource files may name the account's linked storage only when it has one.
pub(super) async fn refuse_unlinked_storage(
    (db, account): (impl sqlx::PgExecutor<'_>, &str),
    start_task: Option<&Value>,
) -> ApiResult<()> {
    let Some(task) = start_task else {
        return Ok(());
    };
    let Ok(task) = serde_json::from_value::<StartTask>(task.clone()) else {
        return Ok(());
    };
    let names_it = task
        .resource_files
        .iter()
        .any(|r| r.auto_storage_container_name.is_some());
    if names_it && store::accounts::storage(db, account).await?.is_none() {
        crate::api::batch::tasks::refuse_auto_storage(
            "startTask.resourceFiles",
            &task.resource_files,
        )?;
    }
    Ok(())
}

pub(super) fn check_start_task(mut raw: Value) -> ApiResult<Value> {
    if let Some(fields) = raw.as_object() {
        refuse_unsupported(START_TASK, "startTask.", fields)?;
        // Kept as it is shown: an admin auto-user, which every task runs as.
        if let Some(identity) = crate::api::batch::identity::checked(fields, "startTask.")? {
            raw["userIdentity"] = identity;
        }
    }
    let task: StartTask = serde_json::from_value(raw.clone())
        .map_err(|e| ApiError::invalid_property("startTask", raw.to_string(), e.to_string()))?;
    match task.command_line.as_deref() {
        None => return Err(ApiError::missing_property("startTask.commandLine")),
        Some(c) if c.trim().is_empty() => {
            return Err(ApiError::invalid_property(
                "startTask.commandLine",
                c,
                "must not be empty",
            ))
        }
        _ => {}
    }
    crate::api::batch::tasks::check_resource_files(
        "startTask.resourceFiles",
        &task.resource_files,
    )?;
    if let Some(settings) = &task.container_settings {
        settings
            .check("startTask.containerSettings")
            .map_err(|(property, value, why)| ApiError::invalid_property(&property, value, why))?;
    }
    if let Some(bad) = task
        .environment_settings
        .iter()
        .find(|e| e.name.is_empty() || e.name.contains('='))
    {
        return Err(ApiError::invalid_property(
            "startTask.environmentSettings",
            &bad.name,
            "a name must be non-empty and contain no '='",
        ));
    }
    if task.max_task_retry_count.is_some_and(|n| n < -1) {
        return Err(ApiError::invalid_property(
            "startTask.maxTaskRetryCount",
            task.max_task_retry_count.unwrap_or(0).to_string(),
            "must be -1 (unlimited) or more",
        ));
    }
    Ok(raw)
}

/// A start task runs in a container of its own only on a pool with a containerConfiguration,
/// as on Azure.
pub(super) fn refuse_start_task_container(
    start_task: Option<&Value>,
    vm_config: Option<&Value>,
) -> ApiResult<()> {
    if in_container(start_task) && crate::domain::container::PoolContainers::of(vm_config).is_none()
    {
        return Err(ApiError::invalid_property(
            "startTask.containerSettings",
            "",
            "the pool has no virtualMachineConfiguration.containerConfiguration; a start task runs in a container of its own only on a pool that has one, as on Azure",
        ));
    }
    Ok(())
}

/// Whether a start task runs in a container of its own.
fn in_container(start_task: Option<&Value>) -> bool {
    start_task
        .and_then(|t| t.get("containerSettings"))
        .is_some_and(|c| !c.is_null())
}

/// As `refuse_start_task_container`, for an existing pool that a change gives a new start task
/// or a new virtualMachineConfiguration (or both; `None` keeps the pool's own).
pub(super) async fn refuse_start_task_container_on(
    app: &Ctx,
    pool_id: &str,
    (start_task, vm_config): (Option<&Value>, Option<&Value>),
) -> ApiResult<()> {
    // Only a start task in a container has anything to check: a new one given without, or
    // none given and no new configuration, needs no read of the pool.
    let nothing_to_check = match start_task {
        Some(_) => !in_container(start_task),
        None => vm_config.is_none(),
    };
    if nothing_to_check {
        return Ok(());
    }
    let Some(pool) = store::pools::get(&app.db, &app.account, pool_id).await? else {
        return Ok(());
    };
    refuse_start_task_container(
        start_task.or(pool.start_task.as_ref()),
        vm_config.or(pool.vm_config.as_ref()),
    )
}

/// A pool's targetNodeCommunicationMode, checked: `default` or `simplified` (either way a node's
/// agent connects out to the server, as in Azure's simplified mode); `classic` is refused.
pub(super) fn communication_mode(
    given: Option<String>,
) -> ApiResult<Option<NodeCommunicationMode>> {
    const AT: &str = "targetNodeCommunicationMode";
    let Some(given) = given else { return Ok(None) };
    match NodeCommunicationMode::parse(&given.to_ascii_lowercase()) {
        Some(NodeCommunicationMode::Classic) => Err(ApiError::invalid_property(
            AT,
            given,
            "not supported by this server: classic node communication (the service reaching into \
             its nodes); every node's agent connects out to the server, as in simplified mode",
        )),
        Some(mode) => Ok(Some(mode)),
        None => Err(ApiError::invalid_property(
            AT,
            given,
            "must be default, classic or simplified",
        )),
    }
}

/// Azure's limits on a resource's tags: how many, and how long a name and a value may be.
const MAX_TAGS: usize = 50;
const MAX_TAG_NAME: usize = 512;
const MAX_TAG_VALUE: usize = 256;

/// A pool's resourceTags, checked as Azure checks a resource's tags: at most 50, each name 1 to
/// 512 characters without `<>%&\?/` and unique regardless of case, each value a string of at
/// most 256 characters. None for none.
pub(super) fn resource_tags(given: Option<Map<String, Value>>) -> ApiResult<Option<ResourceTags>> {
    let Some(given) = given.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let bad = |value: &str, why: String| ApiError::invalid_property("resourceTags", value, why);
    if given.len() > MAX_TAGS {
        return Err(bad(
            &given.len().to_string(),
            format!("a pool has at most {MAX_TAGS} tags"),
        ));
    }
    let mut tags = std::collections::BTreeMap::new();
    for (name, value) in given {
        if name.is_empty() || name.chars().count() > MAX_TAG_NAME {
            return Err(bad(
                &name,
                format!("a tag's name has 1 to {MAX_TAG_NAME} characters"),
            ));
        }
        if name.contains(['<', '>', '%', '&', '\\', '?', '/']) {
            return Err(bad(&name, "a tag's name has none of < > % & \\ ? /".into()));
        }
        if tags.keys().any(|n: &String| n.eq_ignore_ascii_case(&name)) {
            return Err(bad(&name, "tag names are unique regardless of case".into()));
        }
        let value = match value {
            Value::String(v) if v.chars().count() <= MAX_TAG_VALUE => v,
            Value::String(_) => {
                let why =
                    format!("the tag {name:?}'s value has at most {MAX_TAG_VALUE} characters");
                return Err(bad(&name, why));
            }
            _ => {
                return Err(bad(
                    &name,
                    format!("the tag {name:?}'s value is not a string"),
                ))
            }
        };
        tags.insert(name, value);
    }
    Ok(Some(sqlx::types::Json(tags)))
}

/// A pool's upgradePolicy, checked; whether it is given (mode `manual`). Manual is what every
/// node is: nothing on it is upgraded by itself, and a reimage gives it the pool's image anew,
/// Azure's manual upgrade. `automatic` and `rolling`, and the settings of either, are refused.
pub(super) fn upgrade_policy(given: Option<Value>) -> ApiResult<bool> {
    const REFUSED: &str = "not supported by this server: automatic and rolling node OS upgrades (mode `manual` is taken: a reimage gives a node the pool's image anew)";
    let policy = match given {
        None | Some(Value::Null) => return Ok(false),
        Some(Value::Object(policy)) if policy.is_empty() => return Ok(false),
        Some(Value::Object(policy)) => policy,
        Some(other) => {
            let why = "must be an object with a mode";
            return Err(ApiError::invalid_property(
                "upgradePolicy",
                other.to_string(),
                why,
            ));
        }
    };
    if let Some((name, value)) = policy
        .iter()
        .find(|(name, value)| *name != "mode" && crate::api::batch::support::asks(value))
    {
        let name = format!("upgradePolicy.{name}");
        return Err(ApiError::invalid_property(
            &name,
            value.to_string(),
            REFUSED,
        ));
    }
    match policy.get("mode") {
        Some(Value::String(mode)) if mode.eq_ignore_ascii_case("manual") => Ok(true),
        Some(mode) => Err(ApiError::invalid_property(
            "upgradePolicy.mode",
            mode.to_string(),
            REFUSED,
        )),
        None => Err(ApiError::missing_property("upgradePolicy.mode")),
    }
}
