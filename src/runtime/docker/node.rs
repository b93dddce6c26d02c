//! A node's container and its account's network: made (or adopted, after a crash mid-way).
//! What happens to it after is `existing`'s.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::CreateContainerOptionsBuilder;

use super::task_images::ImageError;
use super::{container_name, removal, status_of, DockerRuntime, NODE_PIDS_LIMIT, NODE_ROOT};
use crate::domain::agent::{ENV_DIRS, ENV_NODE, ENV_SECRET, ENV_URL};
use crate::runtime::agents::new_secret;
use crate::runtime::{
    NodeError, NodeHandle, NodeSpec, LABEL_ACCOUNT, LABEL_NODE, LABEL_POOL, LABEL_SERVER,
    LABEL_TAG_PREFIX,
};

/// A step of making a node failed: `what` says which.
pub(super) fn failed(spec: &NodeSpec, what: &str, e: bollard::errors::Error) -> NodeError {
    NodeError {
        code: "NodeCreationFailed",
        message: format!("{what} for node {}: {e}", spec.node_id),
    }
}

impl DockerRuntime {
    pub(super) async fn create_node(&self, spec: &NodeSpec) -> Result<NodeHandle, NodeError> {
        // The pool's images first: with a registry, the node's own may be pulled among them.
        self.ready_task_images(spec).await?;
        self.check_image(spec).await?;
        let name = container_name(&spec.server_id, &spec.node_id);
        // A container made again has a new id: what was read of the old one is stale.
        self.forget_node(&spec.server_id, &spec.node_id);
        // The account's network can go before the container holds it (another server removed
        // it with its last node, or kept an older twin): then it is looked up again.
        for _ in 0..3 {
            let (network, _making) = self.account_network(spec).await?;
            let agent_env = vec![
                format!("{ENV_URL}={}", self.agent_url(spec, &network).await?),
                format!("{ENV_NODE}={}", spec.node_id),
                format!("{ENV_SECRET}={}", new_secret()),
                format!("{ENV_DIRS}={}", super::volumes::node_dirs()),
            ];
            if self
                .create_with_agent(spec, &name, network, agent_env)
                .await?
                == Made::NetworkGone
            {
                continue;
            }
            if let Err(e) = self.docker.start_container(&name, None).await {
                match status_of(&e) {
                    // Already running.
                    Some(304) => {}
                    // Paused (frozen): it runs again as it was, as a thawed node does.
                    Some(409) if self.docker.unpause_container(&name).await.is_ok() => {
                        tracing::warn!(node = %spec.node_id, "the node's container was paused; unpaused it");
                    }
                    _ => return Err(failed(spec, "starting the container", e)),
                }
            }
            return self.handle(spec, name).await;
        }
        Err(NodeError {
            code: "NodeCreationFailed",
            message: format!(
                "the account's network on the Docker host went again and again before node {} could join it",
                spec.node_id
            ),
        })
    }

    /// Creates the node's container with the agent's volume mounted, and makes sure, once the
    /// container holds the volume (no server can remove it then), that it holds the agent. A
    /// server of another build removes the agent volumes no container mounts (a rolling
    /// upgrade): one this server filled, and still names, may be gone, and the engine then
    /// makes an empty one of that name for the container. That container goes, and the volume
    /// is filled again.
    async fn create_with_agent(
        &self,
        spec: &NodeSpec,
        name: &str,
        network: String,
        agent_env: Vec<String>,
    ) -> Result<Made, NodeError> {
        for _ in 0..3 {
            let volume = self.agent_volume(spec).await?;
            let command = self.agent.files.command();
            let body = container_body(spec, network.clone(), (command, &volume), agent_env.clone());
            if self.create_container(spec, name, body).await? == Made::NetworkGone {
                return Ok(Made::NetworkGone);
            }
            let holds = self.agent_complete_in(name).await;
            if holds.map_err(|e| failed(spec, "looking into the node agent's volume", e))? {
                return Ok(Made::Made);
            }
            let _ = self.docker.remove_container(name, Some(removal())).await;
            self.forget_agent_volume(&volume).await;
        }
        Err(NodeError {
            code: "NodeCreationFailed",
            message: format!(
                "the node agent's volume on the Docker host went again and again before node {} could mount it (a server of another build removes the agent volumes no container mounts)",
                spec.node_id
            ),
        })
    }

