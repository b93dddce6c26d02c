//! Recording what happened to an attempt: success, retry, failure, requeue; then what follows
//! for dependants (in `store::tasks::end_attempt`) and for the job (exit options' job action,
//! onAllTasksComplete).

use serde_json::{json, Value};
use sqlx::{PgPool, Postgres, Transaction};

use crate::domain::job::{ExitConditions, JobAction, JobState, TaskFailureMode};
use crate::domain::IsoDuration;
use crate::store::{self, tasks::AttemptRow, tasks::Ending};

/// How an attempt ended, as the executor saw it.
#[derive(Clone, Debug)]
pub enum Outcome {
    Exited(i64),
    /// Killed at its maxWallClockTime.
    TimedOut,
    /// Its outcome cannot be known (its node went away, the runtime failed): run it again.
    Lost(String),
}

fn failure(code: &str, message: String) -> Value {
    json!({"category": "usererror", "code": code, "message": message,
           "details": [{"name": "Message", "value": message}]})
}

/// The failureInfo of a task terminated by a user or with its job.
pub fn ended_by(why: &str) -> Value {
    failure("TaskEnded", format!("The task was terminated: {why}"))
}

pub async fn record(db: &PgPool, a: &AttemptRow, outcome: Outcome) -> sqlx::Result<()> {
    let mut tx = db.begin().await?;
    record_in(&mut tx, a, outcome).await?;
    tx.commit().await
}

/// Records many outcomes in one transaction (one commit instead of one per task); if the batch
/// fails, each is recorded alone so one bad record cannot hold the others back.
pub async fn record_many(db: &PgPool, batch: &[(AttemptRow, Outcome)]) -> sqlx::Result<()> {
    let together = async {
        let mut tx = db.begin().await?;
        let nodes: Vec<i64> = batch.iter().filter_map(|(a, _)| a.node_pk).collect();
        store::tasks::lock_nodes(&mut *tx, &nodes).await?;
        for (a, outcome) in batch {
            record_in(&mut tx, a, outcome.clone()).await?;
        }
        tx.commit().await
    };
    if together.await.is_ok() {
        return Ok(());
    }
    for (a, outcome) in batch {
        record(db, a, outcome.clone()).await?;
    }
    Ok(())
}

async fn record_in(
    tx: &mut Transaction<'_, Postgres>,
    a: &AttemptRow,
    outcome: Outcome,
) -> sqlx::Result<()> {
    let conditions: ExitConditions = a
        .exit_conditions
        .clone()
        .and_then(|c| serde_json::from_value(c).ok())
        .unwrap_or_default();
    let mut job_action = JobAction::None;
    let failure_info;
    let ending = match outcome {
        Outcome::Exited(code) => {
            let verdict = conditions.verdict(code);
            let retries_left =
                a.max_task_retry_count == -1 || a.retry_count < a.max_task_retry_count;
            let code32 = i32::try_from(code).ok();
            if verdict.succeeded {
                Ending::Completed {
                    exit_code: code32,
                    result: "success",
                    failure_info: None,
                    satisfies_dependants: true,
                }
            } else if retries_left {
                Ending::Retry { exit_code: code32 }
            } else {
                job_action = verdict.job_action;
                failure_info = failure(
                    "FailureExitCode",
                    format!("The task exited with exit code {code}, representing a failure"),
                );
                Ending::Completed {
                    exit_code: code32,
                    result: "failure",
                    failure_info: Some(&failure_info),
                    satisfies_dependants: verdict.dependency
                        == crate::domain::job::DependencyAction::Satisfy,
                }
            }
        }
        Outcome::TimedOut => {
            let limit = a
                .max_wall_clock_ticks
                .map(|t| IsoDuration::from_ticks(t).to_string())
                .unwrap_or_default();
            failure_info = failure(
                "MaxWallClockTimeExceeded",
                format!("The task ran longer than its maxWallClockTime of {limit} and was killed"),
            );
            Ending::Completed {
                exit_code: None,
                result: "failure",
                failure_info: Some(&failure_info),
                satisfies_dependants: false,
            }
        }
        Outcome::Lost(why) => {
            tracing::warn!(task = %a.task_id, job = %a.job_id, %why, "the attempt's outcome is unknown; requeueing the task");
            Ending::Requeue
        }
    };
    let ended = store::tasks::end_attempt(tx, a.pk, Some(a.attempt), &["running"], ending).await?;
    if ended.as_ref().is_some_and(|e| e.state == "completed") {
        if a.on_task_failure == TaskFailureMode::PerformExitOptionsJobAction.as_str() {
            match job_action {
                JobAction::Terminate => {
                    terminate_job(tx, a.job_pk, "TaskFailed").await?;
                }
                JobAction::Disable => {
                    disable_job(tx, a.job_pk, crate::domain::job::DisableTasks::Requeue).await?
                }
                JobAction::None => {}
            }
        }
        // Only a job that asks (now) to end with its tasks pays for the scan of its tasks.
        if store::jobs::ends_with_its_tasks(&mut **tx, a.job_pk).await? {
            store::jobs::complete_if_all_tasks_done(&mut **tx, a.job_pk).await?;
        }
    }
    Ok(())
}

