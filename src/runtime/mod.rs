//! Where nodes live. `docker`: one container per node; `local`: one directory per node and plain
//! processes. Both keep the same contract, including the Azure Batch directory layout under the
//! node's root directory, which is always a directory on this host (bind-mounted into containers).

pub mod docker;
pub mod local;
pub mod safe_fs;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use anyhow::Context;
use safe_fs::{Below, Dir};

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
/// the task's `wd`, with stdout.txt and stderr.txt written into the task directory as it runs.
#[derive(Clone, Debug)]
pub struct ExecSpec {
    pub command_line: String,
    pub dirs: TaskDirs,
    /// Each attempt keeps its pid and exit code apart, so a late write of an old attempt never
    /// passes for the new one's.
    pub attempt: i32,
    pub env: Vec<(String, String)>,
}

/// A task directory, on this host and as the node sees it. On this host it lies below a
/// directory the server made (an account's workitems, a node's root): everything below that is
/// the tasks' to write, so it is only ever reached through `safe_fs`.
#[derive(Clone, Debug)]
pub struct TaskDirs {
    pub host: Below,
    pub node: String,
}

impl TaskDirs {
    /// Where the wrapper leaves an attempt's record, below the task directory: its pid on the
    /// first line, and once the command has ended, its exit code on the second. One file, not a
    /// directory of two: every file or directory a task makes costs an inode on the hot path.
    fn state_file(attempt: i32) -> PathBuf {
        Path::new(STATE_DIR).join(attempt.to_string())
    }

    /// Reads the attempt's record, never through a link.
    async fn record(&self, attempt: i32) -> Option<String> {
        self.host
            .with(move |root, rel| {
                let file = root.open_file(&rel.join(Self::state_file(attempt)))?;
                // A record is two short lines; a task cannot make the server read more.
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::io::Read::take(file, 64), &mut text)?;
                Ok(text)
            })
            .await
            .ok()
    }
}

/// An attempt's record: (pid, exit code once written). A line counts once its newline is there,
/// so a half-written record reads as "not yet".
fn parse_record(text: &str) -> (Option<i32>, Option<i64>) {
    let mut lines = text.split_inclusive('\n').filter(|l| l.ends_with('\n'));
    let pid = lines.next().and_then(|l| l.trim().parse().ok());
    let exit = lines.next().and_then(|l| l.trim().parse().ok());
    (pid, exit)
}

/// Hidden in file listings: the wrapper's bookkeeping inside a task directory.
pub const STATE_DIR: &str = ".batchpool";

/// The wrapper every command runs in. It records its pid (the process group to kill) and, when
/// the command ends, its exit code (both in the attempt's state file): a restarted server reads the outcome of an attempt it did
/// not see finish. It also prints its pid first on its own output, which is the server's: so
/// the server knows whom to kill without reading a file in a directory that may be gone. The command line travels in an environment variable, so no quoting breaks it.
/// It starts no program but itself (the directories are made beforehand, and a half-written exit
/// file reads as "not yet"), since every process costs on the hot path: the command runs in a
/// subshell (a fork, no exec of a second shell), where its `exit`, `exec`, options and syntax
/// errors end the subshell only, as they would end a `/bin/sh -c` of their own.
const WRAPPER: &str = r#"cd "$AZ_BATCH_TASK_WORKING_DIR" || exit 127
echo $$ > "$BATCHPOOL_STATE"
echo $$
(eval "$BATCHPOOL_COMMAND_LINE") >"$AZ_BATCH_TASK_DIR/stdout.txt" 2>"$AZ_BATCH_TASK_DIR/stderr.txt" </dev/null
code=$?
echo $code >> "$BATCHPOOL_STATE"
exit $code"#;

/// Where nodes and task directories live on this host.
#[derive(Clone, Debug)]
pub struct Layout {
    pub nodes: PathBuf,
    pub workitems: PathBuf,
}

impl Layout {
    pub fn new(data_dir: &Path) -> Self {
        Self {
            nodes: data_dir.join("nodes"),
            workitems: data_dir.join("workitems"),
        }
    }

    pub fn account_workitems(&self, account: &str) -> PathBuf {
        self.workitems.join(account)
    }

    /// A job's directory: Azure's `workitems/{job}` below its account's workitems.
    pub fn job_dir(&self, account: &str, job_id: &str) -> Below {
        Below {
            root: self.account_workitems(account),
            rel: PathBuf::from(job_id),
        }
    }

