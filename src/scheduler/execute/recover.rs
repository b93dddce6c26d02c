//! After a start, the attempts a previous server started: finished, still running (adopted), or
//! lost.

use std::collections::HashMap;
use std::sync::Arc;

use super::Executor;
use crate::runtime::container_label;
use crate::scheduler::complete::{self, Outcome};
use crate::scheduler::task_files;
use crate::store::{self, tasks::AttemptRow};

impl Executor {
    /// After a start: every attempt the database says is running is either finished (its exit
    /// code was recorded), still running (watched until it ends), or lost (requeued). Each
    /// node's agent is asked about its attempts, the nodes at once: an agent that does not come
    /// back costs one wait, not one per attempt.
    pub async fn recover(self: &Arc<Self>) -> sqlx::Result<()> {
        store::preparations::retry_running_releases(&self.db).await?;
        // Containers of attempts that ended while no server watched, or were never started.
        self.runtime
            .remove_finished_task_containers(&self.server_id)
            .await;
        let attempts = store::tasks::running_attempts(&self.db, None).await?;
        let mut by_node: HashMap<String, Vec<AttemptRow>> = HashMap::new();
        let mut counts = Counts::default();
        for a in attempts {
            match (a.node_id.clone(), a.node_alive) {
                (Some(node_id), true) => by_node.entry(node_id).or_default().push(a),
                _ => {
                    complete::record(&self.db, &a, Outcome::Lost("its node is gone".into()))
                        .await?;
                    counts.lost += 1;
                }
            }
        }
        let nodes = by_node
            .into_iter()
            .map(|(node_id, attempts)| self.recover_on(node_id, attempts));
        for node in futures_util::future::join_all(nodes).await {
            let node = node?;
            counts.finished += node.finished;
            counts.adopted += node.adopted;
            counts.lost += node.lost;
        }
        let Counts {
            finished,
            adopted,
            lost,
        } = counts;
        tracing::info!(
            finished,
            adopted,
            lost,
            "recovered the attempts of a previous run"
        );
        Ok(())
    }

    /// Recovers the attempts on one node, from their records as the node's agent reads them.
    async fn recover_on(
        self: &Arc<Self>,
        node_id: String,
        attempts: Vec<AttemptRow>,
    ) -> sqlx::Result<Counts> {
        let mut counts = Counts::default();
        // Set once the agent cannot be asked: its node's other attempts are lost without
        // asking again.
        let mut unreachable: Option<String> = None;
        for a in attempts {
            let dirs = self.runtime.task_dirs(&node_id, &a.job_id, &a.task_id);
            let record = match &unreachable {
                Some(_) => None,
                None => self
                    .runtime
                    .attempt_record(&node_id, &dirs, a.attempt)
                    .await
                    .unwrap_or_else(|e| {
                        tracing::warn!(node = %node_id, error = %e.message, "recovering attempts");
                        unreachable = Some(e.message);
                        None
                    }),
            };
            let (pid, code) = record.unwrap_or_default();
            if let Some(code) = code {
                self.remove_own_container(&a).await;
                let on = self.task_files(&node_id, &dirs);
                let outcome = task_files::after_exit(&self.fetcher, on, &a, code).await;
                complete::record(&self.db, &a, outcome).await?;
                counts.finished += 1;
                continue;
            }
            // The pid of an attempt a previous server started is known only from its record.
            let alive = match pid.filter(|p| p.pid > 1) {
                Some(pid) if self.runtime.is_alive(&self.server_id, &node_id, &pid).await => {
                    Some(pid)
                }
                _ => None,
            };
            if alive.is_some() {
                self.spawn(a, alive, Vec::new());
                counts.adopted += 1;
            } else {
                let why = match &unreachable {
                    Some(e) => format!("its node's agent could not be asked about it: {e}"),
                    None => "its process is gone and left no exit code".into(),
                };
                complete::record(&self.db, &a, Outcome::Lost(why)).await?;
                counts.lost += 1;
            }
        }
        Ok(counts)
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

/// What a recovery found: attempts finished while no server watched, still running, or lost.
#[derive(Default)]
struct Counts {
    finished: u32,
    adopted: u32,
    lost: u32,
}
