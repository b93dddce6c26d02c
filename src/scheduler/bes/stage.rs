//! Staging a started BES job: its Batch job and the one task that runs the service's command;
//! once the task has a node, its inputs down into the task's working directory, written there
//! by the node's agent.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use super::{classic_pool_id, BesJobDriver, Config, TASK_ID};
use crate::domain::bes::Phase;
use crate::domain::duration::IsoDuration;
use crate::domain::job::{AllTasksComplete, TaskFailureMode};
use crate::runtime::agents::ByteStream;
use crate::runtime::TaskFiles;
use crate::scheduler::complete::Failure;
use crate::scheduler::transfer;
use crate::storage::{self, DataReference};
use crate::store;
use crate::store::services::BesJobRow;
use crate::store::tasks::AttemptRow;

impl BesJobDriver {
    /// The Batch job and its task, in one transaction with the phase change; the inputs go
    /// down once the task has a node ([`stage_inputs`]).
    pub(super) async fn stage(self: Arc<Self>, job: &BesJobRow) -> anyhow::Result<()> {
        // A pass may hand over a job from a snapshot older than a step that just ended: go by
        // the phase now.
        if !self.still_in(job, &[Phase::Staging]).await? {
            return Ok(());
        }
        // The API accepts an input only with a readable place.
        if let Some(name) = job
            .request
            .inputs
            .iter()
            .find_map(|(name, input)| input.reference.is_none().then_some(name))
        {
            return self
                .fail(job, format!("Input {name:?} has no location."))
                .await;
        }
        self.queue_task(job).await
    }

    /// Adds the Batch job and its task, and moves the BES job on to running; unless it was
    /// cancelled meanwhile.
    async fn queue_task(&self, job: &BesJobRow) -> anyhow::Result<()> {
        let mut tx = self.db.begin().await?;
        let current = store::services::lock_job_phase(&mut *tx, job.pk).await?;
        if current != Some(Phase::Staging) {
            return Ok(()); // cancelled meanwhile
        }
        let service = store::services::get_by_pk(&mut *tx, job.service_pk).await?;
        let new_job = batch_job(job, service.as_ref().map(|s| s.id.as_str()));
        if let Err(e) = store::jobs::insert(&mut *tx, &new_job).await {
            if store::is_unique_violation(&e) {
                drop(tx);
                let details = format!(
                    "A Batch job {:?} exists already in the pool's account.",
                    job.id
                );
                return self.fail(job, details).await;
            }
            return Err(e.into());
        }
        let batch_job =
            store::jobs::get(&mut *tx, &job.run_account, &job.id, store::jobs::Lock::None)
                .await?
                .ok_or_else(|| anyhow::anyhow!("the Batch job vanished"))?;
        store::tasks::insert_many(&mut tx, batch_job.pk, &[score_task(job)]).await?;
        store::services::set_phase(&mut *tx, job.pk, &[Phase::Staging], Phase::Running).await?;
        tx.commit().await?;
        tracing::info!(job = %job.id, "BES job's inputs are in place; its task is queued");
        self.wake.dispatch.notify_one();
        Ok(())
    }
}

/// The Batch job of a BES job, on its pool or its image's classic pool; it ends with its task.
fn batch_job(job: &BesJobRow, service_id: Option<&str>) -> store::jobs::NewJob {
    let pool_id = job
        .pool_id
        .clone()
        .unwrap_or_else(|| classic_pool_id(job.request.image.as_deref()));
    store::jobs::NewJob {
        account: job.run_account.clone(),
        id: job.id.clone(),
        display_name: Some(format!(
            "BES job of web service {}",
            service_id.unwrap_or("?")
        )),
        uses_task_dependencies: false,
        common_environment: json!([]),
        props: store::jobs::JobProps {
            priority: 0,
            max_parallel_tasks: -1,
            max_wall_clock_ticks: None,
            max_task_retry_count: 0,
            allow_task_preemption: false,
            pool_id,
            auto_pool: None,
            on_all_tasks_complete: AllTasksComplete::TerminateJob,
            on_task_failure: TaskFailureMode::NoAction,
            metadata: json!([{"name": "besJobId", "value": job.id}]),
        },
        preparation_task: None,
        release_task: None,
        manager_task: None,
    }
}

/// The one task of a BES job's Batch job: the service's command, run once.
fn score_task(job: &BesJobRow) -> store::tasks::NewTask {
    store::tasks::NewTask {
        id: TASK_ID.into(),
        display_name: Some("BES job".into()),
        command_line: job.request.command.clone(),
        environment: json!([{"name": "BES_JOB_ID", "value": job.id}]),
        required_slots: 1,
        max_wall_clock_ticks: None,
        retention_ticks: IsoDuration::from_secs(7 * 24 * 3600).ticks(),
        max_task_retry_count: 0,
        depends_on: None,
        dependency_ids: Vec::new(),
        dependency_ranges: Vec::new(),
        exit_conditions: None,
        extra: json!({}),
        files: None,
        kills_job: false,
        dedicated_only: false,
        job_token: false,
    }
}

/// Before a BES job's task runs on its node: its inputs down into the working directory (each
/// streamed from its storage through this server to the node's agent), and `outputs/` made for
/// the command to write in. The failure, if an input could not be read; nothing for a task that
/// is no running BES job's.
pub async fn stage_inputs(
    db: &sqlx::PgPool,
    config: &Config,
    on: TaskFiles<'_>,
    a: &AttemptRow,
) -> Option<Failure> {
    if a.task_id != TASK_ID {
        return None;
    }
    let job = match store::services::running_job_of(db, &a.account, &a.job_id).await {
        Ok(job) => job?,
        Err(e) => {
            return Some(Failure::new(
                "BlobDownloadMiscError",
                format!("finding the BES job's inputs failed: {e}"),
            ))
        }
    };
    let wd = Path::new("wd");
    for (name, input) in &job.request.inputs {
        let failed = |e: String| {
            Failure::new(
                "BlobDownloadMiscError",
                format!("Input {name:?} could not be read (InvalidBlob): {e}"),
            )
        };
        let Some(r) = &input.reference else {
            return Some(failed("it has no location".into()));
        };
        let bytes = match input_stream(r, config).await {
            Ok(bytes) => bytes,
            Err(e) => return Some(failed(format!("{e:#}"))),
        };
        if let Err(e) = on.write(&wd.join(&input.file), bytes, None).await {
            return Some(failed(e.message));
        }
    }
    on.make_dir(&wd.join("outputs"))
        .await
        .err()
        .map(|e| Failure::new("BlobDownloadMiscError", e.message))
}

/// An input's bytes, from a place under the storage roots (on this host only if allowed).
async fn input_stream(r: &DataReference, config: &Config) -> anyhow::Result<ByteStream> {
    let b = storage::resolve(r, &config.roots)?;
    b.check_host(config.allow_local_urls).await?;
    Ok(transfer::blob_stream(&b).await?)
}
