//! The fleet section: the server with a simulated fleet (`batchpool fleet-sim` beside it, `serve
//! --runtime simulated`), so that the server is measured alone: a pool resized 0 -> `step` ->
//! `nodes` until all are idle; what the idle fleet costs (the server and its PostgreSQL, the
//! simulator apart); `tasks` tasks of `sleep 1` on 4 slots a node: starts a second, sustained;
//! the server's peak RSS and PostgreSQL's size on disk; a restart (SIGKILL) with every agent
//! connected: how long until it listens, and until a task on each slot has run.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{add_tasks, cpu, Client, Server};

/// A port no one listens on now.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A fleet simulator on a free port, ended with the section.
pub async fn fleet_sim() -> (tokio::process::Child, String) {
    batchpool::install_tls();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let bin = std::env::var("BENCH_SERVER_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_batchpool").to_string());
    let child = tokio::process::Command::new(bin)
        .args(["fleet-sim", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(std::process::Stdio::null())
        // Its agents' complaints once the server has stopped are not the section's.
        .stderr(if std::env::var_os("BENCH_SIM_LOG").is_some() {
            std::process::Stdio::inherit()
        } else {
            std::process::Stdio::null()
        })
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    while reqwest::get(format!("{url}/health")).await.is_err() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (child, url)
}

/// What the simulator reports of itself (`GET /stats`).
pub async fn sim_stats(url: &str) -> Value {
    reqwest::get(format!("{url}/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The simulator's own CPU time so far, in seconds.
pub async fn sim_cpu(url: &str) -> f64 {
    sim_stats(url).await["cpuMs"].as_f64().unwrap_or(0.0) / 1e3
}

/// The pool's dedicated node counts.
async fn counts(s: &Client, pool: &str) -> Value {
    let all = s.get("/nodecounts").await;
    all["value"]
        .as_array()
        .and_then(|v| v.iter().find(|c| c["poolId"] == pool))
        .map(|c| c["dedicated"].clone())
        .unwrap_or(Value::Null)
}

/// Resizes the pool to `nodes` and waits until all are idle; the seconds it took.
pub async fn resize(s: &Client, pool: &str, nodes: usize) -> f64 {
    let started = Instant::now();
    s.create(
        &format!("/pools/{pool}/resize"),
        json!({"targetDedicatedNodes": nodes}),
        202,
    )
    .await;
    loop {
        let c = counts(s, pool).await;
        if c["idle"] == nodes && c["total"] == nodes {
            return started.elapsed().as_secs_f64();
        }
        assert_eq!(c["unusable"], 0, "unusable nodes: {c}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Bytes below `dir`.
fn size_of(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => size_of(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The metrics token the fleet sections start their servers with.
pub const METRICS: &str = "bench-metrics";

/// `serve`'s arguments for a server of the simulator at `url` with pools of up to `nodes` nodes;
/// its agents' listener on a fixed port (they come back to it after a restart), its metrics on.
pub fn serve_args(url: &str, nodes: usize) -> Vec<String> {
    let agents = format!("127.0.0.1:{}", free_port());
    [
        "--fleet-sim",
        url,
        "--max-nodes-per-pool",
        &nodes.to_string(),
        "--agent-listen",
        &agents,
        "--metrics-token",
        METRICS,
    ]
    .map(String::from)
    .to_vec()
}

/// A gauge of the server's metrics (`batchpool_leader`, `batchpool_agents_connected`); None
/// while it does not answer.
pub async fn gauge(s: &Client, name: &str) -> Option<f64> {
    let resp = s
        .http
        .get(format!("{}/metrics", s.base))
        .bearer_auth(METRICS)
        .send()
        .await
        .ok()?;
    let text = resp.text().await.ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Waits until `name` reads at least `value` on `s`; the seconds since `since`.
pub async fn wait_gauge(s: &Client, name: &str, value: f64, since: Instant) -> f64 {
    while gauge(s, name).await.is_none_or(|v| v < value) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    since.elapsed().as_secs_f64()
}

/// A pool `id` of 4 slots a node, resized to no nodes.
pub async fn empty_pool(s: &Client, id: &str) {
    let pool = json!({"id": id, "vmSize": "standard_d4s_v3", "targetDedicatedNodes": 0, "taskSlotsPerNode": 4});
    s.create("/pools", pool, 201).await;
}

pub async fn run(step: usize, nodes: usize, tasks: usize, clients: usize) {
    let (_sim, url) = fleet_sim().await;
    let mut s = Server::start_with("simulated", &serve_args(&url, nodes)).await;
    empty_pool(&s, "fleet").await;
    let first = resize(&s, "fleet", step).await;
    let all = resize(&s, "fleet", nodes).await;
    println!(
        "fleet: resize 0 -> {step} simulated nodes, all idle in {first:.1} s; {step} -> {nodes} in {all:.1} s"
    );

    // Past the last hellos, then a minute of nothing to do.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let window = Duration::from_secs(60);
    let (before, sim_before) = (cpu::sample(s.pid(), s.data_dir()), sim_cpu(&url).await);
    tokio::time::sleep(window).await;
    let server_pg =
        cpu::sample(s.pid(), s.data_dir()).server_and_postgres() - before.server_and_postgres();
    let sim = sim_cpu(&url).await - sim_before;
    println!(
        "fleet: {nodes} idle nodes cost {:.1}% of a core (server and its PostgreSQL; their agents' polls and load reports), the simulator {:.1}%",
        server_pg / window.as_secs_f64() * 100.0,
        sim / window.as_secs_f64() * 100.0
    );

    s.create(
        "/jobs",
        json!({"id": "j", "poolInfo": {"poolId": "fleet"}}),
        201,
    )
    .await;
    let (before, sim_before) = (cpu::sample(s.pid(), s.data_dir()), sim_cpu(&url).await);
    let started = Instant::now();
    let adding = add_tasks(&s, "j", tasks, clients, "sleep 1");
    let (add_secs, curve) = tokio::join!(adding, start_curve(&s, "j", tasks));
    let total = started.elapsed().as_secs_f64();
    let server_pg =
        cpu::sample(s.pid(), s.data_dir()).server_and_postgres() - before.server_and_postgres();
    let sim = sim_cpu(&url).await - sim_before;
    let rate = sustained(&curve, tasks);
    println!(
        "fleet: {tasks} tasks of `sleep 1` on {nodes} nodes x 4 slots: added in {add_secs:.1} s, all completed in {total:.1} s; {rate:.0} starts/s sustained (10% -> 90% of the tasks started); CPU per task: server and PostgreSQL {:.2} ms, simulator {:.2} ms",
        server_pg * 1e3 / tasks as f64,
        sim * 1e3 / tasks as f64
    );
    println!(
        "fleet: server peak RSS {:.0} MiB; PostgreSQL {:.0} MiB on disk",
        s.peak_rss_mib(),
        size_of(&s.data_dir().join("postgres")) as f64 / (1 << 20) as f64
    );

    restart(&mut s, nodes, clients).await;
    s.stop_with_postgres().await;
}

/// Kills the server (SIGKILL) with every agent connected and starts it again: when it listens,
/// when a task runs again, when every agent has come back, and a round of tasks on every slot
/// beside the same round before the kill.
async fn restart(s: &mut Server, nodes: usize, clients: usize) {
    let slots = nodes * 4;
    let warm = round(s, "warm", slots, clients).await;
    let killed = Instant::now();
    s.restart().await;
    let listening = killed.elapsed().as_secs_f64();
    s.create(
        "/jobs",
        json!({"id": "first", "poolInfo": {"poolId": "fleet"}}),
        201,
    )
    .await;
    add_tasks(s, "first", 1, 1, "true").await;
    s.wait_completed("first", 1).await;
    let placing = killed.elapsed().as_secs_f64();
    let adopted = wait_gauge(s, "batchpool_agents_connected", nodes as f64, killed).await;
    let after = round(s, "after", slots, clients).await;
    println!(
        "fleet: a restart (SIGKILL) with {nodes} agents connected: listening again in {listening:.1} s; a task run {placing:.1} s after the kill; every agent back {adopted:.1} s after it; a task on each of the {slots} slots in {after:.1} s (before the kill: {warm:.1} s)"
    );
}

/// A job of `tasks` tasks of `true` on the pool `fleet`: the seconds until all completed.
async fn round(s: &Client, job: &str, tasks: usize, clients: usize) -> f64 {
    let started = Instant::now();
    s.create(
        "/jobs",
        json!({"id": job, "poolInfo": {"poolId": "fleet"}}),
        201,
    )
    .await;
    add_tasks(s, job, tasks, clients, "true").await;
    s.wait_completed(job, tasks).await;
    started.elapsed().as_secs_f64()
}

/// Samples how many tasks of `job` have started (running or completed) every 200 ms until all
/// have completed: (seconds since the start, started).
pub async fn start_curve(s: &Client, job: &str, tasks: usize) -> Vec<(f64, u64)> {
    let started = Instant::now();
    let mut curve = Vec::new();
    loop {
        let c = s.get(&format!("/jobs/{job}/taskcounts")).await;
        let count = |k: &str| c["taskCounts"][k].as_u64().unwrap_or(0);
        curve.push((
            started.elapsed().as_secs_f64(),
            count("running") + count("completed"),
        ));
        if count("completed") == tasks as u64 {
            assert_eq!(count("succeeded"), tasks as u64, "{c}");
            return curve;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Starts a second between the samples where 10% and 90% of the tasks had started.
pub fn sustained(curve: &[(f64, u64)], tasks: usize) -> f64 {
    let at = |share: f64| {
        let want = (tasks as f64 * share) as u64;
        curve.iter().find(|(_, n)| *n >= want).copied()
    };
    match (at(0.1), at(0.9)) {
        (Some((t1, n1)), Some((t2, n2))) if t2 > t1 => (n2 - n1) as f64 / (t2 - t1),
        _ => f64::NAN,
    }
}
