//! `cargo bench --bench scheduler`: the server as its own process (release build, its own
//! PostgreSQL in a temporary data directory, the local runtime), measured over HTTP.
//!
//! 1. Throughput: BENCH_TASKS (default 100,000) no-op tasks added to one job through
//!    addtaskcollection (100 per request, BENCH_CLIENTS concurrent clients), run on a local pool
//!    of 2 nodes x 16 slots; submit rate and end-to-end tasks/s, next to a baseline of the same
//!    processes started by `xargs -P 32` in the same run.
//! 2. Scale: BENCH_QUEUED (default 1,000,000) tasks queued in one job on a pool with no nodes;
//!    time to add, the server's peak RSS (VmHWM), and p50/p99 of a 1,000-task list page.
//!
//! Sizes are environment variables so a quick run (BENCH_TASKS=2000 BENCH_QUEUED=20000) checks
//! that it works.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Server {
    child: tokio::process::Child,
    base: String,
    http: reqwest::Client,
    key: String,
    _dir: tempfile::TempDir,
}

/// Signs a request with Shared Key, as the Azure SDKs do.
fn signed(http: &reqwest::Client, key: &str, builder: reqwest::RequestBuilder) -> reqwest::Request {
    let _ = http;
    let mut req = builder.build().unwrap();
    let date = chrono::Utc::now()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    req.headers_mut().insert("ocp-date", date.parse().unwrap());
    if let Some(len) = req.body().and_then(|b| b.as_bytes()).map(<[u8]>::len) {
        req.headers_mut()
            .insert("content-length", len.to_string().parse().unwrap());
    }
    let uri: axum_http::Uri = req.url()[url::Position::BeforePath..].parse().unwrap();
    let sts = batchpool::api::auth::string_to_sign(req.method(), &uri, req.headers(), "batchpool");
    let sig = batchpool::api::auth::signature(key, &sts).unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("SharedKey batchpool:{sig}").parse().unwrap(),
    );
    req
}

impl Server {
    async fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("bpbench")
            .tempdir()
            .unwrap();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_batchpool"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--runtime",
                "local",
                "--data-dir",
            ])
            .arg(dir.path())
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let base = loop {
            let line = lines.next_line().await.unwrap().expect("server exited");
            if let Some(addr) = line.strip_prefix("batchpool listening on ") {
                break addr.to_string();
            }
        };
        let key = std::fs::read_to_string(dir.path().join("batchpool.key")).unwrap();
        Server {
            child,
            base,
            http: reqwest::Client::new(),
            key,
            _dir: dir,
        }
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let req = signed(
            &self.http,
            &self.key,
            self.http.post(format!("{}{path}", self.base)).json(body),
        );
        let resp = self.http.execute(req).await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> Value {
        let req = signed(
            &self.http,
            &self.key,
            self.http.get(format!("{}{path}", self.base)),
        );
        self.http.execute(req).await.unwrap().json().await.unwrap()
    }

    /// Peak resident set size of the server process, in MiB.
    fn peak_rss_mib(&self) -> f64 {
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

    async fn stop(mut self) {
        unsafe { libc::kill(self.child.id().unwrap() as i32, libc::SIGTERM) };
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
    }
}

