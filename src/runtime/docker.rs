//! The `docker` runtime: each node is a long-lived container with the CPU and memory limits of
//! its vmSize, never privileged, labelled with the installation, account, pool and node. Its root
//! directory is a directory on this host bind-mounted at `/mnt/batch/tasks`, where Azure Batch
//! puts it on Linux nodes; so the engine must share this host's filesystem (a local socket).
//! Nodes of one account share a bridge network of their own, which the engine isolates from
//! every other account's (and from the default bridge); no process in a node can gain privileges
//! (`no-new-privileges`), and a node holds a bounded number of processes.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig, NetworkCreateRequest};
use bollard::query_parameters::{
    BuildImageOptionsBuilder, CreateContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;

use super::{
    BoxFuture, FoundNode, Layout, NodeError, NodeHandle, NodeRuntime, NodeSpec, LABEL_ACCOUNT,
    LABEL_NODE, LABEL_POOL, LABEL_SERVER, WRAPPER,
};

/// AZ_BATCH_NODE_ROOT_DIR inside a node container.
pub const NODE_ROOT: &str = "/mnt/batch/tasks";

/// The most processes (and threads) a node's container may hold at once: a fork bomb in a task
/// stops there instead of exhausting the host's pid space.
pub const NODE_PIDS_LIMIT: i64 = 4096;

/// The bridge network of an account's nodes on this installation.
fn network_name(server_id: &str, account: &str) -> String {
    format!("batchpool-{server_id}-{account}")
}

/// The container's main process: it only keeps the node alive, and exits at once on SIGTERM.
const KEEP_ALIVE: &str = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done";

pub struct DockerRuntime {
    docker: Docker,
    layout: Layout,
    /// Held while a network is looked up and made: engines before API 1.44 make a second network
    /// of the same name when asked twice, and a name that matches two is unusable.
    networks: tokio::sync::Mutex<()>,
}

/// Connects to the engine at `host` (a `unix://` or `tcp://` address) or the local default, and
/// agrees on an API version it speaks. Fails when no engine answers.
pub async fn connect(host: Option<&str>) -> anyhow::Result<Docker> {
    let docker = match host {
        Some(h) if !h.is_empty() => Docker::connect_with_host(h),
        _ => Docker::connect_with_local_defaults(),
    }
    .context("configuring the Docker client")?;
    let docker = docker
        .negotiate_version()
        .await
        .context("no Docker engine answers")?;
    docker
        .ping()
        .await
        .context("the Docker engine does not answer a ping")?;
    Ok(docker)
}

fn container_name(server_id: &str, node_id: &str) -> String {
    format!("batchpool-{server_id}-{node_id}")
}

fn status_of(err: &bollard::errors::Error) -> Option<u16> {
    match err {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

impl DockerRuntime {
    pub fn new(docker: Docker, layout: Layout) -> Self {
        Self {
            docker,
            layout,
            networks: tokio::sync::Mutex::default(),
        }
    }

    pub fn client(&self) -> &Docker {
        &self.docker
    }

    async fn create_node(
        &self,
        spec: &NodeSpec,
        root: &Path,
        workitems: &Path,
    ) -> Result<NodeHandle, NodeError> {
        let failed = |what: &str, e: bollard::errors::Error| NodeError {
            code: "NodeCreationFailed",
            message: format!("{what} for node {}: {e}", spec.node_id),
        };
        if let Err(e) = self.docker.inspect_image(&spec.image).await {
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
            return Err(failed("inspecting the image", e));
        }
        let name = container_name(&spec.server_id, &spec.node_id);
        let network = self
            .ensure_network(&spec.server_id, &spec.account)
            .await
            .map_err(|e| failed("creating the account's network", e))?;
        let labels = HashMap::from([
            (LABEL_SERVER.to_string(), spec.server_id.clone()),
            (LABEL_ACCOUNT.to_string(), spec.account.clone()),
            (LABEL_POOL.to_string(), spec.pool_id.clone()),
            (LABEL_NODE.to_string(), spec.node_id.clone()),
        ]);
        let memory = spec.memory_mib * 1024 * 1024;
        let body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            entrypoint: Some(vec!["/bin/sh".into(), "-c".into(), KEEP_ALIVE.into()]),
            cmd: Some(vec![]),
            hostname: Some(spec.node_id.replace('_', "-").chars().take(63).collect()),
            working_dir: Some(NODE_ROOT.into()),
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
                binds: Some(vec![
                    format!("{}:{NODE_ROOT}", root.display()),
                    format!("{}:{NODE_ROOT}/workitems", workitems.display()),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default().name(&name).build();
        let mut created = self
            .docker
            .create_container(Some(options.clone()), body.clone())
            .await;
        if matches!(&created, Err(e) if status_of(e) == Some(404)) {
            // The network went with the account's last node a moment ago: make it again, once.
            self.ensure_network(&spec.server_id, &spec.account)
                .await
                .map_err(|e| failed("creating the account's network", e))?;
            created = self.docker.create_container(Some(options), body).await;
        }
        match created {
            Ok(_) => {}
            // It exists: a previous run created it before it could record so. Adopt it.
            Err(e) if status_of(&e) == Some(409) => {}
            Err(e) => return Err(failed("creating the container", e)),
        }
        if let Err(e) = self.docker.start_container(&name, None).await {
            // 304: already running.
            if status_of(&e) != Some(304) {
                return Err(failed("starting the container", e));
            }
        }
        let info = self
            .docker
            .inspect_container(&name, None)
            .await
            .map_err(|e| failed("inspecting the container", e))?;
        let ip_address = info
            .network_settings
            .and_then(|n| n.networks)
            .and_then(|nets| {
                nets.into_values()
                    .find_map(|n| n.ip_address.filter(|ip| !ip.is_empty()))
            })
            .unwrap_or_default();
        Ok(NodeHandle {
            container_id: info.id.unwrap_or(name),
            ip_address,
        })
    }

    /// Makes the account's network unless it exists; returns its name.
    async fn ensure_network(
        &self,
        server_id: &str,
        account: &str,
    ) -> Result<String, bollard::errors::Error> {
        let name = network_name(server_id, account);
        let _one_at_a_time = self.networks.lock().await;
        match self.docker.inspect_network(&name, None).await {
            Err(e) if status_of(&e) == Some(404) => {}
            other => return other.map(|_| name),
        }
        let request = NetworkCreateRequest {
            name: name.clone(),
            driver: Some("bridge".into()),
            labels: Some(HashMap::from([
                (LABEL_SERVER.to_string(), server_id.to_string()),
                (LABEL_ACCOUNT.to_string(), account.to_string()),
            ])),
            ..Default::default()
        };
        match self.docker.create_network(request).await {
            // 409: another server made it meanwhile (engines from API 1.44 on say so).
            Err(e) if status_of(&e) != Some(409) => Err(e),
            _ => Ok(name),
        }
    }

    async fn remove_node(&self, server_id: &str, node_id: &str) -> anyhow::Result<()> {
        let container = container_name(server_id, node_id);
        let account = match self.docker.inspect_container(&container, None).await {
            Ok(info) => info
                .config
                .and_then(|c| c.labels)
                .and_then(|mut l| l.remove(LABEL_ACCOUNT)),
            Err(e) if status_of(&e) == Some(404) => return Ok(()),
            Err(e) => return Err(e).context("inspecting the node's container"),
        };
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        match self
            .docker
            .remove_container(&container, Some(options))
            .await
        {
            Err(e) if status_of(&e) != Some(404) => {
                return Err(e).context("removing the node's container")
            }
            _ => {}
        }
        // The account's network goes with its last node; while other nodes use it, the engine
        // refuses (403), which is as it should be.
        if let Some(account) = account {
            let _one_at_a_time = self.networks.lock().await;
            let _ = self
                .docker
                .remove_network(&network_name(server_id, &account))
                .await;
        }
        Ok(())
    }

    async fn list_nodes(&self, server_id: &str) -> anyhow::Result<Vec<FoundNode>> {
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
                let node_id = c.labels.as_ref()?.get(LABEL_NODE)?.clone();
                let running = c.state.map(|s| s.to_string() == "running").unwrap_or(false);
                Some(FoundNode { node_id, running })
            })
            .collect())
    }

    async fn exec(
        &self,
        server_id: &str,
        node_id: &str,
        env: Vec<(String, String)>,
        mut started: Option<tokio::sync::oneshot::Sender<i32>>,
    ) -> anyhow::Result<i64> {
        let env: Vec<String> = env.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        let exec = self
            .docker
            .create_exec(
                &container_name(server_id, node_id),
                CreateExecOptions {
                    cmd: Some(vec!["/bin/sh".to_string(), "-c".into(), WRAPPER.into()]),
                    env: Some(env),
                    // Attached, so the stream ends when the command does; its output goes to files.
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await
            .context("creating the exec")?;
        if let StartExecResults::Attached { mut output, .. } =
            self.docker.start_exec(&exec.id, None).await?
        {
            // The wrapper's first line is its pid (in the node's pid namespace); nothing else
            // comes, as the command's output goes to files.
            let mut first_line = Vec::new();
            while let Some(chunk) = output.next().await {
                let chunk = chunk.context("reading the exec stream")?;
                if let (Some(_), bollard::container::LogOutput::StdOut { message }) =
                    (&started, chunk)
                {
                    first_line.extend_from_slice(&message);
                    if let Some(end) = first_line.iter().position(|b| *b == b'\n') {
                        let pid = std::str::from_utf8(&first_line[..end])
                            .ok()
                            .and_then(|p| p.trim().parse().ok());
                        if let (Some(pid), Some(started)) = (pid, started.take()) {
                            let _ = started.send(pid);
                        }
                        started = None;
                    }
                }
            }
        }
        // The stream ends as the process exits; the engine may take a moment to record the code.
        // Usually it has: look again soon, then less often (a fixed 20 ms pause cost every task
        // that missed the first look 20 ms).
        let give_up = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut pause = std::time::Duration::from_millis(1);
        loop {
            let inspect = self.docker.inspect_exec(&exec.id).await?;
            if inspect.running != Some(true) {
                return inspect
                    .exit_code
                    .context("the engine reported no exit code");
            }
            if tokio::time::Instant::now() >= give_up {
                anyhow::bail!(
                    "the engine still reports the command running after its output ended"
                );
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(20));
        }
    }
}

impl DockerRuntime {
    /// Runs a short command in the node's container and returns its exit code.
    async fn run_quick(
        &self,
        server_id: &str,
        node_id: &str,
        cmd: Vec<String>,
    ) -> anyhow::Result<i64> {
        let exec = self
            .docker
            .create_exec(
                &container_name(server_id, node_id),
                CreateExecOptions {
                    cmd: Some(cmd),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await?;
        if let StartExecResults::Attached { mut output, .. } =
            self.docker.start_exec(&exec.id, None).await?
        {
            while output.next().await.is_some() {}
        }
        Ok(self
            .docker
            .inspect_exec(&exec.id)
            .await?
            .exit_code
            .unwrap_or(-1))
    }

    async fn restart_node(&self, server_id: &str, node_id: &str) -> anyhow::Result<()> {
        let options = bollard::query_parameters::RestartContainerOptionsBuilder::default()
            .t(1)
            .build();
        self.docker
            .restart_container(&container_name(server_id, node_id), Some(options))
            .await
            .context("restarting the node's container")
    }

    async fn kill_group(&self, server_id: &str, node_id: &str, pid: i32) -> anyhow::Result<()> {
        match self
            .run_quick(
                server_id,
                node_id,
                vec!["kill".into(), "-9".into(), format!("-{pid}")],
            )
            .await
        {
            Err(e) if matches!(e.downcast_ref::<bollard::errors::Error>(), Some(b) if status_of(b) == Some(404)) => {
                Ok(())
            }
            other => other.map(|_| ()),
        }
    }

    async fn is_alive(&self, server_id: &str, node_id: &str, pid: i32) -> bool {
        matches!(
            self.run_quick(
                server_id,
                node_id,
                vec!["kill".into(), "-0".into(), pid.to_string()]
            )
            .await,
            Ok(0)
        )
    }
}

impl NodeRuntime for DockerRuntime {
    fn name(&self) -> &'static str {
        "docker"
    }

    fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Every node's root is bind-mounted at the same place in its container.
    fn node_root(&self, _host_root: &Path) -> String {
        NODE_ROOT.to_string()
    }

    fn ensure_default_image<'a>(&'a self, image: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(ensure_default_image(&self.docker, image))
    }

    fn reachable(&self) -> BoxFuture<'_, bool> {
        Box::pin(async {
            self.docker
                .ping()
                .await
                .map_err(
                    |e| tracing::warn!(error = %e, "readiness: the Docker engine does not answer"),
                )
                .is_ok()
        })
    }

    fn create_node<'a>(
        &'a self,
        spec: &'a NodeSpec,
        root: &'a Path,
        workitems: &'a Path,
    ) -> BoxFuture<'a, Result<NodeHandle, NodeError>> {
        Box::pin(DockerRuntime::create_node(self, spec, root, workitems))
    }

    fn remove_node<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(DockerRuntime::remove_node(self, server_id, node_id))
    }

    fn restart_node<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(DockerRuntime::restart_node(self, server_id, node_id))
    }

    fn list_nodes<'a>(
        &'a self,
        server_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Vec<FoundNode>>> {
        Box::pin(DockerRuntime::list_nodes(self, server_id))
    }

    fn exec<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        env: Vec<(String, String)>,
        started: Option<tokio::sync::oneshot::Sender<i32>>,
    ) -> BoxFuture<'a, anyhow::Result<i64>> {
        Box::pin(DockerRuntime::exec(self, server_id, node_id, env, started))
    }

    fn kill_group<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        pid: i32,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(DockerRuntime::kill_group(self, server_id, node_id, pid))
    }

    fn is_alive<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        pid: i32,
    ) -> BoxFuture<'a, bool> {
        Box::pin(DockerRuntime::is_alive(self, server_id, node_id, pid))
    }
}

