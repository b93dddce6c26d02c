//! The node runtime over several hosts: each node's operations go to its host, and what
//! concerns every host goes to each.

use std::path::Path;

use super::super::NODE_ROOT;
use super::{DockerHosts, HostSpec};
use crate::runtime::AttemptPid;
use crate::runtime::{
    BoxFuture, FoundNode, Layout, NodeCommand, NodeError, NodeHandle, NodeRuntime, NodeSpec,
    Started, TaskContainer,
};

impl NodeRuntime for DockerHosts {
    fn name(&self) -> &'static str {
        "docker"
    }

    fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Every node's root is a volume at the same place in its container.
    fn node_root(&self, _host_root: &Path) -> String {
        NODE_ROOT.to_string()
    }

    fn ensure_default_image<'a>(&'a self, image: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            for host in self.all() {
                super::super::image::ensure_default_image(&host.runtime.docker, image).await;
            }
        })
    }

    /// Ready while every host answers: a host that does not cannot make or run nodes.
    fn reachable(&self) -> BoxFuture<'_, bool> {
        Box::pin(async {
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
        })
    }

    fn create_node<'a>(
        &'a self,
        spec: &'a NodeSpec,
    ) -> BoxFuture<'a, Result<NodeHandle, NodeError>> {
        Box::pin(DockerHosts::create_node(self, spec))
    }

    fn agent_advice(&self) -> String {
        "nodes must reach the address --agent-url names (see docs/nodes.md, \"The node agent\")"
            .into()
    }

    fn remove_node<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(DockerHosts::remove_node(self, server_id, node_id))
    }

    fn agent_log<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        since: i64,
        until: i64,
    ) -> BoxFuture<'a, anyhow::Result<Vec<u8>>> {
        Box::pin(async move {
            self.host_of(node_id)?
                .runtime
                .agent_log(server_id, node_id, since, until)
                .await
        })
    }

    fn restart_node<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            self.host_of(node_id)?
                .runtime
                .restart_node(server_id, node_id)
                .await
        })
    }

    fn stop_node<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            self.host_of(node_id)?
                .runtime
                .stop_node(server_id, node_id)
                .await?;
            self.agent.agents.forget(node_id);
            Ok(())
        })
    }

    fn list_nodes<'a>(
        &'a self,
        server_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Vec<FoundNode>>> {
        Box::pin(DockerHosts::list_nodes(self, server_id))
    }

    fn exec<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        command: NodeCommand,
        started: Started,
    ) -> BoxFuture<'a, anyhow::Result<i64>> {
        Box::pin(async move {
            self.host_of(node_id)?
                .runtime
                .exec(server_id, node_id, command, started)
                .await
        })
    }

    fn exec_in_container<'a>(
        &'a self,
        at: (&'a str, &'a str),
        env: Vec<(String, String)>,
        container: &'a TaskContainer,
        started: Started,
    ) -> BoxFuture<'a, anyhow::Result<i64>> {
        Box::pin(async move {
            self.host_of(at.1)?
                .runtime
                .exec_in_container(at, env, container, started)
                .await
        })
    }

    fn remove_finished_task_containers<'a>(
        &'a self,
        server_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            for host in self.all() {
                host.runtime
                    .remove_finished_task_containers(server_id)
                    .await?;
            }
            Ok(())
        })
    }

    fn remove_task_container<'a>(
        &'a self,
        server_id: &'a str,
        label: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            for host in self.all() {
                host.runtime.remove_task_container(server_id, label).await?;
            }
            Ok(())
        })
    }

    fn lost_nodes<'a>(&'a self, server_id: &'a str) -> BoxFuture<'a, Vec<String>> {
        Box::pin(DockerHosts::lost_nodes(self, server_id))
    }

    fn room_for(&self, spec: &NodeSpec, candidates: &[String]) -> Option<Vec<String>> {
        DockerHosts::room_for(self, spec, candidates)
    }

    fn has_room(&self, spec: &NodeSpec) -> bool {
        DockerHosts::room_for(self, spec, std::slice::from_ref(&spec.node_id)).is_some()
    }

    fn hosts_answering(&self) -> Vec<(String, bool)> {
        DockerHosts::hosts_answering(self)
    }

    fn sync_hosts<'a>(&'a self, server_id: &'a str, hosts: Vec<HostSpec>) -> BoxFuture<'a, ()> {
        Box::pin(DockerHosts::sync_hosts(self, server_id, hosts))
    }

    fn kill_group<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        pid: &'a AttemptPid,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            self.host_of(node_id)?
                .runtime
                .kill_group(server_id, node_id, pid)
                .await
        })
    }

    fn agent_secret<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, Option<String>> {
        Box::pin(async move {
            let host = self.host_of(node_id).ok()?;
            host.runtime.agent_secret(server_id, node_id).await
        })
    }

    fn is_alive<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        pid: &'a AttemptPid,
    ) -> BoxFuture<'a, Option<bool>> {
        Box::pin(async move {
            let host = self.host_of(node_id).ok()?;
            host.runtime.is_alive(server_id, node_id, pid).await
        })
    }
}
