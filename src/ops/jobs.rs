//! Ending work, as both the API (terminate, disable, delete, remove or reboot nodes) and the
//! scheduler (wall clock limits, job deletion, resize down) start it. Each writes the new states in
//! the caller's transaction; the executor kills the processes of attempts it finds ended.

use serde_json::{json, Value};
use sqlx::{Postgres, Transaction};

use crate::domain::job::{DisableTasks, JobState, TaskState};
use crate::domain::pool::NodeDeallocationOption;
use crate::store::{self, tasks::Ending};

/// A failure message as PostgreSQL can keep it: a message may quote what a storage service or
/// a node said (the API refuses a NUL in what users send), and jsonb holds no NUL, so each
/// becomes U+FFFD.
pub fn storable(message: &str) -> String {
    message.replace('\0', "\u{fffd}")
}

/// A task's failureInfo of category usererror.
pub fn failure(code: &str, message: String) -> Value {
    let message = storable(&message);
    json!({"category": "usererror", "code": code, "message": message,
           "details": [{"name": "Message", "value": message}]})
}

/// The failureInfo of a task terminated by a user or with its job.
pub fn ended_by(why: &str) -> Value {
    failure("TaskEnded", format!("The task was terminated: {why}"))
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
        let ending = Ending::stopped(&info);
        store::tasks::end_attempt(tx, pk, Some(attempt), TaskState::ON_NODE, ending).await?;
    }
    Ok(())
}

/// Disables a job: no new placements; running tasks are requeued, terminated, or left to finish.
pub async fn disable_job(
    tx: &mut Transaction<'_, Postgres>,
    job_pk: i64,
    mode: DisableTasks,
) -> sqlx::Result<()> {
    match mode {
        DisableTasks::Requeue => {
            store::tasks::lock_nodes_of_job(&mut **tx, job_pk).await?;
            for (pk, attempt) in store::tasks::running_of_job(&mut **tx, job_pk).await? {
                let running = TaskState::ON_NODE;
                store::tasks::end_attempt(tx, pk, Some(attempt), running, Ending::Requeue).await?;
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
    option: NodeDeallocationOption,
) -> sqlx::Result<()> {
    stop_tasks_on_nodes_for(tx, node_pks, option, "its node was removed or rebooted").await
}

/// As [`stop_tasks_on_nodes`], saying `why` in the failure of the tasks it ends.
pub async fn stop_tasks_on_nodes_for(
    tx: &mut Transaction<'_, Postgres>,
    node_pks: &[i64],
    option: NodeDeallocationOption,
    why: &str,
) -> sqlx::Result<()> {
    if matches!(
        option,
        NodeDeallocationOption::TaskCompletion | NodeDeallocationOption::RetainedData
    ) {
        return Ok(());
    }
    store::tasks::lock_nodes(&mut **tx, node_pks).await?;
    let info = ended_by(why);
    for (pk, attempt) in store::tasks::running_on_nodes(&mut **tx, node_pks).await? {
        let ending = match option {
            NodeDeallocationOption::Terminate => Ending::stopped(&info),
            _ => Ending::Requeue,
        };
        store::tasks::end_attempt(tx, pk, Some(attempt), TaskState::ON_NODE, ending).await?;
    }
    Ok(())
}
