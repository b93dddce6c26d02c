//! `POST /pools`: a pool as the request describes it, checked, then inserted.

use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::checks::{
    check_resize_timeout, check_start_task, check_targets, refuse_start_task_container,
};
use super::MetadataItem;
use crate::api::batch::support::{refuse_unsupported, POOL_ADD, VM_CONFIGURATION};
use crate::api::error::{ApiError, ApiResult};
use crate::api::json::AzureJson;
use crate::api::state::Settings;
use crate::api::{created, BaseUrl, Ctx};
use crate::domain::files::{PackageReference, PoolPackage};
use crate::domain::ids::check_id;
use crate::domain::pool::{JobDefaultOrder, NodeCommunicationMode, NodeFillType};
use crate::domain::vm_size::VmSize;
use crate::domain::IsoDuration;
use crate::store::{self, pools::NewPool};

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
    auto_scale_formula: Option<String>,
    auto_scale_evaluation_interval: Option<IsoDuration>,
    start_task: Option<Value>,
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    task_slots_per_node: Option<i32>,
    task_scheduling_policy: Option<SchedulingPolicy>,
    metadata: Option<Vec<MetadataItem>>,
    application_package_references: Option<Vec<PackageReference>>,
    target_node_communication_mode: Option<String>,
    enable_inter_node_communication: Option<bool>,
    resource_tags: Option<Map<String, Value>>,
    upgrade_policy: Option<Value>,
    /// The properties above are those that work; any other is refused or ignored by `POOL_ADD`.
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SchedulingPolicy {
    node_fill_type: Option<String>,
    job_default_order: Option<String>,
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
    shared_gallery_image_id: Option<String>,
    community_gallery_image_id: Option<String>,
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
    let mut conn = app.db.acquire().await?;
    let id = insert(&mut conn, (&app.settings, &app.account), body).await?;
    drop(conn);
    app.wake_allocator();
    let pool = store::pools::get(&app.db, &app.account, &id)
        .await?
        .ok_or_else(|| ApiError::internal("pool vanished after insert"))?;
    Ok(created(
        &format!("{base}/pools/{}", pool.id),
        pool.last_modified,
    ))
}

/// Makes, through `db`, the pool of `account` that `body` describes, checked as a pool add is
/// (a job's auto pool is made this way too). Returns its id.
pub(crate) async fn insert(
    db: &mut sqlx::PgConnection,
    (settings, account): (&Settings, &str),
    mut body: PoolCreate,
) -> ApiResult<String> {
    let packages = body
        .application_package_references
        .take()
        .unwrap_or_default();
    let mut new = new_pool(settings, account, body)?;
    super::checks::refuse_unlinked_storage((&mut *db, account), new.start_task.as_ref()).await?;
    new.application_packages = pool_packages((&mut *db, account), &packages).await?;
    match store::pools::insert(&mut *db, &new).await {
        Err(e) if store::is_unique_violation(&e) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "PoolExists",
            format!("The specified pool {:?} already exists.", new.id),
        )),
        other => Ok(other.map(|()| new.id)?),
    }
}

