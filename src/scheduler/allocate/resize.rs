//! Resizing a pool: nodes added or removed one pass at a time until the pool has its target,
//! then a steady allocation state; or a resize error when the resize timeout passes first.

use std::time::Duration;

use chrono::Utc;
use serde_json::json;

use super::Allocator;
use crate::domain::ids::new_node_id;
use crate::domain::pool::{AllocationState, NodeDeallocationOption, NodeState};
use crate::ops;
use crate::store::{self, nodes::NodeRow, pools::PoolRow};

impl Allocator {
    /// Moves the pool a step toward its targets (dedicated and low-priority nodes, each kind on
    /// its own) if it is resizing, and makes it steady once it is there. Preempted nodes count
    /// toward the low-priority target, as Azure counts them: they come back by themselves.
    pub(super) async fn resize_step(
        &self,
        pool: &PoolRow,
        nodes: &[NodeRow],
    ) -> anyhow::Result<()> {
        let alive: Vec<&NodeRow> = nodes
            .iter()
            .filter(|n| n.state != NodeState::LeavingPool)
            .collect();
        let (dedicated, low_priority): (Vec<&NodeRow>, Vec<&NodeRow>) =
            alive.iter().partition(|n| n.is_dedicated);
        let targets = pool.targets();
        let mut kinds = [
            (dedicated, targets.dedicated as usize, true),
            (low_priority, targets.low_priority as usize, false),
        ];
        if pool.allocation_state == AllocationState::Resizing {
            self.hold_back_growth(pool, &mut kinds).await?;
        }
        // A resize is done when no node is still being made and none is still leaving: the
        // poller's "steady" then means the containers really are there, or gone.
        let creating = alive
            .iter()
            .any(|n| matches!(n.state, NodeState::Creating | NodeState::Starting))
            || nodes.iter().any(|n| n.state == NodeState::LeavingPool);
        let off_target = kinds.iter().any(|(have, want, _)| have.len() != *want);
        match pool.allocation_state {
            AllocationState::Resizing if off_target && resize_timed_out(pool) => {
                self.give_up_resize(pool, &kinds).await?
            }
            AllocationState::Resizing if off_target => {
                for (have, want, dedicated) in kinds {
                    if have.len() < want {
                        self.add_nodes(pool, want - have.len(), dedicated).await?;
                    } else if have.len() > want {
                        self.remove_surplus(pool, have, want).await?;
                    }
                }
            }
            AllocationState::Resizing | AllocationState::Stopping if !creating => {
                self.steady(pool).await?
            }
            _ => {}
        }
        Ok(())
    }

    /// A pool whose budget is used up does not grow (docs/metering.md, "Budgets"): each kind
    /// of node short of its target stays as it is, with the budget's `BudgetExceeded` as the
    /// resize error, and the pool goes steady once any shrinking is done.
    async fn hold_back_growth(
        &self,
        pool: &PoolRow,
        kinds: &mut [(Vec<&NodeRow>, usize, bool); 2],
    ) -> anyhow::Result<()> {
        if kinds.iter().all(|(have, want, _)| have.len() >= *want) {
            return Ok(());
        }
        let refused =
            ops::budgets::growth_refused(&self.db, &pool.account, pool.billing_plan.as_deref())
                .await?;
        let Some(error) = refused else {
            return Ok(());
        };
        tracing::info!(pool = %pool.id, "a used-up budget holds the pool at its size");
        store::pools::add_resize_error(&self.db, pool.pk, &error).await?;
        for (have, want, _) in kinds.iter_mut() {
            *want = (*want).min(have.len());
        }
        Ok(())
    }

    async fn steady(&self, pool: &PoolRow) -> sqlx::Result<()> {
        store::pools::set_allocation_state(&self.db, pool.pk, AllocationState::Steady).await
    }

    /// The resize timeout passed before each kind of node reached its target: a resize error,
    /// and the pool stays as it is.
    async fn give_up_resize(
        &self,
        pool: &PoolRow,
        kinds: &[(Vec<&NodeRow>, usize, bool); 2],
    ) -> anyhow::Result<()> {
        for (have, want, dedicated) in kinds.iter().filter(|(h, w, _)| h.len() != *w) {
            let kind = if *dedicated {
                "dedicated"
            } else {
                "low-priority"
            };
            let error = json!({
                "code": "AllocationTimedout",
                "message": format!("Desired number of {kind} nodes could not be allocated as the resize timeout was reached ({} of {want} nodes)", have.len()),
            });
            store::pools::add_resize_error(&self.db, pool.pk, &error).await?;
        }
        self.steady(pool).await?;
        Ok(())
    }

