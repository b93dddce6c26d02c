// Long: every query that reads whole pool rows goes through `select_pools!`, which is local to this file.
//! The pools table.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::PgExecutor;

use crate::domain::files::PoolPackage;
use crate::domain::pool::{
    AllocationState, JobDefaultOrder, NodeCommunicationMode, NodeDeallocationOption, NodeFillType,
    PoolState, Targets,
};

/// A pool's resourceTags: name to value.
pub type ResourceTags = Json<std::collections::BTreeMap<String, String>>;

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct PoolRow {
    pub pk: i64,
    pub account: String,
    pub id: String,
    pub display_name: Option<String>,
    pub vm_size: String,
    pub vcpus: f64,
    pub memory_mib: i64,
    pub image: String,
    pub vm_config: Option<Value>,
    pub start_task: Option<Value>,
    pub task_slots_per_node: i32,
    pub node_fill_type: NodeFillType,
    pub job_default_order: JobDefaultOrder,
    /// targetNodeCommunicationMode: `default` or `simplified`.
    pub node_communication_mode: NodeCommunicationMode,
    /// enableInterNodeCommunication: its nodes are kept on one host, where they reach each other.
    pub inter_node_communication: bool,
    pub resource_tags: Option<ResourceTags>,
    /// upgradePolicy mode `manual` was given.
    pub manual_upgrades: bool,
    pub target_dedicated_nodes: i32,
    pub resize_timeout_ticks: i64,
    pub node_deallocation_option: NodeDeallocationOption,
    pub state: PoolState,
    pub state_transition_time: DateTime<Utc>,
    pub allocation_state: AllocationState,
    pub allocation_state_transition_time: DateTime<Utc>,
    pub resize_errors: Value,
    pub metadata: Value,
    pub creation_time: DateTime<Utc>,
    pub last_modified: DateTime<Utc>,
    /// The plan its compute hours bill to (pools the Pool Service made for a service).
    pub billing_plan: Option<String>,
    pub service_pk: Option<i64>,
    /// Made through the Pool Service (counts against its quotas).
    pub pool_service: bool,
    pub application_packages: Option<Json<Vec<PoolPackage>>>,
    /// Autoscale: whether it is on, the formula and interval (kept when it is turned off), and
    /// the last evaluation as Azure's AutoScaleRun.
    pub enable_auto_scale: bool,
    pub auto_scale_formula: Option<String>,
    pub auto_scale_interval_ticks: Option<i64>,
    pub auto_scale_run: Option<Value>,
    pub target_low_priority_nodes: i32,
    /// Dedicated nodes that exist and are not leaving the pool.
    pub current_dedicated_nodes: i64,
    /// Low-priority nodes that are not leaving the pool, preempted ones included (as Azure
    /// counts them).
    pub current_low_priority_nodes: i64,
}

impl PoolRow {
    pub fn targets(&self) -> Targets {
        Targets::new(self.target_dedicated_nodes, self.target_low_priority_nodes)
    }
}

/// What a client asked for when creating a pool, validated.
#[derive(Debug)]
pub struct NewPool {
    pub account: String,
    pub id: String,
    pub display_name: Option<String>,
    pub vm_size: String,
    pub vcpus: f64,
    pub memory_mib: i64,
    pub image: String,
    pub vm_config: Option<Value>,
    pub start_task: Option<Value>,
    pub task_slots_per_node: i32,
    pub node_fill_type: NodeFillType,
    pub job_default_order: JobDefaultOrder,
    pub node_communication_mode: NodeCommunicationMode,
    pub inter_node_communication: bool,
    pub resource_tags: Option<ResourceTags>,
    pub manual_upgrades: bool,
    pub target_dedicated_nodes: i32,
    pub target_low_priority_nodes: i32,
    pub resize_timeout_ticks: i64,
    pub metadata: Value,
    pub billing_plan: Option<String>,
    pub service_pk: Option<i64>,
    pub pool_service: bool,
    pub application_packages: Option<Json<Vec<PoolPackage>>>,
    /// Autoscale at creation: the formula, its interval (ticks) and its first run.
    pub auto_scale: Option<(String, i64, Value)>,
}

