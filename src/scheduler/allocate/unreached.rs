//! Nodes on a Docker host that did not answer when this server took the lead (it answered when
//! the server started): whether their containers run, and their agents, cannot be known. They
//! are `unknown`, so no task is placed on a node no one can reach, until their host answers;
//! then they are adopted, or made again if their containers are gone, as adoption does. A host
//! silent for the agent timeout loses them: they are replaced, as nodes whose agents fell
//! silent are ([`Allocator::replace_lost_nodes`]).

use std::collections::HashMap;
use std::time::Instant;

use super::Allocator;
use crate::store::{self, nodes::NodeRow};

/// Nodes set aside at adoption: by id, their pk and the host they are on (None if the node's
/// row names none, which waits for every host).
pub(super) type Unreached = HashMap<String, (i64, Option<String>)>;

impl Allocator {
    /// Of `missing` (nodes whose containers were not found), those that may be on a host in
    /// `unanswered`.
    pub(super) async fn on_unanswered(
        &self,
        missing: &[&NodeRow],
        unanswered: &[String],
    ) -> anyhow::Result<Unreached> {
        if unanswered.is_empty() || missing.is_empty() {
            return Ok(Unreached::new());
        }
        let ids: Vec<String> = missing.iter().map(|n| n.id.clone()).collect();
        let hosted = store::nodes::hosted_by_ids(&self.db, &ids).await?;
        Ok(hosted
            .into_iter()
            .filter(|n| n.host.as_ref().is_none_or(|h| unanswered.contains(h)))
            .map(|n| (n.id, (n.pk, n.host)))
            .collect())
    }

    /// Makes `unreached` `unknown` and waits for their hosts ([`Allocator::reach_unreached`]).
    /// Until they are settled, an agent this server does not know may be one of theirs.
    pub(super) async fn set_aside(&self, unreached: Unreached) -> anyhow::Result<()> {
        if !unreached.is_empty() {
            let ids: Vec<String> = unreached.keys().cloned().collect();
            store::contact::lose(&self.db, &ids).await?;
            tracing::warn!(nodes = ?ids, "the nodes' Docker host does not answer: they are unknown until it does");
        }
        self.runtime.agents.set_all_learnt(unreached.is_empty());
        *self.unreached.lock().expect("lock") = (Instant::now(), unreached);
        Ok(())
    }

    /// The nodes set aside whose host answers now are adopted (their agents learnt, and they
    /// are what they were) or made again; returns those whose host has been silent for the
    /// agent timeout, lost.
    pub(super) async fn reach_unreached(&self) -> anyhow::Result<Vec<String>> {
        let (since, waiting) = {
            let unreached = self.unreached.lock().expect("lock");
            if unreached.1.is_empty() {
                return Ok(Vec::new());
            }
            unreached.clone()
        };
        let answering: HashMap<String, bool> = self.runtime.hosts_answering().into_iter().collect();
        let answers = |host: &Option<String>| match host {
            Some(host) => answering.get(host).copied().unwrap_or(false),
            None => answering.values().all(|a| *a),
        };
        let timed_out = since.elapsed() >= self.runtime.agents.timeout();
        let mut settled = Vec::new();
        let mut lost = Vec::new();
        if waiting.values().any(|(_, host)| answers(host)) {
            let found = self.runtime.list_nodes().await?;
            let running = found.running();
            for (id, (pk, host)) in &waiting {
                let listed = match host {
                    Some(host) => !found.unanswered.contains(host),
                    None => found.unanswered.is_empty(),
                };
                if !listed {
                    continue;
                }
                if running.contains(id.as_str()) {
                    tracing::info!(node = %id, "the node's Docker host answers again: the node is adopted");
                    self.runtime.learn_agent(id).await;
                    store::contact::regain(&self.db, Some(std::slice::from_ref(id))).await?;
                } else {
                    self.make_again(*pk, id).await?;
                }
                settled.push(id.clone());
            }
        }
        if timed_out {
            let silent = waiting.keys().filter(|id| !settled.contains(id));
            lost.extend(silent.cloned());
            settled.extend(lost.iter().cloned());
        }
        let mut unreached = self.unreached.lock().expect("lock");
        unreached.1.retain(|id, _| !settled.contains(id));
        if unreached.1.is_empty() {
            self.runtime.agents.set_all_learnt(true);
        }
        Ok(lost)
    }
}
