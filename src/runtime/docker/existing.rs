//! What happens to a node's container once it exists: stopped (a deallocate), restarted (a
//! reboot), measured and listed (adoption after a restart), and removed with its account's
//! network when it was the last node there.

use std::collections::HashMap;

use anyhow::Context;
use bollard::query_parameters::ListContainersOptionsBuilder;

use super::{container_name, removal, status_of, DockerRuntime};
use crate::runtime::{FoundNode, LABEL_ACCOUNT, LABEL_NODE, LABEL_POOL, LABEL_SERVER, LABEL_TASK};

impl DockerRuntime {
    pub(super) async fn remove_node(&self, server_id: &str, node_id: &str) -> anyhow::Result<()> {
        self.forget_node(server_id, node_id);
        self.agent.agents.forget(node_id);
        let container = container_name(server_id, node_id);
        let account = match self.docker.inspect_container(&container, None).await {
            Ok(info) => info
                .config
                .and_then(|c| c.labels)
                .and_then(|mut l| l.remove(LABEL_ACCOUNT)),
            Err(e) if status_of(&e) == Some(404) => return Ok(()),
            Err(e) => return Err(e).context("inspecting the node's container"),
        };
        match self
            .docker
            .remove_container(&container, Some(removal()))
            .await
        {
            Err(e) if status_of(&e) != Some(404) => {
                return Err(e).context("removing the node's container")
            }
            _ => {}
        }
        if let Some(account) = account {
            self.after_last_node(server_id, &account).await;
        }
        Ok(())
    }

    /// What an existing node takes of its host: its account and pool (from its labels), CPUs
    /// and memory (MiB).
    pub(super) async fn node_size(
        &self,
        server_id: &str,
        node_id: &str,
    ) -> anyhow::Result<((String, String), f64, i64)> {
        let info = self
            .docker
            .inspect_container(&container_name(server_id, node_id), None)
            .await
            .context("inspecting the node's container")?;
        let host = info.host_config.unwrap_or_default();
        let mut labels = info.config.and_then(|c| c.labels).unwrap_or_default();
        let mut label = |key| labels.remove(key).unwrap_or_default();
        Ok((
            (label(LABEL_ACCOUNT), label(LABEL_POOL)),
            host.nano_cpus.unwrap_or(0) as f64 / 1e9,
            host.memory.unwrap_or(0) / (1024 * 1024),
        ))
    }

    /// Stops the node's container (its agent, and so its tasks, end; its disk stays).
    pub(super) async fn stop_node(&self, server_id: &str, node_id: &str) -> anyhow::Result<()> {
        let options = bollard::query_parameters::StopContainerOptionsBuilder::default()
            .t(1)
            .build();
        match self
            .docker
            .stop_container(&container_name(server_id, node_id), Some(options))
            .await
        {
            // 304: stopped already; 404: gone (it is made again when it starts).
            Err(e) if !matches!(status_of(&e), Some(304 | 404)) => {
                Err(anyhow::Error::new(e).context("stopping the node's container"))
            }
            _ => Ok(()),
        }
    }

    pub(super) async fn restart_node(&self, server_id: &str, node_id: &str) -> anyhow::Result<()> {
        let options = bollard::query_parameters::RestartContainerOptionsBuilder::default()
            .t(1)
            .build();
        self.docker
            .restart_container(&container_name(server_id, node_id), Some(options))
            .await
            .context("restarting the node's container")
    }

    pub(super) async fn thaw_node(&self, server_id: &str, node_id: &str) -> anyhow::Result<()> {
        self.docker
            .unpause_container(&container_name(server_id, node_id))
            .await
            .context("unpausing the node's container")
    }

    /// The installation's node containers on this host. The engine lists containers from a
    /// view it updates only once it has written their state to its disk: a container started
    /// while that disk was full runs, and is listed as created or exited. Those listed as not
    /// running are asked about one by one (an inspection reads the container itself), so that
    /// a node that runs is not taken for stopped, made again, and its running tasks requeued
    /// beside themselves.
    pub(super) async fn list_nodes(&self, server_id: &str) -> anyhow::Result<Vec<FoundNode>> {
        let filters = HashMap::from([(
            "label".to_string(),
            vec![format!("{LABEL_SERVER}={server_id}")],
        )]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let containers = self.docker.list_containers(Some(options)).await?;
        let mut found = Vec::with_capacity(containers.len());
        for c in containers {
            let Some(labels) = c.labels.as_ref() else {
                continue;
            };
            // A task's own container carries its node's labels too; it is not a node.
            let Some(node_id) = labels
                .get(LABEL_NODE)
                .filter(|_| !labels.contains_key(LABEL_TASK))
            else {
                continue;
            };
            let listed = c.state.map(|s| s.to_string()).unwrap_or_default();
            let (running, paused) = match listed.as_str() {
                "running" => (true, false),
                "paused" => (true, true),
                _ => self.live_state(c.id.as_deref()).await?,
            };
            found.push(FoundNode {
                node_id: node_id.clone(),
                running,
                paused,
            });
        }
        Ok(found)
    }

    /// Whether a container runs, and whether it is paused, as the engine knows it now. One
    /// gone meanwhile runs not.
    async fn live_state(&self, id: Option<&str>) -> anyhow::Result<(bool, bool)> {
        let Some(id) = id else {
            return Ok((false, false));
        };
        let info = match self.docker.inspect_container(id, None).await {
            Ok(info) => info,
            Err(e) if status_of(&e) == Some(404) => return Ok((false, false)),
            Err(e) => return Err(e).context("inspecting a node's container"),
        };
        let state = info.state.unwrap_or_default();
        let paused = state.paused == Some(true);
        Ok((paused || state.running == Some(true), paused))
    }
}
