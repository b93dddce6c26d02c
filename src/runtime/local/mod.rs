//! The `local` runtime: a node is a directory under the data directory and an agent process
//! (`batchpool agent`, see agent.rs) that runs its commands as plain processes. It keeps the
//! docker runtime's contract (layout, environment, output files) on a machine without Docker; it
//! does not enforce CPU or memory limits.

mod agent;

use crate::runtime::agents::ASK_TIMEOUT;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use super::agents::{new_secret, Agents};
use super::safe_fs::Dir;
use super::{AttemptPid, FoundNode, Layout, NodeCommand, NodeError, NodeHandle, NodeSpec};
use crate::domain::agent::Work;
use agent::AgentProc;

pub struct LocalRuntime {
    layout: Layout,
    agents: Arc<Agents>,
    /// Where a local node's agent reaches this server.
    agent_url: String,
}

/// The labels of a local node, kept beside its directories, with its agent.
#[derive(serde::Serialize, serde::Deserialize)]
struct NodeLabels {
    server: String,
    account: String,
    pool: String,
    node: String,
    /// Absent for nodes made before local nodes had agents.
    #[serde(default)]
    agent: Option<AgentProc>,
}

const LABELS_FILE: &str = ".batchpool-node.json";

impl LocalRuntime {
    pub fn new(layout: Layout, agents: Arc<Agents>, agent_url: String) -> Self {
        Self {
            layout,
            agents,
            agent_url,
        }
    }

    /// The node's labels. They sit in the node's root, where its tasks write: read without
    /// following links, and no more than a labels file holds.
    fn labels(&self, node_id: &str) -> Option<NodeLabels> {
        let nodes = Dir::open_root(&self.layout.nodes).ok()?;
        let file = nodes
            .open_file(&Path::new(node_id).join(LABELS_FILE))
            .ok()?;
        serde_json::from_reader(std::io::Read::take(file, 4096)).ok()
    }

    pub(super) async fn create_node(&self, spec: &NodeSpec) -> Result<NodeHandle, NodeError> {
        let root = &self.layout.nodes.join(&spec.node_id);
        let failed = |e: std::io::Error| NodeError {
            code: "NodeDirectoryFailed",
            message: format!("cannot create the node directory {}: {e}", root.display()),
        };
        make_node_dirs(root).await.map_err(failed)?;
        // A node half made before a restart keeps its agent, if it runs.
        let agent = match self.labels(&spec.node_id).and_then(|l| l.agent) {
            Some(agent) if agent.alive() => agent,
            _ => {
                // Made again by a server that did not make it (the one that did lost the lead):
                // the node's old agent goes first, with what it runs.
                agent::end_node_processes(&spec.node_id).await;
                AgentProc::spawn(root, &spec.node_id, &self.agent_url, &new_secret()).map_err(
                    |e| NodeError {
                        code: "NodeAgentFailed",
                        message: format!("cannot start node {}'s agent: {e}", spec.node_id),
                    },
                )?
            }
        };
        self.agents.register(&spec.node_id, &agent.secret);
        let labels = NodeLabels {
            server: spec.server_id.clone(),
            account: spec.account.clone(),
            pool: spec.pool_id.clone(),
            node: spec.node_id.clone(),
            agent: Some(agent),
        };
        let json = serde_json::to_vec(&labels).expect("labels serialize");
        let r = root.to_path_buf();
        // One trip to the blocking pool; the root is read without following a task's links.
        tokio::task::spawn_blocking(move || {
            let dir = Dir::open_root(&r)?;
            dir.create_file(LABELS_FILE.as_ref())?.write_all(&json)
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r)
        .map_err(failed)?;
        Ok(NodeHandle {
            container_id: root.display().to_string(),
            ip_address: "127.0.0.1".into(),
            host: "local".into(),
        })
    }

    pub(super) async fn remove_node(&self, node_id: &str) -> anyhow::Result<()> {
        // The directory is the node, which the caller removes; its agent ends here, and ends
        // what it runs.
        if let Some(agent) = self.labels(node_id).and_then(|l| l.agent) {
            agent.stop();
        }
        agent::end_node_processes(node_id).await;
        self.agents.forget(node_id);
        Ok(())
    }

    pub(super) async fn list_nodes(&self, server_id: &str) -> anyhow::Result<Vec<FoundNode>> {
        let mut found = Vec::new();
        let nodes = match Dir::open_root(&self.layout.nodes) {
            Ok(dir) => dir,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(e) => return Err(e.into()),
        };
        for (name, _) in nodes.entries()? {
            let Some(labels) = name.to_str().and_then(|n| self.labels(n)) else {
                continue;
            };
            if labels.server == server_id {
                // A node whose agent is gone (the machine restarted) is made again.
                let running = labels.agent.as_ref().is_some_and(AgentProc::alive);
                if let (true, Some(agent)) = (running, &labels.agent) {
                    self.agents.register(&labels.node, &agent.secret);
                }
                found.push(FoundNode {
                    node_id: labels.node,
                    running,
                    paused: false,
                });
            }
        }
        Ok(found)
    }

    /// Whether this server knows the node's agent: from now, or (after a restart) by the
    /// secret in its labels.
    async fn knows_agent(&self, node_id: &str) -> bool {
        let secret = async { Some(self.labels(node_id)?.agent?.secret) };
        self.agents.learn(node_id, secret).await
    }

    /// Asks the node's agent; `None` if it does not answer.
    async fn ask(&self, node_id: &str, make: impl FnOnce(u64) -> Work) -> Option<bool> {
        if !self.knows_agent(node_id).await {
            return None;
        }
        self.agents.ask(node_id, make, ASK_TIMEOUT).await.ok()
    }
}

impl LocalRuntime {
    pub(super) fn layout(&self) -> &Layout {
        &self.layout
    }

