//! The node agents' side of the server: their listener, bound before any node is made (nodes'
//! agents connect to it as they start), and what Docker nodes need to run one.

use std::sync::Arc;

use anyhow::Context;
use axum::routing::post;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api;
use crate::config::ServeConfig;
use crate::domain::agent::{EVENTS_PATH, WORK_PATH};
use crate::runtime::agents::Agents;
use crate::runtime::docker::AgentSetup;
use crate::runtime::{Layout, Runtime};

/// The agents' listener and what nodes need to run their agent.
pub struct AgentListener {
    listener: TcpListener,
    pub setup: Arc<AgentSetup>,
}

impl AgentListener {
    /// Binds `--agent-listen` and puts the agent's files where nodes mount them.
    pub async fn bind(config: &ServeConfig, layout: &Layout) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(config.agent_listen)
            .await
            .with_context(|| format!("binding --agent-listen {}", config.agent_listen))?;
        let port = listener.local_addr()?.port();
        let agents = Arc::new(Agents::new(config.agent_url.clone(), port));
        let setup = AgentSetup::prepare(agents, layout).context("preparing the node agent")?;
        tracing::info!(addr = %listener.local_addr()?, url = ?config.agent_url, "node agents connect here");
        Ok(Self {
            listener,
            setup: Arc::new(setup),
        })
    }

    /// Serves the agents' routes until `cancel`.
    pub fn serve(
        self,
        runtime: Arc<Runtime>,
        server_id: String,
        limits: api::serve::Limits,
        cancel: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let state = Arc::new(api::agent::AgentState {
            agents: self.setup.agents.clone(),
            runtime,
            server_id,
        });
        tokio::spawn(async move {
            // Only the agents' routes: the API is not served here.
            let router = axum::Router::new()
                .route(WORK_PATH, post(api::agent::work))
                .route(EVENTS_PATH, post(api::agent::events))
                .with_state(state);
            api::serve::serve(self.listener, router, &limits, async move {
                cancel.cancelled().await
            })
            .await;
        })
    }
}
