//! The hosts given with `--docker-host`, at start. A host that does not answer is waited for up
//! to `--host-timeout`, as long as a running server waits before it takes a host for lost; then
//! the server starts without it. Adoption finds none of its nodes, so they are made again on
//! the other hosts and their running tasks are requeued. It is tried again each time the
//! leader syncs its hosts (every 2 s): once it answers, the containers left on it are removed,
//! so nothing of its old nodes runs on, and it takes new nodes. Until then `/health/ready` says
//! that a host does not answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::Docker;

use super::{DockerHosts, Host, HostSpec};
use crate::runtime::docker::{connect_host, AgentSetup, DockerRuntime};
use crate::runtime::Layout;

/// The longest one try to reach a host may take: an engine behind a firewall that drops
/// packets would otherwise hold the start for the client's whole connect timeout.
const TRY_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest a try of a pending host may take once the server runs: the try is part of the
/// allocator's pass, which a host that hangs holds up by as much as by a ping of a host that
/// runs nodes (`health::PING_TIMEOUT`).
const RETRY_TIMEOUT: Duration = Duration::from_secs(5);

impl DockerHosts {
    /// Connects to every host given, waiting up to `lost_after` for those that do not answer,
    /// and goes on without them. Fails when none answers.
    pub async fn connect(
        specs: &[HostSpec],
        layout: Layout,
        lost_after: Duration,
        agent: Arc<AgentSetup>,
    ) -> anyhow::Result<Self> {
        let mut clients: Vec<Option<Docker>> = vec![None; specs.len()];
        let deadline = Instant::now() + lost_after;
        let mut failures;
        let mut said = false;
        loop {
            failures = Vec::new();
            for (spec, client) in specs.iter().zip(clients.iter_mut()) {
                if client.is_none() {
                    match try_connect(spec, deadline).await {
                        Ok(docker) => *client = Some(docker),
                        Err(e) => failures.push(format!("the Docker host {}: {e:#}", spec.url)),
                    }
                }
            }
            if failures.is_empty() || Instant::now() >= deadline {
                break;
            }
            if !said {
                tracing::warn!(
                    hosts = ?failures,
                    "Docker hosts do not answer; waiting for them up to --host-timeout ({}s)",
                    lost_after.as_secs()
                );
                said = true;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        anyhow::ensure!(
            clients.iter().any(Option::is_some),
            "no Docker host answers: {}",
            failures.join("; ")
        );
        let mut hosts = Vec::new();
        let mut pending = Vec::new();
        for (spec, client) in specs.iter().zip(clients) {
            match client {
                Some(docker) => hosts.push(Host::new(
                    spec.clone(),
                    DockerRuntime::new(docker, layout.clone(), agent.clone()),
                    false,
                )),
                None => {
                    tracing::error!(host = %spec.url, "a Docker host does not answer: the server starts without it, its nodes are made again on the other hosts, and it is tried again every few seconds");
                    pending.push(spec.clone());
                }
            }
        }
        let all = Self::new(hosts, layout, lost_after, agent);
        *all.pending.lock().expect("lock") = pending;
        Ok(all)
    }

    /// Tries the hosts that did not answer at start again; one that answers now has the
    /// containers left on it removed (its nodes were made again elsewhere), and takes nodes.
    pub(super) async fn connect_pending(&self, server_id: &str) {
        let pending = self.pending.lock().expect("lock").clone();
        for spec in pending {
            let Ok(docker) = try_connect(&spec, Instant::now() + RETRY_TIMEOUT).await else {
                continue;
            };
            let index = self.push_host(spec.clone(), docker, false);
            self.pending
                .lock()
                .expect("lock")
                .retain(|p| p.url != spec.url);
            tracing::info!(host = %spec.url, "a Docker host that did not answer at start answers now: it takes nodes");
            self.remove_forgotten(index, server_id).await;
        }
    }

    /// Each host by its URL, and whether it answered when last pinged; those given at start
    /// that have yet to answer, as not answering.
    pub(in crate::runtime) fn hosts_answering(&self) -> Vec<(String, bool)> {
        let hosts = self.all();
        let mut all: Vec<(String, bool)> = hosts
            .iter()
            .enumerate()
            .map(|(i, host)| (host.spec.url.clone(), self.health.answers(i)))
            .collect();
        let pending = self.pending.lock().expect("lock");
        all.extend(pending.iter().map(|spec| (spec.url.clone(), false)));
        all
    }

    /// Whether a host given at start has yet to answer.
    pub(super) fn any_pending(&self) -> bool {
        !self.pending.lock().expect("lock").is_empty()
    }
}

/// One try to reach `spec`, given up at `deadline` (but given at least a second, and at most
/// [`TRY_TIMEOUT`]).
async fn try_connect(spec: &HostSpec, deadline: Instant) -> anyhow::Result<Docker> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .clamp(Duration::from_secs(1), TRY_TIMEOUT);
    tokio::time::timeout(left, connect_host(spec))
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {}s", left.as_secs()))?
}