    pub(super) fn agent_advice(&self) -> String {
        format!("it was to reach it at {}", self.agent_url)
    }

    /// The lines of the agent's log written from `since` to `until` (its lines start with their
    /// time; a line without one goes with the line before it).
    pub(super) async fn agent_log(
        &self,
        node_id: &str,
        since: i64,
        until: i64,
    ) -> anyhow::Result<Vec<u8>> {
        let root = self.layout.nodes.join(node_id);
        let log = tokio::task::spawn_blocking(move || agent::AgentProc::log(&root)).await??;
        Ok(lines_between(&log, since, until))
    }

    pub(super) async fn exec(
        &self,
        node_id: &str,
        command: NodeCommand,
        started: crate::runtime::Started,
    ) -> anyhow::Result<i64> {
        anyhow::ensure!(
            self.knows_agent(node_id).await,
            "node {node_id} has no agent"
        );
        self.agents
            .run(node_id, move |id| command.work(id), started)
            .await
    }

    pub(super) fn agent_secret(&self, node_id: &str) -> Option<String> {
        Some(self.labels(node_id)?.agent?.secret)
    }

    /// Through the node's agent; if it does not answer, the group is killed from here.
    pub(super) async fn kill_group(&self, node_id: &str, pid: &AttemptPid) {
        if self.ask(node_id, |id| pid.kill(id)).await.is_none() && pid.pid > 1 {
            // SAFETY: kill has no memory preconditions; a negative pid names a process group.
            unsafe { libc::kill(-pid.pid, libc::SIGKILL) };
        }
    }

    pub(super) async fn is_alive(&self, node_id: &str, pid: &AttemptPid) -> Option<bool> {
        match self.ask(node_id, |id| pid.alive(id)).await {
            Some(alive) => Some(alive),
            // SAFETY: signal 0 only checks that the process exists.
            None => Some(unsafe { libc::kill(pid.pid, 0) == 0 }),
        }
    }
}

/// The lines of `log` whose leading RFC 3339 time lies from `since` to `until` (Unix seconds;
/// `until` 0: no end).
fn lines_between(log: &[u8], since: i64, until: i64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut keep = false;
    for line in log.split_inclusive(|b| *b == b'\n') {
        let text = String::from_utf8_lossy(line);
        let stamp = text.split_whitespace().next().unwrap_or_default();
        if let Ok(t) = chrono::DateTime::parse_from_rfc3339(stamp) {
            let t = t.timestamp();
            keep = t >= since && (until == 0 || t <= until);
        }
        if keep {
            out.extend_from_slice(line);
        }
    }
    out
}

/// Makes a local node's root and the directories it starts with. The root is the server's;
/// below it, a restarted node's tasks may have left links, which `safe_fs` replaces.
async fn make_node_dirs(root: &Path) -> std::io::Result<()> {
    let r = root.to_path_buf();
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&r)?;
        let node = Dir::open_root(&r)?;
        for dir in crate::runtime::NODE_DIRS {
            node.create_dir_all(Path::new(dir))?;
        }
        Ok(())
    })
    .await
    .map_err(std::io::Error::other)
    .and_then(|r| r)
}
