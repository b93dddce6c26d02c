//! Where nodes live. `docker`: one container per node; `local`: one directory per node and plain
//! processes. Both keep the same contract, including the Azure Batch directory layout under the
//! node's root directory, which is always a directory on this host (bind-mounted into containers).

pub mod docker;
pub mod local;

use std::path::{Path, PathBuf};

pub use docker::DockerRuntime;
pub use local::LocalRuntime;

/// Labels (container labels, or `node.json` for local nodes) that say whose node this is.
pub const LABEL_SERVER: &str = "batchpool.server";
pub const LABEL_ACCOUNT: &str = "batchpool.account";
pub const LABEL_POOL: &str = "batchpool.pool";
pub const LABEL_NODE: &str = "batchpool.node";

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
}

/// A node that is up.
#[derive(Clone, Debug)]
pub struct NodeHandle {
    pub container_id: String,
    pub ip_address: String,
}

/// A node found on the runtime, for adoption after a restart.
#[derive(Clone, Debug)]
pub struct FoundNode {
    pub node_id: String,
    pub running: bool,
}

/// Why a node could not be made, in Azure's terms (`code` goes to the node's errors and the
/// pool's resizeErrors).
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct NodeError {
    pub code: &'static str,
    pub message: String,
}

/// A command to run on a node, as Azure Batch runs task command lines: through `/bin/sh -c` in
/// the working directory, with stdout.txt and stderr.txt written into the task directory.
#[derive(Clone, Debug)]
pub struct ExecSpec {
    pub command_line: String,
    /// Relative to the node root, e.g. `startup`.
    pub task_dir: String,
    pub env: Vec<(String, String)>,
}

/// The wrapper every command runs in: output to the task directory's files, then the user's
/// command line through a shell of its own, from `wd`. The command line travels in an environment
/// variable so that no quoting can break it.
const WRAPPER: &str = r#"cd "$AZ_BATCH_TASK_WORKING_DIR" && exec >"$AZ_BATCH_TASK_DIR/stdout.txt" 2>"$AZ_BATCH_TASK_DIR/stderr.txt" && exec /bin/sh -c "$BATCHPOOL_COMMAND_LINE""#;

pub enum Runtime {
    Docker(DockerRuntime),
    Local(LocalRuntime),
}

impl Runtime {
    pub fn name(&self) -> &'static str {
        match self {
            Runtime::Docker(_) => "docker",
            Runtime::Local(_) => "local",
        }
    }

    /// The node's root directory on this host.
    pub fn host_root(&self, node_id: &str) -> PathBuf {
        self.nodes_dir().join(node_id)
    }

    fn nodes_dir(&self) -> &Path {
        match self {
            Runtime::Docker(d) => &d.nodes_dir,
            Runtime::Local(l) => &l.nodes_dir,
        }
    }

    /// The node's root directory as commands on the node see it (AZ_BATCH_NODE_ROOT_DIR).
    pub fn node_root(&self, node_id: &str) -> String {
        match self {
            Runtime::Docker(_) => docker::NODE_ROOT.to_string(),
            Runtime::Local(_) => self.host_root(node_id).display().to_string(),
        }
    }

    /// Creates and starts the node; if it exists already (a crash mid-way), adopts it.
    pub async fn create_node(&self, spec: &NodeSpec) -> Result<NodeHandle, NodeError> {
        let root = self.host_root(&spec.node_id);
        for dir in ["shared", "startup/wd", "workitems"] {
            tokio::fs::create_dir_all(root.join(dir))
                .await
                .map_err(|e| NodeError {
                    code: "NodeDirectoryFailed",
                    message: format!("cannot create the node directory {}: {e}", root.display()),
                })?;
        }
        match self {
            Runtime::Docker(d) => d.create_node(spec, &root).await,
            Runtime::Local(l) => l.create_node(spec, &root).await,
        }
    }

    /// Removes the node and its directory. Removing a node that is already gone is not an error.
    pub async fn remove_node(&self, server_id: &str, node_id: &str) -> anyhow::Result<()> {
        match self {
            Runtime::Docker(d) => d.remove_node(server_id, node_id).await?,
            Runtime::Local(l) => l.remove_node(node_id).await?,
        }
        let root = self.host_root(node_id);
        match tokio::fs::remove_dir_all(&root).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(anyhow::anyhow!("removing {}: {e}", root.display()))
            }
            _ => Ok(()),
        }
    }

    /// The nodes of this installation that exist on the runtime.
    pub async fn list_nodes(&self, server_id: &str) -> anyhow::Result<Vec<FoundNode>> {
        match self {
            Runtime::Docker(d) => d.list_nodes(server_id).await,
            Runtime::Local(l) => l.list_nodes(server_id).await,
        }
    }

    /// Runs a command on the node and waits for its exit code.
    pub async fn exec(
        &self,
        server_id: &str,
        node_id: &str,
        spec: &ExecSpec,
    ) -> anyhow::Result<i64> {
        let host_task_dir = self.host_root(node_id).join(&spec.task_dir);
        tokio::fs::create_dir_all(host_task_dir.join("wd")).await?;
        let task_dir = format!("{}/{}", self.node_root(node_id), spec.task_dir);
        let mut env = spec.env.clone();
        env.push(("AZ_BATCH_TASK_DIR".into(), task_dir.clone()));
        env.push(("AZ_BATCH_TASK_WORKING_DIR".into(), format!("{task_dir}/wd")));
        env.push(("BATCHPOOL_COMMAND_LINE".into(), spec.command_line.clone()));
        match self {
            Runtime::Docker(d) => d.exec(server_id, node_id, env).await,
            Runtime::Local(l) => l.exec(env).await,
        }
    }
}
