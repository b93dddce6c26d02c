//! Commands a node runs apart from its job tasks (a pool's start task, a job's preparation and
//! release tasks, a package's unzipping), with retries, each attempt reported as Azure's start
//! task and job preparation task information report it.

use std::time::Duration;

use serde_json::{json, Value};

use super::complete::Failure;
use super::environment::Placement;
use super::task_files::{self, Fetcher};
use crate::domain::files::ResourceFile;
use crate::domain::rfc3339;
use crate::domain::run_as::RunAs;
use crate::runtime::{
    AttemptPid, ContainerError, ExecSpec, Runtime, Started, TaskContainer, TaskDirs, TaskFiles,
    AGENT_UNREACHABLE,
};

/// A command a node runs apart from its job tasks: a pool's start task, a job's preparation or
/// release task. It runs in `dirs`, after its resource files are downloaded there.
pub struct SpecialTask<'a> {
    pub command_line: &'a str,
    pub dirs: TaskDirs,
    pub env: Vec<(String, String)>,
    pub resource_files: &'a [ResourceFile],
    pub linked_storage: Option<&'a str>,
    /// Retries after a failure; -1: without limit.
    pub max_retries: i32,
    /// Each attempt's maxWallClockTime.
    pub limit: Option<Duration>,
    /// The command's own container, if it runs in one.
    pub container: Option<TaskContainer>,
    /// Who it runs as.
    pub run_as: RunAs,
}

/// How a node command ended: whether it succeeded, and its information as Azure shows it.
pub struct ExecutionInfo {
    pub succeeded: bool,
    pub info: Value,
}

/// Runs a node command until it succeeds or has used its retries, reporting each attempt as
/// Azure's start task and job preparation task information report it.
pub async fn run_special_task<F, Fut>(
    runtime: &Runtime,
    fetcher: &Fetcher,
    at: &Placement<'_>,
    command: SpecialTask<'_>,
    mut on_attempt: F,
) -> ExecutionInfo
where
    F: FnMut(Value) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut spec = ExecSpec {
        command_line: command.command_line.to_string(),
        dirs: command.dirs,
        attempt: 0,
        env: command.env,
        container: command.container,
        user: runtime.task_user(command.run_as),
        slots: None,
    };
    let start = chrono::Utc::now();
    let mut retry_count = 0;
    loop {
        let mut info =
            json!({"state": "running", "startTime": rfc3339(start), "retryCount": retry_count});
        if retry_count > 0 {
            info["lastRetryTime"] = json!(rfc3339(chrono::Utc::now()));
        }
        on_attempt(info.clone()).await;
        spec.attempt = retry_count;
        let (files, linked) = (command.resource_files, command.linked_storage);
        let on = TaskFiles {
            runtime,
            node: Some(at.node_id),
            dirs: &spec.dirs,
        };
        // A pre-processing error (its resource files) is not retried, as Azure does not; a
        // node whose agent did not answer is no error of the task's.
        let (result, retriable) = match task_files::download(fetcher, on, files, linked).await {
            Err(f) => {
                let node_lost = f.code == AGENT_UNREACHABLE;
                (Err(f), node_lost)
            }
            Ok(()) => (exec(runtime, at, &spec, command.limit).await, true),
        };
        info["state"] = json!("completed");
        info["endTime"] = json!(rfc3339(chrono::Utc::now()));
        let failure = failure_info(&result);
        if let Ok(code) = result {
            info["exitCode"] = json!(code);
        }
        match failure {
            None => {
                info["result"] = json!("success");
                return ExecutionInfo {
                    succeeded: true,
                    info,
                };
            }
            Some(f)
                if !retriable
                    || (command.max_retries != -1 && retry_count >= command.max_retries) =>
            {
                info["result"] = json!("failure");
                info["failureInfo"] = f;
                return ExecutionInfo {
                    succeeded: false,
                    info,
                };
            }
            Some(_) => retry_count += 1,
        }
    }
}

/// Runs the command and waits for its exit code; past `limit`, kills it.
async fn exec(
    runtime: &Runtime,
    at: &Placement<'_>,
    spec: &ExecSpec,
    limit: Option<Duration>,
) -> Result<i64, Failure> {
    let failed = |e: anyhow::Error| match e.downcast::<ContainerError>() {
        Ok(c) => Failure::new(c.code, c.message),
        Err(e) => Failure::new("StartTaskFailedToRun", format!("{e:#}")),
    };
    let (started, mut pid) = tokio::sync::oneshot::channel();
    let run = runtime.exec(at.node_id, spec.clone(), Started::pid(started));
    tokio::pin!(run);
    let Some(limit) = limit else {
        return run.await.map_err(failed);
    };
    tokio::select! {
        result = &mut run => result.map_err(failed),
        _ = tokio::time::sleep(limit) => {
            if let Ok(pid) = (&mut pid).await {
                let pid = AttemptPid::started(pid);
                if let Err(e) = runtime.kill(at.node_id, &pid).await {
                    tracing::warn!(error = %format!("{e:#}"), "killing a node command failed");
                }
            }
            let _ = tokio::time::timeout(Duration::from_secs(15), run).await;
            Err(Failure::new(
                "MaxWallClockTimeExceeded",
                format!("The task ran longer than its maxWallClockTime of {} s and was killed", limit.as_secs()),
            ))
        }
    }
}

/// The failureInfo of a start task attempt, if it failed.
fn failure_info(result: &Result<i64, Failure>) -> Option<Value> {
    match result {
        Ok(0) => None,
        Ok(code) => Some(json!({"category": "usererror", "code": "FailureExitCode",
            "message": format!("The start task exited with code {code}")})),
        Err(f) => {
            let category = if f.code == "StartTaskFailedToRun" {
                "servererror"
            } else {
                "usererror"
            };
            let message = crate::ops::jobs::storable(&f.message);
            Some(json!({"category": category, "code": f.code, "message": message}))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{failure_info, Failure};

    #[test]
    fn a_start_task_failure_quoting_a_nul_is_kept_without_it() {
        let failed = Err(Failure::new("ResourceFileDownloadFailed", "bad\0name"));
        let info = failure_info(&failed).expect("a failure");
        assert_eq!(info["message"], "bad\u{fffd}name");
        assert_eq!(info["category"], "usererror");
    }
}
