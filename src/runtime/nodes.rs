//! The kinds of node, one variant each: what differs from one to another (a container on one of
//! several Docker hosts, a directory and processes, a node of the fleet simulator). Adding a
//! kind of node means a variant here and its own type; nothing else looks at which kind it is.
//! What every kind shares (the directory layout, preparing node and task directories, the
//! attempt records) is [`Runtime`](super::Runtime)'s, around it.

use std::path::Path;

use super::{
    AttemptPid, ContainerError, DockerHosts, Found, Layout, LocalRuntime, NodeCommand, NodeError,
    NodeHandle, NodeSpec, SimulatedRuntime, Started, TaskContainer,
};
use crate::domain::host::HostSpec;

/// The most of a node agent's log one upload of service logs takes (the latest part).
pub const MAX_AGENT_LOG: usize = 16 << 20;

/// A node's root as its commands see it, where a container or a simulated node has it: where
/// a Linux node has it on Azure.
pub const NODE_ROOT: &str = "/mnt/batch/tasks";

pub enum Nodes {
    Docker(DockerHosts),
    Local(LocalRuntime),
    Simulated(SimulatedRuntime),
}

impl From<DockerHosts> for Nodes {
    fn from(hosts: DockerHosts) -> Self {
        Nodes::Docker(hosts)
    }
}

impl From<LocalRuntime> for Nodes {
    fn from(local: LocalRuntime) -> Self {
        Nodes::Local(local)
    }
}

impl From<SimulatedRuntime> for Nodes {
    fn from(simulated: SimulatedRuntime) -> Self {
        Nodes::Simulated(simulated)
    }
}

/// `$body` for whichever kind `$nodes` is, as `$kind`: for what each kind does its own way
/// under the same name.
macro_rules! each {
    ($nodes:expr, $kind:ident => $body:expr) => {
        match $nodes {
            Nodes::Docker($kind) => $body,
            Nodes::Local($kind) => $body,
            Nodes::Simulated($kind) => $body,
        }
    };
}