    /// A job task's directory: Azure's `workitems/{job}/job-1/{task}`.
    pub fn task_dir(&self, account: &str, job_id: &str, task_id: &str) -> Below {
        self.job_dir(account, job_id)
            .join(Path::new("job-1").join(task_id))
    }
}

/// A future a [`NodeRuntime`] returns: boxed, so the trait can be a `dyn` object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What differs from one kind of node to another (a container, a directory and processes, a node
/// agent): adding a runtime means implementing this, and nothing else looks at which runtime it
/// is. What every runtime shares (the directory layout, preparing node and task directories, the
/// wrapper, the attempt records) is [`Runtime`]'s, around it.
pub trait NodeRuntime: Send + Sync {
    /// The runtime's name, for the log.
    fn name(&self) -> &'static str;

    /// Where this runtime keeps node and task directories on this host.
    fn layout(&self) -> &Layout;

    /// The node's root directory as commands on the node see it (AZ_BATCH_NODE_ROOT_DIR), given
    /// where it is on this host.
    fn node_root(&self, host_root: &Path) -> String;

    /// Makes sure the default node image is there, once at start; most runtimes have none.
    fn ensure_default_image<'a>(&'a self, _image: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// Whether the runtime answers, for `/health/ready`.
    fn reachable(&self) -> BoxFuture<'_, bool>;

    /// Creates and starts the node, whose `root` (on this host) and account's `workitems` are
    /// made already; if the node exists already (a crash mid-way), adopts it.
    fn create_node<'a>(
        &'a self,
        spec: &'a NodeSpec,
        root: &'a Path,
        workitems: &'a Path,
    ) -> BoxFuture<'a, Result<NodeHandle, NodeError>>;

    /// Removes the node (not its directory); a node that is already gone is not an error.
    fn remove_node<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>>;

    /// Restarts the node (a reboot).
    fn restart_node<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>>;

    /// The nodes of this installation that exist on the runtime.
    fn list_nodes<'a>(
        &'a self,
        server_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Vec<FoundNode>>>;

    /// Runs the [`WRAPPER`] on the node with `env` and waits for its exit code; `started` learns
    /// the pid of its process group as soon as it runs.
    fn exec<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        env: Vec<(String, String)>,
        started: Option<tokio::sync::oneshot::Sender<i32>>,
    ) -> BoxFuture<'a, anyhow::Result<i64>>;

    /// Kills the process group `pid` (> 1) on the node.
    fn kill_group<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        pid: i32,
    ) -> BoxFuture<'a, anyhow::Result<()>>;

    /// Whether the process `pid` is alive on the node.
    fn is_alive<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        pid: i32,
    ) -> BoxFuture<'a, bool>;
}

/// The node runtime this server uses, with what every runtime shares.
pub struct Runtime {
    node: Box<dyn NodeRuntime>,
}

impl Runtime {
    pub fn new(node: impl NodeRuntime + 'static) -> Self {
        Self {
            node: Box::new(node),
        }
    }

