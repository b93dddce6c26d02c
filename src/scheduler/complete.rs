//! Recording what happened to an attempt: success, retry, failure, requeue; then what follows
//! for dependants (in `store::tasks::end_attempt`) and for the job (exit options' job action,
//! onAllTasksComplete).

use std::collections::{BTreeSet, HashSet};

use serde_json::Value;
use sqlx::{PgPool, Postgres, Transaction};

use super::ready_cursor;
use crate::domain::agent::Usage;
use crate::domain::job::{DependencyAction, ExitConditions, JobAction, TaskFailureMode, TaskState};
use crate::domain::IsoDuration;
use crate::ops::{self, jobs::failure};
use crate::store::{self, outputs::KeptFile, tasks::AttemptRow, tasks::Ending};

/// How an attempt ended, as the executor saw it.
#[derive(Clone, Debug)]
pub enum Outcome {
    Exited(i64),
    /// The command exited, but an output file could not be uploaded.
    UploadFailed {
        exit_code: i64,
        failure: Failure,
    },
    /// A resource file could not be downloaded, so the command never ran.
    NotPrepared(Failure),
    /// The node failed the job's preparation task: the task goes back to the queue, for a node
    /// that did not.
    NodeUnprepared(String),
    /// Killed at its maxWallClockTime.
    TimedOut,
    /// Its outcome cannot be known (its node went away, the runtime failed): run it again.
    Lost(String),
    /// It ended, but the database refused to record how (the reason): it fails, saying so.
    Unrecorded(String),
}

/// Why an attempt could not run or its files could not be moved, as a task's failureInfo says
/// it.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub code: &'static str,
    pub message: String,
}

