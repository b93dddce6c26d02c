//! The C1M section, after Nomad's C1M: `tasks` tasks of 1-30 s (`sleep N`, N spread evenly) added
//! through `addtaskcollection` by `clients` clients to a pool of `nodes` simulated nodes x 4 slots,
//! all queued at once. The placement curve (when the first, the median, the 95th and 99th
//! percentile and the last task started, from the start of the adding), starts a second
//! sustained, and each task's submit -> running (its `creationTime` to its `executionInfo
//! .startTime`, read back through the task list): for all of them, and for the first tasks made,
//! one for each slot, with the CPU of the server, its
//! PostgreSQL and the simulator, and the server's peak RSS.

use std::time::Instant;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::fleet::{empty_pool, fleet_sim, resize, serve_args, sim_cpu, start_curve, sustained};
use super::{add_tasks_with, cpu, percentile, sorted, Client, Server};

/// A task as the list gives it back: when it was made, when its last attempt started, and how
/// many times it was retried and requeued.
pub struct Times {
    pub created: DateTime<Utc>,
    pub started: Option<DateTime<Utc>>,
    pub attempts: u64,
}

/// Every task of `job`, a page of 1,000 at a time.
pub async fn task_times(s: &Client, job: &str) -> Vec<Times> {
    let time = |v: &Value| v.as_str().and_then(|t| t.parse::<DateTime<Utc>>().ok());
    let tasks = super::all_tasks(s, job, "creationTime,executionInfo").await;
    tasks
        .iter()
        .map(|t| {
            let info = &t["executionInfo"];
            let count = |k: &str| info[k].as_u64().unwrap_or(0);
            Times {
                created: time(&t["creationTime"]).expect("creationTime"),
                started: time(&info["startTime"]),
                attempts: 1 + count("retryCount") + count("requeueCount"),
            }
        })
        .collect()
}

pub async fn run(nodes: usize, tasks: usize, clients: usize) {
    let (_sim, url) = fleet_sim().await;
    let s = Server::start_with("simulated", &serve_args(&url, nodes)).await;
    empty_pool(&s, "fleet").await;
    let idle = resize(&s, "fleet", nodes).await;
    s.create(
        "/jobs",
        json!({"id": "c1m", "poolInfo": {"poolId": "fleet"}}),
        201,
    )
    .await;
    println!("c1m: {nodes} simulated nodes x 4 slots idle in {idle:.1} s; adding {tasks} tasks of 1-30 s from {clients} clients");
    let (before, sim_before) = (cpu::sample(s.pid(), s.data_dir()), sim_cpu(&url).await);
    let began = Utc::now();
    let started = Instant::now();
    let task = |i: usize| json!({"id": format!("t{i}"), "commandLine": format!("sleep {}", 1 + (i * 7919) % 30)});
    let adding = add_tasks_with(&s, "c1m", tasks, clients, task);
    let (add_secs, curve) = tokio::join!(adding, start_curve(&s, "c1m", tasks));
    let total = started.elapsed().as_secs_f64();
    let busy =
        cpu::sample(s.pid(), s.data_dir()).server_and_postgres() - before.server_and_postgres();
    let sim = sim_cpu(&url).await - sim_before;
    let rss = s.peak_rss_mib();

    let times = task_times(&s, "c1m").await;
    assert_eq!(times.len(), tasks);
    let secs =
        |a: DateTime<Utc>, b: DateTime<Utc>| (b - a).num_microseconds().unwrap() as f64 / 1e6;
    let starts = sorted(
        times
            .iter()
            .map(|t| secs(began, t.started.expect("started")))
            .collect(),
    );
    let waits: Vec<f64> = times
        .iter()
        .map(|t| secs(t.created, t.started.unwrap()))
        .collect();
    // The first tasks made, one for each slot: each found a slot free.
    let mut by_creation: Vec<&Times> = times.iter().collect();
    by_creation.sort_by_key(|t| t.created);
    let free = sorted(
        by_creation[..(nodes * 4).min(tasks)]
            .iter()
            .map(|t| secs(t.created, t.started.unwrap()))
            .collect(),
    );
    let waits = sorted(waits);
    let more = times.iter().filter(|t| t.attempts > 1).count();
    println!(
        "c1m: added in {add_secs:.1} s; all completed in {total:.1} s; starts (s from the first add): first {:.2}, p50 {:.1}, p95 {:.1}, p99 {:.1}, last {:.1}; {:.0} starts/s sustained (10% -> 90%)",
        starts[0],
        percentile(&starts, 0.5),
        percentile(&starts, 0.95),
        percentile(&starts, 0.99),
        starts[starts.len() - 1],
        sustained(&curve, tasks),
    );
    println!(
        "c1m: submit -> running, all {tasks}: p50 {:.1} s, p99 {:.1} s; the first {} made (a slot free for each): p50 {:.3} s, p99 {:.3} s; tasks run more than once: {more}",
        percentile(&waits, 0.5),
        percentile(&waits, 0.99),
        free.len(),
        percentile(&free, 0.5),
        percentile(&free, 0.99),
    );
    println!(
        "c1m: CPU a task: server and PostgreSQL {:.2} ms, simulator {:.2} ms; server peak RSS {rss:.0} MiB",
        busy * 1e3 / tasks as f64,
        sim * 1e3 / tasks as f64
    );
    s.stop().await;
}
