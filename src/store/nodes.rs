//! The nodes table.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::PgExecutor;

use crate::domain::files::PoolPackage;
use crate::domain::pool::{JobDefaultOrder, NodeFillType, NodeState};

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct NodeRow {
    pub pk: i64,
    pub pool_pk: i64,
    pub id: String,
    pub state: NodeState,
    pub state_transition_time: DateTime<Utc>,
    pub allocation_time: DateTime<Utc>,
    pub last_boot_time: Option<DateTime<Utc>>,
    pub ip_address: Option<String>,
    pub container_id: Option<String>,
    pub errors: Value,
    pub start_task_info: Option<Value>,
    pub running_task_slots: i32,
    pub running_tasks: i32,
    pub total_tasks_run: i32,
    pub total_tasks_succeeded: i32,
    /// Azure's schedulingState `disabled`: the node takes no new tasks.
    pub scheduling_disabled: bool,
    /// Azure's isDedicated: false for a low-priority (spot) node.
    pub is_dedicated: bool,
    /// A preempted node is not made again before this.
    pub preempted_until: Option<DateTime<Utc>>,
    /// It leaves (or is reimaged) with `retaineddata`: its disk stays until the retention of
    /// its tasks' files has run out.
    pub retain_data: bool,
}

impl NodeRow {
    /// Its running tasks and the slots they take, of its pool's `slots` per node; tasks held
    /// beyond its slots (`--tasks-ahead-per-slot`, single-slot tasks all) are not counted.
    pub fn running_of(&self, slots: i32) -> (i32, i32) {
        let waiting = (self.running_task_slots - slots).max(0);
        (
            self.running_tasks - waiting,
            self.running_task_slots - waiting,
        )
    }
}

/// Reads whole `NodeRow`s: `select_nodes!("WHERE ...", args)` is the checked query over every column.
macro_rules! select_nodes {
    ($rest:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            NodeRow,
            r#"SELECT pk, pool_pk, id, state AS "state: _", state_transition_time, allocation_time, last_boot_time, ip_address, container_id, errors, start_task_info, running_task_slots, running_tasks, total_tasks_run, total_tasks_succeeded, scheduling_disabled, is_dedicated, preempted_until, retain_data FROM nodes "# + $rest
            $(, $arg)*
        )
    };
}

/// Records new nodes as `creating`, before any container exists, so a crash between the two
/// leaves a row the next start completes rather than a container nobody knows of.
pub async fn insert_creating(
    db: impl PgExecutor<'_>,
    pool_pk: i64,
    ids: &[String],
    dedicated: bool,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO nodes (pool_pk, id, state, state_transition_time, allocation_time, is_dedicated) \
         SELECT $1, unnest($2::text[]), 'creating', now(), now(), $3",
        pool_pk,
        ids,
        dedicated,
    )
    .execute(db)
    .await?;
    Ok(())
}

pub async fn list_for_pool(db: impl PgExecutor<'_>, pool_pk: i64) -> sqlx::Result<Vec<NodeRow>> {
    select_nodes!("WHERE pool_pk = $1 ORDER BY allocation_time, id", pool_pk,)
        .fetch_all(db)
        .await
}

