//! The chaos soak (RELIABILITY.md, "The chaos soak"): a mixed workload on two servers sharing
//! one PostgreSQL (jobs with dependencies, retries, priorities and maxParallelTasks on a pool
//! with a low-priority node, one job in five on an autoscaled pool, and a job schedule whose
//! jobs' manager tasks run alike; a task in four reads a resource file from Azurite and leaves
//! an output file there, and on Docker one in five runs in a container of its own), while a
//! seeded nemesis injects faults, several at once: kill -9 of a server, a PostgreSQL restart,
//! kill -9 of the postmaster, the operator's reclaim of a low-priority node; on local nodes, a
//! node's agent frozen (SIGSTOP) and thawed, or killed; on Docker nodes (over two hosts), a
//! node's container frozen and thawed, killed, or cut from its network and joined again, the
//! second host's engine stopped and started, and its disk filled and emptied
//! (`soak/docker.rs`). Then a checker reads the API, the database, Azurite, the servers' logs
//! and what every task run recorded, and fails on any violation:
//!
//! - every accepted task ends, successfully (or failed for want of space, its last run on a
//!   node whose disk was filled: its output not written, or its resource files, a
//!   pre-processing error that is not retried), and its command ran at least once and at most 1 + requeueCount + retryCount times; the drain may
//!   take as long as tasks keep completing;
//! - a task with an output file that succeeded left it in Azurite, as it wrote it;
//! - no ready task waits [`IDLE_SLOT_BOUND`] while a node of its pool has a free slot it fits
//!   (looked at through the database every 2 s, during the run and the drain);
//! - no node ran more tasks at once than its slots;
//! - a node's billing intervals never overlap, and they cover the time it is in use: at every
//!   look (every 2 s, one snapshot of the database), a node that is idle, running, offline,
//!   unknown or at its start task has an open record, one being made or preempted has none,
//!   and no record is open for a node that is gone;
//! - every answer is 2xx or 4xx, or 503 with Retry-After (a server killed mid-request answers
//!   nothing, which is no violation);
//! - no panic in the servers' logs, and each server's RSS stays under [`MAX_RSS_KIB`];
//! - no server, agent or task connects outside this machine (`common/outbound.rs`).
//!
//! `scripts/soak.sh --seed N --minutes M [--runtime local|docker|both]` runs one seed as long as
//! asked; in CI both runtimes run for [`CI_SECONDS`] with seed 1.

mod common;
#[path = "soak/docker.rs"]
mod docker;
#[path = "common/engine.rs"]
mod engine;
#[path = "common/outbound.rs"]
mod outbound;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use common::pg::OwnPostgres;
use common::{Rt, TestServer};
use serde_json::{json, Value};

/// How long the nemesis works when the run does not say (`BATCHPOOL_SOAK_SECONDS`).
const CI_SECONDS: u64 = 90;
/// Each server's resident memory, at most (a debug build).
const MAX_RSS_KIB: u64 = 600 * 1024;
/// How long a ready task may wait while a node of its pool has a free slot it fits: the
/// leader's dispatch looks every second, and a new leader takes over within the database's
/// 10 s lease of a killed one.
const IDLE_SLOT_BOUND: Duration = Duration::from_secs(30);
/// How long the drain may go without a task completing before the checker gives up.
const STALL: Duration = Duration::from_secs(120);
/// Slots of each node.
const SLOTS: usize = 4;
/// What the tasks with files find in their resource file, and where.
const INPUT: &str = "soak-input";
const INPUT_PATH: &str = "res/in/data.txt";
/// The size of the second Docker host's disk, which the nemesis fills.
const DISK_MIB: u64 = 1024;

/// A small, seeded generator (xorshift64*): a seed replays the same choices.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// What the run saw that breaks a rule.
#[derive(Default)]
struct Violations(Vec<String>);

impl Violations {
    /// Adds a violation; one seen again (a state that lasts, at every look) counts once.
    fn add(&mut self, what: String) {
        if self.0.contains(&what) {
            return;
        }
        eprintln!("VIOLATION: {what}");
        self.0.push(what);
    }
}

/// A fault under way, and when it ends.
enum Fault {
    ServerDown(usize),
    Frozen(i32),
    /// A Docker node's container paused, on the soak's own engine or not.
    Paused(bool, String),
    /// A Docker node's container cut from its network.
    Cut(bool, String, String),
    /// The soak's own Docker engine stopped.
    EngineDown,
    /// The disk of the soak's own Docker engine filled, by this file.
    Full(std::path::PathBuf),
}