    /// New node rows, dedicated or low-priority; the next pass provisions them.
    async fn add_nodes(&self, pool: &PoolRow, count: usize, dedicated: bool) -> anyhow::Result<()> {
        let ids: Vec<String> = (0..count).map(|_| new_node_id()).collect();
        tracing::info!(pool = %pool.id, count = ids.len(), dedicated, "adding nodes");
        store::nodes::insert_creating(&self.db, pool.pk, &ids, dedicated).await?;
        self.wake.allocate.notify_one();
        Ok(())
    }

    /// Marks the nodes beyond the target as leaving, and deals with their tasks as the pool's
    /// nodeDeallocationOption says; the next pass removes them.
    async fn remove_surplus(
        &self,
        pool: &PoolRow,
        mut alive: Vec<&NodeRow>,
        target: usize,
    ) -> anyhow::Result<()> {
        let surplus = alive.len() - target;
        // Nodes doing nothing useful go first, and among equals the newest.
        alive.sort_by_key(|n| (n.state.removal_rank(), std::cmp::Reverse(n.allocation_time)));
        let pks: Vec<i64> = alive.iter().take(surplus).map(|n| n.pk).collect();
        tracing::info!(pool = %pool.id, count = pks.len(), "removing nodes");
        let retain = pool.node_deallocation_option == NodeDeallocationOption::RetainedData;
        store::nodes::mark_leaving(&self.db, &pks, retain).await?;
        self.stop_tasks_on(&pks, pool.node_deallocation_option)
            .await?;
        self.wake.allocate.notify_one();
        Ok(())
    }
}

impl Allocator {
    /// Gives the runtime the hosts added with `batchpool host add`, at most every 2 s.
    pub(super) async fn sync_hosts(&self) -> anyhow::Result<()> {
        {
            let mut last = self.hosts_synced.lock().expect("lock");
            if last.is_some_and(|t| t.elapsed() < Duration::from_secs(2)) {
                return Ok(());
            }
            *last = Some(std::time::Instant::now());
        }
        let hosts = store::hosts::list(&self.db).await?;
        self.runtime.sync_hosts(hosts).await;
        Ok(())
    }

    /// Nodes lost with their host, and usable nodes whose agent fell silent, leave their pools:
    /// their tasks are requeued (requeueCount + 1, as Azure does when a node fails), and their
    /// pools resize back to their targets on the hosts that answer. Removing a node ends what
    /// still runs on it, so a hung node's tasks do not run on beside their new attempts.
    pub(super) async fn replace_lost_nodes(&self, silent: &[String]) -> anyhow::Result<()> {
        let lost = self.runtime.lost_nodes().await;
        if lost.is_empty() && silent.is_empty() {
            return Ok(());
        }
        // A node still being made, rebooted or reimaged has its own timeouts; an unusable one
        // runs nothing and stays for its owner to see.
        let was_usable = |n: &NodeRow| {
            matches!(
                n.state,
                NodeState::Idle
                    | NodeState::Running
                    | NodeState::WaitingForStartTask
                    | NodeState::StartTaskFailed
                    | NodeState::Offline
                    | NodeState::Unknown
            )
        };
        let rows: Vec<NodeRow> = store::nodes::list_all(&self.db)
            .await?
            .into_iter()
            .filter(|n| {
                n.state != NodeState::LeavingPool
                    && (lost.contains(&n.id) || (silent.contains(&n.id) && was_usable(n)))
            })
            .collect();
        if rows.is_empty() {
            return Ok(());
        }
        for node in rows.iter().filter(|n| !lost.contains(&n.id)) {
            tracing::warn!(node = %node.id, "the node's agent has fallen silent; replacing the node");
        }
        let with_host = rows.iter().filter(|n| lost.contains(&n.id)).count();
        if with_host > 0 {
            tracing::warn!(
                count = with_host,
                "nodes lost with their Docker host; replacing them"
            );
        }
        let pks: Vec<i64> = rows.iter().map(|n| n.pk).collect();
        store::nodes::mark_leaving(&self.db, &pks, false).await?;
        self.stop_tasks_on(&pks, NodeDeallocationOption::Requeue)
            .await?;
        let mut pools: Vec<i64> = rows.iter().map(|n| n.pool_pk).collect();
        pools.dedup();
        for pool in pools {
            store::pools::set_allocation_state(&self.db, pool, AllocationState::Resizing).await?;
        }
        self.wake.allocate.notify_one();
        Ok(())
    }
}

/// Whether the pool has been resizing for longer than its resize timeout.
fn resize_timed_out(pool: &PoolRow) -> bool {
    let timeout = Duration::from_micros((pool.resize_timeout_ticks / 10).max(0) as u64);
    let waited = (Utc::now() - pool.allocation_state_transition_time)
        .to_std()
        .unwrap_or_default();
    waited > timeout
}
