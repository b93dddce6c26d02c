//! What every section of the benchmark shares: the server as its own process, Shared Key
//! signed requests, adding tasks from concurrent clients, and small statistics.

pub mod autoscale;
#[path = "../../tests/common/blobs.rs"]
#[allow(dead_code)]
mod blobs;
pub mod c1m;
pub mod containers;
pub mod cpu;
pub mod data;
pub mod docker;
pub mod eta;
pub mod failover;
pub mod fairness;
pub mod files;
pub mod fleet;
pub mod hosts;
pub mod latency;
pub mod scale;
#[path = "../../tests/common/shared_key.rs"]
mod shared_key;
pub mod slurm;
pub mod throughput;
pub mod versions;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

/// A size from the environment, or its default.
pub fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether a section runs: all do unless BENCH_ONLY names some (comma-separated).
pub fn selected(section: &str) -> bool {
    match std::env::var("BENCH_ONLY") {
        Ok(only) if !only.trim().is_empty() => only.split(',').any(|s| s.trim() == section),
        _ => true,
    }
}

/// A client of the server that signs as one account.
#[derive(Clone)]
pub struct Client {
    pub base: String,
    pub http: reqwest::Client,
    pub account: String,
    pub key: String,
}

pub struct Server {
    child: tokio::process::Child,
    /// The client of the server's own account (`batchpool`); the server derefs to it.
    client: Client,
    /// Dispatch passes that placed tasks: (tasks placed, microseconds), from the server's log.
    passes: Passes,
    dir: tempfile::TempDir,
    /// The runtime and arguments it was started with, to start it again.
    launch: (String, Vec<String>, Option<String>),
}

/// Dispatch passes that placed tasks: (tasks placed, microseconds).
type Passes = Arc<Mutex<Vec<(u64, u64)>>>;

/// Signs a request with Shared Key as the account `batchpool`, as the Azure SDKs do (the tests'
/// own signing).
pub fn signed(key: &str, builder: reqwest::RequestBuilder) -> reqwest::Request {
    signed_as("batchpool", key, builder)
}

/// Signs a request with Shared Key as `account`.
pub fn signed_as(account: &str, key: &str, builder: reqwest::RequestBuilder) -> reqwest::Request {
    let mut req = builder.build().unwrap();
    shared_key::sign(&mut req, account, key);
    req
}

/// `micros=N placed=M` from the server's "dispatch pass" debug line.
fn parse_pass(line: &str) -> Option<(u64, u64)> {
    if !line.contains("dispatch pass") {
        return None;
    }
    let field = |name: &str| -> Option<u64> {
        let rest = &line[line.find(name)? + name.len()..];
        rest.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    Some((field("placed=")?, field("micros=")?))
}

impl Server {
    /// Starts the release binary (or BENCH_SERVER_BIN, to compare two builds in one run) with
    /// its own PostgreSQL on `runtime` ("local" or "docker").
    pub async fn start(runtime: &str) -> Self {
        Self::start_with(runtime, &[]).await
    }

    /// As `start`, with more arguments for `serve`.
    pub async fn start_with(runtime: &str, args: &[String]) -> Self {
        Self::launch(runtime, args, None).await
    }

    /// A second server of the installation: on `first`'s PostgreSQL, with a data directory of
    /// its own and `args` for `serve`.
    pub async fn join(first: &Server, args: &[String]) -> Self {
        let socket = first.data_dir().join("postgres");
        let url = format!(
            "postgres://batchpool@localhost/batchpool?host={}",
            socket.display()
        );
        let mut second = Self::launch(&first.launch.0, args, Some(url)).await;
        second.client.key = first.key.clone();
        second
    }

    async fn launch(runtime: &str, args: &[String], database: Option<String>) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("bpbench")
            .tempdir()
            .unwrap();
        let (child, base, passes) = spawn(runtime, args, dir.path(), database.as_deref()).await;
        let key = std::fs::read_to_string(dir.path().join("batchpool.key")).unwrap_or_default();
        // Our reqwest has TLS without a built-in crypto provider: install the server's (ring).
        batchpool::install_tls();
        let client = Client {
            base,
            http: reqwest::Client::new(),
            account: "batchpool".into(),
            key,
        };
        Server {
            child,
            client,
            passes,
            dir,
            launch: (runtime.to_string(), args.to_vec(), database),
        }
    }

    /// Kills the server (SIGKILL) and starts it again on the same data directory; returns once
    /// it listens. Its nodes' agents come back to it if `--agent-listen` named a fixed port.
    pub async fn restart(&mut self) {
        let _ = self.child.kill().await;
        let (runtime, args, database) = self.launch.clone();
        let (child, base, passes) =
            spawn(&runtime, &args, self.dir.path(), database.as_deref()).await;
        (self.child, self.client.base, self.passes) = (child, base, passes);
    }

    /// The server's data directory.
    pub fn data_dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Starts a server with a pool of `nodes` x `slots` on `runtime`, waits until its nodes are
    /// idle, and adds an empty job on it.
    pub async fn with_pool(
        runtime: &str,
        pool: &str,
        nodes: usize,
        slots: usize,
        job: &str,
    ) -> Self {
        Self::with_pool_and(&[], (runtime, pool, nodes, slots), job).await
    }

    /// As `with_pool`, the server started with more arguments for `serve`.
    pub async fn with_pool_and(
        args: &[String],
        (runtime, pool, nodes, slots): (&str, &str, usize, usize),
        job: &str,
    ) -> Self {
        let s = Self::start_with(runtime, args).await;
        s.create(
            "/pools",
            json!({"id": pool, "vmSize": "standard_d2s_v3", "targetDedicatedNodes": nodes, "taskSlotsPerNode": slots}),
            201,
        )
        .await;
        s.wait_idle_nodes(pool, nodes).await;
        s.create(
            "/jobs",
            json!({"id": job, "poolInfo": {"poolId": pool}}),
            201,
        )
        .await;
        s
    }

    /// Takes the dispatch passes logged since the last call.
    pub fn take_passes(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut *self.passes.lock().unwrap())
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    /// Peak resident set size of the server process, in MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.child.id().unwrap())).unwrap();
        let kb: f64 = status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        kb / 1024.0
    }

    /// Stops the server and then its embedded PostgreSQL, which a server that found it running
    /// (after a SIGKILL) leaves running.
    pub async fn stop_with_postgres(self) {
        let pid_file = self.data_dir().join("postgres/postmaster.pid");
        self.stop().await;
        let pid = std::fs::read_to_string(pid_file).unwrap_or_default();
        if let Some(pid) = pid
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<i32>().ok())
        {
            // SAFETY: kill has no memory preconditions. SIGINT: PostgreSQL's fast shutdown.
            unsafe { libc::kill(pid, libc::SIGINT) };
            let gone = async {
                while std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(30), gone).await;
        }
    }

    /// Kills the server (SIGKILL) and waits for it to end; its PostgreSQL runs on.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            let _ = tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await;
        }
    }
}

