//! Nodes whose agents fall silent are `unknown` (Azure's state for a node the service lost
//! contact with) until their agents speak again, or until the agent timeout, when they are lost
//! and replaced ([`Allocator::replace_lost_nodes`]). A new node whose agent did not say hello
//! in time, or whose container could not be made, is `unusable`; once the fault has passed, it
//! is made again ([`Allocator::remake_if_recovered`]).

use std::collections::HashSet;

use chrono::{DateTime, TimeDelta, Utc};

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

    /// Makes `node` again, as a reimage does, if it is `unusable` for a fault that has passed:
    ///
    /// - its agent did not answer in time (its network cut, its host too loaded), and has
    ///   spoken since (to this server, which leads now: the one that gave up on it may be gone);
    /// - or it did not, and its container has stopped ([`REMAKE_AFTER`] on): it died with its
    ///   host (an engine stopped), or was killed, before its agent could say hello;
    /// - or its container could not be made (its host did not answer, or had no room on its
    ///   disk), [`REMAKE_AFTER`] ago.
    ///
    /// A node whose container runs and whose agent never reaches a server (a wrong
    /// `--agent-url`) is not made again and again. A node with no image, or no room on any host,
    /// (`ImageNotFound`, `AllocationFailed`) stays unusable for its owner to see.
    pub(super) async fn remake_if_recovered(&self, node: &NodeRow) -> anyhow::Result<()> {
        let code = node.errors.get(0).and_then(|e| e.get("code")?.as_str());
        let since = node.state_transition_time;
        let waited = Utc::now() - since >= REMAKE_AFTER;
        let agents = &self.runtime.agents;
        let why = match code {
            Some("NodeAgentUnreachable") if agents.spoke_since(&node.id, since) => {
                "the node's agent spoke at last"
            }
            Some("NodeAgentUnreachable") if waited && self.stopped_since(&node.id, since).await => {
                "the node's container stopped before its agent spoke"
            }
            Some("NodeCreationFailed") if waited => "the node's container could not be made",
            _ => return Ok(()),
        };
        let again = (NodeState::Unusable, NodeState::Reimaging);
        if store::nodes::set_state_from(&self.db, node.pk, again).await? {
            tracing::info!(node = %node.id, why, "making an unusable node again");
            self.wake.allocate.notify_one();
        }
        Ok(())
    }

    /// Whether the node's container has been seen not running since `since`. The runtime's
    /// nodes are listed at most every [`LIST_EVERY`], for all such nodes at once; a listing
    /// that fails (a host down) tells nothing.
    async fn stopped_since(&self, node: &str, since: DateTime<Utc>) -> bool {
        let cached = {
            let running = self.running.lock().expect("lock");
            running
                .as_ref()
                .filter(|(at, _)| Utc::now() - *at < LIST_EVERY)
                .map(|(at, nodes)| (*at, nodes.as_ref().is_none_or(|n| n.contains(node))))
        };
        let (at, runs) = match cached {
            Some(seen) => seen,
            None => {
                let Ok(found) = self.runtime.list_nodes().await else {
                    return false;
                };
                // A host that did not answer may have any node running.
                let nodes: Option<HashSet<String>> = found.unanswered.is_empty().then(|| {
                    let running = found.running().into_iter();
                    running.map(str::to_string).collect()
                });
                let (at, runs) = (Utc::now(), nodes.as_ref().is_none_or(|n| n.contains(node)));
                *self.running.lock().expect("lock") = Some((at, nodes));
                (at, runs)
            }
        };
        at > since && !runs
    }
}

/// How often the runtime's nodes are listed while an unusable node waits to be judged.
const LIST_EVERY: TimeDelta = TimeDelta::seconds(10);

/// How long a node unusable for a fault that may have passed waits before it is made again: a
/// fault that lasts (a host's disk full) costs an attempt this often, not one a second.
const REMAKE_AFTER: TimeDelta = TimeDelta::seconds(30);
