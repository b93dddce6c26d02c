//! A task in a container of its own (Azure's `containerSettings`), inside its node: the node's
//! directories (`--volumes-from` the node, so they are where Azure mounts them), its processes
//! (the node's pid namespace, so the node's `kill` stops it and a restarted server finds it by
//! pid like any task), its network, and its limits. Where the engine nests cgroups (cgroup v1
//! with the cgroupfs driver), the container's cgroup lies inside the node's, so the node's CPU,
//! memory and process limits bound the node and all its task containers together; elsewhere
//! each container gets its slots' share of the node's CPUs and memory.

use std::collections::HashMap;

use anyhow::Context;
use bollard::models::{
    ContainerCreateBody, HostConfig, ImageInspect, SystemInfoCgroupDriverEnum,
    SystemInfoCgroupVersionEnum,
};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, ListContainersOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures_util::StreamExt;

use super::exec::read_pid_to_end;
use super::task_images::ImageError;
use super::{container_name, removal, status_of, DockerRuntime, NODE_PIDS_LIMIT};
use crate::domain::container::{container_command, ContainerRegistry, WorkingDirectory};
use crate::domain::task_token::{TOKEN_VAR, URL_VAR};
use crate::runtime::task::WRAPPER;
use crate::runtime::{
    ContainerError, Started, TaskContainer, LABEL_ACCOUNT, LABEL_NODE, LABEL_POOL, LABEL_SERVER,
    LABEL_TAG_PREFIX, LABEL_TASK,
};

/// What a task container needs of its node's container, read once per node.
#[derive(Clone, Debug)]
pub(super) struct NodeContainer {
    id: String,
    /// The node's cgroup, where task containers nest (cgroupfs only).
    cgroup: String,
    nano_cpus: i64,
    memory: i64,
    labels: HashMap<String, String>,
    /// Where the node's agent reaches this server, which serves tasks the Batch API there: a
    /// task container shares the node's network.
    agent_url: Option<String>,
}

fn refused(code: &'static str, message: String) -> anyhow::Error {
    ContainerError { code, message }.into()
}

impl DockerRuntime {
    pub(super) async fn exec_in_container(
        &self,
        (server_id, node_id): (&str, &str),
        env: Vec<(String, String)>,
        container: &TaskContainer,
        started: Started,
    ) -> anyhow::Result<i64> {
        let settings = &container.settings;
        let registries: Vec<ContainerRegistry> = settings.registry.iter().cloned().collect();
        let image = self
            .ready_image(&settings.image_name, &registries)
            .await
            .map_err(|e| match e {
                ImageError::Refused(code, message) => refused(code, message),
                ImageError::Unanswered(e) => anyhow::Error::new(e).context("readying the image"),
            })?;
        let at = (server_id, node_id);
        let (id, node) = self
            .create_task_container(at, env, container, &image)
            .await?;
        if let Some(tell) = started.container {
            let _ = tell.send(id.clone());
        }
        let ran = match self.run_to_end(&id, started.pid).await {
            Err(e) => Err(self.blame(at, &node, e).await),
            ran => ran,
        };
        // Off the task's path: the next task need not wait for the engine to tidy up.
        let docker = self.docker.clone();
        tokio::spawn(async move {
            let _ = docker.remove_container(&id, Some(removal())).await;
        });
        ran
    }

    /// Creates the task's container in its node's. The node's container as last read may be
    /// gone: made again since (by another server, while this one did not lead), the name the
    /// same, the id not. Then it is read again, once.
    async fn create_task_container(
        &self,
        (server_id, node_id): (&str, &str),
        env: Vec<(String, String)>,
        container: &TaskContainer,
        image: &ImageInspect,
    ) -> anyhow::Result<(String, String)> {
        let mut again = true;
        loop {
            let node = self.node_container(server_id, node_id).await?;
            let body = self.task_body(&node, env.clone(), container, image).await;
            let options = None::<bollard::query_parameters::CreateContainerOptions>;
            match self.docker.create_container(options, body).await {
                Ok(made) => return Ok((made.id, node.id)),
                Err(e) if again && names_no_container(&e) => {
                    self.forget_node(server_id, node_id);
                    again = false;
                }
                // No answer: the attempt is lost (and requeued), not the task's doing.
                Err(e) if status_of(&e).is_none() => {
                    return Err(e).context("creating the task's container")
                }
                Err(e) => {
                    let image = &container.settings.image_name;
                    let why =
                        format!("the task's container from {image:?} could not be created: {e}");
                    let refusal = refused("ContainerCreateFailed", why);
                    return Err(self.blame((server_id, node_id), &node.id, refusal).await);
                }
            }
        }
    }

