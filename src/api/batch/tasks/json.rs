//! A task as Azure's `BatchTask` JSON.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::task_url;
use crate::api::error::{ApiError, ApiResult};
use crate::api::{etag, rfc3339};
use crate::domain::job::TaskState;
use crate::domain::IsoDuration;
use crate::store::{jobs::JobRow, tasks::TaskRow};

/// A task as Azure's `BatchTask` JSON.
pub fn task_json(job: &JobRow, t: &TaskRow, base: &str) -> Value {
    let mut task = json!({
        "id": t.id,
        "url": task_url(base, &job.id, &t.id),
        "eTag": etag(t.last_modified),
        "lastModified": rfc3339(t.last_modified),
        "creationTime": rfc3339(t.creation_time),
        "state": t.state,
        "stateTransitionTime": rfc3339(t.state_transition_time),
        "commandLine": t.command_line,
        "requiredSlots": t.required_slots,
        "constraints": constraints_json(t),
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
    if let Some(files) = &t.files {
        if let Ok(Value::Object(mut fields)) = serde_json::to_value(&files.0) {
            // A registry's password is the user's secret: kept to pull with, never shown.
            if let Some(registry) = fields
                .get_mut("containerSettings")
                .and_then(|c| c.get_mut("registry"))
                .and_then(Value::as_object_mut)
            {
                registry.remove("password");
            }
            obj.extend(fields);
        }
    }
    if let Some(extra) = t.extra.as_object() {
        for (k, v) in extra {
            obj.insert(k.clone(), v.clone());
        }
    }
    obj.insert("executionInfo".into(), execution_json(t));
    if let Some(node_info) = node_info_json(job, t, base) {
        obj.insert("nodeInfo".into(), node_info);
    }
    task
}

fn constraints_json(t: &TaskRow) -> Value {
    let mut constraints = json!({
        "maxWallClockTime": IsoDuration::from_ticks(t.max_wall_clock_ticks.unwrap_or(i64::MAX)).to_string(),
        "retentionTime": IsoDuration::from_ticks(t.retention_ticks).to_string(),
        "maxTaskRetryCount": t.max_task_retry_count,
    });
    if t.max_wall_clock_ticks.is_none() {
        constraints["maxWallClockTime"] = json!(IsoDuration::MAX.to_string());
    }
    constraints
}

fn execution_json(t: &TaskRow) -> Value {
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
    if let Some(id) = &t.container_id {
        // The engine's state of it: it lives as long as its attempt runs.
        let state = if t.state == TaskState::Completed {
            "exited"
        } else {
            "running"
        };
        execution["containerInfo"] = json!({"containerId": id, "state": state});
    }
    execution
}

/// The task's node, when its row names one.
fn node_info_json(job: &JobRow, t: &TaskRow, base: &str) -> Option<Value> {
    let (Some(node_id), Some(pool_id)) = (&t.node_id, &t.pool_id) else {
        return None;
    };
    Some(json!({
        "affinityId": format!("TVM:{node_id}"),
        "nodeUrl": format!("{base}/pools/{pool_id}/nodes/{node_id}"),
        "poolId": pool_id,
        "nodeId": node_id,
        "taskRootDirectory": format!("workitems/{}/job-1/{}", job.id, t.id),
        "taskRootDirectoryUrl": format!("{base}/pools/{pool_id}/nodes/{node_id}/files/workitems/{}/job-1/{}", job.id, t.id),
    }))
}

/// Azure's AffinityInfo: a node's `affinityId` (`TVM:<node id>`, as a node and a task's
/// `nodeInfo` give it) that the task prefers when that node has room.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct AffinityInfo {
    affinity_id: String,
}

/// What a task keeps beside its columns and answers as it was given: its affinityInfo, its
/// userIdentity (the auto-user it runs as, `domain::run_as`), and its
/// authenticationTokenSettings (`job_token`: access to its job).
pub(super) fn extra(
    affinity: Option<AffinityInfo>,
    identity: Option<Value>,
    job_token: bool,
) -> Value {
    let mut extra = Map::new();
    if job_token {
        extra.insert(
            "authenticationTokenSettings".into(),
            json!({"access": ["job"]}),
        );
    }
    if let Some(a) = affinity {
        extra.insert("affinityInfo".into(), json!({"affinityId": a.affinity_id}));
    }
    if let Some(identity) = identity {
        extra.insert("userIdentity".into(), identity);
    }
    Value::Object(extra)
}

/// A task's authenticationTokenSettings, checked: whether they give it access to its job (the
/// one access Azure has, `job`); an empty `access` or none gives it nothing.
pub(super) fn token_access(given: Option<Value>) -> ApiResult<bool> {
    let bad = |name: &str, value: &Value, why: &str| {
        ApiError::invalid_property(
            &format!("authenticationTokenSettings{name}"),
            value.to_string(),
            why,
        )
    };
    let settings = match given {
        None | Some(Value::Null) => return Ok(false),
        Some(Value::Object(settings)) => settings,
        Some(other) => return Err(bad("", &other, "must be an object")),
    };
    match settings.get("access") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Array(access)) => {
            for a in access {
                if !a.as_str().is_some_and(|a| a.eq_ignore_ascii_case("job")) {
                    return Err(bad(".access", a, "the one access there is is `job`"));
                }
            }
            Ok(!access.is_empty())
        }
        Some(other) => Err(bad(".access", other, "must be a list, such as [\"job\"]")),
    }
}
