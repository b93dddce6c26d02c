//! The BES driver: turns started BES jobs into Batch jobs and back. For each job in flight it
//! downloads the inputs into the task's working directory, adds a Batch job with one task
//! (`score`) on the job's pool (or the classic environment's), and when that task completes
//! uploads the outputs and the task's logs (Batch File Conventions) and records the results.
//! All of its state is in `bes_jobs`, so a restarted leader picks up where the last one stopped.

mod classic;
mod finish;
mod stage;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

pub use classic::classic_pool_id;
pub use stage::stage_inputs;

use super::Wakeups;
use crate::domain::bes::Phase;
use crate::runtime::Runtime;
use crate::storage::{DataReference, Roots};
use crate::store;
use crate::store::services::BesJobRow;

/// The one task of a BES job's Batch job.
pub const TASK_ID: &str = "score";

#[derive(Clone, Debug)]
pub struct Config {
    pub roots: Roots,
    /// Whether inputs and outputs may lie on this host's own addresses (`--allow-local-urls`).
    pub allow_local_urls: bool,
    /// Default output storage and the home of the logs (a base location or a connection string).
    pub storage: DataReference,
    pub classic_concurrency: i32,
    pub classic_vm_size: String,
    pub classic_vcpus: f64,
    pub classic_memory_mib: i64,
    pub classic_image: String,
}

pub struct BesJobDriver {
    db: PgPool,
    /// Reaches the files of a job's task through its node's agent.
    runtime: Arc<Runtime>,
    config: Config,
    wake: Wakeups,
    http: reqwest::Client,
    /// Jobs a spawned step is working on.
    busy: Mutex<HashSet<i64>>,
    /// When each classic pool last had a job in flight.
    classic_last_busy: Mutex<HashMap<String, Instant>>,
    cancel: CancellationToken,
}

impl BesJobDriver {
    pub fn new(
        db: PgPool,
        runtime: Arc<Runtime>,
        config: Config,
        wake: Wakeups,
        cancel: CancellationToken,
    ) -> Arc<Self> {
        crate::install_tls();
        Arc::new(Self {
            db,
            runtime,
            config,
            wake,
            http: reqwest::Client::new(),
            busy: Mutex::default(),
            classic_last_busy: Mutex::default(),
            cancel,
        })
    }

    pub async fn run(self: Arc<Self>) {
        loop {
            let in_flight = match self.pass().await {
                Ok(n) => n,
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "BES pass failed");
                    0
                }
            };
            // While jobs are in flight their tasks' ends are looked for often; idle, rarely.
            let wait = if in_flight > 0 {
                Duration::from_millis(200)
            } else {
                self.wake.tick
            };
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = self.wake.bes.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn pass(self: &Arc<Self>) -> anyhow::Result<usize> {
        let jobs = store::services::in_flight(&self.db).await?;
        let classic: Vec<&BesJobRow> = jobs.iter().filter(|j| j.pool_id.is_none()).collect();
        if let Err(e) = self.size_classic_pools(&classic).await {
            tracing::warn!(error = %format!("{e:#}"), "sizing the classic pools failed");
        }
        // First in, first out: staging classic jobs are admitted in start order while fewer than
        // the configured number are past staging.
        let mut admitted = classic.iter().filter(|j| j.phase != Phase::Staging).count() as i32;
        let ended = self.ended_tasks().await?;
        for pk in self.pool_gone().await? {
            if let Some(job) = jobs.iter().find(|j| j.pk == pk) {
                self.abandon(job).await?;
            }
        }
        for job in &jobs {
            match job.phase {
                Phase::Staging => {
                    if job.pool_id.is_none() {
                        if admitted >= self.config.classic_concurrency {
                            continue;
                        }
                        admitted += 1;
                    }
                    self.spawn(job, |d, j| async move { d.stage(&j).await });
                }
                Phase::Running if ended.contains(&job.pk) => {
                    self.spawn(job, |d, j| async move { d.finish(&j).await });
                }
                Phase::Uploading => {
                    self.spawn(job, |d, j| async move { d.finish(&j).await });
                }
                _ => {}
            }
        }
        Ok(jobs.len())
    }

    /// Runs one step of a job unless one is running already.
    fn spawn<F, Fut>(self: &Arc<Self>, job: &BesJobRow, step: F)
    where
        F: FnOnce(Arc<Self>, BesJobRow) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
    {
        if !self.busy.lock().unwrap().insert(job.pk) {
            return;
        }
        let (me, job) = (self.clone(), job.clone());
        tokio::spawn(async move {
            let pk = job.pk;
            let id = job.id.clone();
            if let Err(e) = step(me.clone(), job).await {
                tracing::error!(job = %id, error = %format!("{e:#}"), "BES job step failed; retried on the next pass");
            }
            me.busy.lock().unwrap().remove(&pk);
            me.wake.bes.notify_one();
        });
    }

    /// Running BES jobs whose task has completed, or whose Batch job is gone.
    async fn ended_tasks(&self) -> sqlx::Result<HashSet<i64>> {
        let rows = store::services::running_jobs_ended(&self.db, TASK_ID).await?;
        Ok(rows.into_iter().collect())
    }

    async fn still_in(&self, job: &BesJobRow, phases: &[Phase]) -> sqlx::Result<bool> {
        let now = store::services::job_phase(&self.db, job.pk).await?;
        Ok(now.is_some_and(|p| Phase::parse(&p).is_some_and(|p| phases.contains(&p))))
    }

    /// Jobs waiting for or running on a pool that is gone or being deleted.
    async fn pool_gone(&self) -> sqlx::Result<Vec<i64>> {
        store::services::jobs_without_pool(&self.db).await
    }

    /// Fails a job whose pool went away, and its Batch job with it.
    async fn abandon(&self, job: &BesJobRow) -> anyhow::Result<()> {
        let pool = job.pool_id.as_deref().unwrap_or_default();
        let mut tx = self.db.begin().await?;
        let details = format!("Its pool {pool:?} was deleted before the job ended.");
        if store::services::finish(&mut *tx, job.pk, Phase::Failed, None, Some(&details)).await? {
            if let Some(b) = store::jobs::get(
                &mut *tx,
                &job.run_account,
                &job.id,
                store::jobs::Lock::Update,
            )
            .await?
            {
                store::jobs::set_state(&mut *tx, b.pk, crate::domain::job::JobState::Deleting)
                    .await?;
            }
            tracing::info!(job = %job.id, pool, "BES job failed: its pool is gone");
        }
        tx.commit().await?;
        self.wake.jobs_changed();
        Ok(())
    }

    async fn fail(&self, job: &BesJobRow, details: String) -> anyhow::Result<()> {
        tracing::info!(job = %job.id, %details, "BES job failed");
        store::services::finish(&self.db, job.pk, Phase::Failed, None, Some(&details)).await?;
        Ok(())
    }
}