    /// Starts the created container attached, learns the wrapper's pid, and returns its exit
    /// code once it ends.
    async fn run_to_end(
        &self,
        id: &str,
        started: Option<tokio::sync::oneshot::Sender<i32>>,
    ) -> anyhow::Result<i64> {
        let options = AttachContainerOptionsBuilder::default()
            .stream(true)
            .stdout(true)
            .stderr(true)
            .build();
        let attached = self
            .docker
            .attach_container(id, Some(options))
            .await
            .context("attaching to the task's container")?;
        self.docker.start_container(id, None).await.map_err(|e| {
            if status_of(&e).is_none() {
                return anyhow::Error::new(e).context("starting the task's container");
            }
            refused(
                "ContainerStartFailed",
                format!("the task's container could not start (its image needs /bin/sh): {e}"),
            )
        })?;
        read_pid_to_end(attached.output, started).await?;
        let options = WaitContainerOptionsBuilder::default()
            .condition("not-running")
            .build();
        match self.docker.wait_container(id, Some(options)).next().await {
            Some(Ok(r)) => Ok(r.status_code),
            // The engine reports a non-zero exit as an error of the wait.
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code),
            Some(Err(e)) => Err(e).context("waiting for the task's container"),
            None => anyhow::bail!("the engine said nothing of the task container's end"),
        }
    }

    /// What a refusal of the task's container was: the task's (its image, its options), or its
    /// node's when the node's container, `node` when the task's was made, no longer runs
    /// (killed, paused, stopping with its engine, made again). The engine then refuses the
    /// task's container too ("cannot join network of a non running container"), and the
    /// attempt is lost, not failed: it goes back to the queue, as any attempt of a node that
    /// died.
    async fn blame(
        &self,
        (server_id, node_id): (&str, &str),
        node: &str,
        refusal: anyhow::Error,
    ) -> anyhow::Error {
        if refusal.downcast_ref::<ContainerError>().is_none() {
            return refusal;
        }
        let name = container_name(server_id, node_id);
        let now = self.docker.inspect_container(&name, None).await.ok();
        let state = now.as_ref().and_then(|c| c.state.as_ref());
        let runs = state.is_some_and(|s| s.running == Some(true) && s.paused != Some(true));
        if runs && now.as_ref().and_then(|c| c.id.as_deref()) == Some(node) {
            return refusal;
        }
        self.forget_node(server_id, node_id);
        anyhow::anyhow!("the node's container stopped under its task's: {refusal:#}")
    }

    /// The node's container as a task container needs it; read from the engine once per node.
    async fn node_container(
        &self,
        server_id: &str,
        node_id: &str,
    ) -> anyhow::Result<NodeContainer> {
        let name = container_name(server_id, node_id);
        if let Some(known) = self.nodes.lock().expect("lock").get(&name) {
            return Ok(known.clone());
        }
        let info = self
            .docker
            .inspect_container(&name, None)
            .await
            .context("inspecting the node's container")?;
        let id = info.id.context("the node's container has no id")?;
        let host = info.host_config.unwrap_or_default();
        let parent = host
            .cgroup_parent
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/docker".into());
        let node = NodeContainer {
            cgroup: format!("{}/{id}", parent.trim_end_matches('/')),
            id,
            nano_cpus: host.nano_cpus.unwrap_or(0),
            memory: host.memory.unwrap_or(0),
            agent_url: super::node::agent_url(info.config.as_ref()),
            labels: info.config.and_then(|c| c.labels).unwrap_or_default(),
        };
        self.nodes.lock().expect("lock").insert(name, node.clone());
        Ok(node)
    }

    /// Whether the engine nests a container's cgroup inside another's (cgroup v1 with the
    /// cgroupfs driver); asked once.
    async fn nests_cgroups(&self) -> bool {
        *self
            .nesting
            .get_or_init(|| async {
                match self.docker.info().await {
                    Ok(info) => {
                        info.cgroup_driver == Some(SystemInfoCgroupDriverEnum::CGROUPFS)
                            && info.cgroup_version == Some(SystemInfoCgroupVersionEnum::_1)
                    }
                    Err(_) => false,
                }
            })
            .await
    }

    async fn task_body(
        &self,
        node: &NodeContainer,
        mut env: Vec<(String, String)>,
        container: &TaskContainer,
        image: &ImageInspect,
    ) -> ContainerCreateBody {
        let settings = &container.settings;
        let options = settings.run_options();
        let config = image.config.clone().unwrap_or_default();
        let entrypoint = match &options.entrypoint {
            Some(e) => vec![e.clone()],
            None => config.entrypoint.clone().unwrap_or_default(),
        };
        let image_cmd = config.cmd.clone().unwrap_or_default();
        for (name, value) in env.iter_mut() {
            if name == "BATCHPOOL_COMMAND_LINE" {
                *value = container_command(value, &entrypoint, &image_cmd);
            }
        }
        if settings.working_directory().ok() == Some(WorkingDirectory::Image) {
            let dir = options
                .workdir
                .clone()
                .or(config.working_dir.clone().filter(|d| !d.is_empty()))
                .unwrap_or_else(|| "/".into());
            env.push(("BATCHPOOL_WORKDIR".into(), dir));
        }
        env.extend(options.env.iter().cloned());
        let has = |env: &[(String, String)], name| env.iter().any(|(k, _)| k == name);
        if has(&env, TOKEN_VAR) && !has(&env, URL_VAR) {
            env.extend(node.agent_url.iter().map(|u| (URL_VAR.into(), u.clone())));
        }
        let mut labels = node.labels.clone();
        labels.retain(|k, _| {
            [LABEL_SERVER, LABEL_ACCOUNT, LABEL_POOL, LABEL_NODE].contains(&k.as_str())
                || k.starts_with(LABEL_TAG_PREFIX)
        });
        labels.insert(LABEL_TASK.into(), container.label.clone());
        let mut host = HostConfig {
            network_mode: Some(format!("container:{}", node.id)),
            pid_mode: Some(format!("container:{}", node.id)),
            volumes_from: Some(vec![node.id.clone()]),
            privileged: Some(false),
            security_opt: Some(vec!["no-new-privileges:true".into()]),
            readonly_rootfs: Some(options.read_only),
            nano_cpus: options.nano_cpus,
            memory: options.memory_bytes,
            ..Default::default()
        };
        if self.nests_cgroups().await {
            host.cgroup_parent = Some(node.cgroup.clone());
        } else {
            let share = container.share.clamp(0.0, 1.0);
            let cpus = (node.nano_cpus as f64 * share) as i64;
            let memory = ((node.memory as f64 * share) as i64).max(6 << 20);
            host.nano_cpus = host.nano_cpus.or((cpus > 0).then_some(cpus));
            host.memory = host.memory.or((node.memory > 0).then_some(memory));
            host.pids_limit = Some(NODE_PIDS_LIMIT);
        }
        host.memory_swap = host.memory;
        ContainerCreateBody {
            image: Some(settings.image_name.clone()),
            entrypoint: Some(vec!["/bin/sh".into(), "-c".into(), WRAPPER.into()]),
            cmd: Some(vec![]),
            env: Some(env.into_iter().map(|(k, v)| format!("{k}={v}")).collect()),
            // The node's task user, who owns the task directories.
            user: Some("0:0".into()),
            working_dir: Some("/".into()),
            labels: Some(labels),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            host_config: Some(host),
            ..Default::default()
        }
    }

    /// Removes this installation's task containers that are not running.
    pub(super) async fn remove_finished_task_containers(
        &self,
        server_id: &str,
    ) -> anyhow::Result<()> {
        let filters = HashMap::from([
            (
                "label".to_string(),
                vec![
                    format!("{LABEL_SERVER}={server_id}"),
                    LABEL_TASK.to_string(),
                ],
            ),
            (
                "status".to_string(),
                vec![
                    "created".to_string(),
                    "exited".to_string(),
                    "dead".to_string(),
                ],
            ),
        ]);
        self.remove_task_containers(filters).await
    }

    /// Removes an attempt's container, running or not: its command has ended.
    pub(super) async fn remove_task_container(
        &self,
        server_id: &str,
        label: &str,
    ) -> anyhow::Result<()> {
        let filters = HashMap::from([(
            "label".to_string(),
            vec![
                format!("{LABEL_SERVER}={server_id}"),
                format!("{LABEL_TASK}={label}"),
            ],
        )]);
        self.remove_task_containers(filters).await
    }

    async fn remove_task_containers(
        &self,
        filters: HashMap<String, Vec<String>>,
    ) -> anyhow::Result<()> {
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        for c in self.docker.list_containers(Some(options)).await? {
            if let Some(id) = c.id {
                let _ = self.docker.remove_container(&id, Some(removal())).await;
            }
        }
        Ok(())
    }

    /// Forgets what was read of a node's container (it is removed, or made again).
    pub(super) fn forget_node(&self, server_id: &str, node_id: &str) {
        self.nodes
            .lock()
            .expect("lock")
            .remove(&container_name(server_id, node_id));
    }
}

/// Whether the engine refused for want of a container the request named (the node's).
fn names_no_container(e: &bollard::errors::Error) -> bool {
    match e {
        bollard::errors::Error::DockerResponseServerError {
            status_code,
            message,
        } => *status_code == 404 || message.contains("No such container"),
        _ => false,
    }
}
