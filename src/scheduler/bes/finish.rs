//! Finishing a BES job whose task has ended: the task's logs and the outputs up (under the
//! Batch File Conventions too), then the results, or why the job failed.

use std::path::Path;
use std::sync::Arc;

use chrono::Utc;
use serde_json::{Map, Value};

use super::{BesJobDriver, Config, TASK_ID};
use crate::domain::bes::{Phase, Placed, CLASSIC_ACCOUNT};
use crate::runtime::TaskFiles;
use crate::scheduler::transfer;
use crate::storage::{self, Blob, BlobError, DataReference, Roots};
use crate::store;
use crate::store::services::BesJobRow;

/// Where the Batch File Conventions put a job's logs and outputs: the job's container, in the
/// storage of the first output with an account key, else in the server's.
struct Conventions<'a> {
    container: String,
    home: DataReference,
    roots: &'a Roots,
}

impl<'a> Conventions<'a> {
    fn new(job: &BesJobRow, config: &'a Config) -> Self {
        let home = job
            .request
            .outputs
            .values()
            .filter_map(|o| o.reference.clone())
            .find(|r| {
                r.connection_string
                    .as_deref()
                    .is_some_and(|c| !c.trim().is_empty())
            })
            .unwrap_or_else(|| config.storage.clone());
        Self {
            container: storage::job_container(&job.id),
            home,
            roots: &config.roots,
        }
    }

    /// The blob at `path` in the job's container.
    fn blob(&self, path: String) -> Result<Blob, BlobError> {
        let r = DataReference {
            relative_location: Some(format!("{}/{path}", self.container)),
            base_location: self.home.base_location.clone(),
            connection_string: self.home.connection_string.clone(),
            sas_blob_token: None,
        };
        storage::resolve(&r, self.roots)
    }
}

impl BesJobDriver {
    /// The task has ended: logs and outputs up, results recorded.
    pub(super) async fn finish(self: Arc<Self>, job: &BesJobRow) -> anyhow::Result<()> {
        if !self
            .still_in(job, &[Phase::Running, Phase::Uploading])
            .await?
        {
            return Ok(());
        }
        store::services::set_phase(&self.db, job.pk, &[Phase::Running], Phase::Uploading).await?;
        let outcome = store::tasks::outcome(&self.db, &job.run_account, &job.id, TASK_ID).await?;
        let Some(outcome) = outcome else {
            return self
                .fail(
                    job,
                    "Its Batch job was deleted before the job ended.".into(),
                )
                .await;
        };
        let conventions = Conventions::new(job, &self.config);
        // The task's files are on its node, as its agent reads them; a node that left its pool
        // (or a task that never had one) took them with it.
        let Some(node) = outcome.node_id.as_deref() else {
            let why = match outcome.result.as_deref() {
                Some("success") => "Its command succeeded.".to_string(),
                _ => failure_reason(outcome.exit_code, outcome.failure_info.as_ref()),
            };
            let gone = "Its task's node left its pool, with the task's logs and outputs.";
            return self.fail(job, format!("{why} {gone}")).await;
        };
        let dirs = self.runtime.task_dirs(node, &job.id, TASK_ID);
        let files = TaskFiles {
            runtime: &self.runtime,
            node: Some(node),
            dirs: &dirs,
        };
        self.store_logs(job, files, &conventions).await?;
        if outcome.result.as_deref() != Some("success") {
            let why = failure_reason(outcome.exit_code, outcome.failure_info.as_ref());
            return self.fail_command(job, files, why, &conventions).await;
        }
        let Some(results) = self.store_outputs(job, files, &conventions).await? else {
            return Ok(());
        };
        if store::services::finish(
            &self.db,
            job.pk,
            Phase::Finished,
            Some(&Value::Object(results)),
            None,
        )
        .await?
        {
            tracing::info!(job = %job.id, "BES job finished");
        }
        self.delete_classic_batch_job(job).await
    }

    /// Fails a job whose command failed: why, the end of its stderr, and where its logs are.
    async fn fail_command(
        &self,
        job: &BesJobRow,
        files: TaskFiles<'_>,
        why: String,
        conventions: &Conventions<'_>,
    ) -> anyhow::Result<()> {
        let stderr = files
            .tail(Path::new("stderr.txt"), 2000)
            .await
            .unwrap_or_default();
        let tail = String::from_utf8_lossy(&stderr).trim().to_string();
        let container = &conventions.container;
        self.fail(
            job,
            format!(
                "{why} Its last standard error: {tail:?}. Logs: {container}/{TASK_ID}/$TaskLog/."
            ),
        )
        .await
    }

