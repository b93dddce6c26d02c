//! Pools -> nodes. Each pass compares every pool's nodes with its target and starts the work
//! that closes the gap: provisioning new nodes (container, then start task), removing surplus
//! ones (idle first), removing a deleted pool's nodes and then the pool. Node rows are written
//! before containers are made, so a restarted server finishes what a killed one began.

mod preempted;
mod provision;
mod removal;
mod resize;
mod unknown;
mod unreached;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use chrono::Utc;
use sqlx::PgPool;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::domain::pool::{NodeDeallocationOption, NodeState, PoolState};
use crate::runtime::Runtime;
use crate::store::{self, nodes::NodeRow, pools::PoolRow};

pub struct Allocator {
    db: PgPool,
    runtime: Arc<Runtime>,
    server_id: String,
    wake: super::Wakeups,
    /// Nodes with provisioning under way, and the token that stops it when the node must go.
    provisioning: Mutex<HashMap<String, CancellationToken>>,
    /// Nodes whose removal (or, preempted, their container's) is under way.
    removing: Mutex<HashSet<String>>,
    /// Until when nodes that keep their tasks' files (retaineddata) keep them, by node pk.
    retained: Mutex<HashMap<i64, chrono::DateTime<Utc>>>,
    /// Preempted nodes whose container is gone, by pk and the time they were preempted.
    cleared: Mutex<HashSet<(i64, chrono::DateTime<Utc>)>>,
    /// Nodes this server made `unknown` (their agents silent), until their agents speak again.
    unknown: Mutex<HashSet<String>>,
    /// Nodes on a host that did not answer at adoption, and when adoption set them aside.
    unreached: Mutex<(std::time::Instant, unreached::Unreached)>,
    /// When the added Docker hosts were last read.
    hosts_synced: Mutex<Option<std::time::Instant>>,
    /// The nodes whose containers ran when the runtime was last asked (None if a host did not
    /// answer), and when (see [`Allocator::remake_if_recovered`]).
    running: Mutex<Option<(chrono::DateTime<Utc>, Option<HashSet<String>>)>>,
    /// Bounds how many containers are created or removed at once.
    limit: Arc<Semaphore>,
    /// Fetches start tasks' resource files.
    fetcher: crate::scheduler::task_files::Fetcher,
    /// Installs pools' application packages on their nodes.
    packages: crate::scheduler::packages::Packages,
    /// Runs the tasks: a node goes only once the attempts it killed there are over.
    executor: Arc<crate::scheduler::execute::Executor>,
    /// True once the allocator has tried to adopt the nodes (see [`Allocator::adopted`]).
    adopted: tokio::sync::watch::Sender<bool>,
    cancel: CancellationToken,
}

