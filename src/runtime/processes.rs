//! Commands on nodes: running one (in its own container or not) to its exit code, killing its
//! process group, asking whether it lives, and removing the containers tasks ran in.

use super::{AttemptPid, ExecSpec, Runtime, Started, TaskFiles};

impl Runtime {
    /// Runs a command on the node and waits for its exit code; `started` learns the pid of its
    /// process group as soon as it runs, and the id of its own container if it has one.
    pub async fn exec(
        &self,
        node_id: &str,
        spec: ExecSpec,
        started: Started,
    ) -> anyhow::Result<i64> {
        let Some(container) = &spec.container else {
            // The spec goes into the command: a running attempt holds none of it meanwhile.
            let command = spec.node_command();
            return self
                .node
                .exec(&self.server_id, node_id, command, started)
                .await;
        };
        anyhow::ensure!(spec.user.is_none(), "no non-administrator in a container");
        // A container of its own, which the node's agent does not start: the agent makes its
        // directories all the same, on the node. A node's own commands have it make them as it
        // starts them.
        let files = TaskFiles {
            runtime: self,
            node: Some(node_id),
            dirs: &spec.dirs,
        };
        spec.dirs
            .prepare_through(files, spec.attempt)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        self.node
            .exec_in_container(
                (&self.server_id, node_id),
                spec.wrapper_env(),
                container,
                started,
            )
            .await
    }

    /// Removes an adopted attempt's own container, if it had one (see
    /// [`Nodes::remove_task_container`]).
    pub async fn remove_task_container(&self, label: &str) {
        if let Err(e) = self
            .node
            .remove_task_container(&self.server_id, label)
            .await
        {
            tracing::warn!(error = %format!("{e:#}"), label, "removing a task container failed");
        }
    }

    /// Removes task containers no attempt runs in any more (see
    /// [`Nodes::remove_finished_task_containers`]).
    pub async fn remove_finished_task_containers(&self) {
        if let Err(e) = self
            .node
            .remove_finished_task_containers(&self.server_id)
            .await
        {
            tracing::warn!(error = %format!("{e:#}"), "removing finished task containers failed");
        }
    }

    /// Kills an attempt's whole process tree (its process group), wherever it runs.
    pub async fn kill(&self, node_id: &str, pid: &AttemptPid) -> anyhow::Result<()> {
        if pid.pid <= 1 {
            return Ok(());
        }
        self.node.kill_group(&self.server_id, node_id, pid).await
    }

    /// Whether an attempt's process is still alive (after a restart, to wait for it); None if
    /// its node could not be asked.
    pub async fn is_alive(&self, node_id: &str, pid: &AttemptPid) -> Option<bool> {
        self.node.is_alive(&self.server_id, node_id, pid).await
    }
}
