//! Nodes whose agents fall silent are `unknown` (Azure's state for a node the service lost
//! contact with) until their agents speak again, or until the agent timeout, when they are lost
//! and replaced ([`Allocator::replace_lost_nodes`]). A new node whose agent did not say hello
//! in time is `unusable`; once its agent speaks after all, it is made again.

use super::Allocator;
use crate::domain::pool::NodeState;
use crate::store::{self, nodes::NodeRow};

impl Allocator {
    /// Makes the ready nodes among `unknown` (their agents silent for a while) `unknown`, and
    /// gives those made so whose agents spoke since back what they are. Their running tasks
    /// run on meanwhile; no task is placed on them.
    pub(super) async fn track_contact(&self, unknown: &[String]) -> anyhow::Result<()> {
        let (new, back): (Vec<String>, Vec<String>) = {
            let made = self.unknown.lock().expect("lock");
            let new = unknown.iter().filter(|id| !made.contains(*id)).cloned();
            let back = made.iter().filter(|id| !unknown.contains(id)).cloned();
            (new.collect(), back.collect())
        };
        if !new.is_empty() {
            for id in store::contact::lose(&self.db, &new).await? {
                tracing::warn!(node = %id, "the node's agent is silent: the node is unknown");
            }
            // Those that were not ready are not looked at again while their agents are silent.
            self.unknown.lock().expect("lock").extend(new);
        }
        if !back.is_empty() {
            // Those lost and replaced meanwhile are no longer `unknown`, and stay as they are.
            if store::contact::regain(&self.db, Some(&back)).await? > 0 {
                tracing::info!(nodes = ?back, "the nodes' agents speak again");
            }
            let mut made = self.unknown.lock().expect("lock");
            for id in &back {
                made.remove(id);
            }
        }
        Ok(())
    }

    /// After a start: the nodes a previous leader made `unknown` are what they were; their
    /// agents are judged anew.
    pub(super) async fn regain_unknown(&self) -> anyhow::Result<()> {
        let regained = store::contact::regain(&self.db, None).await?;
        if regained > 0 {
            tracing::info!(
                regained,
                "nodes left unknown by the last leader are judged anew"
            );
        }
        Ok(())
    }

    /// Makes `node` again, as a reimage does, if it is `unusable` because its agent did not
    /// answer in time (its network cut, its host too loaded) and that agent has spoken since
    /// (to this server, which leads now: the one that gave up on it may be gone): the fault
    /// passed, and the pool has its node back. An agent that never reaches a server (a wrong
    /// `--agent-url`) never speaks, so no node is made again and again.
    pub(super) async fn remake_if_heard(&self, node: &NodeRow) -> anyhow::Result<()> {
        let code = node.errors.get(0).and_then(|e| e.get("code")?.as_str());
        let since = node.state_transition_time;
        if code != Some("NodeAgentUnreachable") || !self.runtime.agents.spoke_since(&node.id, since)
        {
            return Ok(());
        }
        let again = (NodeState::Unusable, NodeState::Reimaging);
        if store::nodes::set_state_from(&self.db, node.pk, again).await? {
            tracing::info!(node = %node.id, "the agent of a node unusable for its silence spoke at last: making the node again");
            self.wake.allocate.notify_one();
        }
        Ok(())
    }
}