impl Allocator {
    pub fn new(
        db: PgPool,
        runtime: Arc<Runtime>,
        server_id: String,
        wake: super::Wakeups,
        concurrency: usize,
        fetcher: crate::scheduler::task_files::Fetcher,
        executor: Arc<crate::scheduler::execute::Executor>,
        cancel: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self {
            db: db.clone(),
            runtime: Arc::clone(&runtime),
            server_id,
            wake,
            provisioning: Mutex::default(),
            removing: Mutex::default(),
            retained: Mutex::default(),
            cleared: Mutex::default(),
            unknown: Mutex::default(),
            unreached: Mutex::new((std::time::Instant::now(), unreached::Unreached::new())),
            hosts_synced: Mutex::default(),
            running: Mutex::default(),
            limit: Arc::new(Semaphore::new(concurrency.max(1))),
            packages: crate::scheduler::packages::Packages::new(
                db.clone(),
                Arc::clone(&runtime),
                fetcher.clone(),
            ),
            fetcher,
            executor,
            adopted: tokio::sync::watch::Sender::new(false),
            cancel,
        })
    }

    /// Turns true once the allocator has tried to adopt the nodes: until then a node's row may
    /// name a container that is gone (which adoption makes again), so no task is to be placed.
    pub fn adopted(&self) -> tokio::sync::watch::Receiver<bool> {
        self.adopted.subscribe()
    }

    pub async fn run(self: Arc<Self>) {
        let mut adopting = self.adopt().await;
        // Tasks wait for the first try only: one that failed holds up no node that is well.
        self.adopted.send_replace(true);
        while let Err(e) = adopting {
            tracing::error!(error = %format!("{e:#}"), "adopting the runtime's nodes failed; retrying");
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(self.wake.tick) => {}
            }
            adopting = self.adopt().await;
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
    /// Nodes that may be on a host that does not answer are set aside until it does.
    async fn adopt(&self) -> anyhow::Result<()> {
        let found = self.runtime.list_nodes().await?;
        let rows = store::nodes::list_all(&self.db).await?;
        let known: HashMap<&str, &NodeRow> = rows.iter().map(|n| (n.id.as_str(), n)).collect();
        let mut adopted = 0;
        for node in &found.nodes {
            if known.contains_key(node.node_id.as_str()) {
                adopted += 1;
                continue;
            }
            tracing::info!(node = %node.node_id, "removing a node no pool claims");
            self.runtime.remove_node(&node.node_id).await?;
            store::usage::close(&self.db, &node.node_id, Utc::now()).await?;
        }
        // A frozen node is thawed, and adopted as it was: were it made again, its processes (its
        // tasks, already requeued) would go on beside their next attempts.
        for node in found.nodes.iter().filter(|n| n.paused) {
            tracing::warn!(node = %node.node_id, "the node's container was paused; unpausing it");
            if let Err(e) = self.runtime.thaw_node(&node.node_id).await {
                tracing::warn!(node = %node.node_id, error = %format!("{e:#}"), "unpausing the node failed");
            }
        }
        let running = found.running();
        // A deallocating node's container stops anyway: the next pass goes on with that.
        let missing: Vec<&NodeRow> = rows
            .iter()
            .filter(|row| {
                row.state.is_provisioned()
                    && !matches!(row.state, NodeState::Unusable | NodeState::Deallocating)
                    && !running.contains(row.id.as_str())
            })
            .collect();
        let unreached = self.on_unanswered(&missing, &found.unanswered).await?;
        for row in missing.iter().filter(|r| !unreached.contains_key(&r.id)) {
            self.make_again(row.pk, &row.id).await?;
        }
        // The running nodes' agents' silence counts from now: one that calls a server gone (the
        // last leader, which made the node) and finds no other never speaks here, and its node
        // is lost.
        self.runtime.agents.restart_clocks();
        let adopted_running = running.iter().filter(|node| known.contains_key(*node));
        let learnt = adopted_running.map(|node| self.runtime.learn_agent(node));
        futures_util::future::join_all(learnt).await;
        // Records whose node row is gone (deleted with its pool while no server ran) end now.
        store::usage::close_orphaned(&self.db, Utc::now()).await?;
        self.regain_unknown().await?;
        self.set_aside(unreached).await?;
        tracing::info!(
            adopted,
            runtime = self.runtime.name(),
            "adopted existing nodes"
        );
        Ok(())
    }

    /// Makes a node whose container is gone or stopped again.
    async fn make_again(&self, pk: i64, id: &str) -> anyhow::Result<()> {
        tracing::warn!(node = %id, "the node's container is gone or stopped; making it again");
        // Together: no moment sees the node in use and not billed.
        let mut tx = self.db.begin().await?;
        store::usage::close(&mut *tx, id, Utc::now()).await?;
        store::nodes::set_state(&mut *tx, pk, NodeState::Creating).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn pass(self: &Arc<Self>) -> anyhow::Result<()> {
        self.sync_hosts().await?;
        let silent = self.runtime.silent_nodes();
        self.replace_lost_nodes(&silent.lost).await?;
        // After the hosts are pinged (a host that answers again is cleared of lost nodes).
        let unreached = self.reach_unreached().await?;
        if !unreached.is_empty() {
            self.replace_lost_nodes(&unreached).await?;
        }
        self.track_contact(&silent.unknown).await?;
        let pools = store::pools::list_all(&self.db).await?;
        let all = store::nodes::list_all(&self.db).await?;
        self.forget_cleared(&all);
        // Dedicated nodes get capacity first: no preempted node comes back while one waits.
        let dedicated_waiting = all
            .iter()
            .any(|n| n.is_dedicated && n.state == NodeState::Creating);
        let mut nodes: HashMap<i64, Vec<NodeRow>> = HashMap::new();
        for node in all {
            nodes.entry(node.pool_pk).or_default().push(node);
        }
        for pool in pools {
            let mine = nodes.remove(&pool.pk).unwrap_or_default();
            self.reconcile(&pool, &mine, dedicated_waiting).await?;
        }
        Ok(())
    }

    async fn reconcile(
        self: &Arc<Self>,
        pool: &PoolRow,
        nodes: &[NodeRow],
        dedicated_waiting: bool,
    ) -> anyhow::Result<()> {
        if pool.state == PoolState::Deleting {
            return self.delete_pool(pool, nodes).await;
        }
        self.resize_step(pool, nodes).await?;
        for node in nodes {
            match node.state {
                NodeState::LeavingPool => self.ensure_removal(node, node.retain_data),
                NodeState::Preempted => self.on_preempted(pool, node, dedicated_waiting),
                NodeState::Deallocating => self.ensure_deallocated(node),
                NodeState::Unusable => self.remake_if_recovered(node).await?,
                state if being_provisioned(state) => self.ensure_provisioning(pool, node),
                _ => {}
            }
        }
        Ok(())
    }

    /// A deleted pool's nodes leave (their tasks requeued); once they are gone, the pool goes.
    async fn delete_pool(
        self: &Arc<Self>,
        pool: &PoolRow,
        nodes: &[NodeRow],
    ) -> anyhow::Result<()> {
        if nodes.is_empty() {
            tracing::info!(pool = %pool.id, "pool deleted");
            store::pools::delete(&self.db, pool.pk).await?;
            return Ok(());
        }
        let pks: Vec<i64> = nodes.iter().map(|n| n.pk).collect();
        store::nodes::mark_leaving(&self.db, &pks, false).await?;
        self.stop_tasks_on(&pks, NodeDeallocationOption::Requeue)
            .await?;
        // A deleted pool's nodes go with their tasks' files, whatever they left with.
        for node in nodes {
            self.ensure_removal(node, false);
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
}

/// Whether provisioning has a node to make, start or restart.
fn being_provisioned(state: NodeState) -> bool {
    matches!(
        state,
        NodeState::Creating
            | NodeState::Starting
            | NodeState::WaitingForStartTask
            | NodeState::Rebooting
            | NodeState::Reimaging
    )
}
