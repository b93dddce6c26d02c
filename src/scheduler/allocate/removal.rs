//! Nodes leaving their pools: what happens to their tasks (requeue, terminate, or let them end),
//! then the node's removal once they have ended and its files' retention has run out; a
//! preempted node's container removed while its row stays.

use std::sync::Arc;

use chrono::Utc;

use super::Allocator;
use crate::domain::pool::{NodeDeallocationOption, NodeState};
use crate::store::{self, nodes::NodeRow};

/// How long after a failed removal it is tried again.
const RETRY_REMOVAL: std::time::Duration = std::time::Duration::from_secs(5);

impl Allocator {
    /// Removes a leaving node once its tasks have ended and, if it is to `retain` its tasks'
    /// files (retaineddata), once their retention has run out.
    pub(super) fn ensure_removal(self: &Arc<Self>, node: &NodeRow, retain: bool) {
        let (this, id, node_pk) = (Arc::clone(self), node.id.clone(), node.pk);
        self.remove_once(&node.id, "removing the node", async move {
            this.remove(&id, node_pk, retain).await
        });
    }

    /// Stops a deallocating node once what runs on it is done (its tasks were requeued or
    /// ended, unless the deallocate let them finish): its container stops with its disk kept,
    /// its usage record closes, and it is deallocated.
    pub(super) fn ensure_deallocated(self: &Arc<Self>, node: &NodeRow) {
        let (this, id, node_pk) = (Arc::clone(self), node.id.clone(), node.pk);
        self.remove_once(&node.id, "deallocating the node", async move {
            this.deallocate(&id, node_pk).await
        });
    }

    async fn deallocate(&self, node_id: &str, node_pk: i64) -> anyhow::Result<()> {
        self.tasks_done_on(node_pk).await?;
        self.runtime.stop_node(node_id).await?;
        let mut tx = self.db.begin().await?;
        let stopped = (NodeState::Deallocating, NodeState::Deallocated);
        if store::nodes::set_state_from(&mut *tx, node_pk, stopped).await? {
            store::usage::close(&mut *tx, node_id, Utc::now()).await?;
            tracing::info!(node = %node_id, "node deallocated");
        }
        tx.commit().await?;
        Ok(())
    }

    /// Waits until no task runs on the node (a reboot, reimage or deallocate that lets them
    /// finish; no new one is placed on it meanwhile).
    pub(super) async fn tasks_done_on(&self, node_pk: i64) -> sqlx::Result<()> {
        while store::tasks::any_running_on_node(&self.db, node_pk).await? {
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
        Ok(())
    }

    /// Runs `removal` (of the node, or of its container; `what` names it for the log) in a
    /// task of its own, one at a time per node. A node that is still being provisioned stops
    /// first, and the next pass comes back; the allocator looks again once the removal is done.
    /// One that failed (its host not answering) is tried again after [`RETRY_REMOVAL`], not at
    /// the next pass: a pass comes as soon as anything happens, and a preempted node's removal
    /// tried at every one logged 11 failures a second for as long as its host was down.
    pub(super) fn remove_once(
        self: &Arc<Self>,
        node_id: &str,
        what: &'static str,
        removal: impl std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    ) {
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
            if let Err(e) = removal.await {
                tracing::error!(node = %node_id, error = %format!("{e:#}"), "{what} failed; will retry");
                tokio::time::sleep(RETRY_REMOVAL).await;
            }
            this.removing.lock().expect("lock").remove(&node_id);
            this.wake.allocate.notify_one();
        });
    }

    /// What happens to the tasks running on nodes that leave: requeued (the default), ended as
    /// failed (terminate), or left to finish before the node goes (taskcompletion, retaineddata).
    pub(super) async fn stop_tasks_on(
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

    async fn remove(&self, node_id: &str, node_pk: i64, retain: bool) -> anyhow::Result<()> {
        // A node left to finish its tasks (taskcompletion) goes when the last one ends.
        let busy = store::tasks::any_running_on_node(&self.db, node_pk).await?;
        if busy || (retain && self.retains_files(node_pk).await?) {
            return Ok(());
        }
        // An attempt ended elsewhere just before (terminated, requeued) may still run here: it
        // is killed, and its output kept, before the node takes them with it. (Not on a node
        // lost or silent: nothing would answer, and its replacement would wait.)
        let answers = !self
            .runtime
            .silent_nodes()
            .unknown
            .iter()
            .any(|n| n == node_id)
            && !self.runtime.lost_nodes().await.iter().any(|n| n == node_id);
        if answers {
            self.executor.reap_on(node_id).await?;
        }
        let _permit = self.limit.acquire().await?;
        self.runtime.remove_node(node_id).await?;
        let mut tx = self.db.begin().await?;
        store::usage::close(&mut *tx, node_id, Utc::now()).await?;
        store::nodes::delete(&mut *tx, node_pk).await?;
        tx.commit().await?;
        self.retained.lock().expect("lock").remove(&node_pk);
        tracing::info!(node = %node_id, "node removed");
        Ok(())
    }

    /// Whether the node, its tasks ended, still keeps files whose retention has not run out.
    /// Asked of the database once per node (no task runs there any more), then remembered.
    pub(super) async fn retains_files(&self, node_pk: i64) -> sqlx::Result<bool> {
        let known = self.retained.lock().expect("lock").get(&node_pk).copied();
        let until = match known {
            Some(until) => until,
            None => {
                let until = store::tasks::files_kept_on_node_until(&self.db, node_pk)
                    .await?
                    .unwrap_or_else(Utc::now);
                self.retained.lock().expect("lock").insert(node_pk, until);
                until
            }
        };
        Ok(until > Utc::now())
    }
}