impl NewPool {
    /// A pool the server makes for a service of its own (the Pool Service, the classic BES
    /// environment): `target` dedicated nodes of a size (its name, vCPUs and MiB) running
    /// `image`, one task slot each, with Azure's defaults for everything else. Callers change
    /// what differs with `NewPool { .., ..NewPool::internal(..) }`.
    pub fn internal(
        (account, id): (&str, &str),
        (vm_size, vcpus, memory_mib): (&str, f64, i64),
        image: String,
        target: i32,
    ) -> Self {
        NewPool {
            account: account.to_string(),
            id: id.to_string(),
            display_name: None,
            vm_size: vm_size.to_string(),
            vcpus,
            memory_mib,
            image,
            vm_config: None,
            start_task: None,
            task_slots_per_node: 1,
            node_fill_type: NodeFillType::Spread,
            job_default_order: JobDefaultOrder::CreationTime,
            node_communication_mode: NodeCommunicationMode::Default,
            inter_node_communication: false,
            resource_tags: None,
            manual_upgrades: false,
            target_dedicated_nodes: target,
            target_low_priority_nodes: 0,
            resize_timeout_ticks: crate::domain::IsoDuration::from_secs(
                crate::domain::pool::DEFAULT_RESIZE_TIMEOUT_SECS,
            )
            .ticks(),
            metadata: Value::Array(Vec::new()),
            billing_plan: None,
            service_pk: None,
            pool_service: false,
            application_packages: None,
            auto_scale: None,
        }
    }
}

/// Reads whole `PoolRow`s: `select_pools!("WHERE ...", args)` is the checked query over every
/// column of `pools p`, with the nodes it has.
macro_rules! select_pools {
    ($rest:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            PoolRow,
            r#"SELECT p.pk, p.account, p.id, p.display_name, p.vm_size, p.vcpus, p.memory_mib, p.image, p.vm_config, p.start_task, p.task_slots_per_node, p.node_fill_type AS "node_fill_type: _", p.job_default_order AS "job_default_order: _", p.node_communication_mode AS "node_communication_mode: _", p.inter_node_communication, p.resource_tags AS "resource_tags: _", p.manual_upgrades, p.target_dedicated_nodes, p.resize_timeout_ticks, p.node_deallocation_option AS "node_deallocation_option: _", p.state AS "state: _", p.state_transition_time, p.allocation_state AS "allocation_state: _", p.allocation_state_transition_time, p.resize_errors, p.metadata, p.creation_time, p.last_modified, p.billing_plan, p.service_pk, p.pool_service, p.application_packages AS "application_packages: _",
                p.enable_auto_scale, p.auto_scale_formula, p.auto_scale_interval_ticks, p.auto_scale_run,
                p.target_low_priority_nodes,
                (SELECT count(*) FROM nodes n WHERE n.pool_pk = p.pk AND n.state <> 'leavingpool' AND n.is_dedicated) AS "current_dedicated_nodes!",
                (SELECT count(*) FROM nodes n WHERE n.pool_pk = p.pk AND n.state <> 'leavingpool' AND NOT n.is_dedicated) AS "current_low_priority_nodes!"
               FROM pools p "# + $rest
            $(, $arg)*
        )
    };
}

pub async fn insert(db: impl PgExecutor<'_>, p: &NewPool) -> sqlx::Result<()> {
    // A pool with nodes to make starts out resizing; an empty one is steady at once.
    let allocation = if p.target_dedicated_nodes > 0 || p.target_low_priority_nodes > 0 {
        AllocationState::Resizing
    } else {
        AllocationState::Steady
    };
    sqlx::query!(
        "INSERT INTO pools (account, id, display_name, vm_size, vcpus, memory_mib, image, vm_config, start_task, \
            task_slots_per_node, node_fill_type, target_dedicated_nodes, resize_timeout_ticks, state, \
            state_transition_time, allocation_state, allocation_state_transition_time, metadata, creation_time, last_modified, \
            billing_plan, service_pk, pool_service, application_packages, \
            enable_auto_scale, auto_scale_formula, auto_scale_interval_ticks, auto_scale_run, auto_scale_next, \
            target_low_priority_nodes, job_default_order, node_communication_mode, inter_node_communication, resource_tags, manual_upgrades) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 'active', now(), $14, now(), $15, now(), now(), \
            $16, $17, $18, $19, $20, $21, $22::bigint, $23, now() + make_interval(secs => $22::bigint / 10000000.0), $24, $25, $26, $27, $28, $29)",
        &p.account,
        &p.id,
        &p.display_name as _,
        &p.vm_size,
        p.vcpus,
        p.memory_mib,
        &p.image,
        &p.vm_config as _,
        &p.start_task as _,
        p.task_slots_per_node,
        p.node_fill_type.as_str(),
        p.target_dedicated_nodes,
        p.resize_timeout_ticks,
        allocation.as_str(),
        &p.metadata,
        &p.billing_plan as _,
        p.service_pk,
        p.pool_service,
        &p.application_packages as _,
        p.auto_scale.is_some(),
        p.auto_scale.as_ref().map(|a| a.0.as_str()),
        p.auto_scale.as_ref().map(|a| a.1),
        p.auto_scale.as_ref().map(|a| &a.2),
        p.target_low_priority_nodes,
        p.job_default_order.as_str(),
        p.node_communication_mode.as_str(),
        p.inter_node_communication,
        p.resource_tags.as_ref() as _,
        p.manual_upgrades,
    )
    .execute(db)
    .await?;
    Ok(())
}