    /// Where the node's agent reaches this server: `--agent-url`, else this host's address on
    /// the node's network (its gateway), at the agents' port.
    async fn agent_url(&self, spec: &NodeSpec, network: &str) -> Result<String, NodeError> {
        let agents = &self.agent.agents;
        if let Some(url) = &agents.url {
            return Ok(url.clone());
        }
        let info = self
            .docker
            .inspect_network(network, None)
            .await
            .map_err(|e| failed(spec, "inspecting the account's network", e))?;
        let gateway = info
            .ipam
            .and_then(|i| i.config)
            .into_iter()
            .flatten()
            .find_map(|c| c.gateway.filter(|g| !g.is_empty() && !g.contains(':')))
            .ok_or_else(|| NodeError {
                code: "NodeCreationFailed",
                message: format!(
                    "the network {network} has no IPv4 gateway for node {}'s agent to reach this server by; start the server with --agent-url",
                    spec.node_id
                ),
            })?;
        Ok(format!("http://{gateway}:{}", agents.port))
    }

    /// Nodes never pull their image: it must be on the engine already, or be the Debian image,
    /// which is built here when it is not.
    async fn check_image(&self, spec: &NodeSpec) -> Result<(), NodeError> {
        let Err(e) = self.docker.inspect_image(&spec.image).await else {
            return Ok(());
        };
        if status_of(&e) == Some(404) && spec.image == super::DEBIAN_IMAGE {
            return self.agent.debian.ensure(&self.docker).await.map_err(|why| NodeError {
                code: "ImageNotFound",
                message: format!(
                    "the image {:?} is not present on the Docker engine, and building it failed: {why}; \
                     build it with `batchpool build-node-image --debian` (as root, with debootstrap), then resize the pool to 0 and back, or recreate it",
                    spec.image
                ),
            });
        }
        if status_of(&e) == Some(404) {
            return Err(NodeError {
                code: "ImageNotFound",
                message: format!(
                    "the image {:?} is not present on the Docker engine, and no registry is reachable to pull it; \
                     build or load it on the engine (docker build / docker load, or `batchpool build-node-image`), then resize the pool to 0 and back, or recreate it",
                    spec.image
                ),
            });
        }
        Err(failed(spec, "inspecting the image", e))
    }

    /// The pool's containerImageNames are made ready as the node starts (pulled with the pool's
    /// registries where the engine lacks them), as Azure prefetches them.
    async fn ready_task_images(&self, spec: &NodeSpec) -> Result<(), NodeError> {
        let Some(containers) = &spec.containers else {
            return Ok(());
        };
        for image in &containers.container_image_names {
            match self
                .ready_image(image, &containers.container_registries)
                .await
            {
                // The node's own image, missing with no registry to pull it: `check_image` says
                // what to do, as for any pool.
                Err(ImageError::Refused("ContainerImageNotFound", _)) if *image == spec.image => {}
                Err(ImageError::Refused(code, message)) => return Err(NodeError { code, message }),
                Err(ImageError::Unanswered(e)) => {
                    return Err(failed(spec, &format!("readying the image {image:?}"), e))
                }
                Ok(_) => {}
            }
        }
        Ok(())
    }

    /// Creates the node's container; one that exists already is adopted.
    async fn create_container(
        &self,
        spec: &NodeSpec,
        name: &str,
        body: ContainerCreateBody,
    ) -> Result<Made, NodeError> {
        let options = CreateContainerOptionsBuilder::default().name(name).build();
        match self.docker.create_container(Some(options), body).await {
            Ok(_) => Ok(Made::Made),
            // Its network went a moment ago (the image was there: `check_image`).
            Err(e) if status_of(&e) == Some(404) => Ok(Made::NetworkGone),
            // It exists: a previous run created it before it could record so. Adopt it.
            Err(e) if status_of(&e) == Some(409) => Ok(Made::Made),
            Err(e) => Err(failed(spec, "creating the container", e)),
        }
    }