pub async fn list_all(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<NodeRow>> {
    select_nodes!("ORDER BY pk",).fetch_all(db).await
}

pub async fn get(db: impl PgExecutor<'_>, pool_pk: i64, id: &str) -> sqlx::Result<Option<NodeRow>> {
    select_nodes!("WHERE pool_pk = $1 AND id = $2", pool_pk, id,)
        .fetch_optional(db)
        .await
}

pub async fn get_by_pk(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<Option<NodeRow>> {
    select_nodes!("WHERE pk = $1", pk,).fetch_optional(db).await
}

/// Moves a node to `state` unless it is already leaving the pool (a removal always wins). A
/// preempted node only leaves that state to be made again (`creating`): provisioning under way
/// when it was preempted must not bring it back.
/// Whether the node keeps its disk until its tasks' files' retention runs out, when it is
/// reimaged (see [`NodeRow::retain_data`]).
pub async fn set_retain_data(db: impl PgExecutor<'_>, pk: i64, retain: bool) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE nodes SET retain_data = $2 WHERE pk = $1",
        pk,
        retain
    )
    .execute(db)
    .await
    .map(drop)
}

pub async fn set_state(db: impl PgExecutor<'_>, pk: i64, state: NodeState) -> sqlx::Result<bool> {
    // A node whose scheduling is disabled is `offline` where it would be idle (migration 48).
    let done = sqlx::query!(
        "UPDATE nodes SET state = $2, state_transition_time = now() \
         WHERE pk = $1 AND state <> 'leavingpool' AND state <> $2 \
           AND (state <> 'preempted' OR $2 = 'creating')",
        pk,
        state.as_str(),
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The container is up: record where it is, when it booted, and the application packages
/// installed on it.
pub async fn set_started(
    db: impl PgExecutor<'_>,
    pk: i64,
    state: NodeState,
    (container_id, ip_address, host): (&str, &str, &str),
    packages: Option<&Json<Vec<PoolPackage>>>,
) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "UPDATE nodes SET state = $2, state_transition_time = now(), container_id = $3, ip_address = $4, \
            host = $5, last_boot_time = now(), errors = '[]', application_packages = $6 \
         WHERE pk = $1 AND state NOT IN ('leavingpool', 'preempted')",
        pk,
        state.as_str(),
        container_id,
        ip_address,
        host,
        packages as _,
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Moves the node from `from` to `to` (a new node whose container is up starts, a
/// deallocating node whose container stopped, a deallocated node that starts); false if it
/// was not in `from`.
pub async fn set_state_from(
    db: impl PgExecutor<'_>,
    pk: i64,
    (from, to): (NodeState, NodeState),
) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "UPDATE nodes SET state = $3, state_transition_time = now() WHERE pk = $1 AND state = $2",
        pk,
        from.as_str(),
        to.as_str(),
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The node could not be made: it is unusable and says why.
pub async fn set_unusable(db: impl PgExecutor<'_>, pk: i64, errors: &Value) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE nodes SET state = 'unusable', state_transition_time = now(), errors = $2 \
         WHERE pk = $1 AND state NOT IN ('leavingpool', 'preempted')",
        pk,
        errors,
    )
    .execute(db)
    .await?;
    Ok(())
}

pub async fn set_start_task_info(
    db: impl PgExecutor<'_>,
    pk: i64,
    info: &Value,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE nodes SET start_task_info = $2 WHERE pk = $1",
        pk,
        info
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Marks nodes as leaving; returns those that were not already.
pub async fn mark_leaving(
    db: impl PgExecutor<'_>,
    pks: &[i64],
    retain_data: bool,
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        "UPDATE nodes SET state = 'leavingpool', state_transition_time = now(), retain_data = $2 \
         WHERE pk = ANY($1) AND state <> 'leavingpool' RETURNING pk",
        pks,
        retain_data,
    )
    .fetch_all(db)
    .await
}

/// Preempts low-priority nodes: each that is not leaving or preempted already goes `preempted`,
/// not to be made again before `until`. Returns the pks and ids of those preempted.
pub async fn preempt(
    db: impl PgExecutor<'_>,
    pks: &[i64],
    until: DateTime<Utc>,
) -> sqlx::Result<Vec<(i64, String)>> {
    let rows = sqlx::query!(
        "UPDATE nodes SET state = 'preempted', state_transition_time = now(), preempted_until = $2, \
            errors = '[]' \
         WHERE pk = ANY($1) AND NOT is_dedicated AND state NOT IN ('leavingpool', 'preempted') \
         RETURNING pk, id",
        pks,
        until,
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.pk, r.id)).collect())
}

/// A preempted node that could not be made again (no capacity yet) waits until `until`.
pub async fn preempted_again(
    db: impl PgExecutor<'_>,
    pk: i64,
    until: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE nodes SET state = 'preempted', state_transition_time = now(), preempted_until = $2 \
         WHERE pk = $1 AND state <> 'leavingpool'",
        pk,
        until,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The node's container is gone (a preempted node's): it has no address until it is made again.
pub async fn forget_container(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE nodes SET container_id = NULL, ip_address = NULL WHERE pk = $1",
        pk
    )
    .execute(db)
    .await?;
    Ok(())
}

pub async fn delete(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM nodes WHERE pk = $1", pk)
        .execute(db)
        .await?;
    Ok(())
}

/// A usable node with free slots, with what dispatch needs of its pool.
#[derive(sqlx::FromRow)]
pub struct FreeSlots {
    pub node_pk: i64,
    pub node_id: String,
    pub pool_pk: i64,
    pub pool_id: String,
    pub account: String,
    pub free: i32,
    /// The pool's task slots per node.
    pub slots: i32,
    pub fill: NodeFillType,
    pub order: JobDefaultOrder,
    pub dedicated: bool,
}

