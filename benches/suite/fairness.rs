//! The fairness section: `accounts` accounts, each with a pool of `nodes` simulated nodes x 4
//! slots and 10 jobs of mixed priority (1000 down to -1000, three of them 0), each job `tasks`
//! tasks of `sleep 5`, all queued while the pools have no nodes; then every pool is resized at
//! once. What a user checks: when each job's first task started, by priority; that no job
//! started a round of slots before a job of higher priority of its account had placed all its
//! tasks; and that no
//! account waited on another (the spread of their first and of their last starts).

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures_util::future::join_all;
use serde_json::json;

use super::c1m::task_times;
use super::fleet::{empty_pool, fleet_sim, serve_args};
use super::{add_tasks, percentile, sorted, Client, Server};

/// The jobs' priorities, in each account.
const PRIORITIES: [i64; 10] = [1000, 500, 500, 100, 0, 0, 0, -100, -500, -1000];

/// Makes the account `name` with the CLI, on the running server's PostgreSQL; its primary key.
async fn account(s: &Server, name: &str) -> String {
    let bin = std::env::var("BENCH_SERVER_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_batchpool").to_string());
    let out = tokio::process::Command::new(bin)
        .args(["account", "create", name, "--data-dir"])
        .arg(s.data_dir())
        .env_remove("DATABASE_URL")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("primary key:"))
        .expect("the primary key")
        .trim()
        .to_string()
}

/// One job as it ran: its priority, its first and last start, in seconds from the resize.
struct Ran {
    priority: i64,
    first: f64,
    last: f64,
}

/// Queues the account's jobs on its empty pool.
async fn queue(c: &Client, tasks: usize) {
    empty_pool(c, "p").await;
    for (i, priority) in PRIORITIES.iter().enumerate() {
        let job = json!({"id": format!("j{i}"), "priority": priority, "poolInfo": {"poolId": "p"}});
        c.create("/jobs", job, 201).await;
        add_tasks(c, &format!("j{i}"), tasks, 2, "sleep 5").await;
    }
}

/// Waits for the account's jobs to complete; how each ran, from `resized`.
async fn ran(c: &Client, tasks: usize, resized: DateTime<Utc>) -> Vec<Ran> {
    let secs = |t: DateTime<Utc>| (t - resized).num_microseconds().unwrap() as f64 / 1e6;
    let mut out = Vec::new();
    for (i, priority) in PRIORITIES.iter().enumerate() {
        c.wait_completed(&format!("j{i}"), tasks).await;
        let starts = sorted(
            task_times(c, &format!("j{i}"))
                .await
                .iter()
                .map(|t| secs(t.started.expect("started")))
                .collect(),
        );
        out.push(Ran {
            priority: *priority,
            first: starts[0],
            last: starts[starts.len() - 1],
        });
    }
    out
}

/// Pairs of jobs of one account where the lower priority started more than a second before the
/// higher one's last start: in an earlier round of slots, not the same dispatch pass.
fn inversions(jobs: &[Ran]) -> usize {
    jobs.iter()
        .flat_map(|hi| jobs.iter().map(move |lo| (hi, lo)))
        .filter(|(hi, lo)| hi.priority > lo.priority && lo.first < hi.last - 1.0)
        .count()
}

pub async fn run(accounts: usize, nodes: usize, tasks: usize) {
    let (_sim, url) = fleet_sim().await;
    let s = Server::start_with("simulated", &serve_args(&url, nodes)).await;
    let mut clients = Vec::new();
    for a in 0..accounts {
        let name = format!("team{a}");
        let key = account(&s, &name).await;
        clients.push(s.as_account(&name, &key));
    }
    let queued = Instant::now();
    join_all(clients.iter().map(|c| queue(c, tasks))).await;
    println!(
        "fairness: {accounts} accounts x 10 jobs x {tasks} tasks of `sleep 5` queued in {:.1} s; resizing every pool to {nodes} nodes x 4 slots",
        queued.elapsed().as_secs_f64()
    );
    let resized = Utc::now();
    let resize = json!({"targetDedicatedNodes": nodes});
    join_all(
        clients
            .iter()
            .map(|c| c.create("/pools/p/resize", resize.clone(), 202)),
    )
    .await;
    let runs = join_all(clients.iter().map(|c| ran(c, tasks, resized))).await;

    for priority in [1000, 500, 100, 0, -100, -500, -1000] {
        let firsts = sorted(
            runs.iter()
                .flatten()
                .filter(|r| r.priority == priority)
                .map(|r| r.first)
                .collect(),
        );
        println!(
            "fairness: priority {priority:>5}: first start {:.1} s after the resize (median of {} jobs; {:.1} to {:.1})",
            percentile(&firsts, 0.5),
            firsts.len(),
            firsts[0],
            firsts[firsts.len() - 1]
        );
    }
    let top = sorted(runs.iter().map(|r| r[0].first).collect());
    let lasts = sorted(
        runs.iter()
            .map(|r| r.iter().map(|j| j.last).fold(0.0, f64::max))
            .collect(),
    );
    let inverted: usize = runs.iter().map(|r| inversions(r)).sum();
    println!(
        "fairness: jobs started a round before a job of higher priority had placed all its tasks: {inverted}; each account's first start {:.1} to {:.1} s, its last start {:.1} to {:.1} s",
        top[0],
        top[top.len() - 1],
        lasts[0],
        lasts[lasts.len() - 1]
    );
    // Let the last tasks' ends land before the server stops.
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.stop().await;
}
