//! Nodes across several Docker engines (hosts). Each node lives on one; a new node goes to the
//! host with the fewest nodes of its pool (then the fewest nodes, then the first given), among
//! those with room for it under their caps: so a pool spreads evenly, and a host that is full
//! is skipped. A pool with inter-node communication keeps its nodes on one host instead. With
//! no host left, the node cannot be made (`AllocationFailed`), which the pool's resizeErrors
//! report. Every engine must see the server's data directory at the same path (for now the
//! nodes' directories are bind mounts of it); see docs/nodes.md, "Docker hosts".

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

mod health;
mod routing;
mod start;

use super::DockerRuntime;
pub use crate::domain::host::HostSpec;
use crate::runtime::{Found, FoundNode, Layout, NodeError, NodeHandle, NodeSpec};

/// One engine and its caps.
struct Host {
    /// As given; its caps are `caps`, which `batchpool host add` may change.
    spec: HostSpec,
    /// CPUs and memory (MiB) its nodes may take together.
    caps: RwLock<(Option<f64>, Option<i64>)>,
    runtime: DockerRuntime,
    /// Added with `batchpool host add` (not `--docker-host`).
    added: bool,
    /// Removed with `batchpool host remove`: it takes no new nodes; its nodes stay until their
    /// pools let them go.
    retired: AtomicBool,
}

impl Host {
    fn new(spec: HostSpec, runtime: DockerRuntime, added: bool) -> Arc<Self> {
        Arc::new(Self {
            caps: RwLock::new((spec.cpus, spec.memory_mib)),
            spec,
            runtime,
            added,
            retired: AtomicBool::new(false),
        })
    }
}

impl Host {
    /// Whether a node of `spec` fits beside nodes that take `cpus` and `memory` (MiB).
    fn fits(&self, spec: &NodeSpec, cpus: f64, memory: i64) -> bool {
        let (cap_cpus, cap_memory) = *self.caps.read().expect("lock");
        cap_cpus.is_none_or(|c| cpus + spec.vcpus <= c + 1e-9)
            && cap_memory.is_none_or(|m| memory + spec.memory_mib <= m)
    }
}

/// The CPUs and memory (MiB) the nodes placed on `host` take together.
fn taken(placed: &HashMap<String, Placed>, host: usize) -> (f64, i64) {
    let on = placed.values().filter(|p| p.host == host);
    (
        on.clone().map(|p| p.vcpus).sum(),
        on.map(|p| p.memory_mib).sum(),
    )
}

/// The host that a node of `spec` must go on: that of its pool's placed nodes, where they talk
/// to each other (`together`); None where any host will do.
fn kept_on(placed: &HashMap<String, Placed>, spec: &NodeSpec) -> Option<usize> {
    let found = placed
        .values()
        .find(|p| p.pool.0 == spec.account && p.pool.1 == spec.pool_id);
    found.filter(|_| spec.together).map(|p| p.host)
}

/// Where a node is, and what it takes there.
#[derive(Clone, Debug)]
struct Placed {
    host: usize,
    /// Its account and pool.
    pool: (String, String),
    vcpus: f64,
    memory_mib: i64,
}

/// Why a node of `spec` has nowhere to go: every host is at its cap, or (`kept_on`) the host
/// that its pool's nodes share is.
fn no_room(spec: &NodeSpec, hosts: &[Arc<Host>], kept_on: Option<usize>) -> NodeError {
    let node = format!(
        "node {} ({} CPUs, {} MiB)",
        spec.node_id, spec.vcpus, spec.memory_mib
    );
    let message = match kept_on {
        Some(h) => format!(
            "no room for {node} on the Docker host {}: the pool's nodes talk to each other (enableInterNodeCommunication), so they all go on the host of its first node, and it is at its cap or does not take new nodes",
            hosts[h].spec.url
        ),
        None => format!(
            "no Docker host has room for {node}: each of the {} hosts is at its cap (--docker-host URL,cpus=N,memory=MiB)",
            hosts.len()
        ),
    };
    NodeError {
        code: crate::runtime::ALLOCATION_FAILED,
        message,
    }
}

pub struct DockerHosts {
    /// Only ever grows, so a host's index stays its own.
    hosts: RwLock<Vec<Arc<Host>>>,
    layout: Layout,
    /// Every node this server knows of, by node id: made here, or found at adoption.
    placed: Mutex<HashMap<String, Placed>>,
    /// Which hosts answer (see `health`).
    health: health::Health,
    /// What every host's nodes need to run their agent.
    pub(in crate::runtime) agent: Arc<super::AgentSetup>,
    /// Hosts given at start that did not answer then (see `start`).
    pending: Mutex<Vec<HostSpec>>,
}

