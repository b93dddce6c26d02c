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
        Ok(containers
            .into_iter()
            .filter_map(|c| {
                let labels = c.labels.as_ref()?;
                // A task's own container carries its node's labels too; it is not a node.
                if labels.contains_key(LABEL_TASK) {
                    return None;
                }
                let node_id = labels.get(LABEL_NODE)?.clone();
                let state = c.state.map(|s| s.to_string()).unwrap_or_default();
                let paused = state == "paused";
                Some(FoundNode {
                    node_id,
                    running: paused || state == "running",
                    paused,
                })
            })
            .collect())
    }
}