impl Failure {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl From<crate::storage::BlobError> for Failure {
    fn from(e: crate::storage::BlobError) -> Self {
        Failure {
            code: e.code,
            message: e.message,
        }
    }
}

/// What an ended attempt left besides its outcome: what its command used, where its node's
/// agent measured it, and its output kept.
#[derive(Clone, Debug, Default)]
pub struct Traces {
    pub usage: Option<Usage>,
    pub output: Vec<KeptFile>,
}

/// An attempt that ended: how, and what it left.
pub type Finished = (AttemptRow, Outcome, Traces);

pub async fn record(db: &PgPool, a: &AttemptRow, outcome: Outcome) -> sqlx::Result<()> {
    record_together(db, &[(a.clone(), outcome, Traces::default())]).await
}

/// Records many outcomes in one transaction (one commit, and the same few statements, for the
/// whole batch instead of some per task). If the batch fails, each is recorded alone, so one
/// bad record cannot hold the others back; one the database refuses is recorded as
/// [`Outcome::Unrecorded`], so its task does not stay running for ever. Returns those recorded,
/// and those that could not be recorded at all (the database is away, say), for the caller to
/// try again.
pub async fn record_many(db: &PgPool, batch: Vec<Finished>) -> (Vec<Finished>, Vec<Finished>) {
    if record_together(db, &batch).await.is_ok() {
        return (batch, Vec::new());
    }
    let (mut done, mut left) = (Vec::new(), Vec::new());
    for one in batch {
        let refused = match record_together(db, std::slice::from_ref(&one)).await {
            Ok(()) => {
                done.push(one);
                continue;
            }
            Err(e) => refusal(&e),
        };
        let Some(refused) = refused else {
            left.push(one);
            continue;
        };
        let (a, outcome, _) = &one;
        tracing::error!(task = %a.task_id, job = %a.job_id, ?outcome, %refused, "the database refused an outcome; recording the task as failed");
        let plain = (a.clone(), Outcome::Unrecorded(refused), Traces::default());
        if record_together(db, std::slice::from_ref(&plain))
            .await
            .is_ok()
        {
            done.push(one);
        } else {
            left.push(one);
        }
    }
    (done, left)
}

/// The database's refusal of a record, in its words; `None` for an error that refuses no
/// record, whose outcome is tried again:
/// - the fence refusing a term that is over: the outcome is the next leader's to find (it reads
///   the attempt's record, or requeues the task). Recorded as refused, it failed a task that
///   had run, should the new leader's lock come a moment before its epoch (a stale write
///   passes then);
/// - a database away or going away ("terminating connection due to unexpected postmaster
///   exit"): taken for a refusal, it failed a task that had run, should the database come
///   back before the task's failure was written.
fn refusal(e: &sqlx::Error) -> Option<String> {
    match e {
        _ if store::leader::is_stale(e) || store::unavailable(e) => None,
        sqlx::Error::Database(db) => Some(db.message().to_string()),
        _ => None,
    }
}

async fn record_together(db: &PgPool, batch: &[Finished]) -> sqlx::Result<()> {
    let mut tx = db.begin().await?;
    store::tasks::lock_nodes(&mut *tx, &nodes_of(batch)).await?;
    record_in(&mut tx, batch).await?;
    tx.commit().await
}

/// The nodes a batch of outcomes frees slots on.
pub fn nodes_of(batch: &[Finished]) -> Vec<i64> {
    batch.iter().filter_map(|(a, _, _)| a.node_pk).collect()
}

/// Records the outcomes in `tx`, whose caller has locked their nodes ([`nodes_of`]) first:
/// nodes before tasks, the order every writer of both takes. A task retried or requeued here
/// goes back to its place in its job's queue, before the tasks after it: its job's
/// [`ready_cursor`] moves before it.
pub async fn record_in(tx: &mut Transaction<'_, Postgres>, batch: &[Finished]) -> sqlx::Result<()> {
    let verdicts: Vec<Verdict> = batch.iter().map(|(a, o, _)| judge(a, o)).collect();
    let items: Vec<_> = batch
        .iter()
        .zip(&verdicts)
        .map(|((a, _, _), v)| (a.pk, Some(a.attempt), v.ending()))
        .collect();
    let used: Vec<Usage> = batch
        .iter()
        .map(|(_, _, t)| t.usage.unwrap_or_default())
        .collect();
    let ended = store::tasks::end_attempts(tx, TaskState::ON_NODE, &items, &used).await?;
    let kept: Vec<_> = batch
        .iter()
        .filter(|(_, _, t)| !t.output.is_empty())
        .map(|(a, _, t)| (a.pk, a.attempt, t.output.as_slice()))
        .collect();
    store::outputs::keep(&mut **tx, &kept).await?;
    let done: Vec<_> = ended
        .iter()
        .filter(|e| e.state == TaskState::Completed)
        .collect();
    // Only a job that asks to end with its tasks pays for the scan of its tasks.
    let ending_jobs: BTreeSet<i64> = done
        .iter()
        .filter(|e| e.job_ends_with_tasks)
        .map(|e| e.job_pk)
        .collect();
    let completed: HashSet<i64> = done.iter().map(|e| e.pk).collect();
    let queued: Vec<_> = ended
        .iter()
        .filter(|e| e.state == TaskState::Active)
        .map(|e| (e.job_pk, e.pk))
        .collect();
    ready_cursor::lower(&queued);
    for ((a, _, _), v) in batch.iter().zip(&verdicts) {
        if !completed.contains(&a.pk) {
            continue;
        }
        if a.kills_job {
            // A job manager task with killJobOnCompletion: its completion ends the job.
            ops::jobs::terminate_job(tx, a.job_pk, "JMComplete").await?;
        }
        if a.on_task_failure == TaskFailureMode::PerformExitOptionsJobAction {
            match v.job_action {
                JobAction::Terminate => {
                    ops::jobs::terminate_job(tx, a.job_pk, "TaskFailed").await?;
                }
                JobAction::Disable => {
                    ops::jobs::disable_job(tx, a.job_pk, crate::domain::job::DisableTasks::Requeue)
                        .await?
                }
                JobAction::None => {}
            }
        }
    }
    for job_pk in ending_jobs {
        store::jobs::complete_if_all_tasks_done(&mut **tx, job_pk).await?;
    }
    Ok(())
}

/// What an outcome means for its task: how the attempt ends, and the job's action if it failed.
struct Verdict {
    end: End,
    failure_info: Option<Value>,
    job_action: JobAction,
}

enum End {
    Completed {
        exit_code: Option<i32>,
        result: &'static str,
        satisfies_dependants: bool,
    },
    Retry {
        exit_code: Option<i32>,
    },
    Requeue,
}

impl Verdict {
    fn ending(&self) -> Ending<'_> {
        match self.end {
            End::Completed {
                exit_code,
                result,
                satisfies_dependants,
            } => Ending::Completed {
                exit_code,
                result,
                failure_info: self.failure_info.as_ref(),
                satisfies_dependants,
            },
            End::Retry { exit_code } => Ending::Retry { exit_code },
            End::Requeue => Ending::Requeue,
        }
    }
}