    /// The task's stdout and stderr under the conventions; a log that cannot be stored is no
    /// reason to fail the job.
    async fn store_logs(
        &self,
        job: &BesJobRow,
        files: TaskFiles<'_>,
        conventions: &Conventions<'_>,
    ) -> anyhow::Result<()> {
        for log in ["stdout.txt", "stderr.txt"] {
            let target = conventions.blob(format!("{TASK_ID}/$TaskLog/{log}"))?;
            if let Err(e) = upload(&self.http, files, Path::new(log), &target).await {
                tracing::warn!(job = %job.id, error = %format!("{e:#}"), "storing the task log failed");
            }
        }
        Ok(())
    }

    /// Uploads every output; the results, or None when one is missing or could not be written,
    /// and the job has failed.
    async fn store_outputs(
        &self,
        job: &BesJobRow,
        files: TaskFiles<'_>,
        conventions: &Conventions<'_>,
    ) -> anyhow::Result<Option<Map<String, Value>>> {
        let mut results = Map::new();
        let now = Utc::now();
        for (name, output) in &job.request.outputs {
            let placed = (name.as_str(), output);
            let Some(stored) = self.store_output(job, files, placed, conventions).await? else {
                return Ok(None);
            };
            results.insert(
                name.clone(),
                serde_json::to_value(stored.result_reference(now))?,
            );
        }
        Ok(Some(results))
    }

    /// Uploads one output to where it goes and, if that is elsewhere, under the conventions too;
    /// None when the job has failed over it.
    async fn store_output(
        &self,
        job: &BesJobRow,
        files: TaskFiles<'_>,
        (name, output): (&str, &Placed),
        conventions: &Conventions<'_>,
    ) -> anyhow::Result<Option<Blob>> {
        let file = output.file.as_str();
        let local = Path::new("wd").join(file);
        if !matches!(files.stat(&local).await, Ok(Some(info)) if !info.is_dir) {
            self.fail(job, format!("The command wrote no output {name:?} (expected {file} in its working directory).")).await?;
            return Ok(None);
        }
        let file_name = file.rsplit('/').next().unwrap_or(file).to_string();
        let under_conventions = conventions.blob(format!("{TASK_ID}/$TaskOutput/{file_name}"))?;
        let destination = match &output.reference {
            Some(r) => {
                let b = storage::resolve(r, &self.config.roots)?;
                b.check_host(self.config.allow_local_urls).await?;
                b
            }
            None => under_conventions.clone(),
        };
        if let Err(e) = upload(&self.http, files, &local, &destination).await {
            let details = format!("Output {name:?} could not be written (InvalidBlob): {e:#}");
            self.fail(job, details).await?;
            return Ok(None);
        }
        if destination.path != under_conventions.path
            || destination.place != under_conventions.place
        {
            if let Err(e) = upload(&self.http, files, &local, &under_conventions).await {
                tracing::warn!(job = %job.id, error = %format!("{e:#}"), "storing the output under the conventions failed");
            }
        }
        Ok(Some(destination))
    }

    /// The classic environment's Batch jobs are the server's own: they go once done (their slot
    /// usage stays for billing).
    async fn delete_classic_batch_job(&self, job: &BesJobRow) -> anyhow::Result<()> {
        if job.pool_id.is_some() {
            return Ok(());
        }
        if let Some(b) =
            store::jobs::get(&self.db, CLASSIC_ACCOUNT, &job.id, store::jobs::Lock::None).await?
        {
            store::jobs::set_state(&self.db, b.pk, crate::domain::job::JobState::Deleting).await?;
            self.wake.jobs_changed();
        }
        Ok(())
    }
}

/// Uploads a file of the task's (an absent one as empty), read by its node's agent.
async fn upload(
    http: &reqwest::Client,
    files: TaskFiles<'_>,
    rel: &Path,
    target: &Blob,
) -> anyhow::Result<()> {
    let data = files
        .read(rel)
        .await
        .map_err(|e| anyhow::anyhow!(e.message))?;
    transfer::upload_with(http, data, target, Default::default()).await
}

/// Why the command failed, in a sentence.
fn failure_reason(exit_code: Option<i32>, failure: Option<&Value>) -> String {
    match (exit_code, failure.and_then(|f| f["message"].as_str())) {
        (Some(code), _) => format!("The command exited with code {code}."),
        (None, Some(message)) => format!("The command did not run: {message}"),
        (None, None) => "The command did not complete.".to_string(),
    }
}