pub async fn get(
    db: impl PgExecutor<'_>,
    account: &str,
    id: &str,
) -> sqlx::Result<Option<PoolRow>> {
    select_pools!(
        "WHERE p.account = $1 AND lower(p.id) = lower($2)",
        account,
        id
    )
    .fetch_optional(db)
    .await
}

/// The pools of `pks` that exist, in key order.
pub async fn get_many_by_pk(db: impl PgExecutor<'_>, pks: &[i64]) -> sqlx::Result<Vec<PoolRow>> {
    select_pools!("WHERE p.pk = ANY($1) ORDER BY p.pk", pks)
        .fetch_all(db)
        .await
}

pub async fn get_by_pk(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<Option<PoolRow>> {
    select_pools!("WHERE p.pk = $1", pk)
        .fetch_optional(db)
        .await
}

pub async fn list(db: impl PgExecutor<'_>, account: &str) -> sqlx::Result<Vec<PoolRow>> {
    select_pools!("WHERE p.account = $1 ORDER BY lower(p.id)", account)
        .fetch_all(db)
        .await
}

/// Every pool of every account: what the allocator reconciles.
pub async fn list_all(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<PoolRow>> {
    select_pools!("ORDER BY p.pk").fetch_all(db).await
}

/// Why a change to a pool was refused.
#[derive(Debug, PartialEq)]
pub enum Refused {
    NotFound,
    BeingDeleted,
    NotSteady(AllocationState),
    /// It has nodes, or is to have some, so what shapes them cannot change.
    NotEmpty,
}

/// The pool's state as seen just before a change, for the handler to explain a refusal.
async fn refusal(db: impl PgExecutor<'_>, account: &str, id: &str) -> sqlx::Result<Refused> {
    let row = sqlx::query!(
        r#"SELECT state AS "state: PoolState", allocation_state AS "allocation_state: AllocationState" FROM pools WHERE account = $1 AND lower(id) = lower($2)"#,
        account,
        id,
    )
    .fetch_optional(db)
    .await?;
    Ok(match row {
        None => Refused::NotFound,
        Some(r) if r.state == PoolState::Deleting => Refused::BeingDeleted,
        Some(r) => Refused::NotSteady(r.allocation_state),
    })
}

/// Starts a resize of a steady, active pool. A refusal names the state that refused it: a pool
/// that the allocator made steady between the update and the re-read is resized after all.
pub async fn resize(
    db: &sqlx::PgPool,
    account: &str,
    id: &str,
    targets: Targets,
    resize_timeout_ticks: Option<i64>,
    deallocation: Option<NodeDeallocationOption>,
) -> sqlx::Result<Result<(), Refused>> {
    for _ in 0..3 {
        let done = sqlx::query!(
            "UPDATE pools SET target_dedicated_nodes = $3, target_low_priority_nodes = $6, \
                resize_timeout_ticks = coalesce($4, resize_timeout_ticks), \
                node_deallocation_option = coalesce($5, node_deallocation_option), \
                allocation_state = 'resizing', allocation_state_transition_time = now(), \
                resize_errors = '[]', last_modified = now() \
             WHERE account = $1 AND lower(id) = lower($2) AND state = 'active' AND allocation_state = 'steady'",
            account,
            id,
            targets.dedicated,
            resize_timeout_ticks,
            deallocation.map(|d| d.as_str()),
            targets.low_priority,
        )
        .execute(db)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(Ok(()));
        }
        match refusal(db, account, id).await? {
            Refused::NotSteady(AllocationState::Steady) => continue,
            refused => return Ok(Err(refused)),
        }
    }
    refusal(db, account, id).await.map(Err)
}

/// Asks a resizing pool to stop. A steady pool has nothing to stop, which is not an error.
pub async fn stop_resize(
    db: &sqlx::PgPool,
    account: &str,
    id: &str,
) -> sqlx::Result<Result<(), Refused>> {
    let done = sqlx::query!(
        "UPDATE pools SET allocation_state = CASE WHEN allocation_state = 'resizing' THEN 'stopping' ELSE allocation_state END, \
            allocation_state_transition_time = CASE WHEN allocation_state = 'resizing' THEN now() ELSE allocation_state_transition_time END, \
            last_modified = now() \
         WHERE account = $1 AND lower(id) = lower($2) AND state = 'active'",
        account,
        id,
    )
    .execute(db)
    .await?;
    if done.rows_affected() == 1 {
        return Ok(Ok(()));
    }
    refusal(db, account, id).await.map(Err)
}

/// Marks a pool for deletion; the allocator removes its nodes and then the row.
pub async fn mark_deleting(
    db: &sqlx::PgPool,
    account: &str,
    id: &str,
) -> sqlx::Result<Result<(), Refused>> {
    let done = sqlx::query!(
        "UPDATE pools SET state = 'deleting', state_transition_time = now(), last_modified = now(), \
            target_dedicated_nodes = 0, target_low_priority_nodes = 0 \
         WHERE account = $1 AND lower(id) = lower($2) AND state = 'active'",
        account,
        id,
    )
    .execute(db)
    .await?;
    if done.rows_affected() == 1 {
        return Ok(Ok(()));
    }
    refusal(db, account, id).await.map(Err)
}

/// What a PATCH or an updateproperties changes of a pool; `None` keeps it as it is.
#[derive(Default)]
pub struct PoolChanges<'a> {
    pub metadata: Option<&'a Value>,
    /// `Some(None)` removes the start task.
    pub start_task: Option<Option<&'a Value>>,
    pub display_name: Option<&'a str>,
    pub fill: Option<NodeFillType>,
    pub order: Option<JobDefaultOrder>,
    pub communication: Option<NodeCommunicationMode>,
    /// upgradePolicy mode `manual` given.
    pub manual_upgrades: Option<bool>,
    /// Its application packages; `Some(None)` removes them. Nodes get them when they next start.
    pub packages: Option<Option<&'a Json<Vec<PoolPackage>>>>,
    /// What shapes its nodes: changed only while the pool has none (else `Refused::NotEmpty`).
    pub shape: PoolShape,
}

