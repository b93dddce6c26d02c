//! A pool's start task, run as the node joins, with its retries, and recorded as Azure's
//! `startTaskInfo`.

use serde_json::Value;

use super::environment::{node_environment, Placement};
use super::special_task::{run_special_task, ExecutionInfo, SpecialTask};
use super::task_files::Fetcher;
use crate::domain::pool::StartTask;
use crate::domain::run_as::{Command, RunAs};
use crate::runtime::{container_label, Runtime, TaskContainer};

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
) -> ExecutionInfo
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
    let command = SpecialTask {
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
    run_special_task(runtime, fetcher, at, command, on_attempt).await
}
