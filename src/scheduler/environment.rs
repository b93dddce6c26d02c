//! The environment of every command on a node: the `AZ_BATCH_*` variables, a job's common
//! environment and a command's own, and where the node's application packages are.

use crate::domain::files::{package_variable, PoolPackage};
use crate::domain::pool::EnvironmentSetting;
use crate::runtime::Runtime;
use crate::store::tasks::AttemptRow;

/// Everything a start task needs to know about where it runs.
pub struct Placement<'a> {
    pub account: &'a str,
    pub pool_id: &'a str,
    pub node_id: &'a str,
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
pub fn task_environment(runtime: &Runtime, a: &AttemptRow, node_id: &str) -> Vec<(String, String)> {
    let at = Placement {
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

/// Where a pool package is on a node (`dir`), as the variables that tell commands so.
pub fn pool_package_env(p: &PoolPackage, dir: &str) -> Vec<(String, String)> {
    let mut env = vec![(
        package_variable(&p.application_id, Some(&p.resolved)),
        dir.to_string(),
    )];
    if p.version.is_none() {
        env.push((package_variable(&p.application_id, None), dir.to_string()));
    }
    env
}

/// Where a package version is installed on a node, as the node sees it.
pub fn package_dir(runtime: &Runtime, node_id: &str, id: &str, version: &str) -> String {
    format!("{}/applications/{id}#{version}", runtime.node_root(node_id))
}