impl PoolChanges<'_> {
    /// Whether they change what Azure changes only while a pool has no nodes: its shape, its
    /// display name, its scheduling policy and its upgrade policy (else `Refused::NotEmpty`).
    pub fn need_empty_pool(&self) -> bool {
        self.shape.changes()
            || self.display_name.is_some()
            || self.fill.is_some()
            || self.order.is_some()
            || self.manual_upgrades.is_some()
    }
}

/// A pool's node size, task slots and image, as a PATCH changes them.
#[derive(Default)]
pub struct PoolShape {
    /// The size's name, its CPUs and its memory in MiB.
    pub vm_size: Option<(String, f64, i64)>,
    pub task_slots_per_node: Option<i32>,
    /// The image and the virtualMachineConfiguration it came from.
    pub image: Option<(String, Value)>,
    /// enableInterNodeCommunication.
    pub inter_node: Option<bool>,
}

impl PoolShape {
    pub fn changes(&self) -> bool {
        self.vm_size.is_some()
            || self.task_slots_per_node.is_some()
            || self.image.is_some()
            || self.inter_node.is_some()
    }
}

pub async fn update_properties(
    db: &sqlx::PgPool,
    account: &str,
    id: &str,
    changes: PoolChanges<'_>,
) -> sqlx::Result<Result<(), Refused>> {
    let done = sqlx::query!(
        "UPDATE pools SET metadata = coalesce($3, metadata), \
            start_task = CASE WHEN $4 THEN $5 ELSE start_task END, \
            display_name = coalesce($6, display_name), node_fill_type = coalesce($7, node_fill_type), \
            job_default_order = coalesce($8, job_default_order), \
            vm_size = coalesce($9, vm_size), vcpus = coalesce($10, vcpus), memory_mib = coalesce($11, memory_mib), \
            task_slots_per_node = coalesce($12, task_slots_per_node), image = coalesce($13, image), \
            vm_config = CASE WHEN $13::text IS NULL THEN vm_config ELSE $14 END, \
            node_communication_mode = coalesce($16, node_communication_mode), \
            application_packages = CASE WHEN $17 THEN $18 ELSE application_packages END, \
            inter_node_communication = coalesce($19, inter_node_communication), \
            manual_upgrades = coalesce($20, manual_upgrades), last_modified = now() \
         WHERE account = $1 AND lower(id) = lower($2) AND state = 'active' \
           AND (NOT $15 OR (target_dedicated_nodes = 0 AND target_low_priority_nodes = 0 \
                AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.pool_pk = pools.pk)))",
        account,
        id,
        changes.metadata,
        changes.start_task.is_some(),
        changes.start_task.flatten(),
        changes.display_name,
        changes.fill.map(NodeFillType::as_str),
        changes.order.map(JobDefaultOrder::as_str),
        changes.shape.vm_size.as_ref().map(|s| s.0.as_str()),
        changes.shape.vm_size.as_ref().map(|s| s.1),
        changes.shape.vm_size.as_ref().map(|s| s.2),
        changes.shape.task_slots_per_node,
        changes.shape.image.as_ref().map(|i| i.0.as_str()),
        changes.shape.image.as_ref().map(|i| &i.1),
        changes.need_empty_pool(),
        changes.communication.map(NodeCommunicationMode::as_str),
        changes.packages.is_some(),
        changes.packages.flatten() as _,
        changes.shape.inter_node,
        changes.manual_upgrades,
    )
    .execute(db)
    .await?;
    if done.rows_affected() == 1 {
        return Ok(Ok(()));
    }
    Ok(Err(match refusal(db, account, id).await? {
        Refused::NotSteady(_) if changes.need_empty_pool() => Refused::NotEmpty,
        other => other,
    }))
}