/// Adds `count` tasks to `job` from `clients` concurrent clients; returns the seconds it took.
async fn add_tasks(s: &Server, job: &str, count: usize, clients: usize, command: &str) -> f64 {
    let started = Instant::now();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..clients {
        let (next, http, base, job, command, key) = (
            next.clone(),
            s.http.clone(),
            s.base.clone(),
            job.to_string(),
            command.to_string(),
            s.key.clone(),
        );
        workers.push(tokio::spawn(async move {
            loop {
                let chunk = next.fetch_add(100, std::sync::atomic::Ordering::Relaxed);
                if chunk >= count {
                    break;
                }
                let tasks: Vec<Value> = (chunk..(chunk + 100).min(count))
                    .map(|i| json!({"id": format!("t{i}"), "commandLine": command}))
                    .collect();
                let req = signed(
                    &http,
                    &key,
                    http.post(format!("{base}/jobs/{job}/addtaskcollection"))
                        .json(&json!({"value": tasks})),
                );
                let resp = http.execute(req).await.unwrap();
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

async fn wait_completed(s: &Server, job: &str, count: usize) {
    loop {
        let c = s.get(&format!("/jobs/{job}/taskcounts")).await;
        if c["taskCounts"]["completed"].as_u64() == Some(count as u64) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The physical floor: the same number of `/bin/sh -c true` processes, 32 at a time.
fn xargs_baseline(count: usize) -> f64 {
    let started = Instant::now();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "seq {count} | xargs -P 32 -n 1 sh -c 'true' >/dev/null"
        ))
        .status()
        .unwrap();
    assert!(status.success());
    started.elapsed().as_secs_f64()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let tasks = env("BENCH_TASKS", 100_000);
    let queued = env("BENCH_QUEUED", 1_000_000);
    let clients = env("BENCH_CLIENTS", 4);
    println!(
        "batchpool scheduler benchmark: {} cores, {tasks} tasks, {queued} queued",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );

    let s = Server::start().await;
    let (status, body) = s.post("/pools", &json!({"id": "bench", "vmSize": "standard_d2s_v3", "targetDedicatedNodes": 2, "taskSlotsPerNode": 16})).await;
    assert_eq!(status, 201, "{body}");
    loop {
        let p = s.get("/pools/bench/nodes").await;
        let nodes = p["value"].as_array().unwrap();
        if nodes.len() == 2 && nodes.iter().all(|n| n["state"] == "idle") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        s.post(
            "/jobs",
            &json!({"id": "run", "poolInfo": {"poolId": "bench"}})
        )
        .await
        .0,
        201
    );
    let started = Instant::now();
    let submit = add_tasks(&s, "run", tasks, clients, "true").await;
    wait_completed(&s, "run", tasks).await;
    let total = started.elapsed().as_secs_f64();
    let baseline = xargs_baseline(tasks);
    println!(
        "throughput: submit {:.0} tasks/s ({tasks} in {submit:.1} s, {clients} clients)",
        tasks as f64 / submit
    );
    println!(
        "throughput: end to end {:.0} tasks/s ({tasks} in {total:.1} s); xargs -P 32 baseline {:.0} tasks/s ({baseline:.1} s); ratio {:.2}",
        tasks as f64 / total,
        tasks as f64 / baseline,
        baseline / total
    );

    // Scale: a million queued tasks live in PostgreSQL, not in the server's memory.
    assert_eq!(
        s.post(
            "/pools",
            &json!({"id": "empty", "vmSize": "standard_a1", "targetDedicatedNodes": 0})
        )
        .await
        .0,
        201
    );
    assert_eq!(
        s.post(
            "/jobs",
            &json!({"id": "queue", "poolInfo": {"poolId": "empty"}})
        )
        .await
        .0,
        201
    );
    let add = add_tasks(&s, "queue", queued, clients, "true").await;
    let counts = s.get("/jobs/queue/taskcounts").await;
    assert_eq!(counts["taskCounts"]["active"].as_u64(), Some(queued as u64));
    let mut page_ms = Vec::new();
    for i in 0..50 {
        let after = (i * (queued / 50)) as i64;
        let started = Instant::now();
        let url = format!(
            "{}/jobs/queue/tasks?maxresults=1000&$skiptoken={after}",
            s.base
        );
        let resp = s
            .http
            .execute(signed(&s.http, &s.key, s.http.get(url)))
            .await
            .unwrap();
        let body: Value = resp.json().await.unwrap();
        page_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        assert!(!body["value"].as_array().unwrap().is_empty());
    }
    page_ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "scale: added {queued} tasks in {add:.1} s ({:.0} tasks/s)",
        queued as f64 / add
    );
    println!(
        "scale: 1000-task list page p50 {:.1} ms, p99 {:.1} ms",
        percentile(&page_ms, 0.5),
        percentile(&page_ms, 0.99)
    );
    println!("scale: server peak RSS {:.1} MiB", s.peak_rss_mib());
    s.stop().await;
}
