//! The `docker` runtime: each node is a long-lived container with the CPU and memory limits of
//! its vmSize, never privileged, labelled with the installation, account, pool and node. Its root
//! directory is a directory on this host bind-mounted at `/mnt/batch/tasks`, where Azure Batch
//! puts it on Linux nodes; so the engine must share this host's filesystem (a local socket).
//! Nodes of one account share a bridge network of their own, which the engine isolates from
//! every other account's (and from the default bridge); no process in a node can gain privileges
//! (`no-new-privileges`), and a node holds a bounded number of processes.

mod exec;
mod image;
mod node;
mod task_container;

use std::path::Path;

use anyhow::Context;
use bollard::Docker;

pub use image::build_busybox_image;

use super::{
    BoxFuture, FoundNode, Layout, NodeError, NodeHandle, NodeRuntime, NodeSpec, Started,
    TaskContainer,
};

/// AZ_BATCH_NODE_ROOT_DIR inside a node container.
pub const NODE_ROOT: &str = "/mnt/batch/tasks";

/// The most processes (and threads) a node's container may hold at once: a fork bomb in a task
/// stops there instead of exhausting the host's pid space.
pub const NODE_PIDS_LIMIT: i64 = 4096;

/// The bridge network of an account's nodes on this installation.
fn network_name(server_id: &str, account: &str) -> String {
    format!("batchpool-{server_id}-{account}")
}

/// The container's main process: it only keeps the node alive, and exits at once on SIGTERM.
const KEEP_ALIVE: &str = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done";

pub struct DockerRuntime {
    docker: Docker,
    layout: Layout,
    /// Held while a network is looked up and made: engines before API 1.44 make a second network
    /// of the same name when asked twice, and a name that matches two is unusable.
    networks: tokio::sync::Mutex<()>,
    /// What task containers need of each node's container, by container name.
    nodes: std::sync::Mutex<std::collections::HashMap<String, task_container::NodeContainer>>,
    /// Whether the engine nests cgroups, once asked.
    nesting: tokio::sync::OnceCell<bool>,
}

/// Connects to the engine at `host` (a `unix://` or `tcp://` address) or the local default, and
/// agrees on an API version it speaks. Fails when no engine answers.
pub async fn connect(host: Option<&str>) -> anyhow::Result<Docker> {
    let docker = match host {
        Some(h) if !h.is_empty() => Docker::connect_with_host(h),
        _ => Docker::connect_with_local_defaults(),
    }
    .context("configuring the Docker client")?;
    let docker = docker
        .negotiate_version()
        .await
        .context("no Docker engine answers")?;
    docker
        .ping()
        .await
        .context("the Docker engine does not answer a ping")?;
    Ok(docker)
}

fn container_name(server_id: &str, node_id: &str) -> String {
    format!("batchpool-{server_id}-{node_id}")
}

fn status_of(err: &bollard::errors::Error) -> Option<u16> {
    match err {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

impl DockerRuntime {
    pub fn new(docker: Docker, layout: Layout) -> Self {
        Self {
            docker,
            layout,
            networks: tokio::sync::Mutex::default(),
            nodes: std::sync::Mutex::default(),
            nesting: tokio::sync::OnceCell::new(),
        }
    }

    pub fn client(&self) -> &Docker {
        &self.docker
    }
}

impl NodeRuntime for DockerRuntime {
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
        Box::pin(image::ensure_default_image(&self.docker, image))
    }

    fn reachable(&self) -> BoxFuture<'_, bool> {
        Box::pin(async {
            self.docker
                .ping()
                .await
                .map_err(
                    |e| tracing::warn!(error = %e, "readiness: the Docker engine does not answer"),
                )
                .is_ok()
        })
    }

    fn create_node<'a>(
        &'a self,
        spec: &'a NodeSpec,
        root: &'a Path,
        workitems: &'a Path,
    ) -> BoxFuture<'a, Result<NodeHandle, NodeError>> {
        Box::pin(DockerRuntime::create_node(self, spec, root, workitems))
    }

    fn remove_node<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(DockerRuntime::remove_node(self, server_id, node_id))
    }

    fn restart_node<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(DockerRuntime::restart_node(self, server_id, node_id))
    }

    fn list_nodes<'a>(
        &'a self,
        server_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Vec<FoundNode>>> {
        Box::pin(DockerRuntime::list_nodes(self, server_id))
    }

    fn exec<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        env: Vec<(String, String)>,
        started: Option<tokio::sync::oneshot::Sender<i32>>,
    ) -> BoxFuture<'a, anyhow::Result<i64>> {
        Box::pin(DockerRuntime::exec(self, server_id, node_id, env, started))
    }

    fn exec_in_container<'a>(
        &'a self,
        at: (&'a str, &'a str),
        env: Vec<(String, String)>,
        container: &'a TaskContainer,
        started: Started,
    ) -> BoxFuture<'a, anyhow::Result<i64>> {
        Box::pin(DockerRuntime::exec_in_container(
            self, at, env, container, started,
        ))
    }

    fn remove_finished_task_containers<'a>(
        &'a self,
        server_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(DockerRuntime::remove_finished_task_containers(
            self, server_id,
        ))
    }

    fn remove_task_container<'a>(
        &'a self,
        server_id: &'a str,
        label: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(DockerRuntime::remove_task_container(self, server_id, label))
    }

    fn kill_group<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        pid: i32,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(DockerRuntime::kill_group(self, server_id, node_id, pid))
    }

    fn is_alive<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        pid: i32,
    ) -> BoxFuture<'a, bool> {
        Box::pin(DockerRuntime::is_alive(self, server_id, node_id, pid))
    }
}
