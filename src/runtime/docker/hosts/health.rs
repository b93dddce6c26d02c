//! Which hosts answer. Each is pinged at most once a second, when the allocator asks for lost
//! nodes. A host that has not answered for longer than `--host-timeout` is lost: its nodes are
//! lost (the allocator requeues their tasks and replaces them elsewhere), no node is placed on
//! it, and its nodes are forgotten rather than removed. When it answers again, the containers of
//! nodes this server no longer knows are removed from it, so nothing lost runs on.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::DockerHosts;

/// How long a ping may take before the host counts as not answering: a busy engine can be slow.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) struct Health {
    /// Since when each host has not answered; None while it answers.
    down_since: Mutex<Vec<Option<Instant>>>,
    last_check: Mutex<Option<Instant>>,
    lost_after: Duration,
}

impl Health {
    pub(super) fn new(hosts: usize, lost_after: Duration) -> Self {
        Self {
            down_since: Mutex::new(vec![None; hosts]),
            last_check: Mutex::new(None),
            lost_after,
        }
    }

    /// Makes room for the hosts up to `hosts` (one was added).
    pub(super) fn grow(&self, hosts: usize) {
        let mut down = self.down_since.lock().expect("lock");
        if down.len() < hosts {
            down.resize(hosts, None);
        }
    }

    /// Whether the host answered when last asked.
    pub(super) fn answers(&self, host: usize) -> bool {
        self.down_since.lock().expect("lock")[host].is_none()
    }

    /// Whether the host has not answered for longer than the timeout.
    pub(super) fn is_lost(&self, host: usize) -> bool {
        self.down_since.lock().expect("lock")[host].is_some_and(|t| t.elapsed() > self.lost_after)
    }

    /// Whether a check is due (at most one a second); claims it.
    fn due(&self) -> bool {
        let mut last = self.last_check.lock().expect("lock");
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }

    /// Records a ping's answer; true when the host answers again after not answering.
    fn record(&self, host: usize, answered: bool) -> bool {
        let mut down = self.down_since.lock().expect("lock");
        let was_down = down[host].is_some();
        match (answered, was_down) {
            (true, _) => down[host] = None,
            (false, false) => down[host] = Some(Instant::now()),
            (false, true) => {}
        }
        answered && was_down
    }
}

impl DockerHosts {
    /// The nodes on lost hosts, after pinging the hosts if a check is due.
    pub(in crate::runtime) async fn lost_nodes(&self, server_id: &str) -> Vec<String> {
        if self.health.due() {
            let hosts = self.all();
            // All at once: a host that hangs costs the pass one timeout, not one per host.
            let answers = futures_util::future::join_all(hosts.iter().map(|host| async {
                tokio::time::timeout(PING_TIMEOUT, host.runtime.docker.ping())
                    .await
                    .is_ok_and(|r| r.is_ok())
            }))
            .await;
            for (i, (host, answered)) in hosts.iter().zip(answers).enumerate() {
                if !answered && self.health.answers(i) {
                    tracing::warn!(host = %host.spec.url, "a Docker host does not answer");
                }
                if self.health.record(i, answered) {
                    tracing::info!(host = %host.spec.url, "a Docker host answers again");
                    self.remove_forgotten(i, server_id).await;
                }
            }
        }
        let placed = self.placed.lock().expect("lock");
        placed
            .iter()
            .filter(|(_, p)| self.health.is_lost(p.host))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Removes the containers on a host that answers again of nodes this server no longer
    /// knows there (lost and replaced meanwhile, or made again elsewhere at start).
    pub(super) async fn remove_forgotten(&self, host: usize, server_id: &str) {
        let owner = self.host(host);
        let runtime = &owner.runtime;
        let found = match runtime.list_nodes(server_id).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "listing a returning host's nodes failed");
                return;
            }
        };
        for node in found {
            if self.host_index(&node.node_id) == Some(host) {
                continue;
            }
            tracing::info!(node = %node.node_id, host = %owner.spec.url, "removing a node lost with its host");
            if let Err(e) = runtime.remove_node(server_id, &node.node_id).await {
                tracing::warn!(node = %node.node_id, error = %format!("{e:#}"), "removing a lost node failed");
            }
        }
    }
}
