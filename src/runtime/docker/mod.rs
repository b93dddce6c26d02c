//! The `docker` runtime: each node is a long-lived container with the CPU and memory limits of
//! its vmSize, never privileged, labelled with the installation, account, pool and node. Its root
//! directory is a volume of its own at `/mnt/batch/tasks`, where Azure Batch puts it on Linux
//! nodes, made and removed with the container: the engine shares no file system with this host,
//! and may be on another machine.
//! Nodes of one account share a bridge network of their own, which the engine isolates from
//! every other account's (and from the default bridge); no process in a node can gain privileges
//! (`no-new-privileges`), and a node holds a bounded number of processes.

mod agent_files;
mod debian;
mod exec;
mod existing;
mod hosts;
mod image;
mod logs;
mod networks;
mod node;
mod task_container;
mod task_images;
mod volumes;

use anyhow::Context;
use bollard::Docker;

pub use agent_files::AGENT_DIR;
pub use debian::{build_debian_image, DEBIAN_IMAGE};
pub use hosts::{DockerHosts, HostSpec};
pub use image::build_busybox_image;

use super::agents::Agents;
use super::Layout;

/// How nodes run their agent: this server's side of the agents, and the agent's files that
/// each host unpacks into a volume of its own.
pub struct AgentSetup {
    pub agents: std::sync::Arc<Agents>,
    pub files: agent_files::AgentFiles,
    /// The Debian node image, built on a host when a node there needs it.
    pub debian: debian::DebianImage,
}

impl AgentSetup {
    /// Finds the agent's files, for hosts to unpack.
    pub fn prepare(agents: std::sync::Arc<Agents>, layout: &Layout) -> anyhow::Result<Self> {
        Ok(Self {
            agents,
            files: agent_files::prepare()?,
            debian: debian::DebianImage::new(layout.debian_rootfs.clone()),
        })
    }
}

/// AZ_BATCH_NODE_ROOT_DIR inside a node container.
pub use super::nodes::NODE_ROOT;

/// The most processes (and threads) a node's container may hold at once: a fork bomb in a task
/// stops there instead of exhausting the host's pid space.
pub const NODE_PIDS_LIMIT: i64 = 4096;

/// What the bridge networks of an account's nodes on this installation are named after (each
/// adds a suffix of its own: see `ensure_network`); this server's key for the account's network.
fn network_name(server_id: &str, account: &str) -> String {
    format!("batchpool-{server_id}-{account}")
}

pub struct DockerRuntime {
    docker: Docker,
    /// The volume on this engine that holds the agent's files, once it is filled.
    agent_volume: tokio::sync::Mutex<Option<String>>,
    layout: Layout,
    /// Held while an account's network is looked up and made, or removed, so that this server
    /// makes one network per account (`ensure_network` says what happens when two servers do).
    networks: tokio::sync::Mutex<()>,
    /// Nodes being made on each account's network (by `network_name`), from its lookup until
    /// their containers start (until then no container holds the network): this server does
    /// not remove it meanwhile.
    making_on: std::sync::Mutex<std::collections::HashMap<String, usize>>,
    /// What task containers need of each node's container, by container name.
    nodes: std::sync::Mutex<std::collections::HashMap<String, task_container::NodeContainer>>,
    /// Whether the engine nests cgroups, once asked.
    nesting: tokio::sync::OnceCell<bool>,
    agent: std::sync::Arc<AgentSetup>,
}

/// Connects to the engine at `host` (a `unix://` or `tcp://` address) or the local default, and
/// agrees on an API version it speaks. Fails when no engine answers.
pub async fn connect(host: Option<&str>) -> anyhow::Result<Docker> {
    let docker = match host {
        Some(h) if !h.is_empty() => Docker::connect_with_host(h),
        _ => Docker::connect_with_local_defaults(),
    }
    .context("configuring the Docker client")?;
    agree(docker).await
}

/// Connects to a host as `--docker-host` names it: with TLS client certificates when it says so.
pub async fn connect_host(host: &crate::domain::host::HostSpec) -> anyhow::Result<Docker> {
    match &host.tls {
        Some(dir) => connect_tls(&host.url, dir).await,
        None => connect(Some(&host.url)).await,
    }
}

/// Connects to a `tcp://` engine that requires TLS client certificates: `dir` holds the
/// client's `cert.pem` and `key.pem` and the engine's `ca.pem` (Docker's DOCKER_CERT_PATH).
pub async fn connect_tls(host: &str, dir: &std::path::Path) -> anyhow::Result<Docker> {
    for file in ["cert.pem", "key.pem", "ca.pem"] {
        anyhow::ensure!(dir.join(file).is_file(), "{} has no {file}", dir.display());
    }
    let docker = Docker::connect_with_ssl(
        host,
        &dir.join("key.pem"),
        &dir.join("cert.pem"),
        &dir.join("ca.pem"),
        120,
        bollard::API_DEFAULT_VERSION,
    )
    .context("configuring the Docker client with TLS")?;
    agree(docker).await
}

/// Agrees on an API version with the engine and checks that it answers.
async fn agree(docker: Docker) -> anyhow::Result<Docker> {
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

/// How a container of ours goes (a node, a task's own, a volume's filler): killed if it still
/// runs, with the anonymous volumes its image declared (`VOLUME`), which would otherwise stay on
/// the host, one set for every container made. Named volumes (the agent's) are kept.
fn removal() -> bollard::query_parameters::RemoveContainerOptions {
    bollard::query_parameters::RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(true)
        .build()
}

fn status_of(err: &bollard::errors::Error) -> Option<u16> {
    match err {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

impl DockerRuntime {
    pub fn new(docker: Docker, layout: Layout, agent: std::sync::Arc<AgentSetup>) -> Self {
        Self {
            docker,
            agent_volume: tokio::sync::Mutex::default(),
            layout,
            networks: tokio::sync::Mutex::default(),
            making_on: std::sync::Mutex::default(),
            nodes: std::sync::Mutex::default(),
            nesting: tokio::sync::OnceCell::new(),
            agent,
        }
    }

    pub fn client(&self) -> &Docker {
        &self.docker
    }
}