/// The built-in default image is built from the machine's static busybox when it is missing, so
/// a fresh machine runs pools without a registry. Other images are the user's to provide.
async fn ensure_default_image(docker: &Docker, image: &str) {
    const BUILT_IN: &str = "batchpool/node:latest";
    const BUSYBOX: &str = "/bin/busybox";
    if image != BUILT_IN || docker.inspect_image(image).await.is_ok() {
        return;
    }
    if !std::path::Path::new(BUSYBOX).exists() {
        tracing::warn!(image, "the default node image is missing and {BUSYBOX} is not there to build it (apt-get install busybox-static)");
        return;
    }
    match build_busybox_image(docker, image, std::path::Path::new(BUSYBOX)).await {
        Ok(()) => tracing::info!(image, "built the default node image from {BUSYBOX}"),
        Err(e) => {
            tracing::warn!(image, error = %format!("{e:#}"), "building the default node image failed")
        }
    }
}

/// Builds a node image from a static busybox with no registry: `FROM scratch`, busybox and its
/// applet links (`/bin/sh`, `/bin/sleep`, ...) copied in, through the engine's build API.
pub async fn build_busybox_image(docker: &Docker, tag: &str, busybox: &Path) -> anyhow::Result<()> {
    let binary =
        std::fs::read(busybox).with_context(|| format!("reading {}", busybox.display()))?;
    let context = busybox_build_context(&binary)?;
    let options = BuildImageOptionsBuilder::default()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .build();
    let mut progress = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    while let Some(step) = progress.next().await {
        let step = step.context("building the node image")?;
        if let Some(err) = step.error_detail.and_then(|d| d.message) {
            anyhow::bail!("building the node image: {err}");
        }
    }
    docker
        .inspect_image(tag)
        .await
        .context("the built image is not there")?;
    Ok(())
}