pub async fn set_allocation_state(
    db: impl PgExecutor<'_>,
    pk: i64,
    state: AllocationState,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE pools SET allocation_state = $2, allocation_state_transition_time = now(), last_modified = now() \
         WHERE pk = $1 AND allocation_state <> $2",
        pk,
        state.as_str(),
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Adds a resize error (Azure's `ResizeError`: code, message, values).
pub async fn add_resize_error(db: impl PgExecutor<'_>, pk: i64, error: &Value) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE pools SET resize_errors = resize_errors || jsonb_build_array($2::jsonb), last_modified = now() \
         WHERE pk = $1 AND NOT resize_errors @> jsonb_build_array($2::jsonb)",
        pk,
        error,
    )
    .execute(db)
    .await?;
    Ok(())
}

pub async fn delete(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM pools WHERE pk = $1", pk,)
        .execute(db)
        .await?;
    Ok(())
}

/// After `removed` of the pool's nodes were marked leaving: lowers its targets by as many of
/// each kind (never below 0), sets the resize timeout if one is given, and starts a resize with
/// no errors.
pub async fn shrink_for_removed_nodes(
    db: impl PgExecutor<'_>,
    pk: i64,
    removed: Targets,
    resize_timeout_ticks: Option<i64>,
    option: NodeDeallocationOption,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE pools SET target_dedicated_nodes = greatest(target_dedicated_nodes - $2, 0), \
            target_low_priority_nodes = greatest(target_low_priority_nodes - $5, 0), \
            resize_timeout_ticks = coalesce($3, resize_timeout_ticks), node_deallocation_option = $4, \
            allocation_state = 'resizing', allocation_state_transition_time = now(), resize_errors = '[]', last_modified = now() \
         WHERE pk = $1",
        pk,
        removed.dedicated,
        resize_timeout_ticks,
        option.as_str(),
        removed.low_priority,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Serializes the Pool Service's pool creations of `account` until the transaction ends, so its
/// quota check and insert are one step. Takes a transaction.
pub async fn lock_pool_service_account(db: impl PgExecutor<'_>, account: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(hashtext('poolservice:' || $1))",
        account,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// How many Pool Service pools `account` has, not counting those being deleted (its quota's use).
pub async fn count_pool_service(db: impl PgExecutor<'_>, account: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "pools!" FROM pools WHERE account = $1 AND pool_service AND state <> 'deleting'"#,
        account,
    )
    .fetch_one(db)
    .await
}
