//! After a start, the attempts a previous server started: finished, still running (adopted), or
//! lost.

use std::collections::HashMap;
use std::sync::Arc;

use super::Executor;
use crate::runtime::agents::{ASK_TIMEOUT, FILE_ANSWER_TIMEOUT};
use crate::runtime::{container_label, AttemptPid, NodeError, TaskDirs};
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
                    .asked_record(&node_id, &dirs, a.attempt)
                    .await
                    .unwrap_or_else(|e| {
                        tracing::warn!(node = %node_id, error = %e.message, "recovering attempts");
                        unreachable = Some(e.message);
                        None
                    }),
            };
            let (pid, mut code) = record.unwrap_or_default();
            // The pid of an attempt a previous server started is known only from its record.
            let mut alive = None;
            if code.is_none() {
                alive = match pid.filter(|p| p.pid > 1) {
                    Some(pid) if self.asked_alive(&node_id, &pid).await => Some(pid),
                    _ => None,
                };
                // Gone: it may have ended after its record was read, and left its code since.
                if alive.is_none() && unreachable.is_none() {
                    let again = self.asked_record(&node_id, &dirs, a.attempt).await;
                    code = again.ok().flatten().and_then(|(_, code)| code);
                }
            }
            if let Some(code) = code {
                self.remove_own_container(&a).await;
                let on = self.task_files(&node_id, &dirs);
                let outcome = task_files::after_exit(&self.fetcher, on, &a, code).await;
                complete::record(&self.db, &a, outcome).await?;
                counts.finished += 1;
                continue;
            }
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

    /// The attempt's record as the node's agent reads it. An agent that does not answer within
    /// the wait but has spoken to this server lately is asked again: it lives (a new leader's agents
    /// all arrive at once, and answer slowly), and taking its attempts for lost would requeue
    /// tasks that still run. Only an agent silent for `--agent-timeout` loses them.
    async fn asked_record(
        &self,
        node_id: &str,
        dirs: &TaskDirs,
        attempt: i32,
    ) -> Result<Option<(Option<AttemptPid>, Option<i64>)>, NodeError> {
        loop {
            let asked = std::time::Instant::now();
            match self.runtime.attempt_record(node_id, dirs, attempt).await {
                // Unanswered for the whole wait: an error that comes sooner is an answer.
                Err(e)
                    if asked.elapsed() >= FILE_ANSWER_TIMEOUT
                        && self.runtime.agent_heard_lately(node_id) =>
                {
                    tracing::info!(node = %node_id, error = %e.message, "recovering attempts: asking the agent again");
                }
                answer => return answer,
            }
        }
    }

    /// Whether the attempt's process lives, as the node's agent says; asked again, as
    /// [`Self::asked_record`] does, while a question goes unanswered for [`ASK_TIMEOUT`] (an
    /// answer, yes or no, comes sooner) and the agent has spoken lately.
    async fn asked_alive(&self, node_id: &str, pid: &AttemptPid) -> bool {
        loop {
            let asked = std::time::Instant::now();
            let alive = self.runtime.is_alive(&self.server_id, node_id, pid).await;
            if alive || asked.elapsed() < ASK_TIMEOUT || !self.runtime.agent_heard_lately(node_id) {
                return alive;
            }
            tracing::info!(node = %node_id, "recovering attempts: asking the agent again whether a process lives");
        }
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
