//! Commands in a node's container: the wrapper that runs a task, and the short `kill` commands
//! that stop it or look for it.

use crate::runtime::agents::ASK_TIMEOUT;
use std::pin::Pin;
use std::time::Duration;

use anyhow::Context;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, CreateExecResults, StartExecResults};
use futures_util::{Stream, StreamExt};

use super::{container_name, status_of, DockerRuntime};
use crate::runtime::task::WRAPPER;
use crate::runtime::AttemptPid;
use crate::runtime::NodeCommand;

/// What an attached exec streams back.
pub(super) type Output =
    Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// Why a node made by an older build cannot run a non-administrator's task: `what` of it
/// would start it as root.
fn out_of_date(node_id: &str, what: &str) -> crate::runtime::ContainerError {
    crate::runtime::ContainerError {
        code: "NodeAgentOutOfDate",
        message: format!(
            "node {node_id} was made by an older build: {what} would start a \
             non-administrator's task as root; reimage the node"
        ),
    }
}

impl DockerRuntime {
    pub(super) async fn exec(
        &self,
        server_id: &str,
        node_id: &str,
        command: NodeCommand,
        started: crate::runtime::Started,
    ) -> anyhow::Result<i64> {
        if self.has_agent(server_id, node_id).await {
            // An agent not heard from runs nothing, and its run says so.
            let users = self.agent.agents.starts_users(node_id);
            if command.user.is_some() && users.await == Some(false) {
                return Err(out_of_date(node_id, "its agent").into());
            }
            let run = move |id| command.work(id);
            return self.agent.agents.run(node_id, run, started).await;
        }
        // A node made before nodes had agents: the wrapper, through the engine.
        if command.user.is_some() {
            return Err(out_of_date(node_id, "it has no agent and").into());
        }
        command.prepare().await?;
        let cmd = vec!["/bin/sh".to_string(), "-c".into(), WRAPPER.into()];
        let env: Vec<String> = command
            .wrapper_env()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let exec = self
            .create_exec(server_id, node_id, cmd, Some(env))
            .await
            .context("creating the exec")?;
        if let StartExecResults::Attached { output, .. } =
            self.docker.start_exec(&exec.id, None).await?
        {
            read_pid_to_end(output, started.pid).await?;
        }
        self.exit_code(&exec.id).await
    }

    /// Whether the node runs an agent: one this server knows, or (after a restart) one its
    /// container was made with.
    async fn has_agent(&self, server_id: &str, node_id: &str) -> bool {
        let secret = self.agent_secret(server_id, node_id);
        self.agent.agents.learn(node_id, secret).await
    }

    /// The secret of the node's agent, from its container.
    pub(super) async fn agent_secret(&self, server_id: &str, node_id: &str) -> Option<String> {
        let info = self
            .docker
            .inspect_container(&container_name(server_id, node_id), None)
            .await
            .ok()?;
        super::node::agent_secret(info.config.as_ref())
    }

    /// Makes an exec whose stream ends when its command does (attached); what it prints is read
    /// or dropped by the caller.
    async fn create_exec(
        &self,
        server_id: &str,
        node_id: &str,
        cmd: Vec<String>,
        env: Option<Vec<String>>,
    ) -> Result<CreateExecResults, bollard::errors::Error> {
        self.docker
            .create_exec(
                &container_name(server_id, node_id),
                CreateExecOptions {
                    cmd: Some(cmd),
                    env,
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await
    }

    /// The exit code of an exec whose output has ended.
    async fn exit_code(&self, exec_id: &str) -> anyhow::Result<i64> {
        // The stream ends as the process exits; the engine may take a moment to record the code.
        // Usually it has: look again soon, then less often (a fixed 20 ms pause cost every task
        // that missed the first look 20 ms).
        let give_up = tokio::time::Instant::now() + Duration::from_secs(2);
        let mut pause = Duration::from_millis(1);
        loop {
            let inspect = self.docker.inspect_exec(exec_id).await?;
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
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// Runs a short command in the node's container and returns its exit code.
    async fn run_quick(
        &self,
        server_id: &str,
        node_id: &str,
        cmd: Vec<String>,
    ) -> anyhow::Result<i64> {
        let exec = self.create_exec(server_id, node_id, cmd, None).await?;
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

    pub(super) async fn kill_group(
        &self,
        server_id: &str,
        node_id: &str,
        pid: &AttemptPid,
    ) -> anyhow::Result<()> {
        if self.has_agent(server_id, node_id).await {
            let kill = |id| pid.kill(id);
            match self.agent.agents.ask(node_id, kill, ASK_TIMEOUT).await {
                Ok(_) => return Ok(()),
                // Through the engine, while the node's container runs.
                Err(e) => tracing::debug!(error = %e, "killing through the agent failed"),
            }
        }
        match self
            .run_quick(
                server_id,
                node_id,
                vec!["kill".into(), "-9".into(), format!("-{}", pid.pid)],
            )
            .await
        {
            Err(e) if matches!(e.downcast_ref::<bollard::errors::Error>(), Some(b) if status_of(b) == Some(404)) => {
                Ok(())
            }
            other => other.map(|_| ()),
        }
    }

    /// Whether the process lives, as the node's agent says, else as `kill -0` in the node says;
    /// None if neither could be asked.
    pub(super) async fn is_alive(
        &self,
        server_id: &str,
        node_id: &str,
        pid: &AttemptPid,
    ) -> Option<bool> {
        if self.has_agent(server_id, node_id).await {
            let alive = |id| pid.alive(id);
            match self.agent.agents.ask(node_id, alive, ASK_TIMEOUT).await {
                Ok(yes) => return Some(yes),
                Err(e) => tracing::debug!(error = %e, "asking the agent failed"),
            }
        }
        let signal = vec!["kill".into(), "-0".into(), pid.pid.to_string()];
        match self.run_quick(server_id, node_id, signal).await {
            Ok(code) => Some(code == 0),
            // Its node's container is gone or stopped: so is the process.
            Err(e) if matches!(e.downcast_ref::<bollard::errors::Error>(), Some(b) if matches!(status_of(b), Some(404 | 409))) => {
                Some(false)
            }
            Err(e) => {
                tracing::debug!(error = %format!("{e:#}"), "asking the node's engine failed");
                None
            }
        }
    }
}

/// Reads the wrapper's output to its end. Its first line is its pid (in the node's pid
/// namespace), which `started` learns; nothing else comes, as the command's output goes to files.
pub(super) async fn read_pid_to_end(
    mut output: Output,
    mut started: Option<tokio::sync::oneshot::Sender<i32>>,
) -> anyhow::Result<()> {
    let mut first_line = Vec::new();
    while let Some(chunk) = output.next().await {
        let chunk = chunk.context("reading the exec stream")?;
        if let (Some(_), LogOutput::StdOut { message }) = (&started, chunk) {
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
    Ok(())
}
