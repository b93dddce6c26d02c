//! Low-priority nodes that lose their capacity: a preempted node's container is removed, and
//! the node is made again (same id, new disk) once its hold is over and no dedicated node waits
//! for room. A dedicated node that finds no host with room preempts low-priority nodes to make
//! some, as Azure gives dedicated capacity first.

use std::sync::Arc;

use chrono::{Duration, Utc};

use super::Allocator;
use crate::domain::pool::NodeState;
use crate::runtime::NodeSpec;
use crate::store::{self, nodes::NodeRow, pools::PoolRow};

/// How long a preempted node that could not be made again (no room yet) waits to try again.
const RETRY_RECOVERY: Duration = Duration::seconds(10);

impl Allocator {
    /// A preempted node: its provisioning stops, its container goes (once per preemption), and
    /// once its hold is over, no dedicated node waits for room and a host has room for it, it is
    /// made again. Until then it stays `preempted`, rather than showing `creating` each time it
    /// would try.
    pub(super) fn on_preempted(
        self: &Arc<Self>,
        pool: &PoolRow,
        node: &NodeRow,
        dedicated_waiting: bool,
    ) {
        let key = (node.pk, node.state_transition_time);
        if !self.cleared.lock().expect("lock").contains(&key) {
            let (this, preempted) = (Arc::clone(self), node.clone());
            let what = "removing a preempted node's container";
            self.remove_once(&node.id, what, async move {
                this.remove_container(&preempted).await?;
                this.cleared.lock().expect("lock").insert(key);
                Ok(())
            });
            return;
        }
        let held = node.preempted_until.is_some_and(|t| t > Utc::now());
        if held || dedicated_waiting || !self.runtime.has_room(&self.node_spec(pool, node)) {
            return;
        }
        let this = Arc::clone(self);
        let again = (NodeState::Preempted, NodeState::Creating);
        let pk = node.pk;
        tokio::spawn(async move {
            match store::nodes::set_state_from(&this.db, pk, again).await {
                Ok(true) => this.wake.allocate.notify_one(),
                Ok(false) => {}
                Err(e) => tracing::error!(error = %e, "making a preempted node again"),
            }
        });
    }

    /// Forgets the preemptions whose containers went, of nodes `all` (read at the start of a
    /// pass) no longer shows so preempted. Not when the node is made again: a pass that read
    /// the node before then would take it for a new preemption, and remove the container being
    /// made (a local node's agent then found no directory, and the node went `unusable`).
    pub(super) fn forget_cleared(&self, all: &[NodeRow]) {
        let preempted: std::collections::HashSet<(i64, chrono::DateTime<Utc>)> = all
            .iter()
            .filter(|n| n.state == NodeState::Preempted)
            .map(|n| (n.pk, n.state_transition_time))
            .collect();
        self.cleared
            .lock()
            .expect("lock")
            .retain(|key| preempted.contains(key));
    }

    async fn remove_container(&self, node: &NodeRow) -> anyhow::Result<()> {
        let _permit = self.limit.acquire().await?;
        self.runtime.remove_node(&node.id).await?;
        store::nodes::forget_container(&self.db, node.pk).await?;
        // The files of what ran there went with its disk: nothing is retained for them.
        store::tasks::forget_files_on_node(&self.db, node.pk).await?;
        tracing::info!(node = %node.id, "a preempted node's container was removed");
        Ok(())
    }

    /// A preempted node being made again found no room: it stays preempted and tries again
    /// later. Not a resize error: its capacity is simply not back yet.
    pub(super) async fn recovery_failed(&self, node: &NodeRow) -> anyhow::Result<()> {
        store::nodes::preempted_again(&self.db, node.pk, Utc::now() + RETRY_RECOVERY).await?;
        Ok(())
    }

    /// Makes room for the dedicated node `spec` by preempting low-priority nodes (the newest
    /// first, of any pool) on the one host where the fewest must go, and removing their
    /// containers. False when no set of them would make room; true when the node may be made now.
    pub(super) async fn make_room(&self, spec: &NodeSpec) -> anyhow::Result<bool> {
        let mut candidates: Vec<NodeRow> = store::nodes::list_all(&self.db)
            .await?
            .into_iter()
            .filter(|n| {
                !n.is_dedicated && !matches!(n.state, NodeState::LeavingPool | NodeState::Preempted)
            })
            .collect();
        candidates.sort_by_key(|n| std::cmp::Reverse(n.allocation_time));
        let ids: Vec<String> = candidates.iter().map(|n| n.id.clone()).collect();
        let Some(victims) = self.runtime.room_for(spec, &ids) else {
            return Ok(false);
        };
        let pks: Vec<i64> = candidates
            .iter()
            .filter(|n| victims.contains(&n.id))
            .map(|n| n.pk)
            .collect();
        let preempted = crate::ops::preempt::preempt(&self.db, &pks, Utc::now()).await?;
        tracing::info!(node = %spec.node_id, preempted = preempted.len(), "preempted low-priority nodes to make room for a dedicated node");
        for (_, id) in &preempted {
            self.runtime.remove_node(id).await?;
        }
        self.wake.dispatch.notify_one();
        Ok(true)
    }
}