impl Nodes {
    /// The runtime's name, for the log.
    pub fn name(&self) -> &'static str {
        match self {
            Nodes::Docker(_) => "docker",
            Nodes::Local(_) => "local",
            Nodes::Simulated(_) => "simulated",
        }
    }

    /// Where this runtime keeps node and task directories on this host.
    pub fn layout(&self) -> &Layout {
        each!(self, n => n.layout())
    }

    /// The node's root directory as commands on the node see it (AZ_BATCH_NODE_ROOT_DIR),
    /// given where it is on this host: a local node's is that directory; a container's is a
    /// volume of its own, mounted at [`NODE_ROOT`].
    pub fn node_root(&self, host_root: &Path) -> String {
        match self {
            Nodes::Local(_) => host_root.display().to_string(),
            Nodes::Docker(_) | Nodes::Simulated(_) => NODE_ROOT.to_string(),
        }
    }

    /// This program as a node's commands run it, for its helpers (`batchpool unzip`): a Docker
    /// node's copy in the agent's volume, or this very file for a local node.
    pub fn program_in_node(&self) -> Vec<String> {
        match self {
            Nodes::Docker(hosts) => hosts.agent.files.program.clone(),
            Nodes::Local(_) | Nodes::Simulated(_) => {
                let exe = std::env::current_exe().ok().filter(|p| p.is_file());
                vec![exe.map_or("batchpool".into(), |p| p.display().to_string())]
            }
        }
    }

    /// Makes sure the default node image is on every Docker host, once at start.
    pub async fn ensure_default_image(&self, image: &str) {
        if let Nodes::Docker(hosts) = self {
            hosts.ensure_default_image(image).await
        }
    }

    /// Whether the runtime answers, for `/health/ready`: every Docker host, or the fleet
    /// simulator. A local runtime always does.
    pub async fn reachable(&self) -> bool {
        match self {
            Nodes::Docker(hosts) => hosts.reachable().await,
            Nodes::Local(_) => true,
            Nodes::Simulated(sim) => sim.reachable().await,
        }
    }

    /// Creates and starts the node, its directories with it; if the node exists already (a
    /// crash mid-way), adopts it. Its agent says hello after (see [`agent_advice`]).
    ///
    /// [`agent_advice`]: Nodes::agent_advice
    pub async fn create_node(&self, spec: &NodeSpec) -> Result<NodeHandle, NodeError> {
        each!(self, n => n.create_node(spec).await)
    }

    /// What ends the error of a new node whose agent never said hello: where it was to reach
    /// this server.
    pub fn agent_advice(&self) -> String {
        each!(self, n => n.agent_advice())
    }

    /// Removes the node (not its directory); a node that is already gone is not an error.
    pub async fn remove_node(&self, server_id: &str, node_id: &str) -> anyhow::Result<()> {
        match self {
            Nodes::Docker(hosts) => hosts.remove_node(server_id, node_id).await,
            Nodes::Local(local) => local.remove_node(node_id).await,
            Nodes::Simulated(sim) => sim.remove_node(node_id).await,
        }
    }

    /// Restarts the node (a reboot); a local node has nothing to restart.
    pub async fn restart_node(&self, server_id: &str, node_id: &str) -> anyhow::Result<()> {
        match self {
            Nodes::Docker(hosts) => hosts.restart_node(server_id, node_id).await,
            Nodes::Local(_) => Ok(()),
            Nodes::Simulated(sim) => sim.restart_node(node_id).await,
        }
    }

    /// Thaws a frozen node; only a Docker node's container can be frozen (paused).
    pub async fn thaw_node(&self, server_id: &str, node_id: &str) -> anyhow::Result<()> {
        match self {
            Nodes::Docker(hosts) => hosts.thaw_node(server_id, node_id).await,
            Nodes::Local(_) | Nodes::Simulated(_) => Ok(()),
        }
    }

    /// Stops the node and what runs on it, keeping its disk (a deallocate); making it
    /// (`create_node`) starts it again. A local node's agent ends, its directory stays.
    pub async fn stop_node(&self, server_id: &str, node_id: &str) -> anyhow::Result<()> {
        match self {
            Nodes::Docker(hosts) => hosts.stop_node(server_id, node_id).await,
            Nodes::Local(local) => local.remove_node(node_id).await,
            Nodes::Simulated(sim) => sim.stop_node(node_id).await,
        }
    }

    /// The node agent's log from `since` to `until` (Unix seconds; `until` 0: to now), its
    /// last [`MAX_AGENT_LOG`] bytes, for `uploadbatchservicelogs`.
    pub async fn agent_log(
        &self,
        server_id: &str,
        node_id: &str,
        since: i64,
        until: i64,
    ) -> anyhow::Result<Vec<u8>> {
        match self {
            Nodes::Docker(hosts) => hosts.agent_log(server_id, node_id, since, until).await,
            Nodes::Local(local) => local.agent_log(node_id, since, until).await,
            // A simulated node's agent keeps no log.
            Nodes::Simulated(_) => {
                Ok(format!("node {node_id} is simulated: its agent keeps no log\n").into_bytes())
            }
        }
    }

    /// The nodes of this installation that exist on the runtime, on the hosts that answer.
    pub async fn list_nodes(&self, server_id: &str) -> anyhow::Result<Found> {
        let nodes = match self {
            Nodes::Docker(hosts) => return Ok(hosts.list_nodes(server_id).await),
            Nodes::Local(local) => local.list_nodes(server_id).await?,
            Nodes::Simulated(sim) => sim.list_nodes(server_id).await?,
        };
        Ok(Found {
            nodes,
            unanswered: Vec::new(),
        })
    }

    /// Runs the command on the node, as Azure does and keeping the attempt's record (through
    /// the node's agent), and waits for its exit code; `started` learns the pid of its process
    /// group as soon as it runs, and what it used before the exit code is returned.
    pub async fn exec(
        &self,
        server_id: &str,
        node_id: &str,
        command: NodeCommand,
        started: Started,
    ) -> anyhow::Result<i64> {
        match self {
            Nodes::Docker(hosts) => hosts.exec(server_id, node_id, command, started).await,
            Nodes::Local(local) => local.exec(node_id, command, started).await,
            Nodes::Simulated(sim) => sim.exec(server_id, node_id, command, started).await,
        }
    }

    /// Runs the [`task::WRAPPER`](super::task::WRAPPER) in a container of its own from
    /// `container`'s image, inside the node (its directories, processes, network and
    /// limits), and waits for its exit code; `started` learns the pid of its process group, as
    /// the node sees it. Only Docker nodes run containers: the others refuse, with a
    /// [`ContainerError`].
    pub async fn exec_in_container(
        &self,
        at: (&str, &str),
        env: Vec<(String, String)>,
        container: &TaskContainer,
        started: Started,
    ) -> anyhow::Result<i64> {
        match self {
            Nodes::Docker(hosts) => hosts.exec_in_container(at, env, container, started).await,
            _ => Err(ContainerError {
                code: "ContainerNotSupported",
                message: format!(
                    "the {} runtime runs no containers; a task with containerSettings needs a server started with --runtime docker",
                    self.name()
                ),
            }
            .into()),
        }
    }

    /// Removes the task containers of this installation that are no longer running (those
    /// of attempts that ended while no server watched, or left half made).
    pub async fn remove_finished_task_containers(&self, server_id: &str) -> anyhow::Result<()> {
        match self {
            Nodes::Docker(hosts) => hosts.remove_finished_task_containers(server_id).await,
            _ => Ok(()),
        }
    }

    /// Removes an attempt's own container (`label`, see
    /// [`container_label`](super::container_label)), stopping it if it is still ending: for
    /// attempts a previous server started, whose container no one waits on.
    pub async fn remove_task_container(&self, server_id: &str, label: &str) -> anyhow::Result<()> {
        match self {
            Nodes::Docker(hosts) => hosts.remove_task_container(server_id, label).await,
            _ => Ok(()),
        }
    }

    /// The nodes lost with their Docker host (one that has not answered for longer than its
    /// timeout), checking the hosts as it goes. The other kinds lose none this way.
    pub async fn lost_nodes(&self, server_id: &str) -> Vec<String> {
        match self {
            Nodes::Docker(hosts) => hosts.lost_nodes(server_id).await,
            _ => Vec::new(),
        }
    }

    /// Whether a node of `spec` fits on a host now (where it is placed already, its own share
    /// counts as free). Only Docker hosts have caps.
    pub fn has_room(&self, spec: &NodeSpec) -> bool {
        match self {
            Nodes::Docker(hosts) => hosts
                .room_for(spec, std::slice::from_ref(&spec.node_id))
                .is_some(),
            _ => true,
        }
    }

    /// Which of `candidates` (low-priority nodes, in the order they should go) to preempt so
    /// that a node of `spec` fits on one host; None when no set of them would do, or there
    /// are no caps to make room under.
    pub fn room_for(&self, spec: &NodeSpec, candidates: &[String]) -> Option<Vec<String>> {
        match self {
            Nodes::Docker(hosts) => hosts.room_for(spec, candidates),
            _ => None,
        }
    }

    /// Each Docker host by its URL, and whether it answered when last pinged (a host given at
    /// start that has yet to answer, too).
    pub fn hosts_answering(&self) -> Vec<(String, bool)> {
        match self {
            Nodes::Docker(hosts) => hosts.hosts_answering(),
            _ => Vec::new(),
        }
    }

    /// The Docker hosts added at run time (`batchpool host add`); and those of this server's
    /// (`server_id`) that did not answer at start, tried again.
    pub async fn sync_hosts(&self, server_id: &str, wanted: Vec<HostSpec>) {
        if let Nodes::Docker(hosts) = self {
            hosts.sync_hosts(server_id, wanted).await
        }
    }

    /// The secret the node's agent was given (after a restart, the server learns them again
    /// from the nodes themselves).
    pub async fn agent_secret(&self, server_id: &str, node_id: &str) -> Option<String> {
        match self {
            Nodes::Docker(hosts) => hosts.agent_secret(server_id, node_id).await,
            Nodes::Local(local) => local.agent_secret(node_id),
            Nodes::Simulated(sim) => sim.agent_secret(server_id, node_id).await,
        }
    }

    /// Kills the process group `pid` (> 1) on the node.
    pub async fn kill_group(
        &self,
        server_id: &str,
        node_id: &str,
        pid: &AttemptPid,
    ) -> anyhow::Result<()> {
        match self {
            Nodes::Docker(hosts) => hosts.kill_group(server_id, node_id, pid).await,
            Nodes::Local(local) => {
                local.kill_group(node_id, pid).await;
                Ok(())
            }
            Nodes::Simulated(sim) => {
                sim.kill_group(server_id, node_id, pid).await;
                Ok(())
            }
        }
    }

    /// Whether the process `pid` is alive on the node; None if the node could not be asked
    /// (its agent did not answer, its engine could not be reached): not a "no".
    pub async fn is_alive(&self, server_id: &str, node_id: &str, pid: &AttemptPid) -> Option<bool> {
        match self {
            Nodes::Docker(hosts) => hosts.is_alive(server_id, node_id, pid).await,
            Nodes::Local(local) => local.is_alive(node_id, pid).await,
            Nodes::Simulated(sim) => sim.is_alive(server_id, node_id, pid).await,
        }
    }
}