/// The application packages that `refs` name, resolved against `account`'s applications and
/// checked; None for none. A pool add and a pool's PATCH and updateproperties share it.
pub(super) async fn pool_packages(
    (db, account): (impl sqlx::PgExecutor<'_>, &str),
    refs: &[PackageReference],
) -> ApiResult<Option<sqlx::types::Json<Vec<PoolPackage>>>> {
    if refs.is_empty() {
        return Ok(None);
    }
    let apps = store::applications::list(db, account, None).await?;
    let resolved = crate::api::batch::tasks::checked_packages(refs, &apps)?;
    Ok(Some(sqlx::types::Json(resolved)))
}

/// The pool a create request describes, checked.
pub(crate) fn new_pool(settings: &Settings, account: &str, body: PoolCreate) -> ApiResult<NewPool> {
    let id = body.id.ok_or_else(|| ApiError::missing_property("id"))?;
    check_id(&id).map_err(|why| ApiError::invalid_property("id", &id, why))?;
    refuse_unsupported(POOL_ADD, "", &body.rest)?;
    let (vm_size, size) = vm_size(settings, body.vm_size)?;
    let slots = task_slots(body.task_slots_per_node)?;
    let auto_scale = super::autoscale::at_create(
        body.enable_auto_scale,
        body.auto_scale_formula,
        body.auto_scale_evaluation_interval,
        (
            [
                ("targetDedicatedNodes", body.target_dedicated_nodes),
                ("targetLowPriorityNodes", body.target_low_priority_nodes),
            ],
            slots,
            settings.max_nodes_per_pool,
        ),
    )?;
    let targets = match &auto_scale {
        Some((first, _)) => *first,
        None => check_targets(
            body.target_dedicated_nodes,
            body.target_low_priority_nodes,
            settings.max_nodes_per_pool,
        )?,
    };
    let (fill, order) = scheduling_policy(body.task_scheduling_policy)?;
    let communication = super::checks::communication_mode(body.target_node_communication_mode)?;
    let resize_timeout = check_resize_timeout(body.resize_timeout)?;
    let image = resolve_image(settings, body.virtual_machine_configuration.as_ref())?;
    let start_task = body.start_task.map(check_start_task).transpose()?;
    refuse_start_task_container(
        start_task.as_ref(),
        body.virtual_machine_configuration.as_ref(),
    )?;
    Ok(NewPool {
        account: account.to_string(),
        id,
        display_name: body.display_name,
        vm_size,
        vcpus: size.vcpus,
        memory_mib: size.memory_mib as i64,
        image,
        vm_config: body.virtual_machine_configuration,
        start_task,
        task_slots_per_node: slots,
        node_fill_type: fill,
        job_default_order: order,
        node_communication_mode: communication.unwrap_or(NodeCommunicationMode::Default),
        inter_node_communication: body.enable_inter_node_communication.unwrap_or(false),
        resource_tags: super::checks::resource_tags(body.resource_tags)?,
        manual_upgrades: super::checks::upgrade_policy(body.upgrade_policy)?,
        target_dedicated_nodes: targets.dedicated,
        target_low_priority_nodes: targets.low_priority,
        resize_timeout_ticks: resize_timeout,
        metadata: serde_json::to_value(body.metadata.unwrap_or_default())
            .expect("metadata serializes"),
        auto_scale: auto_scale.map(|(_, kept)| kept),
        // Not made for a service, nor with packages (they are added by a patch).
        billing_plan: None,
        service_pk: None,
        pool_service: false,
        application_packages: None,
    })
}

/// The size's name as the table keeps it, and its CPU and memory.
pub(super) fn vm_size(settings: &Settings, given: Option<String>) -> ApiResult<(String, VmSize)> {
    let vm_size = given.ok_or_else(|| ApiError::missing_property("vmSize"))?;
    settings
        .vm_sizes
        .usable(&vm_size)
        .map_err(|why| ApiError::invalid_property("vmSize", &vm_size, why))
}

pub(super) fn task_slots(given: Option<i32>) -> ApiResult<i32> {
    let slots = given.unwrap_or(1);
    if !(1..=MAX_TASK_SLOTS_PER_NODE).contains(&slots) {
        return Err(ApiError::invalid_property(
            "taskSlotsPerNode",
            slots.to_string(),
            format!("must be between 1 and {MAX_TASK_SLOTS_PER_NODE}"),
        ));
    }
    Ok(slots)
}

/// `taskSchedulingPolicy`: its nodeFillType (default `spread`) and jobDefaultOrder (default
/// `creationtime`, the design's dispatch order; Azure's default is `none`).
fn scheduling_policy(
    policy: Option<SchedulingPolicy>,
) -> ApiResult<(NodeFillType, JobDefaultOrder)> {
    let (fill, order) = match policy {
        Some(policy) => scheduling_changes(policy)?,
        None => (None, None),
    };
    Ok((
        fill.unwrap_or(NodeFillType::Spread),
        order.unwrap_or(JobDefaultOrder::CreationTime),
    ))
}

/// The nodeFillType and jobDefaultOrder a `taskSchedulingPolicy` gives, checked.
pub(super) fn scheduling_changes(
    policy: SchedulingPolicy,
) -> ApiResult<(Option<NodeFillType>, Option<JobDefaultOrder>)> {
    let fill = word(
        policy.node_fill_type,
        ("taskSchedulingPolicy.nodeFillType", "spread or pack"),
        NodeFillType::parse,
    )?;
    let order = word(
        policy.job_default_order,
        (
            "taskSchedulingPolicy.jobDefaultOrder",
            "none or creationtime",
        ),
        JobDefaultOrder::parse,
    )?;
    Ok((fill, order))
}

/// `given`, if any, as one of the words `parse` knows; if not, a 400 naming the property and
/// the words it takes.
fn word<T>(
    given: Option<String>,
    (name, words): (&str, &str),
    parse: fn(&str) -> Option<T>,
) -> ApiResult<Option<T>> {
    given
        .map(|w| {
            parse(&w)
                .ok_or_else(|| ApiError::invalid_property(name, &w, format!("must be {words}")))
        })
        .transpose()
}

/// The Docker image a pool's nodes run. See README, "Node images".
pub(super) fn resolve_image(settings: &Settings, vm_config: Option<&Value>) -> ApiResult<String> {
    let Some(raw) = vm_config else {
        return Ok(settings.default_image.clone());
    };
    if let Some(fields) = raw.as_object() {
        refuse_unsupported(VM_CONFIGURATION, "virtualMachineConfiguration.", fields)?;
    }
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
        let gallery_id = r
            .virtual_machine_image_id
            .or(r.shared_gallery_image_id)
            .or(r.community_gallery_image_id);
        let key = match gallery_id {
            Some(id) => id,
            None => [r.publisher, r.offer, r.sku]
                .map(Option::unwrap_or_default)
                .join("/"),
        };
        return Ok(match settings.image_map.get(&key.to_ascii_lowercase()) {
            Some(image) => image.clone(),
            None => settings.marketplace_image.clone(),
        });
    }
    Ok(settings.default_image.clone())
}
