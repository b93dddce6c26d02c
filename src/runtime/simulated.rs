//! The `simulated` runtime: nodes are simulated by a `batchpool fleet-sim` process
//! (`crate::sim`), which this server asks to make, stop, restart and remove them, as it asks a
//! Docker engine for containers. Each node's agent speaks the agent protocol to this server, so
//! everything past making the node (work, events, files, adoption after a restart) takes the
//! same path as on the other runtimes. For measuring the server with thousands of nodes
//! (docs/fleet-sim.md); the simulated commands only pretend to run.

use crate::runtime::agents::ASK_TIMEOUT;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::agents::{new_secret, Agents};
use super::nodes::NODE_ROOT;
use super::{
    AttemptPid, FoundNode, Layout, NodeCommand, NodeError, NodeHandle, NodeSpec, NODE_DIRS,
};
use crate::domain::agent::Work;
use crate::domain::fleet::{NodeOrder, SimNode};

pub struct SimulatedRuntime {
    layout: Layout,
    agents: Arc<Agents>,
    /// Where simulated nodes' agents reach this server.
    agent_url: String,
    /// The simulator's URL.
    fleet: String,
    http: reqwest::Client,
    /// Requests to the simulator at once: after a restart every agent's first request makes the
    /// server look its node up, and 10,000 lookups on as many connections exhausted the
    /// process's open files.
    calls: tokio::sync::Semaphore,
}

/// At most this many requests to the simulator at once.
const CALLS: usize = 64;

impl SimulatedRuntime {
    pub fn new(layout: Layout, agents: Arc<Agents>, agent_url: String, fleet: &str) -> Self {
        Self {
            layout,
            agents,
            agent_url,
            fleet: fleet.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .tls_certs_only([])
                .build()
                .expect("an HTTP client"),
            calls: tokio::sync::Semaphore::new(CALLS),
        }
    }

    pub(super) async fn create_node(&self, spec: &NodeSpec) -> Result<NodeHandle, NodeError> {
        if spec.containers.is_some() {
            return Err(NodeError {
                code: "ContainerNotSupported",
                message: "the simulated runtime runs no containers: make the pool without containerConfiguration".into(),
            });
        }
        let order = NodeOrder {
            server: spec.server_id.clone(),
            node: spec.node_id.clone(),
            secret: new_secret(),
            url: self.agent_url.clone(),
            dirs: NODE_DIRS
                .iter()
                .map(|d| format!("{NODE_ROOT}/{d}"))
                .collect(),
        };
        let made: SimNode = self
            .call(
                self.http
                    .post(format!("{}/nodes", self.fleet))
                    .header("content-type", "application/json")
                    .body(serde_json::to_vec(&order).unwrap_or_default()),
            )
            .await
            .and_then(|r| Ok(serde_json::from_slice(&r)?))
            .map_err(|e| NodeError {
                code: "NodeCreationFailed",
                message: format!(
                    "the fleet simulator at {} did not make node {}: {e:#}",
                    self.fleet, spec.node_id
                ),
            })?;
        // A node that existed keeps its secret.
        self.agents.register(&spec.node_id, &made.secret);
        Ok(NodeHandle {
            container_id: spec.node_id.clone(),
            ip_address: "127.0.0.1".into(),
            host: self.fleet.clone(),
        })
    }

    async fn call(&self, request: reqwest::RequestBuilder) -> anyhow::Result<bytes::Bytes> {
        let _turn = self.calls.acquire().await?;
        let response = request.send().await?;
        let status = response.status();
        let body = response.bytes().await?;
        anyhow::ensure!(status.is_success(), "it answered {status}");
        Ok(body)
    }

    async fn on_node(&self, node_id: &str, what: &str) -> anyhow::Result<()> {
        let url = format!("{}/nodes/{node_id}{what}", self.fleet);
        let request = if what.is_empty() {
            self.http.delete(url)
        } else {
            self.http.post(url)
        };
        let _turn = self.calls.acquire().await?;
        let response = request
            .send()
            .await
            .with_context(|| format!("asking the fleet simulator at {}", self.fleet))?;
        let status = response.status();
        anyhow::ensure!(
            status.is_success() || status == 404,
            "the fleet simulator answered {status}"
        );
        Ok(())
    }

    pub(super) async fn list_nodes(&self, server_id: &str) -> anyhow::Result<Vec<FoundNode>> {
        let url = format!("{}/nodes?server={server_id}", self.fleet);
        let body = self
            .call(self.http.get(url))
            .await
            .with_context(|| format!("listing the fleet simulator's nodes at {}", self.fleet))?;
        let nodes: Vec<SimNode> = serde_json::from_slice(&body)?;
        Ok(nodes
            .into_iter()
            .map(|n| {
                if n.running {
                    self.agents.register(&n.node, &n.secret);
                }
                FoundNode {
                    node_id: n.node,
                    running: n.running,
                    paused: false,
                }
            })
            .collect())
    }

    /// The secret of the node's agent, from the simulator, if the node runs and is this
    /// installation's.
    pub(super) async fn agent_secret(&self, server_id: &str, node_id: &str) -> Option<String> {
        let url = format!("{}/nodes/{node_id}", self.fleet);
        let body = self.call(self.http.get(url)).await.ok()?;
        let node: SimNode = serde_json::from_slice(&body).ok()?;
        (node.running && node.server == server_id).then_some(node.secret)
    }

    /// The node's agent's answer; None if it could not be asked or did not answer.
    async fn ask(
        &self,
        server_id: &str,
        node_id: &str,
        make: impl FnOnce(u64) -> Work,
    ) -> Option<bool> {
        let secret = self.agent_secret(server_id, node_id);
        if !self.agents.learn(node_id, secret).await {
            return None;
        }
        self.agents.ask(node_id, make, ASK_TIMEOUT).await.ok()
    }
}

impl SimulatedRuntime {
    pub(super) fn layout(&self) -> &Layout {
        &self.layout
    }

    pub(super) fn agent_advice(&self) -> String {
        format!(
            "it was to reach it at {}, from the fleet simulator at {}",
            self.agent_url, self.fleet
        )
    }

    pub(super) async fn reachable(&self) -> bool {
        self.call(self.http.get(format!("{}/health", self.fleet)))
            .await
            .is_ok()
    }

    pub(super) async fn remove_node(&self, node_id: &str) -> anyhow::Result<()> {
        self.on_node(node_id, "").await?;
        self.agents.forget(node_id);
        Ok(())
    }

    pub(super) async fn restart_node(&self, node_id: &str) -> anyhow::Result<()> {
        self.on_node(node_id, "/restart").await
    }

    pub(super) async fn stop_node(&self, node_id: &str) -> anyhow::Result<()> {
        self.on_node(node_id, "/stop").await
    }

    pub(super) async fn exec(
        &self,
        server_id: &str,
        node_id: &str,
        command: NodeCommand,
        started: crate::runtime::Started,
    ) -> anyhow::Result<i64> {
        let secret = self.agent_secret(server_id, node_id);
        anyhow::ensure!(
            self.agents.learn(node_id, secret).await,
            "node {node_id} has no agent"
        );
        self.agents
            .run(node_id, move |id| command.work(id), started)
            .await
    }

    pub(super) async fn kill_group(&self, server_id: &str, node_id: &str, pid: &AttemptPid) {
        self.ask(server_id, node_id, |id| pid.kill(id)).await;
    }

    pub(super) async fn is_alive(
        &self,
        server_id: &str,
        node_id: &str,
        pid: &AttemptPid,
    ) -> Option<bool> {
        self.ask(server_id, node_id, |id| pid.alive(id)).await
    }
}
