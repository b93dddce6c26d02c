//! Running attempts on their nodes: the command with the Azure Batch environment, its
//! maxWallClockTime, kills when its attempt is ended elsewhere (terminate, job deletion,
//! requeue), and, after a restart, the recovery of attempts a previous server started.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::complete::{self, Outcome, Traces};
mod kills;
mod recover;
mod start;

use kills::gone;
pub use kills::Killing;

use super::packages::Packages;
use super::prep::Preparations;
use super::task_files;
use super::Wakeups;
use crate::runtime::{AttemptPid, ExitReport, Runtime, TaskDirs};
use crate::store::{self, tasks::AttemptRow};

pub struct Executor {
    db: PgPool,
    runtime: Arc<Runtime>,
    wake: Wakeups,
    /// Attempts this server watches, by task pk and attempt: a requeued task's next attempt
    /// can start while its last one's outcome is still on its way to the database.
    running: Mutex<HashMap<(i64, i32), Watched>>,
    /// Stops watching (not killing) at shutdown: a restarted server recovers the outcome.
    shutdown: CancellationToken,
    /// Outcomes on their way to the database, recorded in batches by the dispatch passes.
    outcomes: tokio::sync::mpsc::UnboundedSender<complete::Finished>,
    /// Where the dispatch loop takes them from ([`Executor::take_ended`]).
    ended: Mutex<tokio::sync::mpsc::UnboundedReceiver<complete::Finished>>,
    /// Moves resource and output files.
    fetcher: task_files::Fetcher,
    /// Job preparation and release tasks.
    prep: Arc<Preparations>,
    /// Application packages on nodes.
    packages: Packages,
    /// Where BES jobs' inputs come from, for their tasks.
    bes: super::bes::Config,
    /// Tokens for the attempts of tasks with authenticationTokenSettings.
    tokens: crate::domain::task_token::Issuer,
}

/// An attempt being watched.
struct Watched {
    /// Cancelled to kill it.
    kill: CancellationToken,
    /// Cancelled once it is over: killed and its process gone, or ended by itself.
    over: CancellationToken,
    /// Its node.
    node: Option<String>,
}

/// The most outcomes recorded in one transaction.
const OUTCOME_BATCH: usize = 256;

/// How often an adopted attempt's exit file is looked for.
const ADOPTED_POLL: Duration = Duration::from_millis(200);

impl Executor {
    pub fn new(
        db: PgPool,
        runtime: Arc<Runtime>,
        wake: Wakeups,
        fetcher: task_files::Fetcher,
        (bes, tokens): (super::bes::Config, crate::domain::task_token::Issuer),
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let (outcomes, ended) = tokio::sync::mpsc::unbounded_channel();
        Arc::new(Self {
            db: db.clone(),
            runtime: Arc::clone(&runtime),
            wake,
            running: Mutex::default(),
            shutdown,
            outcomes,
            ended: Mutex::new(ended),
            prep: Preparations::new(db.clone(), Arc::clone(&runtime), fetcher.clone()),
            packages: Packages::new(db.clone(), Arc::clone(&runtime), fetcher.clone()),
            fetcher,
            bes,
            tokens,
        })
    }

    /// Adds to `batch` the outcomes that came since the last call, up to [`OUTCOME_BATCH`] in
    /// all: the next dispatch pass records them. True if more are waiting past those.
    pub fn take_ended(&self, batch: &mut Vec<complete::Finished>) -> bool {
        let mut ended = self.ended.lock().expect("lock");
        while batch.len() < OUTCOME_BATCH {
            match ended.try_recv() {
                Ok(finished) => batch.push(finished),
                Err(_) => break,
            }
        }
        !ended.is_empty()
    }

    /// The outcomes of `batch` are in the database: their attempts are no longer watched, so
    /// their places are free for new starts. (An outcome not recorded when the term ends is
    /// read from its attempt's record by the next leader.)
    pub fn recorded(&self, batch: &[complete::Finished]) {
        let mut running = self.running.lock().expect("lock");
        for (a, _, _) in batch {
            running.remove(&(a.pk, a.attempt));
        }
    }

    /// The job preparation and release tasks this executor runs.
    pub fn preparations(&self) -> &Arc<Preparations> {
        &self.prep
    }

    pub fn running_count(&self) -> usize {
        self.running.lock().expect("lock").len()
    }