/// The soak's state: its servers, its PostgreSQL, the jobs it submitted and what it saw.
struct Soak {
    /// First, so that they go first (fields drop in order): each removes its nodes and
    /// networks from the engines, reading the database (below) for its id.
    servers: Vec<TestServer>,
    rt: Rt,
    /// On Docker: a second host, the soak's own engine, to stop and start.
    engine: Option<engine::OwnEngine>,
    /// On Docker: the port of the sink tasks record their runs at ([`docker::sink`]).
    sink: u16,
    server_id: String,
    pg: OwnPostgres,
    up: Vec<bool>,
    rng: Rng,
    ran: std::path::PathBuf,
    marks: tempfile::TempDir,
    jobs: Vec<String>,
    faults: Vec<(Instant, Fault)>,
    injected: BTreeMap<&'static str, u32>,
    answers: BTreeMap<u16, u32>,
    max_rss: u64,
    seen: Violations,
    /// The database, read by the checker (its reads fail while the database is down).
    db: sqlx::PgPool,
    /// Ready tasks seen waiting while a node of their pool had the slots they need: since when
    /// (the first of an unbroken run of looks) and whether it was told, by task pk.
    waiting: HashMap<i64, (Instant, bool)>,
    /// How many connected sockets of its processes the outbound check looked at.
    sockets_seen: usize,
    /// The Azurite container the tasks with files read their input from and write their output
    /// to: its name and a URL with a SAS.
    files: (String, String),
    /// On Docker: the nodes whose disks were filled (all of a host's at once).
    filled: std::collections::HashSet<String>,
}

impl Soak {
    /// A server that is up, if any.
    fn server(&self) -> Option<&TestServer> {
        let i = self.rng.0 as usize % self.servers.len();
        (0..self.servers.len())
            .map(|k| (i + k) % self.servers.len())
            .find(|&k| self.up[k])
            .map(|k| &self.servers[k])
    }

