//! The node agents' side of the server: their listener, bound before any node is made (nodes'
//! agents connect to it as they start), and what Docker nodes need to run one.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api;
use crate::config::ServeConfig;
use crate::domain::endpoint::Endpoint;
use crate::runtime::agents::routes::{self, AgentState};
use crate::runtime::agents::Leading;
use crate::runtime::agents::{Agents, Peers};
use crate::runtime::docker::AgentSetup;
use crate::runtime::{Layout, Runtime};

/// What the agents' side shares with the rest of the server: the runtime, this server among
/// its peers, whether it leads (only the leader takes agents' work requests and events), and
/// the database.
pub type Shared = (Arc<Runtime>, Arc<Peers>, Leading, PgPool);

/// The agents' port when --agent-listen does not say.
const PORT: u16 = 8081;

/// The agents' listener, and this server's side of the agents.
pub struct AgentListener {
    listener: TcpListener,
    pub agents: Arc<Agents>,
}

impl AgentListener {
    /// Binds `--agent-listen`, or `default` where it is not given.
    pub async fn bind(config: &ServeConfig, default: SocketAddr) -> anyhow::Result<Self> {
        let addr = config.agent_listen.unwrap_or(default);
        let listener = crate::api::serve::bind(addr)
            .with_context(|| format!("binding --agent-listen {addr}"))?;
        let port = listener.local_addr()?.port();
        let silence = std::time::Duration::from_secs(config.agent_timeout);
        let agents = Arc::new(Agents::new(config.agent_url.clone(), port, silence));
        tracing::info!(addr = %listener.local_addr()?, url = ?config.agent_url, "node agents connect here");
        Ok(Self { listener, agents })
    }

    /// For Docker nodes: binds, and puts the agent's files where nodes mount them.
    pub async fn for_docker(
        config: &ServeConfig,
        layout: &Layout,
    ) -> anyhow::Result<(Self, Arc<AgentSetup>)> {
        let listener = Self::bind(config, SocketAddr::from(([0, 0, 0, 0], PORT))).await?;
        let setup = AgentSetup::prepare(listener.agents.clone(), layout)
            .context("preparing the node agent")?;
        Ok((listener, Arc::new(setup)))
    }

    /// For local nodes: binds (on this host's loopback, unless told otherwise); returns the
    /// URL their agents use.
    pub async fn for_local(config: &ServeConfig) -> anyhow::Result<(Self, String)> {
        let listener = Self::bind(config, SocketAddr::from(([127, 0, 0, 1], PORT))).await?;
        let addr = listener.listener.local_addr()?;
        let ip = match addr.ip() {
            ip if ip.is_unspecified() => std::net::IpAddr::from([127, 0, 0, 1]),
            ip => ip,
        };
        let url = format!("http://{}", SocketAddr::new(ip, addr.port()));
        Ok((listener, url))
    }

    /// Where other servers on the database reach this one: --peer-url, else --agent-url, else
    /// this machine's loopback at the agents' port.
    pub fn peer_url(&self, config: &ServeConfig) -> String {
        let port = self.agents.port;
        config
            .peer_url
            .clone()
            .or_else(|| config.agent_url.clone())
            .unwrap_or_else(|| format!("http://127.0.0.1:{port}"))
    }

    /// Serves the agents' routes (and the other servers'), and `tasks` (the Batch API as tasks
    /// reach it, [`api::tasks_router`]) on every other path, until `cancel`. Meanwhile, says
    /// where this listener is among the installation's servers (`servers::keep`), for agents to
    /// find the leader by.
    pub fn serve(
        self,
        (runtime, peers, leading, db): Shared,
        tasks: axum::Router,
        server_id: String,
        limits: api::serve::Limits,
        cancel: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        // Local nodes' agents reach this host's loopback whatever --agent-url says.
        let endpoint = Endpoint {
            url: (runtime.name() != "local")
                .then(|| self.agents.url.clone())
                .flatten(),
            port: self.agents.port,
        };
        let servers = super::servers::keep(db, endpoint, peers.clone(), cancel.clone());
        let state = Arc::new(AgentState {
            agents: self.agents.clone(),
            runtime,
            server_id,
            peers,
            leading,
        });
        tokio::spawn(async move {
            let servers = tokio::spawn(servers);
            let router = routes::router(state).fallback_service(tasks);
            api::serve::serve(self.listener, router, &limits, async move {
                cancel.cancelled().await
            })
            .await;
            let _ = servers.await;
        })
    }
}
