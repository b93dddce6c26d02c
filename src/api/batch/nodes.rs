//! `/pools/{id}/nodes`: the nodes of a pool, and files on them.

use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::pools::find;
use crate::api::error::{ApiError, ApiResult};
use crate::api::Ctx;
use crate::api::{odata, rfc3339, BaseUrl, ListQuery, Select};
use crate::store::{self, nodes::NodeRow, pools::PoolRow};

pub async fn list(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(pool_id): Path<String>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let list = ListQuery::from_query(&query, odata::NODE_PROPERTIES)?;
    let pool = find(&app, &pool_id).await?;
    let mut nodes = store::nodes::list_for_pool(&app.db, pool.pk).await?;
    nodes.sort_by(|a, b| a.id.cmp(&b.id));
    let path = format!("/pools/{}/nodes", pool.id);
    Ok(Json(
        list.page_of(
            &base,
            &path,
            nodes
                .iter()
                .map(|n| (n.id.clone(), node_json(&pool, n, &base))),
        ),
    ))
}

pub async fn get(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path((pool_id, node_id)): Path<(String, String)>,
    select: Select,
) -> ApiResult<Json<Value>> {
    let pool = find(&app, &pool_id).await?;
    let node = find_node(&app, &pool, &node_id).await?;
    let mut v = node_json(&pool, &node, &base);
    let tasks = store::tasks::stats::on_node(&app.db, node.pk).await?;
    if !tasks.is_empty() {
        v["recentTasks"] = tasks
            .iter()
            .map(|t| {
                let mut info = json!({"retryCount": t.retry_count, "requeueCount": t.requeue_count});
                if let Some(start) = t.start_time {
                    info["startTime"] = json!(rfc3339(start));
                }
                json!({"taskUrl": format!("{base}/jobs/{}/tasks/{}", t.job_id, t.task_id),
                    "jobId": t.job_id, "taskId": t.task_id, "taskState": t.state, "executionInfo": info})
            })
            .collect();
    }
    Ok(Json(select.shape(v)))
}

pub async fn find_node(app: &Ctx, pool: &PoolRow, node_id: &str) -> ApiResult<NodeRow> {
    store::nodes::get(&app.db, pool.pk, node_id)
        .await?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "NodeNotFound",
                format!("The node {node_id:?} does not exist in pool {:?}.", pool.id),
            )
        })
}

/// A node as Azure's `BatchNode` JSON.
pub(super) fn node_json(pool: &PoolRow, n: &NodeRow, base: &str) -> Value {
    let (running_tasks, running_slots) = n.running_of(pool.task_slots_per_node);
    let mut node = json!({
        "id": n.id,
        "url": format!("{base}/pools/{}/nodes/{}", pool.id, n.id),
        "state": n.state,
        "schedulingState": if n.scheduling_disabled { "disabled" } else { "enabled" },
        "stateTransitionTime": rfc3339(n.state_transition_time),
        "allocationTime": rfc3339(n.allocation_time),
        "ipAddress": n.ip_address.clone().unwrap_or_default(),
        "affinityId": format!("TVM:{}", n.id),
        "vmSize": pool.vm_size,
        "totalTasksRun": n.total_tasks_run,
        "runningTasksCount": running_tasks,
        "runningTaskSlotsCount": running_slots,
        "totalTasksSucceeded": n.total_tasks_succeeded,
        "isDedicated": n.is_dedicated,
        "nodeAgentInfo": {"version": concat!("batchpool/", env!("CARGO_PKG_VERSION")), "lastUpdateTime": rfc3339(n.allocation_time)},
        "virtualMachineInfo": {"imageReference": pool.vm_config.as_ref().and_then(|c| c.get("imageReference")).cloned().unwrap_or(json!({}))},
    });
    if let Some(t) = n.last_boot_time {
        node["lastBootTime"] = json!(rfc3339(t));
    }
    if let Some(start_task) = &pool.start_task {
        node["startTask"] = start_task.clone();
    }
    if let Some(info) = &n.start_task_info {
        node["startTaskInfo"] = info.clone();
    }
    if n.errors.as_array().is_some_and(|e| !e.is_empty()) {
        node["errors"] = n.errors.clone();
    }
    node
}

