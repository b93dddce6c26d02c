//! After a start, the attempts a previous server started: finished, still running (adopted), or
//! lost.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Executor;
use crate::runtime::agents::FILE_ANSWER_TIMEOUT;
use crate::runtime::{container_label, AttemptPid, TaskDirs};
use crate::scheduler::complete::{Outcome, Traces};
use crate::scheduler::task_files;
use crate::store::{self, tasks::AttemptRow};

/// The attempts a previous server started on nodes that live, by node: read before this server
/// starts any, recovered while it does.
pub struct Unrecovered(HashMap<String, Vec<AttemptRow>>);

impl Executor {
    /// Before this server starts anything: the attempts the database says are running, which a
    /// previous server started. Those whose node is gone are lost at once; the others are left
    /// to [`Executor::recover`].
    pub async fn unrecovered(&self) -> sqlx::Result<Unrecovered> {
        store::preparations::retry_running_releases(&self.db).await?;
        // Containers of attempts that ended while no server watched, or were never started.
        self.runtime.remove_finished_task_containers().await;
        let attempts = store::tasks::running_attempts(&self.db, None).await?;
        let mut by_node: HashMap<String, Vec<AttemptRow>> = HashMap::new();
        for a in attempts {
            match (a.node_id.clone(), a.node_alive) {
                (Some(node_id), true) => by_node.entry(node_id).or_default().push(a),
                _ => self.to_record(
                    a,
                    Outcome::Lost("its node is gone".into()),
                    Traces::default(),
                ),
            }
        }
        Ok(Unrecovered(by_node))
    }

    /// Every attempt of `unrecovered` is either finished (its exit code was recorded), still
    /// running (adopted: watched until it ends), or lost (requeued). Each node's agent is asked
    /// about its attempts, the nodes at once: an agent that does not come back costs one wait,
    /// not one per attempt. Placement goes on meanwhile: the database counts these attempts'
    /// slots taken until their outcomes, which the dispatch passes record, come.
    pub async fn recover(self: &Arc<Self>, unrecovered: Unrecovered) {
        let nodes = unrecovered
            .0
            .into_iter()
            .map(|(node_id, attempts)| self.recover_on(node_id, attempts));
        let mut counts = Counts::default();
        for node in futures_util::future::join_all(nodes).await {
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
    }

    /// Recovers the attempts on one node, from their records as the node's agent reads them.
    async fn recover_on(self: &Arc<Self>, node_id: String, attempts: Vec<AttemptRow>) -> Counts {
        let mut counts = Counts::default();
        // Set once the agent cannot be asked: its node's other attempts are lost without
        // asking again.
        let mut unreachable: Option<String> = None;
        for a in attempts {
            let found = match &unreachable {
                Some(e) => Err(e.clone()),
                None => self.found(&node_id, &a).await,
            };
            let mut traces = Traces::default();
            let outcome = match found {
                Ok(Found::Ended(code)) => {
                    self.remove_own_container(&a).await;
                    let dirs = self.runtime.task_dirs(&node_id, &a.job_id, &a.task_id);
                    let on = self.task_files(&node_id, &dirs);
                    counts.finished += 1;
                    let each_end = self.fetcher.kept_each_end;
                    traces.output = task_files::kept::keep(on, None, each_end).await;
                    task_files::after_exit(&self.fetcher, on, &a, code).await
                }
                Ok(Found::Running(pid)) => {
                    self.spawn(a, Some(pid), Vec::new());
                    counts.adopted += 1;
                    continue;
                }
                Ok(Found::Gone) => {
                    counts.lost += 1;
                    Outcome::Lost("its process is gone and left no exit code".into())
                }
                Err(e) => {
                    if unreachable.is_none() {
                        tracing::warn!(node = %node_id, error = %e, "recovering attempts");
                        unreachable = Some(e.clone());
                    }
                    counts.lost += 1;
                    Outcome::Lost(format!("its node's agent could not be asked about it: {e}"))
                }
            };
            self.to_record(a, outcome, traces);
        }
        counts
    }

    /// What became of the attempt, as its node's agent tells; an error if the agent could not
    /// be asked.
    async fn found(&self, node_id: &str, a: &AttemptRow) -> Result<Found, String> {
        let dirs = self.runtime.task_dirs(node_id, &a.job_id, &a.task_id);
        let (pid, code) = self.asked_record(node_id, &dirs, a.attempt).await?;
        if let Some(code) = code {
            return Ok(Found::Ended(code));
        }
        // The pid of an attempt a previous server started is known only from its record.
        if let Some(pid) = pid.filter(|p| p.pid > 1) {
            if self.asked_alive(node_id, &pid).await? {
                return Ok(Found::Running(pid));
            }
        }
        // Gone: it may have ended after its record was read, and left its code since.
        match self.asked_record(node_id, &dirs, a.attempt).await? {
            (_, Some(code)) => Ok(Found::Ended(code)),
            (_, None) => Ok(Found::Gone),
        }
    }

    /// The attempt's record as the node's agent reads it (nothing yet: no pid, no code). An
    /// agent that does not answer within the wait but may still answer is asked again: a new
    /// leader's agents all arrive at once, and answer slowly, and taking its attempts for lost
    /// would requeue tasks that still run. Only an agent silent (or unanswering) for
    /// `--agent-timeout` loses them.
    pub(super) async fn asked_record(
        &self,
        node_id: &str,
        dirs: &TaskDirs,
        attempt: i32,
    ) -> Result<(Option<AttemptPid>, Option<i64>), String> {
        let first = Instant::now();
        loop {
            let asked = Instant::now();
            match self.runtime.attempt_record(node_id, dirs, attempt).await {
                Ok(record) => return Ok(record.unwrap_or_default()),
                // Unanswered for the whole wait: an error that comes sooner is an answer.
                Err(e)
                    if asked.elapsed() >= FILE_ANSWER_TIMEOUT
                        && self.runtime.agent_may_answer(node_id, first) =>
                {
                    tracing::info!(node = %node_id, error = %e.message, "recovering attempts: asking the agent again");
                }
                Err(e) => return Err(e.message),
            }
        }
    }

    /// Whether the attempt's process lives, as the node says: asked again, as
    /// [`Self::asked_record`] does, while the node could not be asked (its agent did not
    /// answer, or was not there yet) and its agent may still answer.
    async fn asked_alive(&self, node_id: &str, pid: &AttemptPid) -> Result<bool, String> {
        let first = Instant::now();
        loop {
            let asked = Instant::now();
            if let Some(alive) = self.runtime.is_alive(node_id, pid).await {
                return Ok(alive);
            }
            if !self.runtime.agent_may_answer(node_id, first) {
                return Err("it could not be asked whether the attempt's process lives".into());
            }
            tracing::info!(node = %node_id, "recovering attempts: asking the agent again whether a process lives");
            // A question that failed at once is not asked again at once.
            tokio::time::sleep(ASK_AGAIN.saturating_sub(asked.elapsed())).await;
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
            self.runtime.remove_task_container(&label).await;
        }
    }
}

/// What became of an attempt a previous server started.
enum Found {
    /// It ended with this exit code while no server watched.
    Ended(i64),
    /// Its process runs still.
    Running(AttemptPid),
    /// Its process is gone and left no exit code.
    Gone,
}

/// How long a liveness question that went unanswered takes at least before it is asked again.
const ASK_AGAIN: Duration = Duration::from_secs(1);

/// What a recovery found: attempts finished while no server watched, still running, or lost.
#[derive(Default)]
struct Counts {
    finished: u32,
    adopted: u32,
    lost: u32,
}
