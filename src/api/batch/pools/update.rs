//! Changes to a pool: resize, stop a resize, update its properties, remove nodes.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::checks::{
    check_resize_timeout, check_start_task, check_targets, communication_mode, deallocation_option,
    refuse_start_task_container_on, refuse_unlinked_storage, upgrade_policy,
};
use super::create::{
    pool_packages, resolve_image, scheduling_changes, task_slots, vm_size, SchedulingPolicy,
};
use super::{answer, check_write, find, refusal, MetadataItem};
use crate::api::batch::support::{refuse_unsupported, POOL_PATCH, POOL_REPLACE};
use crate::api::error::{ApiError, ApiResult};
use crate::api::json::AzureJson;
use crate::api::{BaseUrl, Conditions, Ctx};
use crate::domain::files::PackageReference;
use crate::domain::pool::{
    AllocationState, NodeCommunicationMode, NodeDeallocationOption, NodeState, PoolState, Targets,
};
use crate::domain::IsoDuration;
use crate::store::{self, pools::PoolChanges, pools::PoolRow, pools::PoolShape, pools::Refused};

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
    if find(&app, &pool_id).await?.enable_auto_scale {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "OperationInvalidForCurrentState",
            format!("The pool {pool_id:?} is sized by its autoscale formula; disable autoscale (disableautoscale) to resize it by hand."),
        ));
    }
    let targets = check_targets(
        body.target_dedicated_nodes,
        body.target_low_priority_nodes,
        app.settings.max_nodes_per_pool,
    )?;
    let timeout = body
        .resize_timeout
        .map(|t| check_resize_timeout(Some(t)))
        .transpose()?;
    let deallocation = body
        .node_deallocation_option
        .as_deref()
        .map(deallocation_option)
        .transpose()?;
    let outcome = store::pools::resize(
        &app.db,
        &app.account,
        &pool_id,
        targets,
        timeout,
        deallocation,
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

/// PATCH: only the properties given change.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolPatch {
    metadata: Option<Vec<MetadataItem>>,
    start_task: Option<Value>,
    display_name: Option<String>,
    task_scheduling_policy: Option<SchedulingPolicy>,
    vm_size: Option<String>,
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    task_slots_per_node: Option<i32>,
    virtual_machine_configuration: Option<Value>,
    target_node_communication_mode: Option<String>,
    application_package_references: Option<Vec<PackageReference>>,
    enable_inter_node_communication: Option<bool>,
    upgrade_policy: Option<Value>,
    /// Refused or ignored by `POOL_PATCH`.
    #[serde(flatten)]
    rest: Map<String, Value>,
}

pub async fn patch(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(pool_id): Path<String>,
    conditions: Conditions,
    AzureJson(body): AzureJson<PoolPatch>,
) -> ApiResult<Response> {
    refuse_unsupported(POOL_PATCH, "", &body.rest)?;
    check_write(&app, &pool_id, &conditions).await?;
    let metadata = body
        .metadata
        .map(|m| serde_json::to_value(m).expect("metadata serializes"));
    let shape = PoolShape {
        vm_size: body
            .vm_size
            .map(|given| vm_size(&app.settings, Some(given)))
            .transpose()?
            .map(|(name, size)| (name, size.vcpus, size.memory_mib as i64)),
        task_slots_per_node: body
            .task_slots_per_node
            .map(Some)
            .map(task_slots)
            .transpose()?,
        image: body
            .virtual_machine_configuration
            .map(|config| Ok::<_, ApiError>((resolve_image(&app.settings, Some(&config))?, config)))
            .transpose()?,
        inter_node: body.enable_inter_node_communication,
    };
    if let Some(slots) = shape.task_slots_per_node {
        refuse_fewer_slots_than_tasks_need(&app, &pool_id, slots).await?;
    }
    let start_task = body.start_task.map(check_start_task).transpose()?;
    refuse_unlinked_storage((&app.db, &app.account), start_task.as_ref()).await?;
    let new_config = shape.image.as_ref().map(|(_, config)| config);
    refuse_start_task_container_on(&app, &pool_id, (start_task.as_ref(), new_config)).await?;
    let (fill, order) = match body.task_scheduling_policy {
        Some(policy) => scheduling_changes(policy)?,
        None => (None, None),
    };
    let packages = match body.application_package_references {
        // The pool's nodes get them when they next start (made, rebooted or reimaged).
        Some(refs) => Some(pool_packages((&app.db, &app.account), &refs).await?),
        None => None,
    };
    let changes = PoolChanges {
        metadata: metadata.as_ref(),
        start_task: start_task.as_ref().map(Some),
        display_name: body.display_name.as_deref(),
        fill,
        order,
        communication: communication_mode(body.target_node_communication_mode)?,
        manual_upgrades: upgrade_policy(body.upgrade_policy)?.then_some(true),
        packages: packages.as_ref().map(Option::as_ref),
        shape,
    };
    let outcome = store::pools::update_properties(&app.db, &app.account, &pool_id, changes).await?;
    outcome.map_err(|r| refusal(&pool_id, r))?;
    answer(&app, &base, &pool_id, StatusCode::OK).await
}

