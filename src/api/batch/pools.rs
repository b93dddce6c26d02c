//! `/pools`: create, get, list, resize, stop resize, update, delete.

use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::error::{ApiError, ApiResult};
use crate::api::json::AzureJson;
use crate::api::Ctx;
use crate::api::{
    etag, header_value, odata, resource_headers, rfc3339, BaseUrl, Conditions, ListQuery, Select,
};
use crate::domain::ids::check_id;
use crate::domain::pool::{NodeDeallocationOption, NodeFillType, StartTask};
use crate::domain::IsoDuration;
use crate::store::{self, pools::PoolRow, pools::Refused};

/// Azure's default resizeTimeout.
pub const DEFAULT_RESIZE_TIMEOUT_SECS: i64 = 15 * 60;
/// Azure's limit on taskSlotsPerNode.
const MAX_TASK_SLOTS_PER_NODE: i32 = 256;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolCreate {
    id: Option<String>,
    display_name: Option<String>,
    vm_size: Option<String>,
    virtual_machine_configuration: Option<Value>,
    resize_timeout: Option<IsoDuration>,
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    target_dedicated_nodes: Option<i32>,
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    target_low_priority_nodes: Option<i32>,
    enable_auto_scale: Option<bool>,
    start_task: Option<Value>,
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    task_slots_per_node: Option<i32>,
    task_scheduling_policy: Option<SchedulingPolicy>,
    metadata: Option<Vec<MetadataItem>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SchedulingPolicy {
    node_fill_type: Option<String>,
}

#[derive(Deserialize, serde::Serialize)]
pub struct MetadataItem {
    name: String,
    value: String,
}

/// The parts of virtualMachineConfiguration that choose the node image.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct VmConfig {
    image_reference: Option<ImageReference>,
    container_configuration: Option<ContainerConfiguration>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ImageReference {
    publisher: Option<String>,
    offer: Option<String>,
    sku: Option<String>,
    virtual_machine_image_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerConfiguration {
    container_image_names: Option<Vec<String>>,
}

pub async fn create(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    AzureJson(body): AzureJson<PoolCreate>,
) -> ApiResult<Response> {
    let id = body.id.ok_or_else(|| ApiError::missing_property("id"))?;
    check_id(&id).map_err(|why| ApiError::invalid_property("id", &id, why))?;
    let vm_size = body
        .vm_size
        .ok_or_else(|| ApiError::missing_property("vmSize"))?;
    let (vm_size, size) = app.settings.vm_sizes.get(&vm_size).ok_or_else(|| {
        ApiError::invalid_property(
            "vmSize",
            &vm_size,
            format!(
                "unknown vmSize; the known sizes are: {}",
                app.settings.vm_sizes.names().join(", ")
            ),
        )
    })?;
    let target = body.target_dedicated_nodes.unwrap_or(0);
    check_target(target, app.settings.max_nodes_per_pool)?;
    if body.target_low_priority_nodes.unwrap_or(0) != 0 {
        return Err(ApiError::invalid_property(
            "targetLowPriorityNodes",
            body.target_low_priority_nodes.unwrap_or(0).to_string(),
            "low-priority (spot) nodes are not offered by this server; use targetDedicatedNodes",
        ));
    }
    if body.enable_auto_scale == Some(true) {
        return Err(ApiError::invalid_property(
            "enableAutoScale",
            "true",
            "autoscale formulas are not supported; resize the pool instead",
        ));
    }
    let slots = body.task_slots_per_node.unwrap_or(1);
    if !(1..=MAX_TASK_SLOTS_PER_NODE).contains(&slots) {
        return Err(ApiError::invalid_property(
            "taskSlotsPerNode",
            slots.to_string(),
            format!("must be between 1 and {MAX_TASK_SLOTS_PER_NODE}"),
        ));
    }
    let fill = match body.task_scheduling_policy.and_then(|p| p.node_fill_type) {
        None => NodeFillType::Spread,
        Some(f) => NodeFillType::parse(&f).ok_or_else(|| {
            ApiError::invalid_property(
                "taskSchedulingPolicy.nodeFillType",
                &f,
                "must be spread or pack",
            )
        })?,
    };
    let resize_timeout = check_resize_timeout(body.resize_timeout)?;
    let image = resolve_image(&app, body.virtual_machine_configuration.as_ref())?;
    let start_task = body.start_task.map(check_start_task).transpose()?;
    let new = store::pools::NewPool {
        account: app.account.clone(),
        id: id.clone(),
        display_name: body.display_name,
        vm_size,
        vcpus: size.vcpus,
        memory_mib: size.memory_mib as i64,
        image,
        vm_config: body.virtual_machine_configuration,
        start_task,
        task_slots_per_node: slots,
        node_fill_type: fill.as_str().to_string(),
        target_dedicated_nodes: target,
        resize_timeout_ticks: resize_timeout,
        metadata: serde_json::to_value(body.metadata.unwrap_or_default())
            .expect("metadata serializes"),
        billing_plan: None,
        service_pk: None,
        pool_service: false,
    };
    match store::pools::insert(&app.db, &new).await {
        Err(e) if store::is_unique_violation(&e) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "PoolExists",
                format!("The specified pool {id:?} already exists."),
            ))
        }
        other => other?,
    }
    app.wake_allocator();
    let pool = store::pools::get(&app.db, &app.account, &id)
        .await?
        .ok_or_else(|| ApiError::internal("pool vanished after insert"))?;
    let url = format!("{base}/pools/{}", pool.id);
    let mut headers = resource_headers(pool.last_modified);
    headers.insert("Location", header_value(&url));
    headers.insert("DataServiceId", header_value(&url));
    Ok((StatusCode::CREATED, headers).into_response())
}