/// Completes a job and ends its running tasks (their processes are killed by the executor's
/// reaper once it sees their attempts gone). Returns whether the job was still open.
pub async fn terminate_job(
    tx: &mut Transaction<'_, Postgres>,
    job_pk: i64,
    reason: &str,
) -> sqlx::Result<bool> {
    if !store::jobs::complete(&mut **tx, job_pk, reason).await? {
        return Ok(false);
    }
    end_running_tasks(tx, job_pk, &format!("its job was terminated ({reason})")).await?;
    Ok(true)
}

/// Ends every running task of a job as failed-by-termination.
pub async fn end_running_tasks(
    tx: &mut Transaction<'_, Postgres>,
    job_pk: i64,
    why: &str,
) -> sqlx::Result<()> {
    let info = ended_by(why);
    store::tasks::lock_nodes_of_job(&mut **tx, job_pk).await?;
    for (pk, attempt) in store::tasks::running_of_job(&mut **tx, job_pk).await? {
        let ending = Ending::Completed {
            exit_code: None,
            result: "failure",
            failure_info: Some(&info),
            satisfies_dependants: false,
        };
        store::tasks::end_attempt(tx, pk, Some(attempt), &["running"], ending).await?;
    }
    Ok(())
}

/// Disables a job: no new placements; running tasks are requeued, terminated, or left to finish.
pub async fn disable_job(
    tx: &mut Transaction<'_, Postgres>,
    job_pk: i64,
    mode: crate::domain::job::DisableTasks,
) -> sqlx::Result<()> {
    use crate::domain::job::DisableTasks;
    match mode {
        DisableTasks::Requeue => {
            store::tasks::lock_nodes_of_job(&mut **tx, job_pk).await?;
            for (pk, attempt) in store::tasks::running_of_job(&mut **tx, job_pk).await? {
                store::tasks::end_attempt(tx, pk, Some(attempt), &["running"], Ending::Requeue)
                    .await?;
            }
        }
        DisableTasks::Terminate => end_running_tasks(tx, job_pk, "its job was disabled").await?,
        DisableTasks::Wait => {}
    }
    store::jobs::set_state(&mut **tx, job_pk, JobState::Disabled).await
}

/// What happens to the tasks running on nodes that leave the pool or reboot: requeued (the
/// default), ended as failed (terminate), or left to finish (taskcompletion, retaineddata).
pub async fn stop_tasks_on_nodes(
    tx: &mut Transaction<'_, Postgres>,
    node_pks: &[i64],
    option: crate::domain::pool::NodeDeallocationOption,
) -> sqlx::Result<()> {
    use crate::domain::pool::NodeDeallocationOption;
    if matches!(
        option,
        NodeDeallocationOption::TaskCompletion | NodeDeallocationOption::RetainedData
    ) {
        return Ok(());
    }
    store::tasks::lock_nodes(&mut **tx, node_pks).await?;
    let info = ended_by("its node was removed or rebooted");
    for (pk, attempt) in store::tasks::running_on_nodes(&mut **tx, node_pks).await? {
        let ending = match option {
            NodeDeallocationOption::Terminate => Ending::Completed {
                exit_code: None,
                result: "failure",
                failure_info: Some(&info),
                satisfies_dependants: false,
            },
            _ => Ending::Requeue,
        };
        store::tasks::end_attempt(tx, pk, Some(attempt), &["running"], ending).await?;
    }
    Ok(())
}