    /// Starts the attempts just placed. One on a node with `killing` attempts (ended
    /// elsewhere, whose slots the pass handed on) starts once their processes are gone, or
    /// after [`KILL_WAIT`]: a node whose agent is slow to answer holds up its own new attempts,
    /// not the dispatcher nor other nodes.
    pub fn start_placed(self: &Arc<Self>, placed: Vec<AttemptRow>, killing: &Killing) {
        for attempt in placed {
            let before = attempt
                .node_id
                .as_deref()
                .and_then(|node| killing.get(node))
                .cloned()
                .unwrap_or_default();
            self.spawn(attempt, None, before);
        }
    }

    /// Watches an attempt: starts it once the attempts `before` tells of are gone, or with the
    /// pid a previous server recorded, adopts it.
    fn spawn(
        self: &Arc<Self>,
        a: AttemptRow,
        adopted: Option<AttemptPid>,
        before: Vec<CancellationToken>,
    ) {
        let (kill, over) = (CancellationToken::new(), CancellationToken::new());
        {
            let mut running = self.running.lock().expect("lock");
            let key = (a.pk, a.attempt);
            if running.contains_key(&key) {
                return;
            }
            let watched = Watched {
                kill: kill.clone(),
                over: over.clone(),
                node: a.node_id.clone(),
            };
            running.insert(key, watched);
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let _over = over.drop_guard();
            gone(&before).await;
            if let (None, Some((node_id, dir))) = (&adopted, dir_of(&a)) {
                this.runtime.wait_for_removal(node_id, &dir).await;
            }
            match this.watch(&a, adopted, &kill).await {
                Some((outcome, traces)) => this.to_record(a, outcome, traces),
                None => {
                    if kill.is_cancelled() {
                        this.remove_if_deleted(&a).await;
                    }
                    this.running
                        .lock()
                        .expect("lock")
                        .remove(&(a.pk, a.attempt));
                    this.wake.dispatch.notify_one();
                }
            }
        });
    }

    /// Hands an attempt's outcome to the dispatch passes, which record outcomes in batches.
    fn to_record(&self, a: AttemptRow, outcome: Outcome, traces: Traces) {
        // Never refused: the receiver is this executor's own.
        let _ = self.outcomes.send((a, outcome, traces));
        self.wake.dispatch.notify_one();
    }

    /// A task deleted while it ran keeps its directory until its process is killed (the API
    /// leaves it, so nothing of the task runs on in a directory it will not see removed); then
    /// its node's agent removes it.
    async fn remove_if_deleted(&self, a: &AttemptRow) {
        let Some((node_id, dir)) = dir_of(a) else {
            return;
        };
        // By the node's agent, inside the node; one that does not answer leaves the directory
        // to go with its node.
        let taken = store::tasks::exists(&self.db, &a.account, &a.job_id, &a.task_id);
        if let Err(e) = self.runtime.remove_unless_taken(node_id, &dir, taken).await {
            tracing::warn!(error = %e, "cannot tell whether a killed task was deleted");
        }
    }

    /// Runs (or, adopted, waits for) the attempt; None when there is nothing to record. With
    /// the outcome, what the command used (where its node's agent started it and measured it)
    /// and its output kept.
    async fn watch(
        &self,
        a: &AttemptRow,
        adopted: Option<AttemptPid>,
        kill: &CancellationToken,
    ) -> Option<(Outcome, Traces)> {
        let node_id = a.node_id.clone()?;
        let dirs = self.runtime.task_dirs(&node_id, &a.job_id, &a.task_id);
        let deadline = deadline(a);
        let (started, pid) = tokio::sync::oneshot::channel();
        let (report, reported) = tokio::sync::oneshot::channel();
        // Taken by the run once its command exited, or after a kill.
        let reported = Mutex::new(reported);
        let report_now = || -> ExitReport {
            let mut reported = reported.lock().unwrap_or_else(|e| e.into_inner());
            reported.try_recv().unwrap_or_default()
        };
        let started = crate::runtime::Started {
            pid: Some(started),
            report: Some(report),
            container: None,
            stop: None,
        };
        // Stops a download under way, or a command its node's agent holds for a slot, so a
        // killed or timed-out task never starts its command.
        let stop = kill.child_token();
        let run = async {
            let code = if let Some(pid) = &adopted {
                let code = self.wait_for_exit(a, &node_id, &dirs, pid).await;
                self.remove_own_container(a).await;
                code
            } else {
                match self.start(a, &node_id, &dirs, &stop, started).await {
                    Ok(code) => code,
                    Err(outcome) => return (outcome, Traces::default()),
                }
            };
            match code {
                Ok(code) => {
                    let on = self.task_files(&node_id, &dirs);
                    let outcome = task_files::after_exit(&self.fetcher, on, a, code).await;
                    (outcome, self.traces(on, report_now()).await)
                }
                Err(why) => (Outcome::Lost(why), Traces::default()),
            }
        };
        tokio::pin!(run);
        let pid = async {
            match &adopted {
                Some(pid) => Some(pid.clone()),
                None => pid.await.ok().map(AttemptPid::started),
            }
        };
        let timeout = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let timed_out = tokio::select! {
            ended = &mut run => return Some(ended),
            _ = timeout => {
                stop.cancel();
                true
            }
            _ = kill.cancelled() => false,
            _ = self.shutdown.cancelled() => return None,
        };
        let ended = self.kill(&node_id, run, pid).await;
        if !timed_out {
            // Ended elsewhere (terminated, requeued): its outcome is recorded there, and what
            // it wrote until it was killed is kept here.
            self.keep_killed(a, ended.map(|(_, t)| t.output)).await;
            return None;
        }
        // What it wrote until it was stopped is kept as well.
        let on = self.task_files(&node_id, &dirs);
        Some((Outcome::TimedOut, self.traces(on, report_now()).await))
    }

    /// Keeps the output of an attempt killed because it was ended elsewhere (not over a later
    /// attempt's).
    async fn keep_killed(&self, a: &AttemptRow, output: Option<Vec<store::outputs::KeptFile>>) {
        let Some(output) = output else {
            return;
        };
        let kept = store::outputs::keep(&self.db, &[(a.pk, a.attempt, &output)]).await;
        if let Err(e) = kept {
            tracing::debug!(error = %e, "a killed attempt's output was not kept (its task is gone)");
        }
    }

    /// What an attempt whose command ended left: what its agent reported, and its output kept.
    async fn traces(&self, on: crate::runtime::TaskFiles<'_>, report: ExitReport) -> Traces {
        let each_end = self.fetcher.kept_each_end;
        let output = task_files::kept::keep(on, report.output, each_end).await;
        Traces {
            usage: report.usage,
            output,
        }
    }

    async fn wait_for_exit(
        &self,
        a: &AttemptRow,
        node_id: &str,
        dirs: &TaskDirs,
        pid: &AttemptPid,
    ) -> Result<i64, String> {
        let mut polls: u32 = 0;
        loop {
            if let Ok(Some(code)) = self.recorded_exit(a, node_id, dirs).await {
                return Ok(code);
            }
            polls += 1;
            if polls.is_multiple_of(25) && self.runtime.is_alive(node_id, pid).await == Some(false)
            {
                // It may have written its exit code just before dying; a node slow to tell
                // is asked again, as in a recovery.
                return match self.asked_record(node_id, dirs, a.attempt).await? {
                    (_, Some(code)) => Ok(code),
                    (_, None) => Err("the process ended without an exit code".into()),
                };
            }
            tokio::time::sleep(ADOPTED_POLL).await;
        }
    }

    /// The attempt's files on its node.
    fn task_files<'a>(
        &'a self,
        node_id: &'a str,
        dirs: &'a TaskDirs,
    ) -> crate::runtime::TaskFiles<'a> {
        crate::runtime::TaskFiles {
            runtime: &self.runtime,
            node: Some(node_id),
            dirs,
        }
    }

    /// The exit code the attempt's record holds, if it has ended; as its node's agent reads it.
    async fn recorded_exit(
        &self,
        a: &AttemptRow,
        node_id: &str,
        dirs: &TaskDirs,
    ) -> Result<Option<i64>, String> {
        let record = self.runtime.attempt_record(node_id, dirs, a.attempt);
        match record.await {
            Ok(record) => Ok(record.and_then(|(_, code)| code)),
            Err(e) => Err(e.message),
        }
    }
}

/// The attempt's node and the directory it runs in there (none without a node).
fn dir_of(a: &AttemptRow) -> Option<(&str, std::path::PathBuf)> {
    let node_id = a.node_id.as_deref()?;
    Some((node_id, crate::runtime::task_dir(&a.job_id, &a.task_id)))
}

/// When the attempt's maxWallClockTime runs out, if it has one.
fn deadline(a: &AttemptRow) -> Option<tokio::time::Instant> {
    let started = a.start_time.unwrap_or_else(Utc::now);
    a.max_wall_clock_ticks.and_then(|ticks| {
        let limit = chrono::Duration::microseconds(ticks / 10);
        let left = (started + limit - Utc::now()).to_std().unwrap_or_default();
        // Limits beyond a century are "no limit".
        (ticks < 31_536_000_000_000_000).then(|| tokio::time::Instant::now() + left)
    })
}
