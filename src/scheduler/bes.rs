//! The BES driver: turns started BES jobs into Batch jobs and back. For each job in flight it
//! downloads the inputs into the task's working directory, adds a Batch job with one task
//! (`score`) on the job's pool (or the classic environment's), and when that task completes
//! uploads the outputs and the task's logs (Batch File Conventions) and records the results.
//! All of its state is in `bes_jobs`, so a restarted leader picks up where the last one stopped.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use futures_util::StreamExt;
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::Wakeups;
use crate::domain::bes::Phase;
use crate::domain::bes::{CLASSIC_ACCOUNT, CLASSIC_POOL};
use crate::domain::duration::IsoDuration;
use crate::runtime::safe_fs::Below;
use crate::runtime::Layout;
use crate::storage::{self, DataReference, Roots};
use crate::store;
use crate::store::services::BesJobRow;

/// The one task of a BES job's Batch job.
pub const TASK_ID: &str = "score";
/// How long a classic pool keeps its nodes after its last job.
const CLASSIC_IDLE: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub struct Config {
    pub roots: Roots,
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
    layout: Layout,
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
        layout: Layout,
        config: Config,
        wake: Wakeups,
        cancel: CancellationToken,
    ) -> Arc<Self> {
        crate::install_tls();
        Arc::new(Self {
            db,
            layout,
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
        let mut admitted = classic
            .iter()
            .filter(|j| j.job_phase() != Some(Phase::Staging))
            .count() as i32;
        let ended = self.ended_tasks().await?;
        for pk in self.pool_gone().await? {
            if let Some(job) = jobs.iter().find(|j| j.pk == pk) {
                self.abandon(job).await?;
            }
        }
        for job in &jobs {
            match job.job_phase() {
                Some(Phase::Staging) => {
                    if job.pool_id.is_none() {
                        if admitted >= self.config.classic_concurrency {
                            continue;
                        }
                        admitted += 1;
                    }
                    self.spawn(job, |d, j| async move { d.stage(&j).await });
                }
                Some(Phase::Running) if ended.contains(&job.pk) => {
                    self.spawn(job, |d, j| async move { d.finish(&j).await });
                }
                Some(Phase::Uploading) => {
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
        self.wake.dispatch.notify_one();
        Ok(())
    }

    /// The task's directory, where the command (and so a task before it) writes.
    fn task_dir(&self, job: &BesJobRow) -> Below {
        self.layout.task_dir(&job.run_account, &job.id, TASK_ID)
    }

    async fn fail(&self, job: &BesJobRow, details: String) -> anyhow::Result<()> {
        tracing::info!(job = %job.id, %details, "BES job failed");
        store::services::finish(&self.db, job.pk, Phase::Failed, None, Some(&details)).await?;
        Ok(())
    }

    /// Inputs down, then the Batch job and its task, in one transaction with the phase change.
    async fn stage(self: Arc<Self>, job: &BesJobRow) -> anyhow::Result<()> {
        // A pass may hand over a job from a snapshot older than a step that just ended: go by
        // the phase now, or a second download could rewrite inputs under a running command.
        if !self.still_in(job, &[Phase::Staging]).await? {
            return Ok(());
        }
        let wd = self.task_dir(job).join("wd");
        wd.join("inputs").create_dir_all().await?;
        wd.join("outputs").create_dir_all().await?;
        let inputs = job.request["inputs"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for (name, input) in &inputs {
            let r: DataReference = serde_json::from_value(input["ref"].clone())?;
            let file = input["file"].as_str().unwrap_or_default();
            if let Err(e) = download(&r, &self.config.roots, wd.join(file)).await {
                return self
                    .fail(
                        job,
                        format!("Input {name:?} could not be read (InvalidBlob): {e}"),
                    )
                    .await;
            }
        }
        let mut tx = self.db.begin().await?;
        let current = store::services::lock_job_phase(&mut *tx, job.pk).await?;
        if current.as_deref().and_then(Phase::parse) != Some(Phase::Staging) {
            return Ok(()); // cancelled meanwhile
        }
        let service = store::services::get_by_pk(&mut *tx, job.service_pk).await?;
        let pool_id = job
            .pool_id
            .clone()
            .unwrap_or_else(|| classic_pool_id(job.request["image"].as_str()));
        let new_job = store::jobs::NewJob {
            account: job.run_account.clone(),
            id: job.id.clone(),
            display_name: Some(format!(
                "BES job of web service {}",
                service.as_ref().map(|s| s.id.as_str()).unwrap_or("?")
            )),
            uses_task_dependencies: false,
            common_environment: json!([]),
            props: store::jobs::JobProps {
                priority: 0,
                max_parallel_tasks: -1,
                max_wall_clock_ticks: None,
                max_task_retry_count: 0,
                pool_id,
                on_all_tasks_complete: "terminatejob".into(),
                on_task_failure: "noaction".into(),
                metadata: json!([{"name": "besJobId", "value": job.id}]),
            },
        };
        if let Err(e) = store::jobs::insert(&mut *tx, &new_job).await {
            if store::is_unique_violation(&e) {
                drop(tx);
                return self
                    .fail(
                        job,
                        format!(
                            "A Batch job {:?} exists already in the pool's account.",
                            job.id
                        ),
                    )
                    .await;
            }
            return Err(e.into());
        }
        let batch_job =
            store::jobs::get(&mut *tx, &job.run_account, &job.id, store::jobs::Lock::None)
                .await?
                .ok_or_else(|| anyhow::anyhow!("the Batch job vanished"))?;
        let task = store::tasks::NewTask {
            id: TASK_ID.into(),
            display_name: Some("BES job".into()),
            command_line: job.request["command"]
                .as_str()
                .unwrap_or("false")
                .to_string(),
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
        };
        store::tasks::insert_many(&mut tx, batch_job.pk, &[task]).await?;
        store::services::set_phase(&mut *tx, job.pk, &[Phase::Staging], Phase::Running).await?;
        tx.commit().await?;
        tracing::info!(job = %job.id, "BES job's inputs are in place; its task is queued");
        self.wake.dispatch.notify_one();
        Ok(())
    }

    /// The task has ended: logs and outputs up, results recorded.
    async fn finish(self: Arc<Self>, job: &BesJobRow) -> anyhow::Result<()> {
        if !self
            .still_in(job, &[Phase::Running, Phase::Uploading])
            .await?
        {
            return Ok(());
        }
        store::services::set_phase(&self.db, job.pk, &[Phase::Running], Phase::Uploading).await?;
        let outcome = store::tasks::outcome(&self.db, &job.run_account, &job.id, TASK_ID).await?;
        let Some((_, exit_code, result, failure)) = outcome else {
            return self
                .fail(
                    job,
                    "Its Batch job was deleted before the job ended.".into(),
                )
                .await;
        };
        let dir = self.task_dir(job);
        let container = storage::job_container(&job.id);
        let outputs = job.request["outputs"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        // The conventions' container lives where the first output with an account key goes,
        // else in the server's storage.
        let home = outputs
            .values()
            .filter_map(|o| serde_json::from_value::<DataReference>(o["ref"].clone()).ok())
            .find(|r| {
                r.connection_string
                    .as_deref()
                    .is_some_and(|c| !c.trim().is_empty())
            })
            .unwrap_or_else(|| self.config.storage.clone());
        let in_home = |path: String| -> Result<storage::Blob, storage::BlobError> {
            let r = DataReference {
                relative_location: Some(format!("{container}/{path}")),
                base_location: home.base_location.clone(),
                connection_string: home.connection_string.clone(),
                sas_blob_token: None,
            };
            storage::resolve(&r, &self.config.roots)
        };
        for log in ["stdout.txt", "stderr.txt"] {
            let target = in_home(format!("{TASK_ID}/$TaskLog/{log}"))?;
            if let Err(e) = self.upload(dir.join(log), &target).await {
                tracing::warn!(job = %job.id, error = %format!("{e:#}"), "storing the task log failed");
            }
        }
        if result.as_deref() != Some("success") {
            let stderr = tail(dir.join("stderr.txt"), 2000).await.unwrap_or_default();
            let tail = String::from_utf8_lossy(&stderr).trim().to_string();
            let why = match (
                exit_code,
                failure.as_ref().and_then(|f| f["message"].as_str()),
            ) {
                (Some(code), _) => format!("The command exited with code {code}."),
                (None, Some(message)) => format!("The command did not run: {message}"),
                (None, None) => "The command did not complete.".to_string(),
            };
            return self
                .fail(job, format!("{why} Its last standard error: {tail:?}. Logs: {container}/{TASK_ID}/$TaskLog/."))
                .await;
        }
        let mut results = serde_json::Map::new();
        let now = Utc::now();
        for (name, output) in &outputs {
            let file = output["file"].as_str().unwrap_or_default();
            let local = dir.join("wd").join(file);
            if local.with(|root, rel| root.metadata(rel)).await.is_err() {
                return self.fail(job, format!("The command wrote no output {name:?} (expected {file} in its working directory).")).await;
            }
            let file_name = file.rsplit('/').next().unwrap_or(file).to_string();
            let conventions = in_home(format!("{TASK_ID}/$TaskOutput/{file_name}"))?;
            let destination =
                match serde_json::from_value::<Option<DataReference>>(output["ref"].clone())? {
                    Some(r) => storage::resolve(&r, &self.config.roots)?,
                    None => conventions.clone(),
                };
            if let Err(e) = self.upload(local.clone(), &destination).await {
                return self
                    .fail(
                        job,
                        format!("Output {name:?} could not be written (InvalidBlob): {e:#}"),
                    )
                    .await;
            }
            if destination.path != conventions.path || destination.place != conventions.place {
                if let Err(e) = self.upload(local, &conventions).await {
                    tracing::warn!(job = %job.id, error = %format!("{e:#}"), "storing the output under the conventions failed");
                }
            }
            results.insert(
                name.clone(),
                serde_json::to_value(destination.result_reference(now))?,
            );
        }
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
        // The classic environment's Batch jobs are the server's own: they go once done (their
        // slot usage stays for billing).
        if job.pool_id.is_none() {
            if let Some(b) =
                store::jobs::get(&self.db, CLASSIC_ACCOUNT, &job.id, store::jobs::Lock::None)
                    .await?
            {
                store::jobs::set_state(&self.db, b.pk, crate::domain::job::JobState::Deleting)
                    .await?;
                self.wake.dispatch.notify_one();
            }
        }
        Ok(())
    }

    /// Uploads a file (an absent one as empty): in one request when small, else in 8 MiB parts
    /// with at most 4 in flight, so a large output never sits whole in memory.
    /// A link (the task's) is refused, never followed.
    async fn upload(&self, local: Below, target: &storage::Blob) -> anyhow::Result<()> {
        const PART: usize = 8 * 1024 * 1024;
        target.ensure_container(&self.http).await?;
        let mut file = match local.with(|root, rel| root.open_file(rel)).await {
            Ok(f) => tokio::fs::File::from_std(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                target
                    .store
                    .put(&target.path, PutPayload::from(Vec::new()))
                    .await?;
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        if file.metadata().await?.len() <= PART as u64 {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).await?;
            target
                .store
                .put(&target.path, PutPayload::from(bytes))
                .await?;
            return Ok(());
        }
        let upload = target.store.put_multipart(&target.path).await?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
        let mut buf = vec![0u8; 1024 * 1024];
        loop {
            let n = file.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            writer.wait_for_capacity(4).await?;
            writer.write(&buf[..n]);
        }
        writer.finish().await?;
        Ok(())
    }

    /// Each classic pool (one per image) has a node per classic job of its image in flight, up
    /// to the configured number; it keeps them until it has been idle a while, then goes to zero.
    async fn size_classic_pools(&self, jobs: &[&BesJobRow]) -> anyhow::Result<()> {
        let limit = self.config.classic_concurrency;
        if limit == 0 {
            return Ok(());
        }
        let mut wanted: BTreeMap<String, (Option<String>, i32)> = BTreeMap::new();
        for job in jobs {
            let image = job.request["image"].as_str().map(String::from);
            wanted
                .entry(classic_pool_id(image.as_deref()))
                .or_insert((image, 0))
                .1 += 1;
        }
        let existing = store::pools::list(&self.db, CLASSIC_ACCOUNT).await?;
        let mut ids: Vec<String> = wanted.keys().cloned().collect();
        ids.extend(
            existing
                .iter()
                .map(|p| p.id.clone())
                .filter(|id| !wanted.contains_key(id)),
        );
        for id in ids {
            let (image, count) = wanted.get(&id).cloned().unwrap_or((None, 0));
            let want = count.min(limit);
            let idle = {
                let mut busy = self.classic_last_busy.lock().unwrap();
                let last = busy.entry(id.clone()).or_insert_with(Instant::now);
                if want > 0 {
                    *last = Instant::now();
                }
                last.elapsed() >= CLASSIC_IDLE
            };
            let Some(pool) = existing.iter().find(|p| p.id == id) else {
                if want > 0 {
                    self.make_classic_pool(&id, image, want).await?;
                }
                continue;
            };
            let target = if want > pool.target_dedicated_nodes {
                want
            } else if want == 0 && idle {
                0
            } else {
                continue;
            };
            if target != pool.target_dedicated_nodes
                && store::pools::resize(&self.db, CLASSIC_ACCOUNT, &id, target, None, None)
                    .await?
                    .is_ok()
            {
                self.wake.allocate.notify_one();
            }
        }
        Ok(())
    }

    async fn make_classic_pool(
        &self,
        id: &str,
        image: Option<String>,
        nodes: i32,
    ) -> anyhow::Result<()> {
        let new = store::pools::NewPool {
            account: CLASSIC_ACCOUNT.into(),
            id: id.into(),
            display_name: Some(format!(
                "The classic BES environment ({})",
                image.as_deref().unwrap_or("the default image")
            )),
            vm_size: self.config.classic_vm_size.clone(),
            vcpus: self.config.classic_vcpus,
            memory_mib: self.config.classic_memory_mib,
            image: image.unwrap_or_else(|| self.config.classic_image.clone()),
            vm_config: None,
            start_task: None,
            task_slots_per_node: 1,
            node_fill_type: "spread".into(),
            target_dedicated_nodes: nodes,
            resize_timeout_ticks: IsoDuration::from_secs(15 * 60).ticks(),
            metadata: json!([]),
            billing_plan: None,
            service_pk: None,
            pool_service: false,
        };
        match store::pools::insert(&self.db, &new).await {
            Err(e) if !store::is_unique_violation(&e) => return Err(e.into()),
            _ => {}
        }
        self.wake.allocate.notify_one();
        Ok(())
    }
}

/// The classic pool that runs the jobs of services with `image` (None: the default image).
pub fn classic_pool_id(image: Option<&str>) -> String {
    use sha2::{Digest, Sha256};
    match image {
        None => CLASSIC_POOL.to_string(),
        Some(image) => {
            let digest = Sha256::digest(image.as_bytes());
            let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            format!("{CLASSIC_POOL}-{hex}")
        }
    }
}

/// Streams a blob into a file (made anew), through no link a task left on the way.
async fn download(r: &DataReference, roots: &Roots, to: Below) -> anyhow::Result<()> {
    let b = storage::resolve(r, roots)?;
    let mut stream = b.store.get(&b.path).await?.into_stream();
    let name =
        anyhow::Context::context(to.rel.file_name(), "an input names no file")?.to_os_string();
    let parent = Below {
        root: to.root.clone(),
        rel: to
            .rel
            .parent()
            .unwrap_or(std::path::Path::new(""))
            .to_path_buf(),
    };
    // Written aside and renamed into place: the file is there whole or not at all.
    let mut partial = name.clone();
    partial.push(".partial");
    let (dir, file) = parent
        .with({
            let partial = partial.clone();
            move |root, rel| {
                let dir = root.create_dir_all(rel)?;
                let file = dir.create_file(&partial)?;
                Ok((dir, file))
            }
        })
        .await?;
    let mut file = tokio::fs::File::from_std(file);
    while let Some(chunk) = stream.next().await {
        file.write_all(&chunk?).await?;
    }
    file.flush().await?;
    tokio::task::spawn_blocking(move || dir.rename(&partial, &name)).await??;
    Ok(())
}

/// The last `max` bytes of a file, read from a seek: a task's log may be any size.
async fn tail(file: Below, max: u64) -> std::io::Result<Vec<u8>> {
    let file = file.with(|root, rel| root.open_file(rel)).await?;
    let len = file.metadata()?.len();
    let mut file = tokio::fs::File::from_std(file);
    tokio::io::AsyncSeekExt::seek(&mut file, std::io::SeekFrom::Start(len.saturating_sub(max)))
        .await?;
    let mut out = Vec::new();
    file.take(max).read_to_end(&mut out).await?;
    Ok(out)
}