/// A task never runs on nodes with fewer slots than it needs: a pool's taskSlotsPerNode may not
/// go below what a waiting task of its jobs needs (a task add is refused likewise).
async fn refuse_fewer_slots_than_tasks_need(app: &Ctx, pool_id: &str, slots: i32) -> ApiResult<()> {
    let needed = store::tasks::most_slots_needed(&app.db, &app.account, pool_id).await?;
    match needed {
        Some(needed) if needed > slots => Err(ApiError::invalid_property(
            "taskSlotsPerNode",
            slots.to_string(),
            format!("a task of a job on this pool needs {needed} slots; a node must have at least as many"),
        )),
        _ => Ok(()),
    }
}

/// POST updateproperties: metadata, startTask, applicationPackageReferences and
/// targetNodeCommunicationMode are replaced; an absent startTask or package list is removed, an
/// absent mode is `default`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolReplace {
    metadata: Option<Vec<MetadataItem>>,
    start_task: Option<Value>,
    target_node_communication_mode: Option<String>,
    application_package_references: Option<Vec<PackageReference>>,
    /// Refused or ignored by `POOL_REPLACE`.
    #[serde(flatten)]
    rest: Map<String, Value>,
}

pub async fn update_properties(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(pool_id): Path<String>,
    conditions: Conditions,
    AzureJson(body): AzureJson<PoolReplace>,
) -> ApiResult<Response> {
    refuse_unsupported(POOL_REPLACE, "", &body.rest)?;
    check_write(&app, &pool_id, &conditions).await?;
    let metadata = serde_json::to_value(
        body.metadata
            .ok_or_else(|| ApiError::missing_property("metadata"))?,
    )
    .expect("metadata serializes");
    let start_task = body.start_task.map(check_start_task).transpose()?;
    refuse_unlinked_storage((&app.db, &app.account), start_task.as_ref()).await?;
    refuse_start_task_container_on(&app, &pool_id, (start_task.as_ref(), None)).await?;
    let communication = communication_mode(body.target_node_communication_mode)?;
    let refs = body.application_package_references.unwrap_or_default();
    let packages = pool_packages((&app.db, &app.account), &refs).await?;
    let changes = PoolChanges {
        metadata: Some(&metadata),
        start_task: Some(start_task.as_ref()),
        communication: Some(communication.unwrap_or(NodeCommunicationMode::Default)),
        packages: Some(packages.as_ref()),
        ..PoolChanges::default()
    };
    let outcome = store::pools::update_properties(&app.db, &app.account, &pool_id, changes).await?;
    outcome.map_err(|r| refusal(&pool_id, r))?;
    answer(&app, &base, &pool_id, StatusCode::NO_CONTENT).await
}

async fn accepted(
    app: &Ctx,
    base: &str,
    pool_id: &str,
    outcome: Result<(), Refused>,
) -> ApiResult<Response> {
    outcome.map_err(|r| refusal(pool_id, r))?;
    app.wake_allocator();
    answer(app, base, pool_id, StatusCode::ACCEPTED).await
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
    let option = body
        .node_deallocation_option
        .as_deref()
        .map(deallocation_option)
        .transpose()?
        .unwrap_or(NodeDeallocationOption::Requeue);
    let timeout = body
        .resize_timeout
        .map(|t| check_resize_timeout(Some(t)))
        .transpose()?;
    let pool = find(&app, &pool_id).await?;
    if pool.state != PoolState::Active {
        return Err(refusal(&pool_id, Refused::BeingDeleted));
    }
    if pool.allocation_state != AllocationState::Steady {
        return Err(refusal(&pool_id, Refused::NotSteady(pool.allocation_state)));
    }
    let named = nodes_to_remove(&app, &pool, &pool_id, &wanted).await?;
    let pks: Vec<i64> = named.iter().map(|(pk, _)| *pk).collect();
    let mut tx = app.db.begin().await?;
    crate::ops::jobs::stop_tasks_on_nodes(&mut tx, &pks, option).await?;
    let retain = option == crate::domain::pool::NodeDeallocationOption::RetainedData;
    let leaving = store::nodes::mark_leaving(&mut *tx, &pks, retain).await?;
    // Each kind's target shrinks by the nodes of that kind that leave.
    let dedicated = named
        .iter()
        .filter(|(pk, dedicated)| *dedicated && leaving.contains(pk))
        .count() as i32;
    let removed = Targets {
        dedicated,
        low_priority: leaving.len() as i32 - dedicated,
    };
    store::pools::shrink_for_removed_nodes(&mut *tx, pool.pk, removed, timeout, option).await?;
    tx.commit().await?;
    app.wake_allocator();
    app.wake_dispatcher();
    accepted(&app, &base, &pool_id, Ok(())).await
}

/// The nodes named that are not leaving the pool already, and whether each is dedicated; a name
/// of no node of the pool is refused, under the pool id as the request spelled it.
async fn nodes_to_remove(
    app: &Ctx,
    pool: &PoolRow,
    pool_id: &str,
    wanted: &[String],
) -> ApiResult<Vec<(i64, bool)>> {
    let nodes = store::nodes::list_for_pool(&app.db, pool.pk).await?;
    let mut pks = Vec::new();
    for id in wanted {
        match nodes.iter().find(|n| n.id == *id) {
            Some(n) if n.state != NodeState::LeavingPool => pks.push((n.pk, n.is_dedicated)),
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
    Ok(pks)
}