/// Locks every usable node (of an active pool) with room for tasks and returns its free slots
/// (below zero on a node holding tasks ahead), in node order: room until its tasks fill `1 +
/// ahead` times its slots (`ahead`: `--tasks-ahead-per-slot`).
pub async fn lock_free_slots(db: impl PgExecutor<'_>, ahead: i32) -> sqlx::Result<Vec<FreeSlots>> {
    sqlx::query_as!(
        FreeSlots,
        r#"SELECT n.pk AS node_pk, n.id AS node_id, p.pk AS pool_pk, p.id AS pool_id, p.account,
                p.task_slots_per_node - n.running_task_slots AS "free!", p.task_slots_per_node AS slots,
                p.node_fill_type AS "fill: _", p.job_default_order AS "order: _", n.is_dedicated AS dedicated
         FROM nodes n JOIN pools p ON p.pk = n.pool_pk
         WHERE n.state IN ('idle', 'running') AND p.state = 'active'
           AND n.running_task_slots < p.task_slots_per_node * (1 + $1::int)
           AND NOT n.scheduling_disabled
         ORDER BY n.pk FOR UPDATE OF n"#,
        ahead,
    )
    .fetch_all(db)
    .await
}

/// Locks, in node order, the nodes `freeing` names (a batch of ended attempts frees slots on
/// them) with every node [`lock_free_slots`] would lock (with the same `ahead`): one
/// transaction can then record the batch and fill the slots, having taken every node lock it
/// needs at once, in the order every other writer takes them.
pub async fn lock_for_pass(
    db: impl PgExecutor<'_>,
    freeing: &[i64],
    ahead: i32,
) -> sqlx::Result<()> {
    sqlx::query!(
        r#"SELECT n.pk FROM nodes n JOIN pools p ON p.pk = n.pool_pk
         WHERE n.pk = ANY($1)
            OR (n.state IN ('idle', 'running') AND p.state = 'active'
                AND n.running_task_slots < p.task_slots_per_node * (1 + $2::int)
                AND NOT n.scheduling_disabled)
         ORDER BY n.pk FOR UPDATE OF n"#,
        freeing,
        ahead,
    )
    .fetch_all(db)
    .await?;
    Ok(())
}

/// Turns a node's task scheduling off or on; false if the node is gone.
pub async fn set_scheduling(
    db: impl PgExecutor<'_>,
    pk: i64,
    disabled: bool,
) -> sqlx::Result<bool> {
    // An idle node whose scheduling is disabled is `offline`, as on Azure, and idle again when
    // it is enabled (the trigger nodes_offline_when_disabled, migration 48, keeps the rule).
    let done = sqlx::query!(
        "UPDATE nodes SET scheduling_disabled = $2 WHERE pk = $1",
        pk,
        disabled,
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// A node as the operator's reclaim route sees it: with its pool, account and host.
#[derive(Debug, sqlx::FromRow)]
pub struct HostedNode {
    pub pk: i64,
    pub id: String,
    pub is_dedicated: bool,
    pub state: NodeState,
    pub pool_id: String,
    pub account: String,
    pub host: Option<String>,
}

/// The nodes named by `ids`, of any pool and account.
pub async fn hosted_by_ids(
    db: impl PgExecutor<'_>,
    ids: &[String],
) -> sqlx::Result<Vec<HostedNode>> {
    sqlx::query_as!(
        HostedNode,
        r#"SELECT n.pk, n.id, n.is_dedicated, n.state AS "state: _", p.id AS pool_id, p.account, n.host
         FROM nodes n JOIN pools p ON p.pk = n.pool_pk WHERE n.id = ANY($1) ORDER BY n.pk"#,
        ids,
    )
    .fetch_all(db)
    .await
}

/// Up to `count` low-priority nodes that may be preempted (neither leaving nor preempted), the
/// newest first, on `host` if one is given.
pub async fn preemptible(
    db: impl PgExecutor<'_>,
    host: Option<&str>,
    count: i64,
) -> sqlx::Result<Vec<HostedNode>> {
    sqlx::query_as!(
        HostedNode,
        r#"SELECT n.pk, n.id, n.is_dedicated, n.state AS "state: _", p.id AS pool_id, p.account, n.host
         FROM nodes n JOIN pools p ON p.pk = n.pool_pk
         WHERE NOT n.is_dedicated AND n.state NOT IN ('leavingpool', 'preempted')
           AND ($1::text IS NULL OR n.host = $1)
         ORDER BY n.allocation_time DESC, n.pk DESC LIMIT $2"#,
        host,
        count,
    )
    .fetch_all(db)
    .await
}
