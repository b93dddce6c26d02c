//! Nodes across several Docker engines (hosts). Each node lives on one; a new node goes to the
//! host with the fewest nodes of its pool (then the fewest nodes, then the first given), among
//! those with room for it under their caps: so a pool spreads evenly, and a host that is full
//! is skipped. With no host left, the node cannot be made (`AllocationFailed`), which the pool's
//! resizeErrors report. Every engine must see the server's data directory at the same path (for
//! now the nodes' directories are bind mounts of it); see docs/nodes.md, "Docker hosts".

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use anyhow::Context;

mod health;

use super::{DockerRuntime, NODE_ROOT};
pub use crate::domain::host::HostSpec;
use crate::runtime::{
    BoxFuture, FoundNode, Layout, NodeError, NodeHandle, NodeRuntime, NodeSpec, Started,
    TaskContainer,
};

/// One engine and its cap.
struct Host {
    spec: HostSpec,
    runtime: DockerRuntime,
}

/// Where a node is, and what it takes there.
#[derive(Clone, Debug)]
struct Placed {
    host: usize,
    pool: String,
    vcpus: f64,
    memory_mib: i64,
}

pub struct DockerHosts {
    hosts: Vec<Host>,
    layout: Layout,
    /// Every node this server knows of, by node id: made here, or found at adoption.
    placed: Mutex<HashMap<String, Placed>>,
    /// Which hosts answer (see `health`).
    health: health::Health,
}

impl DockerHosts {
    /// Connects to every host; fails when one does not answer.
    pub async fn connect(
        specs: &[HostSpec],
        layout: Layout,
        lost_after: std::time::Duration,
    ) -> anyhow::Result<Self> {
        let mut hosts = Vec::new();
        for spec in specs {
            let docker = super::connect_host(spec)
                .await
                .with_context(|| format!("the Docker host {}", spec.url))?;
            hosts.push(Host {
                spec: spec.clone(),
                runtime: DockerRuntime::new(docker, layout.clone()),
            });
        }
        Ok(Self::new(hosts, layout, lost_after))
    }

    /// The local engine alone (DOCKER_HOST, or the default socket), with no cap.
    pub fn single(runtime: DockerRuntime, url: &str, lost_after: std::time::Duration) -> Self {
        let layout = runtime.layout.clone();
        let spec = HostSpec {
            url: url.to_string(),
            tls: None,
            cpus: None,
            memory_mib: None,
        };
        Self::new(vec![Host { spec, runtime }], layout, lost_after)
    }