    pub fn name(&self) -> &'static str {
        self.node.name()
    }

    /// The node's root directory on this host.
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

    /// Makes sure the default node image is there (see [`NodeRuntime::ensure_default_image`]).
    pub async fn ensure_default_image(&self, image: &str) {
        self.node.ensure_default_image(image).await
    }

    /// Whether the runtime answers, for `/health/ready`.
    pub async fn reachable(&self) -> bool {
        self.node.reachable().await
    }

    /// The start task's directory on a node.
    pub fn start_task_dirs(&self, node_id: &str) -> TaskDirs {
        TaskDirs {
            host: Below {
                root: self.host_root(node_id),
                rel: PathBuf::from("startup"),
            },
            node: format!("{}/startup", self.node_root(node_id)),
        }
    }

    /// A job task's directory: Azure's `workitems/{job}/job-1/{task}`. It lives in the account's
    /// workitems directory, outside the node, so a task's files outlive the node that ran it.
    pub fn task_dirs(&self, account: &str, node_id: &str, job_id: &str, task_id: &str) -> TaskDirs {
        TaskDirs {
            host: self.layout().task_dir(account, job_id, task_id),
            node: format!(
                "{}/workitems/{job_id}/job-1/{task_id}",
                self.node_root(node_id)
            ),
        }
    }

    /// Creates and starts the node; if it exists already (a crash mid-way), adopts it.
    pub async fn create_node(&self, spec: &NodeSpec) -> Result<NodeHandle, NodeError> {
        let root = self.host_root(&spec.node_id);
        let workitems = self.layout().account_workitems(&spec.account);
        let dir_failed = |e: std::io::Error| NodeError {
            code: "NodeDirectoryFailed",
            message: format!("cannot create the node directory {}: {e}", root.display()),
        };
        let (r, w) = (root.clone(), workitems.clone());
        // The node's root and the account's workitems are the server's; below the root, a
        // restarted node's tasks may have left links, which `safe_fs` replaces.
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&r)?;
            std::fs::create_dir_all(&w)?;
            let node = Dir::open_root(&r)?;
            node.create_dir_all(Path::new("shared"))?;
            node.create_dir_all(Path::new("startup/wd"))?;
            Ok(())
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r)
        .map_err(dir_failed)?;
        self.node.create_node(spec, &root, &workitems).await
    }

    /// Removes the node and its directory. Removing a node that is already gone is not an error.
    pub async fn remove_node(&self, server_id: &str, node_id: &str) -> anyhow::Result<()> {
        self.node.remove_node(server_id, node_id).await?;
        // Links in it (a local node's workitems, any a task made) go as links.
        Below {
            root: self.layout().nodes.clone(),
            rel: PathBuf::from(node_id),
        }
        .remove()
        .await;
        Ok(())
    }

    /// Restarts a node (a reboot).
    pub async fn restart_node(&self, server_id: &str, node_id: &str) -> anyhow::Result<()> {
        self.node.restart_node(server_id, node_id).await
    }

    /// The nodes of this installation that exist on the runtime.
    pub async fn list_nodes(&self, server_id: &str) -> anyhow::Result<Vec<FoundNode>> {
        self.node.list_nodes(server_id).await
    }

    /// Runs a command on the node and waits for its exit code; `started` learns the pid of its
    /// process group as soon as it runs.
    pub async fn exec(
        &self,
        server_id: &str,
        node_id: &str,
        spec: &ExecSpec,
        started: Option<tokio::sync::oneshot::Sender<i32>>,
    ) -> anyhow::Result<i64> {
        let attempt = spec.attempt;
        // One trip to the blocking pool for all of it, not one each. The root is the server's
        // (made with the node, unless removed since).
        spec.dirs
            .host
            .create_then(move |task| {
                task.create_dir_all(Path::new(STATE_DIR))?;
                // A record left by an earlier run of this attempt number must not pass for this
                // one's.
                task.remove_all(&TaskDirs::state_file(attempt))?;
                task.create_dir_all(Path::new("wd")).map(|_| ())
            })
            .await
            .with_context(|| format!("preparing the task directory {}", spec.dirs.node))?;
        let mut env = spec.env.clone();
        env.push(("AZ_BATCH_TASK_DIR".into(), spec.dirs.node.clone()));
        env.push((
            "AZ_BATCH_TASK_WORKING_DIR".into(),
            format!("{}/wd", spec.dirs.node),
        ));
        env.push((
            "BATCHPOOL_STATE".into(),
            format!("{}/{STATE_DIR}/{}", spec.dirs.node, spec.attempt),
        ));
        env.push(("BATCHPOOL_COMMAND_LINE".into(), spec.command_line.clone()));
        self.node.exec(server_id, node_id, env, started).await
    }

    /// The exit code an attempt recorded, if it finished.
    pub async fn recorded_exit(dirs: &TaskDirs, attempt: i32) -> Option<i64> {
        parse_record(&dirs.record(attempt).await?).1
    }

    /// The pid an attempt recorded: only for attempts a previous server started, whose pid
    /// this one never saw.
    pub async fn recorded_pid(dirs: &TaskDirs, attempt: i32) -> Option<i32> {
        parse_record(&dirs.record(attempt).await?)
            .0
            .filter(|pid| *pid > 1)
    }

    /// Kills an attempt's whole process tree (its process group), wherever it runs.
    pub async fn kill(&self, server_id: &str, node_id: &str, pid: i32) -> anyhow::Result<()> {
        if pid <= 1 {
            return Ok(());
        }
        self.node.kill_group(server_id, node_id, pid).await
    }

    /// Whether an attempt's process is still alive (after a restart, to wait for it).
    pub async fn is_alive(&self, server_id: &str, node_id: &str, pid: i32) -> bool {
        self.node.is_alive(server_id, node_id, pid).await
    }
}

#[cfg(test)]
mod tests {
    use super::parse_record;

    #[test]
    fn a_record_counts_its_lines_once_they_end() {
        assert_eq!(parse_record(""), (None, None));
        assert_eq!(parse_record("12"), (None, None));
        assert_eq!(parse_record("12\n"), (Some(12), None));
        assert_eq!(parse_record("12\n13"), (Some(12), None));
        assert_eq!(parse_record("12\n137\n"), (Some(12), Some(137)));
    }
}
