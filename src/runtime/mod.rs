//! Where nodes live. `docker`: one container per node, its root a volume of its own on its
//! engine; `local`: one directory per node on this host and plain processes. Both keep the same
//! contract, including the Azure Batch directory layout under the node's root directory, which
//! the server reaches only through the node's agent.

pub mod agents;
pub mod docker;
pub mod keyed_locks;
mod layout;
pub mod local;
mod node_files;
mod nodes;
mod processes;
mod removing;
pub mod simulated;
mod task;
mod task_files;

pub use crate::sys::safe_fs;

use std::path::{Path, PathBuf};

use safe_fs::Below;

pub use docker::{DockerHosts, DockerRuntime};
pub use layout::Layout;
pub use local::LocalRuntime;
pub use nodes::{Nodes, MAX_AGENT_LOG};
pub use simulated::SimulatedRuntime;
pub use task::{
    container_label, AttemptPid, ExecSpec, ExitReport, NodeCommand, Started, TaskContainer,
    TaskDirs, STATE_DIR,
};
pub use task_files::{FileData, TaskFiles};

use crate::domain::container::PoolContainers;

/// Labels (container labels, or `node.json` for local nodes) that say whose node this is.
pub const LABEL_SERVER: &str = "batchpool.server";
pub const LABEL_ACCOUNT: &str = "batchpool.account";
pub const LABEL_POOL: &str = "batchpool.pool";
pub const LABEL_NODE: &str = "batchpool.node";
/// On a task's own container: `job/task/attempt`.
pub const LABEL_TASK: &str = "batchpool.task";
/// Before each of the pool's resourceTags, on its nodes' containers and their tasks'.
pub const LABEL_TAG_PREFIX: &str = "batchpool.tag.";

/// What a node is made from.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    pub server_id: String,
    pub account: String,
    pub pool_id: String,
    pub node_id: String,
    pub image: String,
    pub vcpus: f64,
    pub memory_mib: i64,
    /// The pool's containerConfiguration: images its tasks' containers run, made ready as the
    /// node starts, and the registries to pull them from. None: the pool runs no containers.
    pub containers: Option<PoolContainers>,
    /// The pool's enableInterNodeCommunication: its nodes go on one host, where they reach
    /// each other on their account's network.
    pub together: bool,
    /// The pool's resourceTags, which its node's container carries as labels.
    pub tags: Vec<(String, String)>,
}

/// A node that is up.
#[derive(Clone, Debug)]
pub struct NodeHandle {
    pub container_id: String,
    pub ip_address: String,
    /// Where it runs: its Docker engine's URL, or `local`.
    pub host: String,
}

/// A node found on the runtime, for adoption after a restart.
#[derive(Clone, Debug)]
pub struct FoundNode {
    pub node_id: String,
    /// Its processes are there: running, or frozen (`paused`).
    pub running: bool,
    /// Frozen (a Docker container paused): its processes are there, stopped.
    pub paused: bool,
}

/// The nodes of this installation found on the runtime, and the Docker hosts that could not be
/// asked: nodes on those may run still, and are not among `nodes`.
#[derive(Debug, Default)]
pub struct Found {
    pub nodes: Vec<FoundNode>,
    /// The URLs of the hosts that did not answer.
    pub unanswered: Vec<String>,
}

impl Found {
    /// The nodes whose processes are there (running, or frozen).
    pub fn running(&self) -> std::collections::HashSet<&str> {
        let running = self.nodes.iter().filter(|n| n.running);
        running.map(|n| n.node_id.as_str()).collect()
    }
}

/// Why a task's container could not run, in Azure's terms (`code` goes to the task's
/// failureInfo, and the task is retried as a task whose resource files failed).
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ContainerError {
    pub code: &'static str,
    pub message: String,
}

/// The code of a node that no host has room for.
pub const ALLOCATION_FAILED: &str = "AllocationFailed";

/// The code of a node whose agent did not answer: the node's doing, not its task's.
pub const AGENT_UNREACHABLE: &str = "NodeAgentUnreachable";

/// Why a node could not be made, in Azure's terms (`code` goes to the node's errors and the
/// pool's resizeErrors).
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct NodeError {
    pub code: &'static str,
    pub message: String,
}

/// A job task's directory below its node's root: Azure's `workitems/{job}/job-1/{task}`.
pub fn task_dir(job_id: &str, task_id: &str) -> PathBuf {
    Path::new("workitems")
        .join(job_id)
        .join("job-1")
        .join(task_id)
}