/// A tar build context: a Dockerfile and a root filesystem with busybox and its applet links.
fn busybox_build_context(busybox: &[u8]) -> anyhow::Result<Vec<u8>> {
    const DOCKERFILE: &str = "FROM scratch\nCOPY rootfs/ /\nENV PATH=/bin\nCMD [\"/bin/sh\"]\n";
    const APPLETS: &[&str] = &[
        "sh",
        "ash",
        "cat",
        "echo",
        "env",
        "sleep",
        "ls",
        "mkdir",
        "rm",
        "cp",
        "mv",
        "touch",
        "true",
        "false",
        "test",
        "[",
        "printf",
        "pwd",
        "grep",
        "sed",
        "awk",
        "head",
        "tail",
        "wc",
        "sort",
        "date",
        "id",
        "kill",
        "ps",
        "seq",
        "tr",
        "cut",
        "expr",
        "stat",
        "nproc",
        "chmod",
        "ln",
        "uname",
        "find",
        "xargs",
        "tee",
        "dd",
        "md5sum",
        "sha256sum",
        "basename",
        "dirname",
        "hostname",
        "yes",
        "timeout",
        "du",
        "df",
        "gzip",
        "tar",
    ];
    let mut tar = tar::Builder::new(Vec::new());
    let mut add = |path: &str,
                   kind: tar::EntryType,
                   mode: u32,
                   data: &[u8],
                   link: Option<&str>|
     -> std::io::Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(data.len() as u64);
        header.set_mtime(0);
        if let Some(link) = link {
            header.set_link_name(link)?;
        }
        header.set_path(path)?;
        header.set_cksum();
        tar.append(&header, data)
    };
    add(
        "Dockerfile",
        tar::EntryType::Regular,
        0o644,
        DOCKERFILE.as_bytes(),
        None,
    )?;
    for dir in [
        "rootfs",
        "rootfs/bin",
        "rootfs/tmp",
        "rootfs/mnt",
        "rootfs/mnt/batch",
        "rootfs/mnt/batch/tasks",
    ] {
        add(
            dir,
            tar::EntryType::Directory,
            if dir == "rootfs/tmp" { 0o1777 } else { 0o755 },
            &[],
            None,
        )?;
    }
    add(
        "rootfs/bin/busybox",
        tar::EntryType::Regular,
        0o755,
        busybox,
        None,
    )?;
    for applet in APPLETS {
        add(
            &format!("rootfs/bin/{applet}"),
            tar::EntryType::Symlink,
            0o777,
            &[],
            Some("busybox"),
        )?;
    }
    Ok(tar.into_inner()?)
}