impl DockerHosts {
    /// The local engine alone (DOCKER_HOST, or the default socket), with no cap.
    pub fn single(runtime: DockerRuntime, url: &str, lost_after: std::time::Duration) -> Self {
        let (layout, agent) = (runtime.layout.clone(), runtime.agent.clone());
        let spec = HostSpec {
            url: url.to_string(),
            tls: None,
            cpus: None,
            memory_mib: None,
        };
        Self::new(
            vec![Host::new(spec, runtime, false)],
            layout,
            lost_after,
            agent,
        )
    }

    fn new(
        hosts: Vec<Arc<Host>>,
        layout: Layout,
        lost_after: std::time::Duration,
        agent: Arc<super::AgentSetup>,
    ) -> Self {
        Self {
            agent,
            health: health::Health::new(hosts.len(), lost_after),
            hosts: RwLock::new(hosts),
            layout,
            placed: Mutex::default(),
            pending: Mutex::default(),
        }
    }

    /// Which host a node is on, if this server knows.
    fn host_index(&self, node_id: &str) -> Option<usize> {
        self.placed
            .lock()
            .expect("lock")
            .get(node_id)
            .map(|p| p.host)
    }

    /// Makes the hosts added with `batchpool host add` (`wanted`) this server's: connects to
    /// new ones (one that does not answer is tried again at the next sync), retires those
    /// removed, and takes back those added again, with their caps as the table has them. Hosts
    /// given with `--docker-host` stay as they are; those that did not answer at start are
    /// tried again. On each host that answers, the account networks left empty go.
    pub(in crate::runtime) async fn sync_hosts(&self, server_id: &str, wanted: Vec<HostSpec>) {
        for (i, host) in self.all().iter().enumerate() {
            if self.health.answers(i) {
                host.runtime.sweep_networks(server_id).await;
            }
        }
        self.connect_pending(server_id).await;
        let hosts = self.all();
        for spec in &wanted {
            if let Some(known) = hosts.iter().find(|h| h.spec.url == spec.url) {
                if known.added {
                    *known.caps.write().expect("lock") = (spec.cpus, spec.memory_mib);
                    if known.retired.swap(false, Ordering::Relaxed) {
                        tracing::info!(host = %spec.url, "a Docker host takes new nodes again");
                    }
                }
                continue;
            }
            match super::connect_host(spec).await {
                Ok(docker) => {
                    self.push_host(spec.clone(), docker, true);
                    tracing::info!(host = %spec.url, "a Docker host was added");
                }
                Err(e) => {
                    tracing::warn!(host = %spec.url, error = %format!("{e:#}"), "an added Docker host does not answer; trying again")
                }
            }
        }
        for host in hosts.iter().filter(|h| h.added) {
            if !wanted.iter().any(|w| w.url == host.spec.url)
                && !host.retired.swap(true, Ordering::Relaxed)
            {
                tracing::info!(host = %host.spec.url, "a Docker host was removed: it takes no new nodes");
            }
        }
    }

    /// Takes a host that answers now (`added` with `batchpool host add`); returns its index.
    fn push_host(&self, spec: HostSpec, docker: bollard::Docker, added: bool) -> usize {
        let runtime = DockerRuntime::new(docker, self.layout.clone(), self.agent.clone());
        let mut hosts = self.hosts.write().expect("lock");
        hosts.push(Host::new(spec, runtime, added));
        self.health.grow(hosts.len());
        hosts.len() - 1
    }

    /// Every host, as it is now.
    fn all(&self) -> Vec<Arc<Host>> {
        self.hosts.read().expect("lock").clone()
    }

    fn host(&self, i: usize) -> Arc<Host> {
        Arc::clone(&self.hosts.read().expect("lock")[i])
    }

    /// The host of a node this server knows of, unless that host is lost.
    fn host_of(&self, node_id: &str) -> anyhow::Result<Arc<Host>> {
        let hosts = self.all();
        match self.host_index(node_id) {
            // Nothing is asked of a lost host: a request could wait out the client's timeout.
            Some(i) if self.health.is_lost(i) => {
                anyhow::bail!(
                    "the node {node_id}'s Docker host {} is lost",
                    hosts[i].spec.url
                )
            }
            Some(i) => Ok(Arc::clone(&hosts[i])),
            None if hosts.len() == 1 => Ok(Arc::clone(&hosts[0])),
            None => anyhow::bail!("the node {node_id} is on none of this server's Docker hosts"),
        }
    }

    /// Whether host `h` takes new nodes: it is not retired, and not lost. A host that missed a
    /// ping or two may be busy: only a lost one is passed over.
    fn takes_nodes(&self, hosts: &[Arc<Host>], h: usize) -> bool {
        !self.health.is_lost(h) && !hosts[h].retired.load(Ordering::Relaxed)
    }