/// A job's directory below a node's root: `workitems/{job}`.
pub fn job_dir(job_id: &str) -> PathBuf {
    Path::new("workitems").join(job_id)
}

/// A job's preparation and release tasks' directory below a node's root: `jobprep/{job}`.
pub fn job_prep_dir(job_id: &str) -> PathBuf {
    Path::new("jobprep").join(job_id)
}

/// The directories below a node's root that it starts with: Azure's shared directory, its
/// tasks' directories and the start task's working directory.
pub const NODE_DIRS: [&str; 3] = ["shared", "workitems", "startup/wd"];

/// The node runtime this server uses, with what every runtime shares.
pub struct Runtime {
    node: Nodes,
    /// The agents of the nodes, as this server knows them.
    pub agents: std::sync::Arc<agents::Agents>,
    /// This installation's id, which names its nodes on the runtime.
    server_id: String,
    /// Task directories held for their removal.
    removing: removing::Removing,
}

impl Runtime {
    pub fn new(
        node: impl Into<Nodes>,
        agents: std::sync::Arc<agents::Agents>,
        server_id: &str,
    ) -> Self {
        Self {
            node: node.into(),
            agents,
            server_id: server_id.to_string(),
            removing: keyed_locks::KeyedLocks::new(),
        }
    }

    pub fn name(&self) -> &'static str {
        self.node.name()
    }

    /// The node's root directory as this host names it: a local node's directory, or for a
    /// Docker node only a name for its volume, through whose agent every path below it goes.
    pub fn host_root(&self, node_id: &str) -> PathBuf {
        self.layout().nodes.join(node_id)
    }

    /// Where this runtime keeps node and task directories.
    pub fn layout(&self) -> &Layout {
        self.node.layout()
    }

    /// The node's root directory as commands on the node see it (AZ_BATCH_NODE_ROOT_DIR).
    pub fn node_root(&self, node_id: &str) -> String {
        self.node.node_root(&self.host_root(node_id))
    }

    /// This program as a node's commands run it (see [`Nodes::program_in_node`]).
    pub fn program_in_node(&self) -> Vec<String> {
        self.node.program_in_node()
    }

    /// Makes sure the default node image is there (see [`Nodes::ensure_default_image`]).
    pub async fn ensure_default_image(&self, image: &str) {
        self.node.ensure_default_image(image).await
    }

    /// The secret of the node's agent, if it runs one (see [`Nodes::agent_secret`]).
    pub async fn agent_secret(&self, node_id: &str) -> Option<String> {
        self.node.agent_secret(&self.server_id, node_id).await
    }

    /// Whether the runtime answers, for `/health/ready`.
    pub async fn reachable(&self) -> bool {
        self.node.reachable().await
    }

    /// The start task's directory on a node.
    pub fn start_task_dirs(&self, node_id: &str) -> TaskDirs {
        self.dirs_on_node(node_id, PathBuf::from("startup"))
    }

    /// A job's preparation or release task's directory on one node: `jobprep/{job}/{task}` below
    /// the node's root; tasks find it through AZ_BATCH_JOB_PREP_DIR.
    pub fn job_prep_dirs(&self, node_id: &str, job_id: &str, task_id: &str) -> TaskDirs {
        self.dirs_on_node(node_id, job_prep_dir(job_id).join(task_id))
    }

    /// A job task's directory on the node that runs it: Azure's `workitems/{job}/job-1/{task}`
    /// below the node's root. As on Azure, it lives and goes with its node.
    pub fn task_dirs(&self, node_id: &str, job_id: &str, task_id: &str) -> TaskDirs {
        self.dirs_on_node(node_id, task_dir(job_id, task_id))
    }

    /// A command's directory `rel` below the node's root, as this host names it and as the
    /// node sees it.
    fn dirs_on_node(&self, node_id: &str, rel: PathBuf) -> TaskDirs {
        let node_root = self.node_root(node_id);
        TaskDirs {
            node: format!("{node_root}/{}", rel.display()),
            host: Below {
                root: self.host_root(node_id),
                rel,
            },
            node_base: node_root,
        }
    }

    /// Removes `rel` below the node's root, and everything in it, through the node's agent
    /// (see [`file`](Self::file)); what is not there is not an error. A directory an agent
    /// cannot remove now stays until its node goes. One question at a time: the agent stops a
    /// removal before this server would give up on it (so none goes on unseen, once the caller
    /// has moved on), and the next question goes on from there.
    pub async fn remove_on_node(&self, node_id: &str, rel: &Path) {
        use crate::domain::agent::FileError;
        let at = Below {
            root: self.host_root(node_id),
            rel: rel.to_path_buf(),
        };
        let refused = loop {
            let op = crate::domain::agent::FileOp::Remove { recursive: true };
            match self.file(Some(node_id), &at, op).await {
                Ok(agents::FileAnswer::Refused {
                    error: FileError::Unfinished,
                    ..
                }) => continue,
                Ok(agents::FileAnswer::Refused { error, message })
                    if error != FileError::NotFound =>
                {
                    break message
                }
                Ok(_) => return,
                Err(e) => break e.message,
            }
        };
        tracing::warn!(node = node_id, path = %rel.display(), error = %refused, "removing a directory on a node failed");
    }

    /// Creates and starts the node; if it exists already (a crash mid-way), adopts it. It is
    /// ready once its agent says hello ([`node_ready`](Self::node_ready)).
    pub async fn start_node(&self, spec: &NodeSpec) -> Result<NodeHandle, NodeError> {
        self.node.create_node(spec).await
    }

    /// Waits for a started node's agent to say hello, up to the agent timeout.
    pub async fn node_ready(&self, node_id: &str) -> Result<(), NodeError> {
        let advice = self.node.agent_advice();
        self.agents.await_hello(node_id, &advice).await
    }

    /// Removes the node and its directory. Removing a node that is already gone is not an error.
    pub async fn remove_node(&self, node_id: &str) -> anyhow::Result<()> {
        self.node.remove_node(&self.server_id, node_id).await?;
        // A local node's directory (or a Docker node's made by a server before nodes had
        // volumes of their own). Links in it (any a task made) go as links.
        Below {
            root: self.layout().nodes.clone(),
            rel: PathBuf::from(node_id),
        }
        .remove()
        .await;
        Ok(())
    }

    /// The node agent's log (see [`Nodes::agent_log`]).
    pub async fn agent_log(
        &self,
        node_id: &str,
        since: i64,
        until: i64,
    ) -> anyhow::Result<Vec<u8>> {
        self.node
            .agent_log(&self.server_id, node_id, since, until)
            .await
    }

    /// Restarts a node (a reboot).
    pub async fn restart_node(&self, node_id: &str) -> anyhow::Result<()> {
        self.node.restart_node(&self.server_id, node_id).await
    }

    /// Thaws a frozen node ([`FoundNode::paused`]): its processes go on where they stopped.
    pub async fn thaw_node(&self, node_id: &str) -> anyhow::Result<()> {
        self.node.thaw_node(&self.server_id, node_id).await
    }

    /// Stops a node, keeping its disk (a deallocate).
    pub async fn stop_node(&self, node_id: &str) -> anyhow::Result<()> {
        self.node.stop_node(&self.server_id, node_id).await
    }

    /// Takes the hosts added at run time (see [`Nodes::sync_hosts`]).
    pub async fn sync_hosts(&self, hosts: Vec<crate::domain::host::HostSpec>) {
        self.node.sync_hosts(&self.server_id, hosts).await
    }

    /// What the nodes' commands use, as their agents (connected to this server) last said.
    pub fn node_loads(&self) -> Vec<crate::domain::agent::NodeLoad> {
        self.agents.loads()
    }

    /// Whether a node of `spec` fits on a host now (see [`Nodes::has_room`]).
    pub fn has_room(&self, spec: &NodeSpec) -> bool {
        self.node.has_room(spec)
    }

    /// Low-priority nodes to preempt for a node that finds no room (see
    /// [`Nodes::room_for`]).
    pub fn room_for(&self, spec: &NodeSpec, candidates: &[String]) -> Option<Vec<String>> {
        self.node.room_for(spec, candidates)
    }

    /// The nodes lost with their host (see [`Nodes::lost_nodes`]).
    pub async fn lost_nodes(&self) -> Vec<String> {
        self.node.lost_nodes(&self.server_id).await
    }

    /// The nodes whose agents fell silent: for longer than the agent timeout (lost), and long
    /// enough to be `unknown` (see [`agents::Agents::silent`]).
    pub fn silent_nodes(&self) -> agents::Silent {
        self.agents.silent()
    }

    /// The nodes of this installation that exist on the runtime, on the hosts that answer.
    pub async fn list_nodes(&self) -> anyhow::Result<Found> {
        self.node.list_nodes(&self.server_id).await
    }
}