fn check_target(target: i32, quota: i32) -> ApiResult<()> {
    if target < 0 {
        return Err(ApiError::invalid_property(
            "targetDedicatedNodes",
            target.to_string(),
            "must not be negative",
        ));
    }
    if target > quota {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "AccountQuotaExceeded",
            format!("targetDedicatedNodes {target} exceeds the quota of {quota} nodes per pool."),
        )
        .with("PropertyName", "targetDedicatedNodes")
        .with("PropertyValue", target.to_string())
        .with("Quota", quota.to_string()));
    }
    Ok(())
}

fn check_resize_timeout(timeout: Option<IsoDuration>) -> ApiResult<i64> {
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

/// The Docker image a pool's nodes run. See README, "Node images".
fn resolve_image(app: &Ctx, vm_config: Option<&Value>) -> ApiResult<String> {
    let Some(raw) = vm_config else {
        return Ok(app.settings.default_image.clone());
    };
    let config: VmConfig = serde_json::from_value(raw.clone()).map_err(|e| {
        ApiError::invalid_property(
            "virtualMachineConfiguration",
            raw.to_string(),
            e.to_string(),
        )
    })?;
    if let Some(names) = config
        .container_configuration
        .and_then(|c| c.container_image_names)
    {
        if let Some(first) = names.into_iter().next() {
            if first.trim().is_empty() || first.chars().any(char::is_whitespace) {
                return Err(ApiError::invalid_property(
                    "virtualMachineConfiguration.containerConfiguration.containerImageNames",
                    &first,
                    "not a Docker image reference",
                ));
            }
            return Ok(first);
        }
    }
    if let Some(r) = config.image_reference {
        let key = match r.virtual_machine_image_id {
            Some(id) => id,
            None => [r.publisher, r.offer, r.sku]
                .map(Option::unwrap_or_default)
                .join("/"),
        };
        if let Some(image) = app.settings.image_map.get(&key.to_ascii_lowercase()) {
            return Ok(image.clone());
        }
    }
    Ok(app.settings.default_image.clone())
}

fn check_start_task(raw: Value) -> ApiResult<Value> {
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

pub async fn get(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(pool_id): Path<String>,
    select: Select,
    conditions: Conditions,
) -> ApiResult<Response> {
    let pool = find(&app, &pool_id).await?;
    conditions.check(pool.last_modified, true)?;
    Ok((
        resource_headers(pool.last_modified),
        Json(select.shape(pool_json(&pool, &base))),
    )
        .into_response())
}

pub async fn list(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let list = ListQuery::from_query(&query, odata::POOL_PROPERTIES)?;
    let pools = store::pools::list(&app.db, &app.account).await?;
    Ok(Json(
        list.page_of(
            &base,
            "/pools",
            pools
                .iter()
                .map(|p| (p.id.to_lowercase(), pool_json(p, &base))),
        ),
    ))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResizeBody {
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    target_dedicated_nodes: Option<i32>,
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    target_low_priority_nodes: Option<i32>,
    resize_timeout: Option<IsoDuration>,
    node_deallocation_option: Option<String>,
}

pub async fn resize(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(pool_id): Path<String>,
    conditions: Conditions,
    AzureJson(body): AzureJson<ResizeBody>,
) -> ApiResult<Response> {
    check_write(&app, &pool_id, &conditions).await?;
    let target = body.target_dedicated_nodes.unwrap_or(0);
    check_target(target, app.settings.max_nodes_per_pool)?;
    if body.target_low_priority_nodes.unwrap_or(0) != 0 {
        return Err(ApiError::invalid_property(
            "targetLowPriorityNodes",
            body.target_low_priority_nodes.unwrap_or(0).to_string(),
            "low-priority (spot) nodes are not offered by this server",
        ));
    }
    let timeout = body
        .resize_timeout
        .map(|t| check_resize_timeout(Some(t)))
        .transpose()?;
    let deallocation = match body.node_deallocation_option.as_deref() {
        None => None,
        Some(o) => Some(NodeDeallocationOption::parse(o).ok_or_else(|| {
            ApiError::invalid_property(
                "nodeDeallocationOption",
                o,
                "must be requeue, terminate, taskcompletion or retaineddata",
            )
        })?),
    };
    let outcome = store::pools::resize(
        &app.db,
        &app.account,
        &pool_id,
        target,
        timeout,
        deallocation.map(|d| d.as_str()),
    )
    .await?;
    accepted(&app, &base, &pool_id, outcome).await
}

pub async fn stop_resize(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(pool_id): Path<String>,
    conditions: Conditions,
) -> ApiResult<Response> {
    check_write(&app, &pool_id, &conditions).await?;
    let outcome = store::pools::stop_resize(&app.db, &app.account, &pool_id).await?;
    accepted(&app, &base, &pool_id, outcome).await
}

pub async fn delete(
    app: Ctx,
    Path(pool_id): Path<String>,
    conditions: Conditions,
) -> ApiResult<Response> {
    check_write(&app, &pool_id, &conditions).await?;
    match store::pools::mark_deleting(&app.db, &app.account, &pool_id).await? {
        // Deleting a pool that is already being deleted is accepted again, as Azure does.
        Ok(()) | Err(Refused::BeingDeleted) => {
            app.wake_allocator();
            Ok(StatusCode::ACCEPTED.into_response())
        }
        Err(refused) => Err(refusal(&pool_id, refused)),
    }
}

/// PATCH: only the properties given change.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolPatch {
    metadata: Option<Vec<MetadataItem>>,
    start_task: Option<Value>,
}

pub async fn patch(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(pool_id): Path<String>,
    conditions: Conditions,
    AzureJson(body): AzureJson<PoolPatch>,
) -> ApiResult<Response> {
    check_write(&app, &pool_id, &conditions).await?;
    let metadata = body
        .metadata
        .map(|m| serde_json::to_value(m).expect("metadata serializes"));
    let start_task = body.start_task.map(check_start_task).transpose()?;
    let outcome = store::pools::update_properties(
        &app.db,
        &app.account,
        &pool_id,
        metadata.as_ref(),
        start_task.as_ref().map(Some),
    )
    .await?;
    outcome.map_err(|r| refusal(&pool_id, r))?;
    let pool = find(&app, &pool_id).await?;
    let mut headers = resource_headers(pool.last_modified);
    headers.insert(
        "DataServiceId",
        header_value(&format!("{base}/pools/{}", pool.id)),
    );
    Ok((StatusCode::OK, headers).into_response())
}

/// POST updateproperties: metadata and startTask are replaced; an absent startTask is removed.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolReplace {
    metadata: Option<Vec<MetadataItem>>,
    start_task: Option<Value>,
}

pub async fn update_properties(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(pool_id): Path<String>,
    conditions: Conditions,
    AzureJson(body): AzureJson<PoolReplace>,
) -> ApiResult<Response> {
    check_write(&app, &pool_id, &conditions).await?;
    let metadata = serde_json::to_value(
        body.metadata
            .ok_or_else(|| ApiError::missing_property("metadata"))?,
    )
    .expect("metadata serializes");
    let start_task = body.start_task.map(check_start_task).transpose()?;
    let outcome = store::pools::update_properties(
        &app.db,
        &app.account,
        &pool_id,
        Some(&metadata),
        Some(start_task.as_ref()),
    )
    .await?;
    outcome.map_err(|r| refusal(&pool_id, r))?;
    let pool = find(&app, &pool_id).await?;
    let mut headers = resource_headers(pool.last_modified);
    headers.insert(
        "DataServiceId",
        header_value(&format!("{base}/pools/{}", pool.id)),
    );
    Ok((StatusCode::NO_CONTENT, headers).into_response())
}

async fn accepted(
    app: &Ctx,
    base: &str,
    pool_id: &str,
    outcome: Result<(), Refused>,
) -> ApiResult<Response> {
    outcome.map_err(|r| refusal(pool_id, r))?;
    app.wake_allocator();
    let pool = find(app, pool_id).await?;
    let mut headers = resource_headers(pool.last_modified);
    headers.insert(
        "DataServiceId",
        header_value(&format!("{base}/pools/{}", pool.id)),
    );
    Ok((StatusCode::ACCEPTED, headers).into_response())
}

pub async fn find(app: &Ctx, pool_id: &str) -> ApiResult<PoolRow> {
    store::pools::get(&app.db, &app.account, pool_id)
        .await?
        .ok_or_else(|| ApiError::pool_not_found(pool_id))
}

fn refusal(pool_id: &str, refused: Refused) -> ApiError {
    match refused {
        Refused::NotFound => ApiError::pool_not_found(pool_id),
        Refused::BeingDeleted => ApiError::new(StatusCode::CONFLICT, "PoolBeingDeleted", format!("The pool {pool_id:?} is being deleted.")),
        Refused::NotSteady(state) => ApiError::new(
            StatusCode::CONFLICT,
            "PoolNotSteady",
            format!("The pool {pool_id:?} is {state}; it can be resized only when its allocationState is steady (stop the resize first)."),
        )
        .with("AllocationState", state),
    }
}

/// A pool as Azure's `BatchPool` JSON.
pub fn pool_json(p: &PoolRow, base: &str) -> Value {
    let vm_config = p.vm_config.clone().unwrap_or_else(|| {
        // No configuration was given: say which image the nodes run, in Azure's own terms.
        json!({
            "nodeAgentSKUId": "batch.node.batchpool",
            "containerConfiguration": {"type": "dockerCompatible", "containerImageNames": [p.image]},
        })
    });
    let mut pool = json!({
        "id": p.id,
        "url": format!("{base}/pools/{}", p.id),
        "eTag": etag(p.last_modified),
        "lastModified": rfc3339(p.last_modified),
        "creationTime": rfc3339(p.creation_time),
        "state": p.state,
        "stateTransitionTime": rfc3339(p.state_transition_time),
        "allocationState": p.allocation_state,
        "allocationStateTransitionTime": rfc3339(p.allocation_state_transition_time),
        "vmSize": p.vm_size,
        "virtualMachineConfiguration": vm_config,
        "resizeTimeout": IsoDuration::from_ticks(p.resize_timeout_ticks).to_string(),
        "currentDedicatedNodes": p.current_dedicated_nodes,
        "currentLowPriorityNodes": 0,
        "targetDedicatedNodes": p.target_dedicated_nodes,
        "targetLowPriorityNodes": 0,
        "enableAutoScale": false,
        "enableInterNodeCommunication": false,
        "taskSlotsPerNode": p.task_slots_per_node,
        "taskSchedulingPolicy": {"nodeFillType": p.node_fill_type},
    });
    if let Some(name) = &p.display_name {
        pool["displayName"] = json!(name);
    }
    if p.resize_errors.as_array().is_some_and(|e| !e.is_empty()) {
        pool["resizeErrors"] = p.resize_errors.clone();
    }
    if p.metadata.as_array().is_some_and(|m| !m.is_empty()) {
        pool["metadata"] = p.metadata.clone();
    }
    if let Some(start_task) = &p.start_task {
        pool["startTask"] = start_task.clone();
    }
    pool
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoveNodesBody {
    node_list: Option<Vec<String>>,
    node_deallocation_option: Option<String>,
    resize_timeout: Option<IsoDuration>,
}

/// Removes the named nodes from a steady pool; its target shrinks by as many.
pub async fn remove_nodes(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(pool_id): Path<String>,
    conditions: Conditions,
    AzureJson(body): AzureJson<RemoveNodesBody>,
) -> ApiResult<Response> {
    check_write(&app, &pool_id, &conditions).await?;
    let wanted = body
        .node_list
        .ok_or_else(|| ApiError::missing_property("nodeList"))?;
    if wanted.is_empty() || wanted.len() > 100 {
        return Err(ApiError::invalid_property(
            "nodeList",
            wanted.len().to_string(),
            "name 1 to 100 nodes",
        ));
    }
    let option = match body.node_deallocation_option.as_deref() {
        None => NodeDeallocationOption::Requeue,
        Some(o) => NodeDeallocationOption::parse(o).ok_or_else(|| {
            ApiError::invalid_property(
                "nodeDeallocationOption",
                o,
                "must be requeue, terminate, taskcompletion or retaineddata",
            )
        })?,
    };
    let timeout = body
        .resize_timeout
        .map(|t| check_resize_timeout(Some(t)))
        .transpose()?;
    let pool = find(&app, &pool_id).await?;
    if pool.state != "active" {
        return Err(refusal(&pool_id, Refused::BeingDeleted));
    }
    if pool.allocation_state != "steady" {
        return Err(refusal(
            &pool_id,
            Refused::NotSteady(pool.allocation_state.clone()),
        ));
    }
    let nodes = store::nodes::list_for_pool(&app.db, pool.pk).await?;
    let mut pks = Vec::new();
    for id in &wanted {
        match nodes.iter().find(|n| n.id == *id) {
            Some(n) if n.state != "leavingpool" => pks.push(n.pk),
            Some(_) => {}
            None => {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "NodeNotFound",
                    format!("The node {id:?} does not exist in pool {pool_id:?}."),
                )
                .with("NodeId", id))
            }
        }
    }
    let mut tx = app.db.begin().await?;
    crate::ops::jobs::stop_tasks_on_nodes(&mut tx, &pks, option).await?;
    let leaving = store::nodes::mark_leaving(&mut *tx, &pks).await?;
    store::pools::shrink_for_removed_nodes(
        &mut *tx,
        pool.pk,
        leaving.len() as i32,
        timeout,
        option,
    )
    .await?;
    tx.commit().await?;
    app.wake_allocator();
    app.wake_dispatcher();
    accepted(&app, &base, &pool_id, Ok(())).await
}

/// A write's conditional headers, checked against the pool as it is.
async fn check_write(app: &Ctx, pool_id: &str, conditions: &Conditions) -> ApiResult<()> {
    if conditions.is_empty() {
        return Ok(());
    }
    conditions.check(find(app, pool_id).await?.last_modified, false)
}