    fn new(hosts: Vec<Host>, layout: Layout, lost_after: std::time::Duration) -> Self {
        Self {
            health: health::Health::new(hosts.len(), lost_after),
            hosts,
            layout,
            placed: Mutex::default(),
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

    /// The host of a node this server knows of.
    fn host_of(&self, node_id: &str) -> anyhow::Result<&DockerRuntime> {
        let placed = self.host_index(node_id);
        match placed {
            Some(i) => Ok(&self.hosts[i].runtime),
            None if self.hosts.len() == 1 => Ok(&self.hosts[0].runtime),
            None => anyhow::bail!("the node {node_id} is on none of this server's Docker hosts"),
        }
    }

    /// Places a new node: the host with the fewest nodes of its pool, then the fewest nodes,
    /// among those with room for it. A node placed already (made before a crash) stays.
    fn place(&self, spec: &NodeSpec) -> Result<usize, NodeError> {
        let mut placed = self.placed.lock().expect("lock");
        if let Some(p) = placed.get(&spec.node_id) {
            return Ok(p.host);
        }
        let load = |host: usize| {
            let on: Vec<&Placed> = placed.values().filter(|p| p.host == host).collect();
            let pool = on.iter().filter(|p| p.pool == spec.pool_id).count();
            let cpus: f64 = on.iter().map(|p| p.vcpus).sum();
            let memory: i64 = on.iter().map(|p| p.memory_mib).sum();
            (pool, on.len(), cpus, memory)
        };
        let chosen = (0..self.hosts.len())
            .filter(|&h| self.health.answers(h))
            .filter(|&h| {
                let (_, _, cpus, memory) = load(h);
                let cap = &self.hosts[h].spec;
                cap.cpus.is_none_or(|c| cpus + spec.vcpus <= c + 1e-9)
                    && cap.memory_mib.is_none_or(|m| memory + spec.memory_mib <= m)
            })
            .min_by_key(|&h| {
                let (pool, all, _, _) = load(h);
                (pool, all, h)
            })
            .ok_or_else(|| NodeError {
                code: "AllocationFailed",
                message: format!(
                    "no Docker host has room for node {} ({} CPUs, {} MiB): each of the {} hosts is at its cap (--docker-host URL,cpus=N,memory=MiB)",
                    spec.node_id, spec.vcpus, spec.memory_mib, self.hosts.len()
                ),
            })?;
        placed.insert(
            spec.node_id.clone(),
            Placed {
                host: chosen,
                pool: spec.pool_id.clone(),
                vcpus: spec.vcpus,
                memory_mib: spec.memory_mib,
            },
        );
        Ok(chosen)
    }

    async fn create_node(
        &self,
        spec: &NodeSpec,
        root: &Path,
        workitems: &Path,
    ) -> Result<NodeHandle, NodeError> {
        let host = self.place(spec)?;
        let made = self.hosts[host]
            .runtime
            .create_node(spec, root, workitems)
            .await;
        if made.is_err() {
            self.placed.lock().expect("lock").remove(&spec.node_id);
        }
        made
    }

    async fn remove_node(&self, server_id: &str, node_id: &str) -> anyhow::Result<()> {
        let placed = self.host_index(node_id);
        match placed {
            // A lost host's node is forgotten: its container goes when the host answers again.
            Some(i) if self.health.is_lost(i) => {}
            Some(i) => {
                self.hosts[i]
                    .runtime
                    .remove_node(server_id, node_id)
                    .await?
            }
            // Not known here: wherever it is, it goes (removing a missing node is no error).
            None => {
                for (i, host) in self.hosts.iter().enumerate() {
                    if !self.health.is_lost(i) {
                        host.runtime.remove_node(server_id, node_id).await?;
                    }
                }
            }
        }
        self.placed.lock().expect("lock").remove(node_id);
        Ok(())
    }

    /// The nodes on every host, each remembered where it is with what it takes.
    async fn list_nodes(&self, server_id: &str) -> anyhow::Result<Vec<FoundNode>> {
        let mut all = Vec::new();
        for (i, host) in self.hosts.iter().enumerate() {
            let found = host
                .runtime
                .list_nodes(server_id)
                .await
                .with_context(|| format!("listing the nodes on {}", host.spec.url))?;
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
            all.extend(found);
        }
        Ok(all)
    }
}

impl NodeRuntime for DockerHosts {
    fn name(&self) -> &'static str {
        "docker"
    }

    fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Every node's root is bind-mounted at the same place in its container.
    fn node_root(&self, _host_root: &Path) -> String {
        NODE_ROOT.to_string()
    }

    fn ensure_default_image<'a>(&'a self, image: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            for host in &self.hosts {
                super::image::ensure_default_image(&host.runtime.docker, image).await;
            }
        })
    }

    /// Ready while every host answers: a host that does not cannot make or run nodes.
    fn reachable(&self) -> BoxFuture<'_, bool> {
        Box::pin(async {
            for host in &self.hosts {
                if let Err(e) = host.runtime.docker.ping().await {
                    tracing::warn!(host = %host.spec.url, error = %e, "readiness: a Docker host does not answer");
                    return false;
                }
            }
            true
        })
    }

    fn create_node<'a>(
        &'a self,
        spec: &'a NodeSpec,
        root: &'a Path,
        workitems: &'a Path,
    ) -> BoxFuture<'a, Result<NodeHandle, NodeError>> {
        Box::pin(DockerHosts::create_node(self, spec, root, workitems))
    }

    fn remove_node<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(DockerHosts::remove_node(self, server_id, node_id))
    }

    fn restart_node<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            self.host_of(node_id)?
                .restart_node(server_id, node_id)
                .await
        })
    }

    fn list_nodes<'a>(
        &'a self,
        server_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Vec<FoundNode>>> {
        Box::pin(DockerHosts::list_nodes(self, server_id))
    }

    fn exec<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        env: Vec<(String, String)>,
        started: Option<tokio::sync::oneshot::Sender<i32>>,
    ) -> BoxFuture<'a, anyhow::Result<i64>> {
        Box::pin(async move {
            self.host_of(node_id)?
                .exec(server_id, node_id, env, started)
                .await
        })
    }

    fn exec_in_container<'a>(
        &'a self,
        at: (&'a str, &'a str),
        env: Vec<(String, String)>,
        container: &'a TaskContainer,
        started: Started,
    ) -> BoxFuture<'a, anyhow::Result<i64>> {
        Box::pin(async move {
            self.host_of(at.1)?
                .exec_in_container(at, env, container, started)
                .await
        })
    }

    fn remove_finished_task_containers<'a>(
        &'a self,
        server_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            for host in &self.hosts {
                host.runtime
                    .remove_finished_task_containers(server_id)
                    .await?;
            }
            Ok(())
        })
    }

    fn remove_task_container<'a>(
        &'a self,
        server_id: &'a str,
        label: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            for host in &self.hosts {
                host.runtime.remove_task_container(server_id, label).await?;
            }
            Ok(())
        })
    }

    fn lost_nodes<'a>(&'a self, server_id: &'a str) -> BoxFuture<'a, Vec<String>> {
        Box::pin(DockerHosts::lost_nodes(self, server_id))
    }

    fn kill_group<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        pid: i32,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            self.host_of(node_id)?
                .kill_group(server_id, node_id, pid)
                .await
        })
    }

    fn is_alive<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        pid: i32,
    ) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            match self.host_of(node_id) {
                Ok(host) => host.is_alive(server_id, node_id, pid).await,
                Err(_) => false,
            }
        })
    }
}