    /// Places a new node: the host with the fewest nodes of its pool, then the fewest nodes,
    /// among those with room for it. A node placed already (made before a crash) stays. A pool
    /// whose nodes talk to each other (`together`) keeps them on the host of its first.
    fn place(&self, spec: &NodeSpec) -> Result<usize, NodeError> {
        let mut placed = self.placed.lock().expect("lock");
        if let Some(p) = placed.get(&spec.node_id) {
            return Ok(p.host);
        }
        let hosts = self.all();
        let pool = (spec.account.clone(), spec.pool_id.clone());
        let kept = kept_on(&placed, spec);
        let chosen = (0..hosts.len())
            .filter(|&h| kept.is_none_or(|k| k == h))
            .filter(|&h| self.takes_nodes(&hosts, h))
            .filter(|&h| {
                let (cpus, memory) = taken(&placed, h);
                hosts[h].fits(spec, cpus, memory)
            })
            .min_by_key(|&h| {
                let on: Vec<&Placed> = placed.values().filter(|p| p.host == h).collect();
                let of_pool = on.iter().filter(|p| p.pool == pool).count();
                (of_pool, on.len(), h)
            })
            .ok_or_else(|| no_room(spec, &hosts, kept))?;
        placed.insert(
            spec.node_id.clone(),
            Placed {
                host: chosen,
                pool,
                vcpus: spec.vcpus,
                memory_mib: spec.memory_mib,
            },
        );
        Ok(chosen)
    }

    /// Which of `candidates` to preempt so that a node of `spec` fits: on each host that takes
    /// new nodes (for a pool whose nodes talk to each other, only the host of its nodes), the
    /// candidates there (in the order given) until it fits; the host where the fewest must go.
    /// None when no host would have room.
    pub(in crate::runtime) fn room_for(
        &self,
        spec: &NodeSpec,
        candidates: &[String],
    ) -> Option<Vec<String>> {
        let placed = self.placed.lock().expect("lock");
        let hosts = self.all();
        let kept = kept_on(&placed, spec);
        (0..hosts.len())
            .filter(|&h| kept.is_none_or(|k| k == h))
            .filter(|&h| self.takes_nodes(&hosts, h))
            .filter_map(|h| {
                let (mut cpus, mut memory) = taken(&placed, h);
                let mut victims = Vec::new();
                for id in candidates {
                    if hosts[h].fits(spec, cpus, memory) {
                        break;
                    }
                    if let Some(p) = placed.get(id).filter(|p| p.host == h) {
                        cpus -= p.vcpus;
                        memory -= p.memory_mib;
                        victims.push(id.clone());
                    }
                }
                hosts[h].fits(spec, cpus, memory).then_some(victims)
            })
            .min_by_key(Vec::len)
    }

    pub(in crate::runtime) async fn create_node(
        &self,
        spec: &NodeSpec,
    ) -> Result<NodeHandle, NodeError> {
        let host = self.place(spec)?;
        let made = self.host(host).runtime.create_node(spec).await;
        if made.is_err() {
            self.placed.lock().expect("lock").remove(&spec.node_id);
        }
        made.map(|handle| NodeHandle {
            host: self.host(host).spec.url.clone(),
            ..handle
        })
    }

    pub(in crate::runtime) async fn remove_node(
        &self,
        server_id: &str,
        node_id: &str,
    ) -> anyhow::Result<()> {
        let placed = self.host_index(node_id);
        match placed {
            // A lost host's node is forgotten: its container goes when the host answers again.
            // What waits on its agent fails now, as anything asked of a lost host does.
            Some(i) if self.health.is_lost(i) => self.agent.agents.forget(node_id),
            Some(i) => self.host(i).runtime.remove_node(server_id, node_id).await?,
            // Not known here: wherever it is, it goes (removing a missing node is no error).
            None => {
                for (i, host) in self.all().iter().enumerate() {
                    if !self.health.is_lost(i) {
                        host.runtime.remove_node(server_id, node_id).await?;
                    }
                }
            }
        }
        self.placed.lock().expect("lock").remove(node_id);
        Ok(())
    }

    /// The nodes on every host that answers, each remembered where it is with what it takes.
    /// A host that does not (stopped since the server started) is named apart: its nodes may
    /// run still, and are neither adopted nor taken for gone.
    pub(in crate::runtime) async fn list_nodes(&self, server_id: &str) -> Found {
        let mut all = Found::default();
        for (i, host) in self.all().iter().enumerate() {
            match self.list_host(i, host, server_id).await {
                Ok(found) => all.nodes.extend(found),
                Err(e) => {
                    tracing::warn!(host = %host.spec.url, error = %format!("{e:#}"), "listing a Docker host's nodes failed");
                    all.unanswered.push(host.spec.url.clone());
                }
            }
        }
        all
    }

    async fn list_host(
        &self,
        i: usize,
        host: &Host,
        server_id: &str,
    ) -> anyhow::Result<Vec<FoundNode>> {
        let found = host.runtime.list_nodes(server_id).await?;
        for node in &found {
            let (pool, vcpus, memory_mib) =
                host.runtime.node_size(server_id, &node.node_id).await?;
            self.placed.lock().expect("lock").insert(
                node.node_id.clone(),
                Placed {
                    host: i,
                    pool,
                    vcpus,
                    memory_mib,
                },
            );
        }
        Ok(found)
    }
}
