//! `/pools`: create, get, list, resize, stop resize, update, delete.

mod autoscale;
mod checks;
mod create;
mod update;

use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::error::{ApiError, ApiResult};
use crate::api::Ctx;
use crate::api::{
    etag, header_value, odata, resource_headers, rfc3339, BaseUrl, Conditions, ListQuery, Select,
};
use crate::domain::IsoDuration;
use crate::store::{self, pools::PoolRow, pools::Refused};
pub use autoscale::{disable as disable_auto_scale, enable as enable_auto_scale, evaluate_formula};
pub use create::{create, PoolCreate};
pub(crate) use create::{insert as insert_pool, new_pool};
pub use update::{patch, remove_nodes, resize, stop_resize, update_properties};

/// Azure's default resizeTimeout.
pub use crate::domain::pool::DEFAULT_RESIZE_TIMEOUT_SECS;

#[derive(Deserialize, serde::Serialize)]
pub struct MetadataItem {
    name: String,
    value: String,
}

pub async fn get(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(pool_id): Path<String>,
    (select, expand): (Select, crate::api::Expand),
    conditions: Conditions,
) -> ApiResult<Response> {
    let pool = find(&app, &pool_id).await?;
    conditions.check(pool.last_modified, true)?;
    let mut v = pool_json(&pool, &base);
    if expand.stats {
        v["stats"] = crate::api::batch::stats::pool_stats(&app, &base, &pool).await?;
    }
    Ok((resource_headers(pool.last_modified), Json(select.shape(v))).into_response())
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
        .with("AllocationState", state.as_str()),
        Refused::NotEmpty => ApiError::new(
            StatusCode::CONFLICT,
            "OperationInvalidForCurrentState",
            format!("The pool {pool_id:?} has nodes, or targets above 0; its displayName, vmSize, taskSlotsPerNode, taskSchedulingPolicy, virtualMachineConfiguration, enableInterNodeCommunication and upgradePolicy change only while it has none, as on Azure: resize it to 0 first."),
        ),
    }
}

/// A pool as Azure's `BatchPool` JSON.
pub fn pool_json(p: &PoolRow, base: &str) -> Value {
    let mut vm_config = p.vm_config.clone().unwrap_or_else(|| {
        // No configuration was given: say which image the nodes run, in Azure's own terms.
        json!({
            "nodeAgentSKUId": "batch.node.batchpool",
            "containerConfiguration": {"type": "dockerCompatible", "containerImageNames": [p.image]},
        })
    });
    // Registry passwords are the user's secrets: kept to pull with, never shown.
    if let Some(registries) = vm_config
        .pointer_mut("/containerConfiguration/containerRegistries")
        .and_then(Value::as_array_mut)
    {
        for r in registries.iter_mut().filter_map(Value::as_object_mut) {
            r.remove("password");
        }
    }
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
        "currentLowPriorityNodes": p.current_low_priority_nodes,
        "targetDedicatedNodes": p.target_dedicated_nodes,
        "targetLowPriorityNodes": p.target_low_priority_nodes,
        "enableAutoScale": p.enable_auto_scale,
        "enableInterNodeCommunication": p.inter_node_communication,
        "taskSlotsPerNode": p.task_slots_per_node,
        "taskSchedulingPolicy": {
            "nodeFillType": p.node_fill_type,
            "jobDefaultOrder": p.job_default_order,
        },
        "targetNodeCommunicationMode": p.node_communication_mode,
        // Every node's agent connects out to the server.
        "currentNodeCommunicationMode": "simplified",
    });
    if p.enable_auto_scale {
        pool["autoScaleFormula"] = json!(p.auto_scale_formula);
        let ticks = p.auto_scale_interval_ticks.unwrap_or_default();
        pool["autoScaleEvaluationInterval"] = json!(IsoDuration::from_ticks(ticks).to_string());
        if let Some(run) = &p.auto_scale_run {
            pool["autoScaleRun"] = run.clone();
        }
    }
    if let Some(name) = &p.display_name {
        pool["displayName"] = json!(name);
    }
    if p.manual_upgrades {
        pool["upgradePolicy"] = json!({"mode": "manual"});
    }
    if let Some(tags) = &p.resource_tags {
        pool["resourceTags"] = json!(tags.0);
    }
    if p.resize_errors.as_array().is_some_and(|e| !e.is_empty()) {
        pool["resizeErrors"] = p.resize_errors.clone();
    }
    if p.metadata.as_array().is_some_and(|m| !m.is_empty()) {
        pool["metadata"] = p.metadata.clone();
    }
    if let Some(packages) = p.application_packages.as_ref().filter(|p| !p.is_empty()) {
        let refs: Vec<_> = packages.iter().map(|p| p.reference()).collect();
        pool["applicationPackageReferences"] = json!(refs);
    }
    if let Some(start_task) = &p.start_task {
        pool["startTask"] = start_task.clone();
    }
    pool
}

/// An answer about the pool as it is now: its ETag, Last-Modified and URL.
async fn answer(app: &Ctx, base: &str, pool_id: &str, status: StatusCode) -> ApiResult<Response> {
    let pool = find(app, pool_id).await?;
    let mut headers = resource_headers(pool.last_modified);
    headers.insert(
        "DataServiceId",
        header_value(&format!("{base}/pools/{}", pool.id)),
    );
    Ok((status, headers).into_response())
}

/// A write's conditional headers, checked against the pool as it is.
async fn check_write(app: &Ctx, pool_id: &str, conditions: &Conditions) -> ApiResult<()> {
    if conditions.is_empty() {
        return Ok(());
    }
    conditions.check(find(app, pool_id).await?.last_modified, false)
}
