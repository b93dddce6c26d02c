//! Job preparation tasks: run once on a node before the job's first task there (the job's tasks
//! wait for it unless it says `waitForSuccess: false`; a node where it failed gets none of the
//! job's tasks). Job release tasks: run on each node that ran the preparation task, once the job
//! has ended (completed, terminated or being deleted). Both run in the node's own
//! `jobprep/{job}/{task}` directory and are recorded per job and node (`job_node_tasks`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use sqlx::PgPool;

use super::environment::{job_command_environment, Placement};
use super::special_task::{run_special_task, SpecialTask};
use super::task_files::{self, Fetcher};
use crate::domain::container::ContainerSettings;
use crate::domain::job_prep::{retention_ticks, JobPreparationTask};
use crate::domain::pool::EnvironmentSetting;
use crate::domain::run_as::{Command, RunAs};
use crate::runtime::keyed_locks::KeyedLocks;
use crate::runtime::{container_label, Runtime, TaskContainer};
use crate::store::{self, preparations::DueRelease, tasks::AttemptRow};

/// Limits beyond a century are "no limit".
const NO_LIMIT_TICKS: i64 = 31_536_000_000_000_000;

pub struct Preparations {
    db: PgPool,
    runtime: Arc<Runtime>,
    fetcher: Fetcher,
    /// One lock per job and node, so that a node's tasks of one job wait for one run.
    locks: Arc<KeyedLocks<JobNode>>,
    /// Release tasks under way (job, node).
    releasing: Mutex<HashSet<JobNode>>,
    /// When due release tasks were last looked for.
    looked: Mutex<Option<std::time::Instant>>,
}

/// How often the dispatch loop looks for due release tasks: they are not on any task's path,
/// so the busy loop does not pay a query per pass for them.
const RELEASE_SCAN: std::time::Duration = std::time::Duration::from_secs(1);

/// A job's pk and a node's.
type JobNode = (i64, i64);

impl Preparations {
    pub fn new(db: PgPool, runtime: Arc<Runtime>, fetcher: Fetcher) -> Arc<Self> {
        Arc::new(Self {
            db,
            runtime,
            fetcher,
            locks: KeyedLocks::new(),
            releasing: Mutex::default(),
            looked: Mutex::default(),
        })
    }

    /// Before one of the job's tasks runs on its node: Ok once the node is prepared (or the job
    /// does not wait for it); Err(why) when the node failed the preparation task. The run goes
    /// on by itself if the caller stops waiting (its task killed).
    pub async fn ensure(self: &Arc<Self>, a: &AttemptRow) -> Result<(), String> {
        let (Some(prep), Some(node_pk)) = (a.preparation_task.as_ref(), a.node_pk) else {
            return Ok(());
        };
        let (this, a, prep) = (Arc::clone(self), a.clone(), prep.0.clone());
        let run = tokio::spawn(async move {
            let _held = this.locks.lock((a.job_pk, node_pk)).await;
            match store::preparations::get(&this.db, a.job_pk, node_pk).await {
                Err(e) => {
                    return Err(format!(
                        "reading the job preparation task's state failed: {e}"
                    ))
                }
                Ok(Some(info)) if info["state"] == "completed" => {
                    return if info["result"] == "success" || !prep.wait_for_success {
                        Ok(())
                    } else {
                        Err("the job preparation task failed on this node".into())
                    };
                }
                // Running still, and the job's tasks do not wait for it.
                Ok(Some(_)) if !prep.wait_for_success => return Ok(()),
                // Not run yet here, or left running by a server that stopped: run it.
                _ => {}
            }
            if prep.wait_for_success {
                this.run_preparation(&a, &prep).await
            } else {
                tokio::spawn(async move { this.run_preparation(&a, &prep).await });
                Ok(())
            }
        });
        run.await
            .unwrap_or_else(|e| Err(format!("the job preparation task's run failed: {e}")))
    }

