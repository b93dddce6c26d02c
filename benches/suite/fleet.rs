//! The fleet section: the server with a simulated fleet (`batchpool fleet-sim` beside it, `serve
//! --runtime simulated`), so that the server is measured alone: a pool resized 0 -> `step` ->
//! `nodes` until all are idle; what the idle fleet costs (the server and its PostgreSQL, the
//! simulator apart); `tasks` tasks of `sleep 1` on 4 slots a node: starts a second, sustained;
//! the server's peak RSS and PostgreSQL's size on disk; a restart (SIGKILL) with every agent
//! connected: how long until it listens, and until a task on each slot has run.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{add_tasks, cpu, Server};

/// A port no one listens on now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A fleet simulator on a free port, ended with the section.
async fn fleet_sim() -> (tokio::process::Child, String) {
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

/// The simulator's own CPU time so far, in seconds.
async fn sim_cpu(url: &str) -> f64 {
    let stats: Value = reqwest::get(format!("{url}/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    stats["cpuMs"].as_f64().unwrap_or(0.0) / 1e3
}

/// The pool's dedicated node counts.
async fn counts(s: &Server, pool: &str) -> Value {
    let all = s.get("/nodecounts").await;
    all["value"]
        .as_array()
        .and_then(|v| v.iter().find(|c| c["poolId"] == pool))
        .map(|c| c["dedicated"].clone())
        .unwrap_or(Value::Null)
}

/// Resizes the pool to `nodes` and waits until all are idle; the seconds it took.
async fn resize(s: &Server, pool: &str, nodes: usize) -> f64 {
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

pub async fn run(step: usize, nodes: usize, tasks: usize, clients: usize) {
    let (_sim, url) = fleet_sim().await;
    // A fixed port for the agents: they come back to it after the restart.
    let agents = format!("127.0.0.1:{}", free_port());
    let args: Vec<String> = [
        "--fleet-sim",
        &url,
        "--max-nodes-per-pool",
        &nodes.to_string(),
        "--agent-listen",
        &agents,
    ]
    .map(String::from)
    .to_vec();
    let mut s = Server::start_with("simulated", &args).await;
    let pool = json!({"id": "fleet", "vmSize": "standard_d4s_v3", "targetDedicatedNodes": 0, "taskSlotsPerNode": 4});
    s.create("/pools", pool, 201).await;
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
    let (add_secs, curve) = tokio::join!(adding, start_curve(&s, tasks));
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

    let killed = Instant::now();
    s.restart().await;
    let listening = killed.elapsed().as_secs_f64();
    s.create(
        "/jobs",
        json!({"id": "after", "poolInfo": {"poolId": "fleet"}}),
        201,
    )
    .await;
    let slots = nodes * 4;
    add_tasks(&s, "after", slots, clients, "true").await;
    s.wait_completed("after", slots).await;
    println!(
        "fleet: a restart (SIGKILL) with {nodes} agents connected: listening again in {listening:.1} s; a task on each of the {slots} slots (every node adopted) done {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    s.stop().await;
}

/// Samples how many tasks have started (running or completed) every 200 ms until all have
/// completed: (seconds since the start, started).
async fn start_curve(s: &Server, tasks: usize) -> Vec<(f64, u64)> {
    let started = Instant::now();
    let mut curve = Vec::new();
    loop {
        let c = s.get("/jobs/j/taskcounts").await;
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
fn sustained(curve: &[(f64, u64)], tasks: usize) -> f64 {
    let at = |share: f64| {
        let want = (tasks as f64 * share) as u64;
        curve.iter().find(|(_, n)| *n >= want).copied()
    };
    match (at(0.1), at(0.9)) {
        (Some((t1, n1)), Some((t2, n2))) if t2 > t1 => (n2 - n1) as f64 / (t2 - t1),
        _ => f64::NAN,
    }
}
