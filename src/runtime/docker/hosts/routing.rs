//! Each node's operations go to its host, and what concerns every host goes to each.

use super::DockerHosts;
use crate::runtime::{AttemptPid, Layout, NodeCommand, Started, TaskContainer};

impl DockerHosts {
    pub(in crate::runtime) fn layout(&self) -> &Layout {
        &self.layout
    }

    pub(in crate::runtime) fn agent_advice(&self) -> String {
        "nodes must reach the address --agent-url names (see docs/nodes.md, \"The node agent\")"
            .into()
    }

    pub(in crate::runtime) async fn ensure_default_image(&self, image: &str) {
        for host in self.all() {
            crate::runtime::docker::image::ensure_default_image(&host.runtime.docker, image).await;
        }
    }

    /// Ready while every host answers: a host that does not cannot make or run nodes.
    pub(in crate::runtime) async fn reachable(&self) -> bool {
        if self.any_pending() {
            tracing::warn!("readiness: a Docker host given at start has yet to answer");
            return false;
        }
        for host in self.all() {
            if let Err(e) = host.runtime.docker.ping().await {
                tracing::warn!(host = %host.spec.url, error = %e, "readiness: a Docker host does not answer");
                return false;
            }
        }
        true
    }

    pub(in crate::runtime) async fn agent_log(
        &self,
        server_id: &str,
        node_id: &str,
        since: i64,
        until: i64,
    ) -> anyhow::Result<Vec<u8>> {
        self.host_of(node_id)?
            .runtime
            .agent_log(server_id, node_id, since, until)
            .await
    }

    pub(in crate::runtime) async fn restart_node(
        &self,
        server_id: &str,
        node_id: &str,
    ) -> anyhow::Result<()> {
        self.host_of(node_id)?
            .runtime
            .restart_node(server_id, node_id)
            .await
    }

    pub(in crate::runtime) async fn thaw_node(
        &self,
        server_id: &str,
        node_id: &str,
    ) -> anyhow::Result<()> {
        self.host_of(node_id)?
            .runtime
            .thaw_node(server_id, node_id)
            .await
    }

    pub(in crate::runtime) async fn stop_node(
        &self,
        server_id: &str,
        node_id: &str,
    ) -> anyhow::Result<()> {
        self.host_of(node_id)?
            .runtime
            .stop_node(server_id, node_id)
            .await?;
        self.agent.agents.forget(node_id);
        Ok(())
    }

    pub(in crate::runtime) async fn exec(
        &self,
        server_id: &str,
        node_id: &str,
        command: NodeCommand,
        started: Started,
    ) -> anyhow::Result<i64> {
        self.host_of(node_id)?
            .runtime
            .exec(server_id, node_id, command, started)
            .await
    }

    pub(in crate::runtime) async fn exec_in_container(
        &self,
        at: (&str, &str),
        env: Vec<(String, String)>,
        container: &TaskContainer,
        started: Started,
    ) -> anyhow::Result<i64> {
        self.host_of(at.1)?
            .runtime
            .exec_in_container(at, env, container, started)
            .await
    }

    pub(in crate::runtime) async fn remove_finished_task_containers(
        &self,
        server_id: &str,
    ) -> anyhow::Result<()> {
        for host in self.all() {
            host.runtime
                .remove_finished_task_containers(server_id)
                .await?;
        }
        Ok(())
    }

    pub(in crate::runtime) async fn remove_task_container(
        &self,
        server_id: &str,
        label: &str,
    ) -> anyhow::Result<()> {
        for host in self.all() {
            host.runtime.remove_task_container(server_id, label).await?;
        }
        Ok(())
    }

    pub(in crate::runtime) async fn kill_group(
        &self,
        server_id: &str,
        node_id: &str,
        pid: &AttemptPid,
    ) -> anyhow::Result<()> {
        self.host_of(node_id)?
            .runtime
            .kill_group(server_id, node_id, pid)
            .await
    }

    pub(in crate::runtime) async fn agent_secret(
        &self,
        server_id: &str,
        node_id: &str,
    ) -> Option<String> {
        let host = self.host_of(node_id).ok()?;
        host.runtime.agent_secret(server_id, node_id).await
    }

    pub(in crate::runtime) async fn is_alive(
        &self,
        server_id: &str,
        node_id: &str,
        pid: &AttemptPid,
    ) -> Option<bool> {
        let host = self.host_of(node_id).ok()?;
        host.runtime.is_alive(server_id, node_id, pid).await
    }
}
