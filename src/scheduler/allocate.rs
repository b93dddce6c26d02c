//! Pools -> nodes. Each pass compares every pool's nodes with its target and starts the work
//! that closes the gap: provisioning new nodes (container, then start task), removing surplus
//! ones (idle first), removing a deleted pool's nodes and then the pool. Node rows are written
//! before containers are made, so a restarted server finishes what a killed one began.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use sqlx::PgPool;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::start_task::{self, Placement};
use crate::domain::ids::new_node_id;
use crate::domain::pool::StartTask;
use crate::domain::pool::{AllocationState, NodeDeallocationOption, NodeState, PoolState};
use crate::runtime::{NodeSpec, Runtime};
use crate::store::{self, nodes::NodeRow, pools::PoolRow};

pub struct Allocator {
    db: PgPool,
    runtime: Arc<Runtime>,
    server_id: String,
    wake: super::Wakeups,
    /// Nodes with provisioning under way, and the token that stops it when the node must go.
    provisioning: Mutex<HashMap<String, CancellationToken>>,
    /// Nodes whose removal is under way.
    removing: Mutex<HashSet<String>>,
    /// Bounds how many containers are created or removed at once.
    limit: Arc<Semaphore>,
    cancel: CancellationToken,
}

impl Allocator {
    pub fn new(
        db: PgPool,
        runtime: Arc<Runtime>,
        server_id: String,
        wake: super::Wakeups,
        concurrency: usize,
        cancel: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self {
            db,
            runtime,
            server_id,
            wake,
            provisioning: Mutex::default(),
            removing: Mutex::default(),
            limit: Arc::new(Semaphore::new(concurrency.max(1))),
            cancel,
        })
    }

    pub async fn run(self: Arc<Self>) {
        while let Err(e) = self.adopt().await {
            tracing::error!(error = %format!("{e:#}"), "adopting the runtime's nodes failed; retrying");
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(self.wake.tick) => {}
            }
        }
        loop {
            if let Err(e) = self.pass().await {
                tracing::error!(error = %format!("{e:#}"), "allocation pass failed");
            }
            tokio::select! {
                _ = self.cancel.cancelled() => break,
                _ = self.wake.allocate.notified() => {}
                _ = tokio::time::sleep(self.wake.tick) => {}
            }
        }
        // Provisioning in flight stops here; its rows say where it was, and the next start resumes.
        for token in self.provisioning.lock().expect("lock").values() {
            token.cancel();
        }
    }

    /// After a start: makes the runtime agree with the database. Containers of this installation
    /// that no node row claims (their pool was deleted meanwhile) are removed; nodes whose
    /// container vanished are made again; everything else is adopted as it is, usage records and all.
    async fn adopt(&self) -> anyhow::Result<()> {
        let found = self.runtime.list_nodes(&self.server_id).await?;
        let rows = store::nodes::list_all(&self.db).await?;
        let known: HashMap<&str, &NodeRow> = rows.iter().map(|n| (n.id.as_str(), n)).collect();
        let now = Utc::now();
        let mut adopted = 0;
        for node in &found {
            if known.contains_key(node.node_id.as_str()) {
                adopted += 1;
                continue;
            }
            tracing::info!(node = %node.node_id, "removing a node no pool claims");
            self.runtime
                .remove_node(&self.server_id, &node.node_id)
                .await?;
            store::usage::close(&self.db, &node.node_id, now).await?;
        }
        let running: HashSet<&str> = found
            .iter()
            .filter(|n| n.running)
            .map(|n| n.node_id.as_str())
            .collect();
        for row in &rows {
            let state = row.node_state();
            if state.is_provisioned()
                && state != NodeState::Unusable
                && !running.contains(row.id.as_str())
            {
                tracing::warn!(node = %row.id, "the node's container is gone or stopped; making it again");
                store::usage::close(&self.db, &row.id, now).await?;
                store::nodes::set_state(&self.db, row.pk, NodeState::Creating).await?;
            }
        }
        // Records whose node row is gone (deleted with its pool while no server ran) end now.
        store::usage::close_orphaned(&self.db, now).await?;
        tracing::info!(
            adopted,
            runtime = self.runtime.name(),
            "adopted existing nodes"
        );
        Ok(())
    }

    async fn pass(self: &Arc<Self>) -> anyhow::Result<()> {
        let pools = store::pools::list_all(&self.db).await?;
        let mut nodes: HashMap<i64, Vec<NodeRow>> = HashMap::new();
        for node in store::nodes::list_all(&self.db).await? {
            nodes.entry(node.pool_pk).or_default().push(node);
        }
        for pool in pools {
            let mine = nodes.remove(&pool.pk).unwrap_or_default();
            self.reconcile(&pool, &mine).await?;
        }
        Ok(())
    }

    async fn reconcile(self: &Arc<Self>, pool: &PoolRow, nodes: &[NodeRow]) -> anyhow::Result<()> {
        if pool.state == PoolState::Deleting.as_str() {
            if nodes.is_empty() {
                tracing::info!(pool = %pool.id, "pool deleted");
                store::pools::delete(&self.db, pool.pk).await?;
                return Ok(());
            }
            let pks: Vec<i64> = nodes.iter().map(|n| n.pk).collect();
            store::nodes::mark_leaving(&self.db, &pks).await?;
            self.stop_tasks_on(&pks, NodeDeallocationOption::Requeue)
                .await?;
            for node in nodes {
                self.ensure_removal(&node.id, node.pk);
            }
            return Ok(());
        }
        let alive: Vec<&NodeRow> = nodes
            .iter()
            .filter(|n| n.node_state() != NodeState::LeavingPool)
            .collect();
        let target = pool.target_dedicated_nodes as usize;
        // A resize is done when no node is still being made and none is still leaving: the
        // poller's "steady" then means the containers really are there, or gone.
        let creating = alive.iter().any(|n| n.node_state() == NodeState::Creating)
            || nodes
                .iter()
                .any(|n| n.node_state() == NodeState::LeavingPool);
        match AllocationState::parse(&pool.allocation_state) {
            Some(AllocationState::Resizing) => {
                let timeout = Duration::from_micros((pool.resize_timeout_ticks / 10).max(0) as u64);
                let waited = (Utc::now() - pool.allocation_state_transition_time)
                    .to_std()
                    .unwrap_or_default();
                if waited > timeout && alive.len() != target {
                    let error = json!({
                        "code": "AllocationTimedout",
                        "message": format!("Desired number of dedicated nodes could not be allocated as the resize timeout was reached ({} of {target} nodes)", alive.len()),
                    });
                    store::pools::add_resize_error(&self.db, pool.pk, &error).await?;
                    store::pools::set_allocation_state(&self.db, pool.pk, AllocationState::Steady)
                        .await?;
                } else if alive.len() < target {
                    let ids: Vec<String> = (alive.len()..target).map(|_| new_node_id()).collect();
                    tracing::info!(pool = %pool.id, count = ids.len(), "adding nodes");
                    store::nodes::insert_creating(&self.db, pool.pk, &ids).await?;
                    self.wake.allocate.notify_one();
                } else if alive.len() > target {
                    let mut candidates = alive.clone();
                    // Nodes doing nothing useful go first, and among equals the newest.
                    candidates.sort_by_key(|n| {
                        (
                            n.node_state().removal_rank(),
                            std::cmp::Reverse(n.allocation_time),
                        )
                    });
                    let pks: Vec<i64> = candidates
                        .iter()
                        .take(alive.len() - target)
                        .map(|n| n.pk)
                        .collect();
                    tracing::info!(pool = %pool.id, count = pks.len(), "removing nodes");
                    store::nodes::mark_leaving(&self.db, &pks).await?;
                    let option = NodeDeallocationOption::parse(&pool.node_deallocation_option)
                        .unwrap_or(NodeDeallocationOption::Requeue);
                    self.stop_tasks_on(&pks, option).await?;
                    self.wake.allocate.notify_one();
                } else if !creating {
                    store::pools::set_allocation_state(&self.db, pool.pk, AllocationState::Steady)
                        .await?;
                }
            }
            Some(AllocationState::Stopping) if !creating => {
                store::pools::set_allocation_state(&self.db, pool.pk, AllocationState::Steady)
                    .await?;
            }
            _ => {}
        }
        for node in nodes {
            match node.node_state() {
                NodeState::LeavingPool => self.ensure_removal(&node.id, node.pk),
                NodeState::Creating
                | NodeState::Starting
                | NodeState::WaitingForStartTask
                | NodeState::Rebooting => self.ensure_provisioning(pool, node),
                _ => {}
            }
        }
        Ok(())
    }

    fn ensure_provisioning(self: &Arc<Self>, pool: &PoolRow, node: &NodeRow) {
        let token = {
            let mut map = self.provisioning.lock().expect("lock");
            if map.contains_key(&node.id) {
                return;
            }
            let token = self.cancel.child_token();
            map.insert(node.id.clone(), token.clone());
            token
        };
        let this = Arc::clone(self);
        let (pool, node) = (pool.clone(), node.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                r = this.provision(&pool, &node) => if let Err(e) = r {
                    tracing::error!(node = %node.id, error = %format!("{e:#}"), "provisioning failed");
                }
            }
            this.provisioning.lock().expect("lock").remove(&node.id);
            this.wake.allocate.notify_one();
        });
    }

    fn ensure_removal(self: &Arc<Self>, node_id: &str, node_pk: i64) {
        // A node that is still being provisioned stops first; the next pass removes it.
        if let Some(token) = self.provisioning.lock().expect("lock").get(node_id) {
            token.cancel();
            return;
        }
        if !self
            .removing
            .lock()
            .expect("lock")
            .insert(node_id.to_string())
        {
            return;
        }
        let this = Arc::clone(self);
        let node_id = node_id.to_string();
        tokio::spawn(async move {
            if let Err(e) = this.remove(&node_id, node_pk).await {
                tracing::error!(node = %node_id, error = %format!("{e:#}"), "removing the node failed; will retry");
            }
            this.removing.lock().expect("lock").remove(&node_id);
            this.wake.allocate.notify_one();
        });
    }

    /// What happens to the tasks running on nodes that leave: requeued (the default), ended as
    /// failed (terminate), or left to finish before the node goes (taskcompletion, retaineddata).
    async fn stop_tasks_on(
        &self,
        node_pks: &[i64],
        option: NodeDeallocationOption,
    ) -> anyhow::Result<()> {
        let mut tx = self.db.begin().await?;
        crate::ops::jobs::stop_tasks_on_nodes(&mut tx, node_pks, option).await?;
        tx.commit().await?;
        self.wake.dispatch.notify_one();
        Ok(())
    }

    async fn remove(&self, node_id: &str, node_pk: i64) -> anyhow::Result<()> {
        // A node left to finish its tasks (taskcompletion) goes when the last one ends.
        let busy = store::tasks::any_running_on_node(&self.db, node_pk).await?;
        if busy {
            return Ok(());
        }
        let _permit = self.limit.acquire().await?;
        self.runtime.remove_node(&self.server_id, node_id).await?;
        let mut tx = self.db.begin().await?;
        store::usage::close(&mut *tx, node_id, Utc::now()).await?;
        store::nodes::delete(&mut *tx, node_pk).await?;
        tx.commit().await?;
        tracing::info!(node = %node_id, "node removed");
        Ok(())
    }

    async fn provision(&self, pool: &PoolRow, node: &NodeRow) -> anyhow::Result<()> {
        // The pass that asked for this read its rows before an earlier provisioning of the same
        // node may have finished: go by the node as it is now, or a start task would run twice.
        let Some(node) = store::nodes::get_by_pk(&self.db, node.pk).await? else {
            return Ok(());
        };
        let node = &node;
        if !matches!(
            node.node_state(),
            NodeState::Creating
                | NodeState::Starting
                | NodeState::WaitingForStartTask
                | NodeState::Rebooting
        ) {
            return Ok(());
        }
        let spec = NodeSpec {
            server_id: self.server_id.clone(),
            account: pool.account.clone(),
            pool_id: pool.id.clone(),
            node_id: node.id.clone(),
            image: pool.image.clone(),
            vcpus: pool.vcpus,
            memory_mib: pool.memory_mib,
        };
        let created = {
            let _permit = self.limit.acquire().await?;
            if node.node_state() == NodeState::Rebooting {
                // A reboot restarts the node (its disk, the node directory, stays) and reruns the start task.
                if let Err(e) = self.runtime.restart_node(&self.server_id, &node.id).await {
                    tracing::warn!(node = %node.id, error = %format!("{e:#}"), "restarting the node failed; making it again");
                }
            }
            self.runtime.create_node(&spec).await
        };
        let handle = match created {
            Ok(handle) => handle,
            Err(e) => {
                tracing::warn!(node = %node.id, code = e.code, message = %e.message, "node could not be created");
                let error = json!({"code": e.code, "message": e.message});
                store::nodes::set_unusable(&self.db, node.pk, &json!([error])).await?;
                store::pools::add_resize_error(&self.db, pool.pk, &error).await?;
                return Ok(());
            }
        };
        let start_task: Option<StartTask> = pool
            .start_task
            .clone()
            .map(serde_json::from_value)
            .transpose()?;
        // Azure's default: the node waits for the start task unless told otherwise.
        let wait = start_task
            .as_ref()
            .is_some_and(|t| t.wait_for_success.unwrap_or(true));
        let state = if wait {
            NodeState::WaitingForStartTask
        } else {
            NodeState::Idle
        };
        let mut tx = self.db.begin().await?;
        let still_wanted = store::nodes::set_started(
            &mut *tx,
            node.pk,
            state,
            &handle.container_id,
            &handle.ip_address,
        )
        .await?;
        if still_wanted {
            store::usage::open(&mut *tx, node.pk, Utc::now()).await?;
        }
        tx.commit().await?;
        if !still_wanted {
            return Ok(());
        }
        tracing::info!(node = %node.id, pool = %pool.id, %state, "node started");
        let Some(task) = start_task else {
            return Ok(());
        };
        let at = Placement {
            server_id: &self.server_id,
            account: &pool.account,
            pool_id: &pool.id,
            node_id: &node.id,
        };
        let db = &self.db;
        let outcome = start_task::run(&self.runtime, &at, &task, |info| async move {
            if let Err(e) = store::nodes::set_start_task_info(db, node.pk, &info).await {
                tracing::warn!(error = %e, "recording the start task's progress");
            }
        })
        .await;
        store::nodes::set_start_task_info(&self.db, node.pk, &outcome.info).await?;
        if wait {
            let next = if outcome.succeeded {
                NodeState::Idle
            } else {
                NodeState::StartTaskFailed
            };
            store::nodes::set_state(&self.db, node.pk, next).await?;
        }
        Ok(())
    }
}