impl Client {
    /// The same server, signing as `account` with `key`.
    pub fn as_account(&self, account: &str, key: &str) -> Client {
        Client {
            account: account.into(),
            key: key.into(),
            ..self.clone()
        }
    }

    /// A request signed as this client's account.
    pub fn signed(&self, builder: reqwest::RequestBuilder) -> reqwest::Request {
        signed_as(&self.account, &self.key, builder)
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let req = self.signed(self.http.post(format!("{}{path}", self.base)).json(body));
        let resp = self.http.execute(req).await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// POSTs and insists on `status`.
    pub async fn create(&self, path: &str, body: Value, status: u16) {
        let (got, resp) = self.post(path, &body).await;
        assert_eq!(got, status, "POST {path}: {resp}");
    }

    pub async fn get(&self, path: &str) -> Value {
        let req = self.signed(self.http.get(format!("{}{path}", self.base)));
        self.http.execute(req).await.unwrap().json().await.unwrap()
    }

    /// Waits until the pool has `count` nodes, all idle; returns the seconds it took.
    pub async fn wait_idle_nodes(&self, pool: &str, count: usize) -> f64 {
        let started = Instant::now();
        loop {
            let p = self.get(&format!("/pools/{pool}/nodes")).await;
            let nodes = p["value"].as_array().unwrap();
            if nodes.len() == count && nodes.iter().all(|n| n["state"] == "idle") {
                return started.elapsed().as_secs_f64();
            }
            if let Some(n) = nodes.iter().find(|n| n["state"] == "unusable") {
                panic!("a node of {pool} is unusable: {n}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn wait_steady(&self, pool: &str) {
        while self.get(&format!("/pools/{pool}")).await["allocationState"] != "steady" {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn wait_completed(&self, job: &str, count: usize) {
        loop {
            let c = self.get(&format!("/jobs/{job}/taskcounts")).await;
            if c["taskCounts"]["completed"].as_u64() == Some(count as u64) {
                assert_eq!(
                    c["taskCounts"]["succeeded"].as_u64(),
                    Some(count as u64),
                    "{c}"
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl std::ops::Deref for Server {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

/// Starts the release binary (or BENCH_SERVER_BIN) as `serve` on `runtime` with `args`, its data
/// in `dir`; the process, its API's base URL once it listens, and the dispatch passes its log
/// tells of.
async fn spawn(
    runtime: &str,
    args: &[String],
    dir: &std::path::Path,
    database: Option<&str>,
) -> (tokio::process::Child, String, Passes) {
    let bin = std::env::var("BENCH_SERVER_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_batchpool").to_string());
    let mut command = tokio::process::Command::new(bin);
    command.args(["serve", "--listen", "127.0.0.1:0", "--runtime", runtime]);
    if !args.iter().any(|a| a == "--agent-listen") {
        command.args(["--agent-listen", "0.0.0.0:0"]);
    }
    match database {
        Some(url) => command.env("DATABASE_URL", url),
        None => command.env_remove("DATABASE_URL"),
    };
    let mut child = command
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        // The data section's storage (Azurite) listens on this host.
        .env("BATCHPOOL_ALLOW_LOCAL_URLS", "true")
        .env(
            "RUST_LOG",
            std::env::var("BENCH_RUST_LOG")
                .unwrap_or("warn,batchpool::scheduler::dispatch=debug".into()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let passes = Arc::new(Mutex::new(Vec::new()));
    let mut errors = BufReader::new(child.stderr.take().unwrap()).lines();
    let sink = passes.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = errors.next_line().await {
            match parse_pass(&line) {
                Some(pass) => sink.lock().unwrap().push(pass),
                None => eprintln!("{line}"),
            }
        }
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let base = loop {
        let line = lines.next_line().await.unwrap().expect("server exited");
        if let Some(addr) = line.strip_prefix("batchpool listening on ") {
            break addr.to_string();
        }
    };
    (child, base, passes)
}

/// Adds `count` tasks to `job` from `clients` concurrent clients, 100 per addtaskcollection;
/// returns the seconds it took.
pub async fn add_tasks(s: &Client, job: &str, count: usize, clients: usize, command: &str) -> f64 {
    let command = command.to_string();
    add_tasks_with(
        s,
        job,
        count,
        clients,
        move |i| json!({"id": format!("t{i}"), "commandLine": command}),
    )
    .await
}

/// Adds `count` tasks, the i-th made by `task(i)`, 100 per request from `clients` clients;
/// returns the seconds it took.
pub async fn add_tasks_with(
    s: &Client,
    job: &str,
    count: usize,
    clients: usize,
    task: impl Fn(usize) -> Value + Send + Sync + 'static,
) -> f64 {
    let task = Arc::new(task);
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..clients {
        let (next, client, job, task) = (next.clone(), s.clone(), job.to_string(), task.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let chunk = next.fetch_add(100, std::sync::atomic::Ordering::Relaxed);
                if chunk >= count {
                    break;
                }
                let tasks: Vec<Value> =
                    (chunk..(chunk + 100).min(count)).map(|i| task(i)).collect();
                let req = client.signed(
                    client
                        .http
                        .post(format!("{}/jobs/{job}/addtaskcollection", client.base))
                        .json(&json!({"value": tasks})),
                );
                let resp = client.http.execute(req).await.unwrap();
                assert_eq!(resp.status(), 200);
                let body: Value = resp.json().await.unwrap();
                assert!(
                    body["value"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|r| r["status"] == "success"),
                    "{body}"
                );
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    started.elapsed().as_secs_f64()
}

/// Runs a shell command line (a baseline) and returns the seconds it took.
pub fn timed_shell(command: &str) -> f64 {
    let started = Instant::now();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .status()
        .unwrap();
    assert!(status.success(), "{command}");
    started.elapsed().as_secs_f64()
}

/// The `p` quantile (0..=1) of sorted figures.
/// Every task of the job with the properties `select`, through every page.
pub async fn all_tasks(c: &Client, job: &str, select: &str) -> Vec<Value> {
    let mut next = Some(format!(
        "{}/jobs/{job}/tasks?$select={select}&maxresults=1000",
        c.base
    ));
    let mut out = Vec::new();
    while let Some(url) = next.take() {
        let req = c.signed(c.http.get(url));
        let page: Value = c.http.execute(req).await.unwrap().json().await.unwrap();
        out.extend(
            page["value"]
                .as_array()
                .expect("a page of tasks")
                .iter()
                .cloned(),
        );
        next = page["odata.nextLink"].as_str().map(String::from);
    }
    out
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

/// p50 and p99 of the logged dispatch passes that placed tasks, in milliseconds, and their count.
pub fn pass_summary(passes: &[(u64, u64)]) -> String {
    let ms = sorted(
        passes
            .iter()
            .filter(|(placed, _)| *placed > 0)
            .map(|(_, micros)| *micros as f64 / 1000.0)
            .collect(),
    );
    let placed: u64 = passes.iter().map(|(p, _)| p).sum();
    format!(
        "{} passes placed {placed} tasks; pass time p50 {:.2} ms, p99 {:.2} ms",
        ms.len(),
        percentile(&ms, 0.5),
        percentile(&ms, 0.99)
    )
}