    async fn run_preparation(
        &self,
        a: &AttemptRow,
        prep: &JobPreparationTask,
    ) -> Result<(), String> {
        let (Some(node_pk), Some(node_id)) = (a.node_pk, a.node_id.as_deref()) else {
            return Err("the task has no node".into());
        };
        let pool_id = a.pool_id.as_deref().unwrap_or_default();
        let at = Placement {
            account: &a.account,
            pool_id,
            node_id,
        };
        let dirs = self.runtime.job_prep_dirs(node_id, &a.job_id, &prep.id);
        let root = dirs.node.clone();
        let linked = task_files::linked_storage(&self.db, &a.account, &prep.resource_files)
            .await
            .map_err(|f| f.message)?;
        let command = SpecialTask {
            command_line: &prep.command_line,
            dirs,
            env: job_command_environment(
                &self.runtime,
                &at,
                (&a.job_id, &prep.id),
                (&a.common_environment, &prep.environment_settings),
                a.node_packages.as_deref().map(Vec::as_slice),
            ),
            resource_files: &prep.resource_files,
            linked_storage: linked.as_deref(),
            max_retries: prep.constraints.max_task_retry_count.unwrap_or(0),
            limit: prep
                .constraints
                .max_wall_clock_time
                .filter(|d| d.ticks() < NO_LIMIT_TICKS)
                .map(|d| d.to_std()),
            container: node_container(&prep.container_settings, &a.job_id, &prep.id),
            run_as: RunAs::of(prep.user_identity.as_ref(), Command::Preparation(a.job_pk)),
        };
        let retention = retention_ticks(prep.constraints.retention_time);
        let record = |mut info: Value| {
            info["taskRootDirectory"] = json!(root);
            let db = self.db.clone();
            let (job_pk, pool_id, node_id) = (a.job_pk, pool_id.to_string(), node_id.to_string());
            async move {
                let recorded = store::preparations::record_preparation(
                    &db,
                    (job_pk, node_pk),
                    (&pool_id, &node_id),
                    &info,
                    retention,
                );
                if let Err(e) = recorded.await {
                    tracing::warn!(error = %e, "recording a job preparation task failed");
                }
            }
        };
        let outcome = run_special_task(&self.runtime, &self.fetcher, &at, command, record).await;
        record(outcome.info).await;
        tracing::info!(job = %a.job_id, node = node_id, succeeded = outcome.succeeded, "job preparation task ran");
        if outcome.succeeded {
            Ok(())
        } else {
            Err("the job preparation task failed on this node".into())
        }
    }

    /// Starts the release tasks that are due, at most once every [`RELEASE_SCAN`].
    pub async fn start_due_releases_now_and_then(self: &Arc<Self>) -> sqlx::Result<()> {
        {
            let mut looked = self.looked.lock().expect("lock");
            if looked.is_some_and(|at| at.elapsed() < RELEASE_SCAN) {
                return Ok(());
            }
            *looked = Some(std::time::Instant::now());
        }
        self.start_due_releases().await
    }

    /// Starts the release tasks that are due and not under way.
    pub async fn start_due_releases(self: &Arc<Self>) -> sqlx::Result<()> {
        for due in store::preparations::due_releases(&self.db).await? {
            let key = (due.job_pk, due.node_pk);
            if !self.releasing.lock().expect("lock").insert(key) {
                continue;
            }
            let this = Arc::clone(self);
            tokio::spawn(async move {
                this.run_release(&due).await;
                this.releasing.lock().expect("lock").remove(&key);
            });
        }
        Ok(())
    }

    async fn run_release(&self, due: &DueRelease) {
        match store::preparations::claim_release(&self.db, due.job_pk, due.node_pk).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(error = %e, "taking a job release task failed");
                return;
            }
        }
        let release = &due.release_task.0;
        let at = Placement {
            account: &due.account,
            pool_id: &due.pool_id,
            node_id: &due.node_id,
        };
        let dirs = self
            .runtime
            .job_prep_dirs(&due.node_id, &due.job_id, &release.id);
        let root = dirs.node.clone();
        let common: Vec<EnvironmentSetting> =
            serde_json::from_value(due.common_environment.clone()).unwrap_or_default();
        let linked = task_files::linked_storage(&self.db, &due.account, &release.resource_files)
            .await
            .unwrap_or_default();
        let command = SpecialTask {
            command_line: &release.command_line,
            dirs,
            env: job_command_environment(
                &self.runtime,
                &at,
                (&due.job_id, &release.id),
                (&common, &release.environment_settings),
                due.node_packages.as_deref().map(Vec::as_slice),
            ),
            resource_files: &release.resource_files,
            linked_storage: linked.as_deref(),
            max_retries: 0,
            limit: Some(release.limit()),
            container: node_container(&release.container_settings, &due.job_id, &release.id),
            run_as: RunAs::of(release.user_identity.as_ref(), Command::Release(due.job_pk)),
        };
        let retention = retention_ticks(release.retention_time);
        let record = |mut info: Value| {
            info["taskRootDirectory"] = json!(root);
            let db = self.db.clone();
            let (job_pk, node_pk) = (due.job_pk, due.node_pk);
            async move {
                info.as_object_mut().map(|o| o.remove("retryCount"));
                let recorded =
                    store::preparations::record_release(&db, (job_pk, node_pk), &info, retention);
                if let Err(e) = recorded.await {
                    tracing::warn!(error = %e, "recording a job release task failed");
                }
            }
        };
        let outcome = run_special_task(&self.runtime, &self.fetcher, &at, command, record).await;
        record(outcome.info).await;
        tracing::info!(job = %due.job_id, node = %due.node_id, succeeded = outcome.succeeded, "job release task ran");
    }
}

/// A job's preparation or release task's own container, if it has one: it has the node to
/// itself (it runs before the job's tasks there, or after them).
fn node_container(
    settings: &Option<ContainerSettings>,
    job_id: &str,
    task_id: &str,
) -> Option<TaskContainer> {
    settings.clone().map(|settings| TaskContainer {
        settings,
        share: 1.0,
        label: container_label(job_id, task_id, 0),
    })
}
