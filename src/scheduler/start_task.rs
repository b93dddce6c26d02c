//! Commands a node runs apart from its job tasks, with retries: a pool's start task as the node
//! joins (recorded as Azure's `startTaskInfo`), and the job preparation and release tasks
//! (`super::prep`). Also the `AZ_BATCH_*` environment every command on a node sees.

use std::time::Duration;

use serde_json::{json, Value};

use super::packages::{package_dir, pool_package_env};
use super::task_files::{self, Failure, Fetcher};
use crate::domain::files::{PoolPackage, ResourceFile};
use crate::domain::pool::EnvironmentSetting;
use crate::domain::pool::StartTask;
use crate::domain::rfc3339;
use crate::domain::run_as::{Command, RunAs};
use crate::runtime::{
    container_label, AttemptPid, ContainerError, ExecSpec, Runtime, Started, TaskContainer,
    TaskDirs, TaskFiles,
};
use crate::store::tasks::AttemptRow;

/// Everything a start task needs to know about where it runs.
pub struct Placement<'a> {
    pub server_id: &'a str,
    pub account: &'a str,
    pub pool_id: &'a str,
    pub node_id: &'a str,
}

pub struct Outcome {
    pub succeeded: bool,
    pub info: Value,
}

/// `AZ_BATCH_*` variables every command on a node sees.
pub fn node_environment(runtime: &Runtime, at: &Placement<'_>) -> Vec<(String, String)> {
    let root = runtime.node_root(at.node_id);
    vec![
        ("AZ_BATCH_ACCOUNT_NAME".into(), at.account.into()),
        ("AZ_BATCH_POOL_ID".into(), at.pool_id.into()),
        ("AZ_BATCH_NODE_ID".into(), at.node_id.into()),
        ("AZ_BATCH_NODE_IS_DEDICATED".into(), "true".into()),
        ("AZ_BATCH_NODE_ROOT_DIR".into(), root.clone()),
        ("AZ_BATCH_NODE_SHARED_DIR".into(), format!("{root}/shared")),
        (
            "AZ_BATCH_NODE_STARTUP_DIR".into(),
            format!("{root}/startup"),
        ),
    ]
}

/// The environment of a command of a job on a node (a task, or the job's preparation or release
/// task): the job's common environment, the command's own, then the `AZ_BATCH_*` variables,
/// with the node's pool's application packages.
pub fn job_command_environment(
    runtime: &Runtime,
    at: &Placement<'_>,
    (job_id, task_id): (&str, &str),
    (common, own): (&[EnvironmentSetting], &[EnvironmentSetting]),
    packages: Option<&[PoolPackage]>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = common
        .iter()
        .chain(own)
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    env.extend(node_environment(runtime, at));
    for p in packages.unwrap_or_default() {
        let dir = package_dir(runtime, at.node_id, &p.application_id, &p.resolved);
        env.extend(pool_package_env(p, &dir));
    }
    env.push(("AZ_BATCH_JOB_ID".into(), job_id.to_string()));
    env.push(("AZ_BATCH_TASK_ID".into(), task_id.to_string()));
    env
}

/// A job task's environment: a job command's, with its retry count and where its job's
/// preparation task ran on the node.
pub fn task_environment(
    runtime: &Runtime,
    server_id: &str,
    a: &AttemptRow,
    node_id: &str,
) -> Vec<(String, String)> {
    let at = Placement {
        server_id,
        account: &a.account,
        pool_id: a.pool_id.as_deref().unwrap_or_default(),
        node_id,
    };
    let mut env = job_command_environment(
        runtime,
        &at,
        (&a.job_id, &a.task_id),
        (&a.common_environment, &a.environment),
        a.node_packages.as_deref().map(Vec::as_slice),
    );
    env.push((
        "AZ_BATCH_TASK_RETRY_COUNT".into(),
        a.retry_count.to_string(),
    ));
    if let Some(prep) = &a.preparation_task {
        let dir = runtime.job_prep_dirs(node_id, &a.job_id, &prep.id).node;
        env.push(("AZ_BATCH_JOB_PREP_WORKING_DIR".into(), format!("{dir}/wd")));
        env.push(("AZ_BATCH_JOB_PREP_DIR".into(), dir));
    }
    env
}

/// A command a node runs apart from its job tasks: a pool's start task, a job's preparation or
/// release task. It runs in `dirs`, after its resource files are downloaded there.
pub struct NodeCommand<'a> {
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

/// Runs the pool's start task until it succeeds or has used its retries; `on_attempt` is called
/// with the running state before each attempt so that readers see it.
pub async fn run<F, Fut>(
    runtime: &Runtime,
    fetcher: &Fetcher,
    linked_storage: Option<&str>,
    at: &Placement<'_>,
    task: &StartTask,
    extra_env: Vec<(String, String)>,
    on_attempt: F,
) -> Outcome
where
    F: FnMut(Value) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut env = node_environment(runtime, at);
    env.extend(
        task.environment_settings
            .iter()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default())),
    );
    env.extend(extra_env);
    let command = NodeCommand {
        command_line: task.command_line.as_deref().unwrap_or_default(),
        dirs: runtime.start_task_dirs(at.node_id),
        env,
        resource_files: &task.resource_files,
        linked_storage,
        max_retries: task.max_task_retry_count.unwrap_or(0),
        limit: None,
        // The start task has the node to itself.
        container: task
            .container_settings
            .clone()
            .map(|settings| TaskContainer {
                settings,
                share: 1.0,
                label: container_label(at.pool_id, "starttask", 0),
            }),
        run_as: RunAs::of(task.user_identity.as_ref(), Command::Start),
    };
    run_command(runtime, fetcher, at, command, on_attempt).await
}

/// Runs a node command until it succeeds or has used its retries, reporting each attempt as
/// Azure's start task and job preparation task information report it.
pub async fn run_command<F, Fut>(
    runtime: &Runtime,
    fetcher: &Fetcher,
    at: &Placement<'_>,
    command: NodeCommand<'_>,
    mut on_attempt: F,
) -> Outcome
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
        let result = match task_files::download(fetcher, on, files, linked).await {
            Err(f) => Err(f),
            Ok(()) => exec(runtime, at, &spec, command.limit).await,
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
                return Outcome {
                    succeeded: true,
                    info,
                };
            }
            Some(f) if command.max_retries != -1 && retry_count >= command.max_retries => {
                info["result"] = json!("failure");
                info["failureInfo"] = f;
                return Outcome {
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
    let run = runtime.exec(at.server_id, at.node_id, spec, Started::pid(started));
    tokio::pin!(run);
    let Some(limit) = limit else {
        return run.await.map_err(failed);
    };
    tokio::select! {
        result = &mut run => result.map_err(failed),
        _ = tokio::time::sleep(limit) => {
            if let Ok(pid) = (&mut pid).await {
                let pid = AttemptPid::started(pid);
                if let Err(e) = runtime.kill(at.server_id, at.node_id, &pid).await {
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
