//! Starting an attempt on its node: its node prepared for its job, its application packages
//! installed and its resource files downloaded (the task `preparing` meanwhile), then its command.

use tokio_util::sync::CancellationToken;

use super::Executor;
use crate::domain::agent::Slots;
use crate::domain::run_as::{Command, RunAs};
use crate::runtime::{
    container_label, ContainerError, ExecSpec, Started, TaskContainer, TaskDirs, AGENT_UNREACHABLE,
};
use crate::scheduler::complete::Failure;
use crate::scheduler::complete::Outcome;
use crate::scheduler::environment::task_environment;
use crate::scheduler::task_files;
use crate::store;
use crate::store::tasks::AttemptRow;

impl Executor {
    /// Puts in place what the attempt needs and runs its command to its exit code; the outcome
    /// instead, when the attempt ends before its command could run. `stop` ends the preparing
    /// early (the attempt was killed or timed out). `started` learns its pid and what it used.
    pub(super) async fn start(
        &self,
        a: &AttemptRow,
        node_id: &str,
        dirs: &TaskDirs,
        stop: &CancellationToken,
        mut started: Started,
    ) -> Result<Result<i64, String>, Outcome> {
        // Boxed: its futures are large and over before the command starts, and every running
        // attempt's watch (40,000 of them on a large fleet) would hold their room while it runs.
        let package_env = Box::pin(self.prepare(a, node_id, dirs, stop)).await?;
        task_files::prepared(&self.db, a).await;
        let spec = ExecSpec {
            command_line: a.command_line.clone(),
            dirs: dirs.clone(),
            attempt: a.attempt,
            env: task_environment(&self.runtime, a, node_id)
                .into_iter()
                .chain(package_env)
                .chain(self.token_env(a))
                .collect(),
            container: task_container(a),
            user: self
                .runtime
                .task_user(RunAs::of(a.user_identity.as_ref(), Command::Task(a.pk))),
            slots: Some(slots_of(a)),
        };
        let (container, created) = tokio::sync::oneshot::channel::<String>();
        let (db, pk, attempt) = (self.db.clone(), a.pk, a.attempt);
        // Its container's id is the task's executionInfo.containerInfo, as on Azure.
        tokio::spawn(async move {
            if let Ok(id) = created.await {
                if let Err(e) = store::tasks::set_container(&db, pk, attempt, &id).await {
                    tracing::warn!(error = %e, "recording a task's container failed");
                }
            }
        });
        started.container = Some(container);
        started.stop = Some(stop.clone());
        match self.runtime.exec(node_id, spec, started).await {
            Ok(code) => Ok(Ok(code)),
            Err(e) => match e.downcast::<ContainerError>() {
                Ok(c) => Err(Outcome::NotPrepared(Failure::new(c.code, c.message))),
                Err(e) => Ok(Err(format!("{e:#}"))),
            },
        }
    }

    /// Prepares the attempt's node for its job, installs its application packages (their
    /// environment is returned) and downloads its resource files and inputs; stopped early by
    /// `stop`.
    async fn prepare(
        &self,
        a: &AttemptRow,
        node_id: &str,
        dirs: &TaskDirs,
        stop: &CancellationToken,
    ) -> Result<Vec<(String, String)>, Outcome> {
        let stopped = || Outcome::Lost("stopped while preparing".into());
        let prepared = tokio::select! {
            prepared = self.prep.ensure(a) => prepared,
            _ = stop.cancelled() => return Err(stopped()),
        };
        prepared.map_err(Outcome::NodeUnprepared)?;
        let installed = tokio::select! {
            installed = self.packages.install(a) => installed,
            _ = stop.cancelled() => return Err(stopped()),
        };
        let package_env = installed.map_err(Outcome::NotPrepared)?;
        let downloaded = tokio::select! {
            failure = task_files::download_for(&self.fetcher, &self.db, a, self.task_files(node_id, dirs)) => failure,
            _ = stop.cancelled() => return Err(stopped()),
        };
        match downloaded {
            // Its node's agent did not answer: the attempt is lost, and the task requeued.
            Some(f) if f.code == AGENT_UNREACHABLE => return Err(Outcome::Lost(f.message)),
            Some(failure) => return Err(Outcome::NotPrepared(failure)),
            None => {}
        }
        let on = self.task_files(node_id, dirs);
        let staged = tokio::select! {
            failure = super::super::bes::stage_inputs(&self.db, &self.bes, on, a) => failure,
            _ = stop.cancelled() => return Err(stopped()),
        };
        if let Some(failure) = staged {
            return Err(Outcome::NotPrepared(failure));
        }
        Ok(package_env)
    }

    /// The token of an attempt of a task with authenticationTokenSettings, and where the API
    /// is; nothing for other tasks.
    fn token_env(&self, a: &AttemptRow) -> Vec<(String, String)> {
        if !a.job_token {
            return Vec::new();
        }
        let token = crate::domain::task_token::TaskToken {
            account: a.account.clone(),
            job_pk: a.job_pk,
            task_pk: a.pk,
            attempt: a.attempt,
        };
        self.tokens.env(&token)
    }
}

/// The attempt's own container, if its task runs in one: its share of the node is its slots'.
fn task_container(a: &AttemptRow) -> Option<TaskContainer> {
    let settings = a.files.as_ref()?.0.container_settings.clone()?;
    Some(TaskContainer {
        settings,
        share: (f64::from(a.required_slots) / f64::from(slots_of(a).of)).min(1.0),
        label: container_label(&a.job_id, &a.task_id, a.attempt),
    })
}

/// The attempt's slots, of its node's (at least one of each).
fn slots_of(a: &AttemptRow) -> Slots {
    Slots {
        needs: u32::try_from(a.required_slots).unwrap_or(1).max(1),
        of: u32::try_from(a.pool_slots.unwrap_or(1)).unwrap_or(1).max(1),
    }
}