    /// A request to a server that is up; its status and body, or None when nothing answered.
    async fn call(
        &mut self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Option<(u16, Value)> {
        let s = self.server()?;
        let mut req = s.http.request(method, format!("{}{path}", s.base));
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = tokio::time::timeout(Duration::from_secs(30), req.send())
            .await
            .ok()?
            .ok()?;
        let status = resp.status().as_u16();
        let retry_after = resp.headers().contains_key("retry-after");
        let text = resp.text().await.ok()?;
        *self.answers.entry(status).or_default() += 1;
        if status >= 500 && !(status == 503 && retry_after) {
            self.seen.add(format!("{status} to {path}: {text}"));
        }
        Some((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// Stops the schedule making jobs, and adds those it made to the jobs the checker waits for.
    async fn schedule_done(&mut self) {
        let mut disabled = false;
        for _ in 0..240 {
            let path = "/jobschedules/sched/disable";
            if let Some((204 | 200, _)) = self.call(reqwest::Method::POST, path, None).await {
                disabled = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        for _ in 0..240 {
            let path = "/jobschedules/sched/jobs?$select=id";
            if let (true, Some((200, list))) =
                (disabled, self.call(reqwest::Method::GET, path, None).await)
            {
                let made = list["value"].as_array().cloned().unwrap_or_default();
                self.jobs.extend(
                    made.iter()
                        .filter_map(|j| Some(j["id"].as_str()?.to_string())),
                );
                *self.injected.entry("(jobs the schedule made)").or_default() += made.len() as u32;
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        self.seen
            .add("the schedule could not be disabled, or its jobs listed".into());
    }

    /// A job of 5 to 24 tasks: some depend on the one before, some fail once and are retried,
    /// with a random priority and maxParallelTasks.
    async fn submit(&mut self) {
        let job = format!("j{}", self.jobs.len());
        // One job in five on the autoscaled pool.
        let pool = if self.rng.chance(20) { "auto" } else { "soak" };
        let body = json!({
            "id": job, "poolInfo": {"poolId": pool}, "usesTaskDependencies": true,
            "priority": self.rng.below(201) as i64 - 100,
            "maxParallelTasks": if self.rng.chance(30) { 1 + self.rng.below(4) as i64 } else { -1 },
            "constraints": {"maxTaskRetryCount": 2},
        });
        match self.call(reqwest::Method::POST, "/jobs", Some(&body)).await {
            Some((201, _)) => {}
            // Made before a server died or the database went: it is there, or it is not.
            _ => return,
        }
        self.jobs.push(job.clone());
        let count = 5 + self.rng.below(20);
        let tasks: Vec<Value> = (0..count).map(|i| self.task(&job, i, true)).collect();
        let path = format!("/jobs/{job}/addtaskcollection");
        // Tasks added after a fault are added again: a task id is added once or refused.
        for _ in 0..20 {
            if let Some((200, _)) = self
                .call(reqwest::Method::POST, &path, Some(&json!({"value": tasks})))
                .await
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Task `i` of a job: records its runs, sleeps, fails once in seven. With `extras`, one in
    /// four reads a resource file from Azurite and leaves an output file there, and on Docker
    /// one in five runs in a container of its own.
    fn task(&mut self, job: &str, i: u64, extras: bool) -> Value {
        let record = |what: &str| {
            format!(
                "echo {what} $AZ_BATCH_NODE_ID $AZ_BATCH_JOB_ID $AZ_BATCH_TASK_ID $(date +%s%N) >> {}",
                self.ran.display()
            )
        };
        let mark = format!(
            "{}/$AZ_BATCH_JOB_ID.$AZ_BATCH_TASK_ID",
            self.marks.path().display()
        );
        let fails_once = self.rng.chance(15);
        let mut work = format!("sleep {}.{}", self.rng.below(3), self.rng.below(10));
        let files = extras && self.rng.chance(25);
        if files {
            // The input must be there, and the output written, or the run fails (and is retried).
            work += &format!(
                "; grep -q {INPUT} {INPUT_PATH} || exit 4; echo $AZ_BATCH_JOB_ID/$AZ_BATCH_TASK_ID > out.txt || exit 5"
            );
        }
        let boxed = extras && self.rt == Rt::Docker && self.rng.chance(20);
        let command = match self.rt {
            Rt::Docker => docker::command(self.sink, &work, fails_once),
            Rt::Local => self.local_command(&record, &mark, &work, fails_once),
        };
        let mut task =
            json!({"id": format!("t{i:02}"), "commandLine": format!("sh -c '{command}'")});
        if files {
            let url = &self.files.1;
            task["resourceFiles"] =
                json!([{"storageContainerUrl": url, "blobPrefix": "in/", "filePath": "res"}]);
            task["outputFiles"] = json!([{"filePattern": "out.txt",
                "destination": {"container": {"containerUrl": url,
                    "path": format!("out/{job}/t{i:02}.txt")}},
                "uploadOptions": {"uploadCondition": "tasksuccess"}}]);
        }
        if boxed {
            task["containerSettings"] = json!({"imageName": common::TEST_IMAGE});
        }
        // A task that fails for want of space (its disk filled: its output not written, or its
        // resource file or container not made) holds up none of its dependants, as Azure's
        // exitConditions allow.
        task["exitConditions"] = json!({
            "exitCodes": [{"code": 5, "exitOptions": {"dependencyAction": "satisfy"}}],
            "preProcessingError": {"dependencyAction": "satisfy"},
        });
        self.with_dependency(i, task)
    }

    /// A task's command on a local node, as [`docker::command`] is on a Docker one, its runs
    /// recorded in the file `record` writes and its one failure marked in `mark`.
    fn local_command(
        &self,
        record: &dyn Fn(&str) -> String,
        mark: &str,
        work: &str,
        fails_once: bool,
    ) -> String {
        let mut command = format!("{}; {work}", record("start"));
        if fails_once {
            command += &format!(
                "; if [ ! -e {mark} ]; then touch {mark}; {}; exit 3; fi",
                record("end")
            );
        }
        command + &format!("; {}", record("end"))
    }

    /// Some tasks depend on the one before.
    fn with_dependency(&mut self, i: u64, mut task: Value) -> Value {
        if i > 0 && self.rng.chance(30) {
            task["dependsOn"] = json!({"taskIds": [format!("t{:02}", i - 1)]});
        }
        task
    }
}

/// The agents of the soak's own local nodes (their roots in its servers' data directories, so
/// that no other test's nodes are touched): (node id, pid).
fn agents(roots: &[std::path::PathBuf]) -> Vec<(String, i32)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if !cmdline.split(|b| *b == 0).any(|a| a == b"agent") {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let var = |name: &str| {
            environ.split(|b| *b == 0).find_map(|v| {
                let v = String::from_utf8_lossy(v);
                v.strip_prefix(name).map(str::to_string)
            })
        };
        let ours = var("BATCHPOOL_AGENT_ROOT=").is_some_and(|root| {
            roots
                .iter()
                .any(|r| root.starts_with(&*r.to_string_lossy()))
        });
        if let (true, Some(node)) = (ours, var("BATCHPOOL_AGENT_NODE=")) {
            found.push((node, pid));
        }
    }
    found
}

impl Soak {
    /// Whether a task that did not succeed failed as it should have: its last run on a node
    /// whose disk the nemesis filled, for want of space (its output not written, exit code 5,
    /// or its agent's own words), or its container refused by the engine whose disk it is (a
    /// node made and gone while the disk was full, between two looks at the engine's nodes).
    fn failed_for_space(&self, t: &Value) -> bool {
        let info = &t["executionInfo"];
        let node = t["nodeInfo"]["nodeId"].as_str().unwrap_or_default();
        let message = info["failureInfo"]["message"].as_str().unwrap_or_default();
        let no_space = message.to_lowercase().contains("no space left on device");
        let data = self.engine.as_ref().map(|e| e.data());
        let on_the_full_disk = data.is_some_and(|d| message.contains(&*d.to_string_lossy()));
        (self.filled.contains(node) && (info["exitCode"] == 5 || no_space))
            || (no_space && on_the_full_disk)
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: a signal to a process this test's servers started.
    unsafe { libc::kill(pid, sig) };
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Soak {
    /// One fault, chosen by the seed; those that last end later ([`Soak::heal_due`]).
    async fn inject(&mut self) {
        let kinds = if self.rt == Rt::Docker { 9 } else { 6 };
        let kind = self.rng.below(kinds);
        let name = match kind {
            0 => {
                let i = self.rng.below(2) as usize;
                if !self.up[i] {
                    return;
                }
                self.servers[i].kill().await;
                self.up[i] = false;
                let back = Instant::now() + Duration::from_millis(500 + self.rng.below(4000));
                self.faults.push((back, Fault::ServerDown(i)));
                "kill -9 of a server"
            }
            1 => {
                self.pg.restart();
                "PostgreSQL restarted"
            }
            2 => {
                self.pg.kill_postmaster();
                "kill -9 of the postmaster, then started"
            }
            3 | 4 | 6 | 7 | 8 if self.rt == Rt::Docker => match self.docker_fault(kind) {
                Some(name) => name,
                None => return,
            },
            3 | 4 => {
                let agents = agents(&self.roots());
                if agents.is_empty() {
                    return;
                }
                let (_, pid) = agents[self.rng.below(agents.len() as u64) as usize];
                if kind == 3 {
                    signal(pid, libc::SIGSTOP);
                    let thaw = Instant::now() + Duration::from_secs(2 + self.rng.below(14));
                    self.faults.push((thaw, Fault::Frozen(pid)));
                    "an agent frozen (SIGSTOP), thawed 2-15 s later"
                } else {
                    signal(pid, libc::SIGKILL);
                    "kill -9 of an agent"
                }
            }
            _ => {
                let Some(s) = self.server() else { return };
                let body = json!({"count": 1, "holdFor": "PT5S"});
                let _ = s
                    .operator(reqwest::Method::POST, "reclaim", Some(&body), None)
                    .await;
                "the operator's reclaim of a low-priority node"
            }
        };
        *self.injected.entry(name).or_default() += 1;
        // When, for reading a violation against the servers' logs.
        println!("FAULT {} {name}", chrono::Utc::now().to_rfc3339());
    }

    /// Ends the faults whose time has come (or, with `all`, every one).
    async fn heal_due(&mut self, all: bool) {
        // A node made on the full disk's host meanwhile shares the disk too, whatever the
        // engine lists it as.
        if self.disk_full() {
            let own = docker::nodes(&mut self.cli(true), &self.server_id, true);
            self.filled.extend(own.into_iter().map(|(_, node)| node));
        }
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.faults)
            .into_iter()
            .partition(|(at, _)| all || *at <= now);
        self.faults = later;
        for (_, fault) in due {
            match fault {
                Fault::ServerDown(i) => {
                    self.servers[i].launch().await;
                    self.up[i] = true;
                }
                Fault::Frozen(pid) => signal(pid, libc::SIGCONT),
                Fault::Paused(own, container) => {
                    docker::quietly(self.cli(own).args(["unpause", &container]))
                }
                Fault::Cut(own, container, network) => docker::quietly(
                    self.cli(own)
                        .args(["network", "connect", &network, &container]),
                ),
                Fault::EngineDown => {
                    if let Some(engine) = &mut self.engine {
                        engine.launch();
                    }
                }
                Fault::Full(file) => {
                    let _ = std::fs::remove_file(file);
                }
            }
        }
    }

    /// The docker CLI of the machine's engine, or of the soak's own.
    fn cli(&self, own: bool) -> std::process::Command {
        match (&self.engine, own) {
            (Some(engine), true) => engine.cli(),
            _ => std::process::Command::new("docker"),
        }
    }

    /// Whether the soak's own engine is stopped, or its disk full (then it is not stopped: an
    /// engine started on a full disk may not start).
    fn engine_down(&self) -> bool {
        self.faults
            .iter()
            .any(|(_, f)| matches!(f, Fault::EngineDown))
    }

    fn disk_full(&self) -> bool {
        self.faults.iter().any(|(_, f)| matches!(f, Fault::Full(_)))
    }

    /// Fills the disk of a node on the soak's own engine (which its other nodes share), emptied
    /// `later`. The engine's nodes are remembered: a task that failed there for want of space
    /// failed as it should.
    fn fill_disk(&mut self, later: Instant) -> Option<&'static str> {
        if self.engine_down() || self.disk_full() {
            return None;
        }
        let own = docker::nodes(&mut self.cli(true), &self.server_id, true);
        if own.is_empty() {
            return None;
        }
        let (container, _) = &own[self.rng.below(own.len() as u64) as usize];
        let disk = docker::disk(&mut self.cli(true), container)?;
        let file = engine::fill(&disk)?;
        self.filled.extend(own.into_iter().map(|(_, node)| node));
        self.faults.push((later, Fault::Full(file)));
        Some(
            "a node's disk filled (the second host's, which its nodes share), emptied 2-15 s later",
        )
    }

    /// One of the soak's node containers, on either engine (true: its own), if any.
    fn pick_node(&mut self) -> Option<(bool, String)> {
        let mut all: Vec<(bool, String)> =
            docker::nodes(&mut self.cli(false), &self.server_id, false)
                .into_iter()
                .map(|(c, _)| (false, c))
                .collect();
        if self.engine.is_some() && !self.engine_down() {
            let own = docker::nodes(&mut self.cli(true), &self.server_id, false);
            all.extend(own.into_iter().map(|(c, _)| (true, c)));
        }
        if all.is_empty() {
            return None;
        }
        let i = self.rng.below(all.len() as u64) as usize;
        Some(all.swap_remove(i))
    }

    /// A fault only Docker nodes have (`kind` as [`Soak::inject`] drew it); None if there was
    /// nothing to do it to.
    fn docker_fault(&mut self, kind: u64) -> Option<&'static str> {
        let later = Instant::now() + Duration::from_secs(2 + self.rng.below(14));
        if kind == 8 {
            // One in three, as engine stops: tasks on a full disk fail, and would be most.
            return match self.rng.chance(33) {
                true => self.fill_disk(later),
                false => None,
            };
        }
        if kind == 7 {
            // One in three: the engine's nodes are lost with it, and made again elsewhere.
            if self.engine_down() || self.disk_full() || !self.rng.chance(33) {
                return None;
            }
            self.engine.as_mut()?.stop();
            self.faults
                .push((later + Duration::from_secs(5), Fault::EngineDown));
            return Some("the second Docker engine stopped, started 7-20 s later");
        }
        let (own, container) = self.pick_node()?;
        Some(match kind {
            3 => {
                docker::quietly(self.cli(own).args(["pause", &container]));
                self.faults.push((later, Fault::Paused(own, container)));
                "a node's container frozen (docker pause), thawed 2-15 s later"
            }
            4 => {
                docker::quietly(self.cli(own).args(["kill", &container]));
                "a node's container killed (docker kill)"
            }
            _ => {
                let network = docker::networks(&mut self.cli(own), &container).pop()?;
                docker::quietly(self.cli(own).args([
                    "network",
                    "disconnect",
                    "-f",
                    &network,
                    &container,
                ]));
                self.faults
                    .push((later, Fault::Cut(own, container, network)));
                "a node cut from its network, joined again 2-15 s later"
            }
        })
    }

    /// Looks for ready tasks (active, their dependencies met, their job active and under its
    /// maxParallelTasks) while a node of their pool that takes tasks has the slots they need. A
    /// task seen so at every look for [`IDLE_SLOT_BOUND`] is a violation: the scheduler left
    /// work waiting beside a free slot. A look that fails (the database is down) starts over.
    async fn look_for_idle_slots(&mut self) {
        let look = sqlx::query_as::<_, (i64, String)>(
            "SELECT t.pk, j.id || '/' || t.id FROM tasks t JOIN jobs j ON j.pk = t.job_pk
               JOIN pools p ON p.account = j.account AND lower(p.id) = lower(j.pool_id)
             WHERE t.state = 'active' AND t.unmet_deps = 0 AND j.state = 'active'
               AND (j.max_parallel_tasks = -1 OR (SELECT count(*) FROM tasks r WHERE r.job_pk = j.pk
                    AND r.state IN ('preparing', 'running')) < j.max_parallel_tasks)
               AND EXISTS (SELECT 1 FROM nodes n WHERE n.pool_pk = p.pk AND n.state IN ('idle', 'running')
                    AND NOT n.scheduling_disabled AND p.task_slots_per_node - n.running_task_slots >= t.required_slots)",
        )
        .fetch_all(&self.db);
        let Ok(Ok(now)) = tokio::time::timeout(Duration::from_secs(5), look).await else {
            self.waiting.clear();
            return;
        };
        let at = Instant::now();
        let mut waiting = HashMap::new();
        for (pk, name) in now {
            let (since, mut told) = self.waiting.get(&pk).copied().unwrap_or((at, false));
            if at.duration_since(since) > IDLE_SLOT_BOUND && !told {
                self.seen.add(format!(
                    "{name} was ready for {:.0} s while a node of its pool had a free slot",
                    at.duration_since(since).as_secs_f64()
                ));
                told = true;
            }
            waiting.insert(pk, (since, told));
        }
        self.waiting = waiting;
    }

    /// Checks, in one snapshot of the database, that the nodes in use are billed and the others
    /// not: a node idle, running, offline, unknown or at its start task has one open usage
    /// record; a node being made (`creating`, `starting`) or preempted has none; and no record
    /// is open for a node that is gone. A look that fails (the database is down) is skipped.
    async fn look_at_billing(&mut self) {
        let look = sqlx::query_as::<_, (String, String, i64)>(
            "SELECT n.id, n.state, (SELECT count(*) FROM usage_records u
                                     WHERE u.node_id = n.id AND u.ended_at IS NULL)
               FROM nodes n
             UNION ALL
             SELECT u.node_id, 'gone', 1 FROM usage_records u
              WHERE u.ended_at IS NULL AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = u.node_id)",
        )
        .fetch_all(&self.db);
        let Ok(Ok(nodes)) = tokio::time::timeout(Duration::from_secs(5), look).await else {
            return;
        };
        for (node, state, open) in nodes {
            let billed = match state.as_str() {
                "idle"
                | "running"
                | "offline"
                | "unknown"
                | "waitingforstarttask"
                | "starttaskfailed" => true,
                "creating" | "starting" | "preempted" | "gone" => false,
                _ => continue,
            };
            if open != i64::from(billed) {
                let records = sqlx::query_as::<_, (String,)>(
                    "SELECT started_at::text || ' .. ' || coalesce(ended_at::text, 'open')
                       FROM usage_records WHERE node_id = $1 ORDER BY started_at",
                )
                .bind(&node)
                .fetch_all(&self.db)
                .await
                .unwrap_or_default();
                let records: Vec<String> = records.into_iter().map(|r| r.0).collect();
                self.seen.add(format!(
                    "node {node} is {state} with {open} open billing records: {records:?}"
                ));
            }
        }
    }

    /// Fails on any socket of the servers, their nodes' agents or what those started that is
    /// connected or connecting to an address outside this machine ([`outbound`]), Docker nodes'
    /// in their own network namespaces.
    fn look_outside(&mut self) {
        let mut roots: Vec<i32> = (0..self.servers.len())
            .filter(|&i| self.up[i])
            .map(|i| self.servers[i].pid() as i32)
            .collect();
        roots.extend(agents(&self.roots()).into_iter().map(|(_, pid)| pid));
        if self.rt == Rt::Docker {
            // Each node's and task's container's first process, and with it all it started.
            for own in [false, true] {
                if own && (self.engine.is_none() || self.engine_down()) {
                    continue;
                }
                for container in docker::containers(&mut self.cli(own), &self.server_id) {
                    roots.extend(docker::pid(&mut self.cli(own), &container));
                }
            }
        }
        let (looked, outside) = outbound::outside(&roots);
        self.sockets_seen += looked;
        for (pid, to) in outside {
            self.seen.add(format!(
                "process {pid} connected outside this machine, to {to}"
            ));
        }
    }

    /// Where the servers keep their local nodes.
    fn roots(&self) -> Vec<std::path::PathBuf> {
        self.servers
            .iter()
            .map(|s| s.data_dir.path().to_path_buf())
            .collect()
    }

    fn sample_rss(&mut self) {
        for (i, s) in self.servers.iter().enumerate() {
            if self.up[i] {
                self.max_rss = self.max_rss.max(rss_kib(s.pid()));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_nemesis_breaks_no_rule() {
    soak(Rt::Local).await
}

/// On Docker nodes, over two hosts: the machine's engine and one of the soak's own, which the
/// nemesis stops and starts; it also freezes, kills and cuts off node containers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_nemesis_breaks_no_rule_on_docker() {
    soak(Rt::Docker).await
}

/// Runs the workload and the nemesis on `rt`'s nodes for the seed's time, then checks.
async fn soak(rt: Rt) {
    let seed: u64 = std::env::var("BATCHPOOL_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let seconds: u64 = std::env::var("BATCHPOOL_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(CI_SECONDS);
    let pg = OwnPostgres::start();
    let url = pg.fresh_database().await;
    let engine = (rt == Rt::Docker).then(|| {
        let dir = format!("/tmp/batchpool-engines/soak-{}", std::process::id());
        let engine = engine::OwnEngine::start_on_disk(&dir, 207, DISK_MIB);
        engine.build_test_image(&engine.url());
        engine
    });
    // Azurite, on this machine, holds the tasks' files.
    let mut args = vec![
        "--agent-timeout".to_string(),
        "10".into(),
        "--allow-local-urls".into(),
    ];
    if let Some(engine) = &engine {
        args.extend(["--docker-host".into(), "unix:///var/run/docker.sock".into()]);
        // Long enough that a busy machine's own engine, slow to answer a ping, is not lost.
        args.extend([
            "--docker-host".into(),
            engine.url(),
            "--host-timeout".into(),
            "8".into(),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let first = TestServer::start_with(rt, Some(url.clone()), &args).await;
    let second = TestServer::start_with(rt, Some(url.clone()), &args).await;
    let traces = tempfile::tempdir().unwrap();
    let ran = traces.path().join("ran");
    let sink = match rt {
        Rt::Docker => docker::sink(ran.clone()).await,
        Rt::Local => 0,
    };
    let server_id = first.server_id().await;
    let files = common::blobs::container("rwl").await;
    common::blobs::put_blob(&format!("{}/in/data.txt", files.0), INPUT).await;
    let mut soak = Soak {
        files,
        filled: Default::default(),
        rt,
        engine,
        sink,
        server_id,
        pg,
        servers: vec![first, second],
        up: vec![true, true],
        rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
        ran,
        marks: tempfile::tempdir().unwrap(),
        jobs: Vec::new(),
        faults: Vec::new(),
        injected: BTreeMap::new(),
        answers: BTreeMap::new(),
        max_rss: 0,
        seen: Violations::default(),
        db: sqlx::postgres::PgPoolOptions::new()
            .acquire_timeout(Duration::from_secs(3))
            .connect_lazy(&url)
            .unwrap(),
        waiting: HashMap::new(),
        sockets_seen: 0,
    };
    let mut pool = json!({"id": "soak", "vmSize": "standard_a1", "targetDedicatedNodes": 3,
                      "targetLowPriorityNodes": 1, "taskSlotsPerNode": SLOTS});
    // A pool that grows to 2 nodes while tasks wait for it, and shrinks to none as they end.
    let mut auto = json!({"id": "auto", "vmSize": "standard_a1", "taskSlotsPerNode": SLOTS,
        "enableAutoScale": true, "autoScaleEvaluationInterval": "PT5S",
        "autoScaleFormula": "$TargetDedicatedNodes = min(2, $PendingTasks.GetSample(1)); $NodeDeallocationOption = taskcompletion;"});
    if rt == Rt::Docker {
        // Their nodes run tasks in containers of their own too.
        let vm = json!({
            "imageReference": {"publisher": "microsoft-azure-batch", "offer": "ubuntu-server-container", "sku": "20-04-lts"},
            "nodeAgentSKUId": "batch.node.ubuntu 20.04",
            "containerConfiguration": {"type": "dockerCompatible", "containerImageNames": [common::TEST_IMAGE]},
        });
        pool["virtualMachineConfiguration"] = vm.clone();
        auto["virtualMachineConfiguration"] = vm;
    }
    for body in [pool, auto] {
        let (status, answer) = soak.servers[0].post("/pools", &body).await;
        assert_eq!(status, 201, "{answer}");
    }
    // A schedule that makes a job every 20 s, whose job manager task runs as the others do.
    let manager = soak.task("", 0, false)["commandLine"].clone();
    let schedule = json!({"id": "sched", "schedule": {"recurrenceInterval": "PT20S"},
        "jobSpecification": {"poolInfo": {"poolId": "soak"},
                             "jobManagerTask": {"id": "jm", "commandLine": manager,
                                                "constraints": {"maxTaskRetryCount": 2}}}});
    assert_eq!(
        soak.servers[0].post("/jobschedules", &schedule).await.0,
        201
    );
    soak.servers[0].wait_nodes("soak", 4, "idle").await;

    // In percent of the 250 ms ticks. Local nodes: about 0.4 jobs of 14 tasks a second, below
    // what 4 nodes of 4 slots run between faults, so that the backlog drains, and a fault
    // every 2 s. Docker nodes take longer to come back from their faults (a host's engine
    // restarted, a node made again): half the jobs, and a fault every 3 s.
    let (jobs, faults) = match rt {
        Rt::Local => (10, 12),
        Rt::Docker => (5, 8),
    };
    let started = Instant::now();
    let end = started + Duration::from_secs(seconds);
    let mut tick = 0u64;
    while Instant::now() < end {
        if soak.rng.chance(jobs) {
            soak.submit().await;
        }
        if soak.rng.chance(faults) {
            soak.inject().await;
        }
        soak.heal_due(false).await;
        soak.sample_rss();
        tick += 1;
        if tick.is_multiple_of(8) {
            soak.look_for_idle_slots().await;
            soak.look_at_billing().await;
            soak.look_outside();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    soak.heal_due(true).await;
    soak.schedule_done().await;
    check(&mut soak, seed, started).await;
}

/// Waits for every job to end, then checks every rule.
async fn check(soak: &mut Soak, seed: u64, started: Instant) {
    let tasks = drain(soak).await;
    let text = std::fs::read_to_string(&soak.ran).unwrap_or_default();
    let mut runs: HashMap<(String, String), u64> = HashMap::new();
    let (mut with_files, mut boxed, mut failed_for_space) = (0, 0, 0);
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() == 5 && f[0] == "start" {
            *runs
                .entry((f[2].to_string(), f[3].to_string()))
                .or_default() += 1;
        }
    }
    for (job, t) in &tasks {
        let id = t["id"].as_str().unwrap_or_default();
        let info = &t["executionInfo"];
        let allowed = 1
            + info["requeueCount"].as_u64().unwrap_or(0)
            + info["retryCount"].as_u64().unwrap_or(0);
        let ran = runs
            .get(&(job.clone(), id.to_string()))
            .copied()
            .unwrap_or(0);
        let for_space = info["result"] != "success" && soak.failed_for_space(t);
        if info["result"] != "success" {
            if for_space {
                failed_for_space += 1;
            } else {
                soak.seen.add(format!("{job}/{id} did not succeed: {t}"));
            }
        } else if t["outputFiles"].is_array() {
            let blob = format!("{}/out/{job}/{id}.txt", soak.files.0);
            let wanted = format!("{job}/{id}\n");
            if common::blobs::get_blob(&blob).await.map(|b| b.0) != Some(wanted) {
                soak.seen.add(format!(
                    "{job}/{id} succeeded, its output not in storage: {t}"
                ));
            }
            with_files += 1;
        }
        if t["containerSettings"].is_object() {
            boxed += 1;
        }
        // A task that failed for want of space may have failed before its command ran.
        if (ran == 0 && !for_space) || ran > allowed {
            soak.seen.add(format!(
                "{job}/{id} ran {ran} times, {allowed} allowed: {t}"
            ));
        }
    }
    check_slots(&text, &mut soak.seen);
    check_billing(soak).await;
    for s in &soak.servers {
        if s.log_contains("panicked") {
            soak.seen
                .add(format!("a panic in a server's log:\n{}", s.log_tail()));
        }
    }
    if soak.sockets_seen == 0 {
        soak.seen
            .add("the outbound check saw none of the servers' connections".into());
    }
    if soak.max_rss > MAX_RSS_KIB {
        soak.seen
            .add(format!("a server's RSS reached {} KiB", soak.max_rss));
    }
    println!(
        "soak seed {seed}: {:.0} s, {} jobs, {} tasks ({with_files} with files, {boxed} in containers, {failed_for_space} failed for a full disk), {} runs; faults {:?}; answers {:?}; peak RSS {} MiB; {} sockets looked at; {} violations",
        started.elapsed().as_secs_f64(),
        soak.jobs.len(),
        tasks.len(),
        runs.values().sum::<u64>(),
        soak.injected,
        soak.answers,
        soak.max_rss / 1024,
        soak.sockets_seen,
        soak.seen.0.len()
    );
    if !soak.seen.0.is_empty() {
        if let Ok(dir) = std::env::var("BATCHPOOL_SOAK_KEEP") {
            let _ = std::fs::create_dir_all(&dir);
            for (i, s) in soak.servers.iter().enumerate() {
                let _ = std::fs::copy(s.log_path(), format!("{dir}/server{i}.log"));
            }
            let _ = std::fs::copy(&soak.ran, format!("{dir}/ran"));
            for (job, t) in &tasks {
                eprintln!("TASK {job} {t}");
            }
        }
    }
    assert!(soak.seen.0.is_empty(), "seed {seed}: {:#?}", soak.seen.0);
}

/// Waits for every job's tasks to complete, as long as tasks keep completing: a backlog may
/// take long to drain, but [`STALL`] without a task completing anywhere is a violation, told
/// with the tasks not completed. Returns the completed tasks, with their jobs.
async fn drain(soak: &mut Soak) -> Vec<(String, Value)> {
    let mut tasks: Vec<(String, Value)> = Vec::new();
    let (mut left, mut progress, mut stalled) = (i64::MAX, Instant::now(), false);
    for job in soak.jobs.clone() {
        loop {
            soak.sample_rss();
            soak.look_for_idle_slots().await;
            soak.look_at_billing().await;
            let path = format!(
                "/jobs/{job}/tasks?$select=id,state,executionInfo,nodeInfo,outputFiles,containerSettings"
            );
            let mut not_done = Vec::new();
            if let Some((200, list)) = soak.call(reqwest::Method::GET, &path, None).await {
                let all = list["value"].as_array().cloned().unwrap_or_default();
                not_done = all
                    .iter()
                    .filter(|t| t["state"] != "completed")
                    .cloned()
                    .collect();
                if list.get("odata.nextLink").is_none() && not_done.is_empty() {
                    tasks.extend(all.into_iter().map(|t| (job.clone(), t)));
                    break;
                }
            }
            let count = sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM tasks WHERE state <> 'completed'",
            )
            .fetch_one(&soak.db)
            .await;
            if let Some(count) = count.ok().filter(|c| *c < left) {
                (left, progress) = (count, Instant::now());
            }
            if !stalled && progress.elapsed() > STALL {
                // What the fleet looked like when it stalled, for whoever reads why.
                let nodes = sqlx::query_as::<_, (String, String, String, i32, String)>(
                    "SELECT p.id, n.id, n.state, n.running_task_slots, n.errors::text FROM nodes n
                     JOIN pools p ON p.pk = n.pool_pk ORDER BY p.id, n.id",
                )
                .fetch_all(&soak.db)
                .await;
                soak.seen.add(format!(
                    "the drain stalled; the nodes (pool, node, state, slots taken, errors): {nodes:?}"
                ));
            }
            if stalled || progress.elapsed() > STALL {
                stalled = true;
                // The job's tasks that did not succeed, whole: what holds up those left.
                let path = format!("/jobs/{job}/tasks");
                if let Some((200, list)) = soak.call(reqwest::Method::GET, &path, None).await {
                    let all = list["value"].as_array().cloned().unwrap_or_default();
                    let unwell = all
                        .iter()
                        .filter(|t| t["executionInfo"]["result"] != "success")
                        .map(Value::to_string);
                    eprintln!(
                        "job {job}'s tasks not successful:\n{}",
                        unwell.collect::<Vec<_>>().join("\n")
                    );
                }
                soak.seen.add(format!(
                    "job {job}'s tasks did not all complete, and no task completed for {} s: {not_done:?}",
                    STALL.as_secs()
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    tasks
}

/// No node ran more tasks at once than its slots, by the runs' own start and end lines (a run
/// killed before its end line counts until its last line was written: it is left out).
fn check_slots(text: &str, seen: &mut Violations) {
    let mut open: HashMap<(String, String, String), u128> = HashMap::new();
    // node -> (start, end, job/task)
    let mut spans: HashMap<String, Vec<(u128, u128, String)>> = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let (Some(at), true) = (f.get(4).and_then(|t| t.parse::<u128>().ok()), f.len() == 5) else {
            continue;
        };
        let key = (f[1].to_string(), f[2].to_string(), f[3].to_string());
        match f[0] {
            "start" => {
                open.insert(key, at);
            }
            _ => {
                if let Some(from) = open.remove(&key) {
                    let name = format!("{}/{}", key.1, key.2);
                    spans.entry(key.0).or_default().push((from, at, name));
                }
            }
        }
    }
    for (node, runs) in spans {
        let mut events: Vec<(u128, i32)> =
            runs.iter().flat_map(|r| [(r.0, 1), (r.1, -1)]).collect();
        events.sort();
        let mut running = 0;
        for (at, change) in events {
            running += change;
            if running > SLOTS as i32 {
                let at_once: Vec<&(u128, u128, String)> =
                    runs.iter().filter(|r| r.0 <= at && at < r.1).collect();
                seen.add(format!(
                    "node {node} ran {running} tasks at once: {at_once:?}"
                ));
                break;
            }
        }
    }
}

/// A node's billing intervals never overlap.
async fn check_billing(soak: &mut Soak) {
    let db = soak.servers[0].db().await;
    let overlapping: Vec<(String,)> = sqlx::query_as(
        "SELECT a.node_id FROM usage_records a JOIN usage_records b ON a.node_id = b.node_id AND a.ctid < b.ctid
         WHERE tstzrange(a.started_at, coalesce(a.ended_at, 'infinity')) && tstzrange(b.started_at, coalesce(b.ended_at, 'infinity'))",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    for (node,) in overlapping {
        soak.seen
            .add(format!("node {node}'s billing intervals overlap"));
    }
}
