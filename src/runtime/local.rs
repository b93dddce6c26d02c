//! The `local` runtime: a node is a directory under the data directory, and commands are plain
//! processes. It keeps the docker runtime's contract (layout, environment, output files) on a
//! machine without Docker; it does not enforce CPU or memory limits.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use super::safe_fs::Dir;
use super::task::WRAPPER;
use super::{BoxFuture, FoundNode, Layout, NodeError, NodeHandle, NodeRuntime, NodeSpec};

pub struct LocalRuntime {
    layout: Layout,
    /// The process groups running on each node, so that removing a node ends them as removing
    /// a container does.
    groups: Mutex<HashMap<String, HashSet<i32>>>,
}

/// The labels of a local node, kept beside its directories.
#[derive(serde::Serialize, serde::Deserialize)]
struct NodeLabels {
    server: String,
    account: String,
    pool: String,
    node: String,
}

const LABELS_FILE: &str = ".batchpool-node.json";

impl LocalRuntime {
    pub fn new(layout: Layout) -> Self {
        Self {
            layout,
            groups: Mutex::default(),
        }
    }

    async fn create_node(
        &self,
        spec: &NodeSpec,
        root: &Path,
        workitems: &Path,
    ) -> Result<NodeHandle, NodeError> {
        let labels = NodeLabels {
            server: spec.server_id.clone(),
            account: spec.account.clone(),
            pool: spec.pool_id.clone(),
            node: spec.node_id.clone(),
        };
        let json = serde_json::to_vec(&labels).expect("labels serialize");
        let (r, w) = (root.to_path_buf(), workitems.to_path_buf());
        // One trip to the blocking pool; the root is read without following a task's links.
        tokio::task::spawn_blocking(move || {
            let dir = Dir::open_root(&r)?;
            // Commands find the account's workitems below the node's root, as in a container.
            if dir.metadata(Path::new("workitems")).is_err() {
                std::os::unix::fs::symlink(&w, r.join("workitems"))?;
            }
            dir.create_file(LABELS_FILE.as_ref())?.write_all(&json)
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r)
        .map_err(|e| NodeError {
            code: "NodeDirectoryFailed",
            message: format!("cannot create the node directory {}: {e}", root.display()),
        })?;
        Ok(NodeHandle {
            container_id: root.display().to_string(),
            ip_address: "127.0.0.1".into(),
        })
    }

    async fn remove_node(&self, node_id: &str) -> anyhow::Result<()> {
        // The directory is the node, which the caller removes; its processes end here.
        let groups = self.groups.lock().expect("lock").remove(node_id);
        for pgid in groups.into_iter().flatten() {
            // SAFETY: kill has no memory preconditions; a negative pid names a process group.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
        Ok(())
    }

    async fn list_nodes(&self, server_id: &str) -> anyhow::Result<Vec<FoundNode>> {
        let mut found = Vec::new();
        let nodes = match Dir::open_root(&self.layout.nodes) {
            Ok(dir) => dir,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(e) => return Err(e.into()),
        };
        for (name, _) in nodes.entries()? {
            // The labels sit in the node's root, where its tasks write: read without following.
            let Ok(file) = nodes.open_file(&Path::new(&name).join(LABELS_FILE)) else {
                continue;
            };
            let Ok(labels) =
                serde_json::from_reader::<_, NodeLabels>(std::io::Read::take(file, 4096))
            else {
                continue;
            };
            if labels.server == server_id {
                found.push(FoundNode {
                    node_id: labels.node,
                    running: true,
                });
            }
        }
        Ok(found)
    }

    async fn exec(
        &self,
        node_id: &str,
        env: Vec<(String, String)>,
        started: Option<tokio::sync::oneshot::Sender<i32>>,
    ) -> anyhow::Result<i64> {
        let mut child = tokio::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(WRAPPER)
            // Only what a node would have: the server's own environment (its secrets) stays out.
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("LANG", "C.UTF-8")
            .envs(env)
            .stdin(std::process::Stdio::null())
            // The wrapper prints its pid there; here the child's id says it.
            .stdout(std::process::Stdio::null())
            // Its own process group: a kill reaches the whole task tree, and signals meant for
            // the server (Ctrl-C) do not reach tasks.
            .process_group(0)
            .spawn()?;
        let pgid = child.id().map(|id| id as i32);
        if let Some(pgid) = pgid {
            self.groups
                .lock()
                .expect("lock")
                .entry(node_id.to_string())
                .or_default()
                .insert(pgid);
            if let Some(started) = started {
                let _ = started.send(pgid);
            }
        }
        let status = child.wait().await;
        if let Some(pgid) = pgid {
            if let Some(groups) = self.groups.lock().expect("lock").get_mut(node_id) {
                groups.remove(&pgid);
            }
        }
        let status = status?;
        // A process killed by a signal reports 128 + the signal, as a shell would.
        use std::os::unix::process::ExitStatusExt;
        Ok(status
            .code()
            .map(i64::from)
            .unwrap_or_else(|| 128 + i64::from(status.signal().unwrap_or(0))))
    }
}

impl NodeRuntime for LocalRuntime {
    fn name(&self) -> &'static str {
        "local"
    }

    fn layout(&self) -> &Layout {
        &self.layout
    }

    fn node_root(&self, host_root: &Path) -> String {
        host_root.display().to_string()
    }

    fn reachable(&self) -> BoxFuture<'_, bool> {
        Box::pin(async { true })
    }

    fn create_node<'a>(
        &'a self,
        spec: &'a NodeSpec,
        root: &'a Path,
        workitems: &'a Path,
    ) -> BoxFuture<'a, Result<NodeHandle, NodeError>> {
        Box::pin(LocalRuntime::create_node(self, spec, root, workitems))
    }

    fn remove_node<'a>(
        &'a self,
        _server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(LocalRuntime::remove_node(self, node_id))
    }

    /// A local node has nothing to restart.
    fn restart_node<'a>(
        &'a self,
        _server_id: &'a str,
        _node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn list_nodes<'a>(
        &'a self,
        server_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Vec<FoundNode>>> {
        Box::pin(LocalRuntime::list_nodes(self, server_id))
    }

    fn exec<'a>(
        &'a self,
        _server_id: &'a str,
        node_id: &'a str,
        env: Vec<(String, String)>,
        started: Option<tokio::sync::oneshot::Sender<i32>>,
    ) -> BoxFuture<'a, anyhow::Result<i64>> {
        Box::pin(LocalRuntime::exec(self, node_id, env, started))
    }

    fn kill_group<'a>(
        &'a self,
        _server_id: &'a str,
        _node_id: &'a str,
        pid: i32,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            // SAFETY: kill has no memory preconditions; a negative pid names a process group.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            Ok(())
        })
    }

    fn is_alive<'a>(
        &'a self,
        _server_id: &'a str,
        _node_id: &'a str,
        pid: i32,
    ) -> BoxFuture<'a, bool> {
        // SAFETY: signal 0 only checks that the process exists.
        Box::pin(async move { unsafe { libc::kill(pid, 0) == 0 } })
    }
}
