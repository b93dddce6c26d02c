//! The contract of a kind of node: what a runtime implements.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;

use crate::domain::host::HostSpec;

use super::{
    AttemptPid, ContainerError, FoundNode, Layout, NodeCommand, NodeError, NodeHandle, NodeSpec,
    Started, TaskContainer,
};

/// A future a [`NodeRuntime`] returns: boxed, so the trait can be a `dyn` object.
/// The most of a node agent's log one upload of service logs takes (the latest part).
pub const MAX_AGENT_LOG: usize = 16 << 20;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What differs from one kind of node to another (a container, a directory and processes, a node
/// agent): adding a runtime means implementing this, and nothing else looks at which runtime it
/// is. What every runtime shares (the directory layout, preparing node and task directories, the
/// wrapper, the attempt records) is [`Runtime`]'s, around it.
pub trait NodeRuntime: Send + Sync {
    /// The runtime's name, for the log.
    fn name(&self) -> &'static str;

    /// Where this runtime keeps node and task directories on this host.
    fn layout(&self) -> &Layout;

    /// The node's root directory as commands on the node see it (AZ_BATCH_NODE_ROOT_DIR), given
    /// where it is on this host.
    fn node_root(&self, host_root: &Path) -> String;

    /// Makes sure the default node image is there, once at start; most runtimes have none.
    fn ensure_default_image<'a>(&'a self, _image: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// Whether the runtime answers, for `/health/ready`.
    fn reachable(&self) -> BoxFuture<'_, bool>;

    /// Creates and starts the node, its directories with it; if the node exists already (a
    /// crash mid-way), adopts it. Its agent says hello after (see [`agent_advice`]).
    ///
    /// [`agent_advice`]: NodeRuntime::agent_advice
    fn create_node<'a>(
        &'a self,
        spec: &'a NodeSpec,
    ) -> BoxFuture<'a, Result<NodeHandle, NodeError>>;

    /// What ends the error of a new node whose agent never said hello: where it was to reach
    /// this server.
    fn agent_advice(&self) -> String;

    /// Removes the node (not its directory); a node that is already gone is not an error.
    fn remove_node<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>>;

    /// Restarts the node (a reboot).
    fn restart_node<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>>;

    /// The node agent's log from `since` to `until` (Unix seconds; `until` 0: to now), its last
    /// [`MAX_AGENT_LOG`] bytes, for `uploadbatchservicelogs`.
    fn agent_log<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        since: i64,
        until: i64,
    ) -> BoxFuture<'a, anyhow::Result<Vec<u8>>>;

    /// The nodes of this installation that exist on the runtime.
    fn list_nodes<'a>(
        &'a self,
        server_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Vec<FoundNode>>>;

    /// Runs the command on the node, as Azure does and keeping the attempt's record (through
    /// the node's agent, or the [`task::WRAPPER`]), and waits for its exit code; `started`
    /// learns the pid of its process group as soon as it runs, and what it used (where an
    /// agent ran it) before the exit code is returned.
    fn exec<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        command: NodeCommand,
        started: Started,
    ) -> BoxFuture<'a, anyhow::Result<i64>>;

    /// Runs the [`task::WRAPPER`] in a container of its own from `container`'s image, inside
    /// the node (its directories, processes, network and limits), and waits for its exit code;
    /// `started` learns the pid of its process group, as the node sees it. Runtimes without
    /// containers refuse, with a [`ContainerError`].
    fn exec_in_container<'a>(
        &'a self,
        _at: (&'a str, &'a str),
        _env: Vec<(String, String)>,
        _container: &'a TaskContainer,
        _started: Started,
    ) -> BoxFuture<'a, anyhow::Result<i64>> {
        Box::pin(async move {
            Err(ContainerError {
                code: "ContainerNotSupported",
                message: format!(
                    "the {} runtime runs no containers; a task with containerSettings needs a server started with --runtime docker",
                    self.name()
                ),
            }
            .into())
        })
    }

    /// Stops the node and what runs on it, keeping its disk (a deallocate); making it
    /// (`create_node`) starts it again.
    fn stop_node<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>>;

    /// Removes the task containers of this installation that are no longer running (those
    /// of attempts that ended while no server watched, or left half made).
    fn remove_finished_task_containers<'a>(
        &'a self,
        _server_id: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Removes an attempt's own container (`label`, see [`container_label`]), stopping it if
    /// it is still ending: for attempts a previous server started, whose container no one
    /// waits on.
    fn remove_task_container<'a>(
        &'a self,
        _server_id: &'a str,
        _label: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// The nodes this runtime has lost with their host (one that has not answered for longer
    /// than its timeout); checking the hosts as it goes. Most runtimes lose none.
    fn lost_nodes<'a>(&'a self, _server_id: &'a str) -> BoxFuture<'a, Vec<String>> {
        Box::pin(async { Vec::new() })
    }

    /// Whether a node of `spec` fits on a host now (where it is placed already, its own share
    /// counts as free). Runtimes without caps always have room.
    fn has_room(&self, _spec: &NodeSpec) -> bool {
        true
    }

    /// Which of `candidates` (low-priority nodes, in the order they should go) to preempt so
    /// that a node of `spec` fits on one host; None when no set of them would do, or the
    /// runtime has no caps to make room under.
    fn room_for(&self, _spec: &NodeSpec, _candidates: &[String]) -> Option<Vec<String>> {
        None
    }

    /// Each host by its URL, and whether it answered when last pinged (a host given at start
    /// that has yet to answer, too), for runtimes that have hosts.
    fn hosts_answering(&self) -> Vec<(String, bool)> {
        Vec::new()
    }

    /// The hosts added at run time (`batchpool host add`), for runtimes that have hosts; and
    /// those of this server's (`server_id`) that did not answer at start, tried again.
    fn sync_hosts<'a>(&'a self, _server_id: &'a str, _hosts: Vec<HostSpec>) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// The secret the node's agent was given, for nodes that run one (after a restart, the
    /// server learns them again from the nodes themselves).
    fn agent_secret<'a>(
        &'a self,
        _server_id: &'a str,
        _node_id: &'a str,
    ) -> BoxFuture<'a, Option<String>> {
        Box::pin(async { None })
    }

    /// Kills the process group `pid` (> 1) on the node.
    fn kill_group<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        pid: &'a AttemptPid,
    ) -> BoxFuture<'a, anyhow::Result<()>>;

    /// Whether the process `pid` is alive on the node; None if the node could not be asked
    /// (its agent did not answer, its engine could not be reached): not a "no".
    fn is_alive<'a>(
        &'a self,
        server_id: &'a str,
        node_id: &'a str,
        pid: &'a AttemptPid,
    ) -> BoxFuture<'a, Option<bool>>;
}