fn judge(a: &AttemptRow, outcome: &Outcome) -> Verdict {
    let conditions: ExitConditions = a
        .exit_conditions
        .clone()
        .and_then(|c| serde_json::from_value(c).ok())
        .unwrap_or_default();
    let verdict = |end, failure_info, job_action| Verdict {
        end,
        failure_info,
        job_action,
    };
    match outcome {
        Outcome::Exited(code) => {
            let code = *code;
            let judged = conditions.verdict(code);
            let retries_left =
                a.max_task_retry_count == -1 || a.retry_count < a.max_task_retry_count;
            let exit_code = i32::try_from(code).ok();
            if judged.succeeded {
                let end = End::Completed {
                    exit_code,
                    result: "success",
                    satisfies_dependants: true,
                };
                verdict(end, None, JobAction::None)
            } else if retries_left {
                verdict(End::Retry { exit_code }, None, JobAction::None)
            } else {
                let info = failure(
                    "FailureExitCode",
                    format!("The task exited with exit code {code}, representing a failure"),
                );
                let end = End::Completed {
                    exit_code,
                    result: "failure",
                    satisfies_dependants: judged.dependency == DependencyAction::Satisfy,
                };
                verdict(end, Some(info), judged.job_action)
            }
        }
        Outcome::NotPrepared(f) => {
            tracing::info!(task = %a.task_id, job = %a.job_id, code = f.code, message = %f.message, "the task could not be prepared; it fails, not retried");
            not_prepared(&conditions, f)
        }
        Outcome::UploadFailed {
            exit_code,
            failure: f,
        } => upload_failed(&conditions, *exit_code, f),
        Outcome::TimedOut => {
            let limit = a
                .max_wall_clock_ticks
                .map(|t| IsoDuration::from_ticks(t).to_string())
                .unwrap_or_default();
            failed_without_code(
                "MaxWallClockTimeExceeded",
                format!("The task ran longer than its maxWallClockTime of {limit} and was killed"),
            )
        }
        Outcome::NodeUnprepared(why) => {
            tracing::info!(task = %a.task_id, job = %a.job_id, %why, "requeueing the task for another node");
            verdict(End::Requeue, None, JobAction::None)
        }
        Outcome::Unrecorded(why) => failed_without_code(
            "TaskOutcomeNotRecorded",
            format!("The task ended, but how it ended could not be recorded: {why}"),
        ),
        Outcome::Lost(why) => {
            tracing::warn!(task = %a.task_id, job = %a.job_id, %why, "the attempt's outcome is unknown; requeueing the task");
            verdict(End::Requeue, None, JobAction::None)
        }
    }
}

/// The task fails, with no exit code, for the reason given; no retry, no job action.
fn failed_without_code(code: &str, message: String) -> Verdict {
    Verdict {
        end: End::Completed {
            exit_code: None,
            result: "failure",
            satisfies_dependants: false,
        },
        failure_info: Some(failure(code, message)),
        job_action: JobAction::None,
    }
}

/// Resource files could not be downloaded: the task fails as its preProcessingError says. Not
/// retried, whatever its maxTaskRetryCount: Azure retries a task for its exit code only
/// ("pre-processing errors (the Task could not be run) and file upload errors are not
/// retried").
fn not_prepared(conditions: &ExitConditions, f: &Failure) -> Verdict {
    let judged = conditions.pre_processing_verdict();
    Verdict {
        end: End::Completed {
            exit_code: None,
            result: "failure",
            satisfies_dependants: judged.dependency == DependencyAction::Satisfy,
        },
        failure_info: Some(failure(f.code, f.message.clone())),
        job_action: judged.job_action,
    }
}

/// The command exited but an output file could not be uploaded: the task fails as its exit code's
/// options, else fileUploadError, say.
fn upload_failed(conditions: &ExitConditions, exit_code: i64, f: &Failure) -> Verdict {
    let judged = conditions.file_upload_verdict(exit_code);
    Verdict {
        end: End::Completed {
            exit_code: i32::try_from(exit_code).ok(),
            result: "failure",
            satisfies_dependants: judged.dependency == DependencyAction::Satisfy,
        },
        failure_info: Some(failure(f.code, f.message.clone())),
        job_action: judged.job_action,
    }
}
