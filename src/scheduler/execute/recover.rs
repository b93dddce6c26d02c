//! After a start, the attempts a previous server started: finished, still running (adopted), or
//! lost.

use std::sync::Arc;

use super::Executor;
use crate::runtime::{container_label, Runtime};
use crate::scheduler::complete::{self, Outcome};
use crate::scheduler::task_files;
use crate::store::{self, tasks::AttemptRow};

impl Executor {
    /// After a start: every attempt the database says is running is either finished (its exit
    /// code was recorded), still running (watched until it ends), or lost (requeued).
    pub async fn recover(self: &Arc<Self>) -> sqlx::Result<()> {
        store::preparations::retry_running_releases(&self.db).await?;
        // Containers of attempts that ended while no server watched, or were never started.
        self.runtime
            .remove_finished_task_containers(&self.server_id)
            .await;
        let attempts = store::tasks::running_attempts(&self.db, None).await?;
        let (mut finished, mut adopted, mut lost) = (0, 0, 0);
        for a in attempts {
            let (Some(node_id), true) = (a.node_id.clone(), a.node_alive) else {
                complete::record(&self.db, &a, Outcome::Lost("its node is gone".into())).await?;
                lost += 1;
                continue;
            };
            let dirs = self
                .runtime
                .task_dirs(&a.account, &node_id, &a.job_id, &a.task_id);
            // The pid of an attempt a previous server started is known only from its record.
            let alive = match Runtime::recorded_pid(&dirs, a.attempt).await {
                Some(pid) if self.runtime.is_alive(&self.server_id, &node_id, &pid).await => {
                    Some(pid)
                }
                _ => None,
            };
            if let Some(code) = Runtime::recorded_exit(&dirs, a.attempt).await {
                self.remove_own_container(&a).await;
                let outcome = task_files::after_exit(&self.fetcher, &a, &dirs, code).await;
                complete::record(&self.db, &a, outcome).await?;
                finished += 1;
            } else if alive.is_some() {
                self.spawn(a, alive);
                adopted += 1;
            } else {
                complete::record(
                    &self.db,
                    &a,
                    Outcome::Lost("its process is gone and left no exit code".into()),
                )
                .await?;
                lost += 1;
            }
        }
        tracing::info!(
            finished,
            adopted,
            lost,
            "recovered the attempts of a previous run"
        );
        Ok(())
    }

    /// Removes the container of an attempt a previous server started, if it ran in one: no one
    /// else waits on it. Its command has ended (its exit code is recorded).
    pub(super) async fn remove_own_container(&self, a: &AttemptRow) {
        if a.files
            .as_ref()
            .is_some_and(|f| f.0.container_settings.is_some())
        {
            let label = container_label(&a.job_id, &a.task_id, a.attempt);
            self.runtime
                .remove_task_container(&self.server_id, &label)
                .await;
        }
    }
}