/// A body that may be left out (the SDKs send none when no option is set): its defaults then.
fn optional_body<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> ApiResult<T> {
    if body.is_empty() {
        return Ok(T::default());
    }
    crate::api::json::parse(body)
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct RebootBody {
    /// `nodeRebootKind` in API 2025-06-01, `nodeRebootOption` before it.
    #[serde(alias = "nodeRebootKind")]
    node_reboot_option: Option<String>,
}

/// Reboots a node: its running tasks are requeued (or ended, or left: nodeRebootOption), its
/// container restarts with its disk as it was, and its start task runs again.
pub async fn reboot(
    app: Ctx,
    Path((pool_id, node_id)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> ApiResult<axum::response::Response> {
    let body: RebootBody = optional_body(&body)?;
    let option = deallocation("nodeRebootOption", body.node_reboot_option.as_deref())?;
    let reboot = (crate::domain::pool::NodeState::Rebooting, "rebooted");
    restart(&app, (&pool_id, &node_id), option, reboot).await
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReimageBody {
    node_reimage_option: Option<String>,
}

/// Reimages a node: as a reboot, but the node is made again from its pool's image, with a new
/// disk (its root directory: `startup`, `shared`, job preparation directories). Job tasks'
/// directories are the account's, not the node's, and stay until their retention time.
pub async fn reimage(
    app: Ctx,
    Path((pool_id, node_id)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> ApiResult<axum::response::Response> {
    let body: ReimageBody = optional_body(&body)?;
    let option = deallocation("nodeReimageOption", body.node_reimage_option.as_deref())?;
    let reimage = (crate::domain::pool::NodeState::Reimaging, "reimaged");
    restart(&app, (&pool_id, &node_id), option, reimage).await
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DeallocateBody {
    node_deallocate_option: Option<String>,
}

/// Deallocates a node: its running tasks are requeued (or ended, or left to finish:
/// nodeDeallocateOption), then its container stops with its disk kept. A deallocated node runs
/// nothing and is not billed until it is started again.
pub async fn deallocate(
    app: Ctx,
    Path((pool_id, node_id)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> ApiResult<axum::response::Response> {
    let body: DeallocateBody = optional_body(&body)?;
    let option = deallocation(
        "nodeDeallocateOption",
        body.node_deallocate_option.as_deref(),
    )?;
    let deallocate = (crate::domain::pool::NodeState::Deallocating, "deallocated");
    restart(&app, (&pool_id, &node_id), option, deallocate).await
}

/// Starts a deallocated node: its container starts with its disk as it was, and its start task
/// runs again, as after a reboot.
pub async fn start(
    app: Ctx,
    Path((pool_id, node_id)): Path<(String, String)>,
) -> ApiResult<axum::response::Response> {
    let pool = find(&app, &pool_id).await?;
    let node = find_node(&app, &pool, &node_id).await?;
    let mut tx = app.db.begin().await?;
    use crate::domain::pool::NodeState::{Deallocated, Starting};
    if !store::nodes::set_state_from(&mut *tx, node.pk, (Deallocated, Starting)).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "NodeNotDeallocated",
            format!(
                "The node {node_id:?} is {}; only a deallocated node can be started.",
                node.state
            ),
        ));
    }
    store::preparations::forget_for_reboot(&mut *tx, node.pk).await?;
    tx.commit().await?;
    app.wake_allocator();
    Ok(axum::response::IntoResponse::into_response(
        StatusCode::ACCEPTED,
    ))
}

fn deallocation(
    name: &str,
    given: Option<&str>,
) -> ApiResult<crate::domain::pool::NodeDeallocationOption> {
    use crate::domain::pool::NodeDeallocationOption;
    match given {
        None => Ok(NodeDeallocationOption::Requeue),
        Some(o) => NodeDeallocationOption::parse(o).ok_or_else(|| {
            ApiError::invalid_property(
                name,
                o,
                "must be requeue, terminate, taskcompletion or retaineddata",
            )
        }),
    }
}

/// Stops (or leaves) the node's tasks as `option` says and puts it in `state` (rebooting,
/// reimaging or deallocating), for the allocator to make it again or stop it.
async fn restart(
    app: &Ctx,
    (pool_id, node_id): (&str, &str),
    option: crate::domain::pool::NodeDeallocationOption,
    (state, done): (crate::domain::pool::NodeState, &str),
) -> ApiResult<axum::response::Response> {
    use crate::domain::pool::NodeState;
    let pool = find(app, pool_id).await?;
    let node = find_node(app, &pool, node_id).await?;
    if !matches!(
        node.state,
        NodeState::Idle
            | NodeState::Running
            | NodeState::Offline
            | NodeState::StartTaskFailed
            | NodeState::Unusable
            | NodeState::Unknown
    ) {
        return Err(ApiError::new(StatusCode::CONFLICT, "NodeNotReady", format!("The node {node_id:?} is {}; it can be {done} when it is idle, running, offline, unusable, unknown or its start task failed.", node.state)));
    }
    let mut tx = app.db.begin().await?;
    crate::ops::jobs::stop_tasks_on_nodes(&mut tx, &[node.pk], option).await?;
    store::nodes::set_state(&mut *tx, node.pk, state).await?;
    // A reimage takes the node's disk: with retaineddata, not before its tasks' files'
    // retention has run out.
    let retain = option == crate::domain::pool::NodeDeallocationOption::RetainedData;
    if state == NodeState::Reimaging {
        store::nodes::set_retain_data(&mut *tx, node.pk, retain).await?;
    }
    tx.commit().await?;
    app.wake_allocator();
    app.wake_dispatcher();
    Ok(axum::response::IntoResponse::into_response(
        StatusCode::ACCEPTED,
    ))
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DisableSchedulingBody {
    node_disable_scheduling_option: Option<String>,
}

/// Stops a node taking tasks (an operator draining it): what runs on it is requeued (the
/// default), ended as failed (`terminate`), or left to finish (`taskcompletion`).
pub async fn disable_scheduling(
    app: Ctx,
    Path((pool_id, node_id)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> ApiResult<axum::response::Response> {
    use crate::domain::pool::NodeDeallocationOption as Deallocation;
    let body: DisableSchedulingBody = optional_body(&body)?;
    let option = match body.node_disable_scheduling_option.as_deref() {
        None | Some("requeue") => Deallocation::Requeue,
        Some("terminate") => Deallocation::Terminate,
        Some("taskcompletion") => Deallocation::TaskCompletion,
        Some(other) => {
            return Err(ApiError::invalid_property(
                "nodeDisableSchedulingOption",
                other,
                "must be requeue, terminate or taskcompletion",
            ))
        }
    };
    let pool = find(&app, &pool_id).await?;
    let node = find_node(&app, &pool, &node_id).await?;
    let mut tx = app.db.begin().await?;
    store::nodes::set_scheduling(&mut *tx, node.pk, true).await?;
    let why = "scheduling was disabled on its node";
    crate::ops::jobs::stop_tasks_on_nodes_for(&mut tx, &[node.pk], option, why).await?;
    tx.commit().await?;
    app.wake_dispatcher();
    Ok(axum::response::IntoResponse::into_response(StatusCode::OK))
}

/// Lets a node take tasks again.
pub async fn enable_scheduling(
    app: Ctx,
    Path((pool_id, node_id)): Path<(String, String)>,
) -> ApiResult<axum::response::Response> {
    let pool = find(&app, &pool_id).await?;
    let node = find_node(&app, &pool, &node_id).await?;
    store::nodes::set_scheduling(&app.db, node.pk, false).await?;
    app.wake_dispatcher();
    Ok(axum::response::IntoResponse::into_response(StatusCode::OK))
}