    /// The started container's id and address.
    async fn handle(&self, spec: &NodeSpec, name: String) -> Result<NodeHandle, NodeError> {
        let info = self
            .docker
            .inspect_container(&name, None)
            .await
            .map_err(|e| failed(spec, "inspecting the container", e))?;
        let ip_address = info
            .network_settings
            .and_then(|n| n.networks)
            .and_then(|nets| {
                nets.into_values()
                    .find_map(|n| n.ip_address.filter(|ip| !ip.is_empty()))
            })
            .unwrap_or_default();
        // Its agent's secret is the one it was made with (by this call, or an earlier one).
        if let Some(secret) = agent_secret(info.config.as_ref()) {
            self.agent.agents.register(&spec.node_id, &secret);
        }
        Ok(NodeHandle {
            container_id: info.id.unwrap_or(name),
            ip_address,
            // The engine's URL, which the hosts that place the node know (DockerHosts).
            host: String::new(),
        })
    }
}

/// What came of making a node's container.
#[derive(Debug, PartialEq)]
enum Made {
    Made,
    /// Its network went before the container could join it.
    NetworkGone,
}

/// The node's container: the vmSize's limits, root but never privileged, labelled with whose
/// node it is, its root a volume of its own (its tasks' directories, `workitems`, in it) where
/// Azure Batch puts it, and the agent's volume mounted read-only.
fn container_body(
    spec: &NodeSpec,
    network: String,
    (command, agent_volume): (Vec<String>, &str),
    agent_env: Vec<String>,
) -> ContainerCreateBody {
    let mut labels = HashMap::from([
        (LABEL_SERVER.to_string(), spec.server_id.clone()),
        (LABEL_ACCOUNT.to_string(), spec.account.clone()),
        (LABEL_POOL.to_string(), spec.pool_id.clone()),
        (LABEL_NODE.to_string(), spec.node_id.clone()),
    ]);
    // The pool's resourceTags, as Azure puts them on a pool's resources.
    labels.extend(
        spec.tags
            .iter()
            .map(|(name, value)| (format!("{LABEL_TAG_PREFIX}{name}"), value.clone())),
    );
    let memory = spec.memory_mib * 1024 * 1024;
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        // The agent is the node's main process: the node lives as long as it does.
        entrypoint: Some(command),
        cmd: Some(vec![]),
        env: Some(agent_env),
        hostname: Some(spec.node_id.replace('_', "-").chars().take(63).collect()),
        working_dir: Some(NODE_ROOT.into()),
        // The agent, and so every task, runs as root, the node's administrator (an image's
        // USER is for its own programs): tasks are what Azure calls admin auto-users.
        user: Some("0:0".into()),
        // An anonymous volume: the node's disk, removed with its container.
        volumes: Some(vec![NODE_ROOT.into()]),
        labels: Some(labels),
        host_config: Some(HostConfig {
            nano_cpus: Some((spec.vcpus * 1e9) as i64),
            memory: Some(memory),
            // No swap beyond the memory limit: a node has the memory of its size, no more.
            memory_swap: Some(memory),
            privileged: Some(false),
            security_opt: Some(vec!["no-new-privileges:true".into()]),
            pids_limit: Some(NODE_PIDS_LIMIT),
            network_mode: Some(network),
            mounts: Some(vec![super::volumes::agent_mount(agent_volume)]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The agent's secret a node's container was made with.
pub(super) fn agent_secret(config: Option<&bollard::models::ContainerConfig>) -> Option<String> {
    agent_setting(config, ENV_SECRET)
}

/// Where a node's agent reaches this server, as its container was made.
pub(super) fn agent_url(config: Option<&bollard::models::ContainerConfig>) -> Option<String> {
    agent_setting(config, ENV_URL)
}

/// The agent's setting `name` a node's container was made with.
fn agent_setting(config: Option<&bollard::models::ContainerConfig>, name: &str) -> Option<String> {
    let prefix = format!("{name}=");
    config?
        .env
        .as_ref()?
        .iter()
        .find_map(|e| e.strip_prefix(&prefix).map(str::to_string))
}
