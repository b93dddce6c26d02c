//! Autoscale: how long a task on an autoscaled pool at zero nodes waits to run (one sample
//! period, one evaluation interval and a node's start, at most), and what 1,000 autoscaled
//! pools cost the server and its PostgreSQL (sampling every 5 s, each formula every 5 s),
//! against the same server idle with 1,000 fixed-size pools, in one run.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{cpu, percentile, sorted, Server};

/// A formula that follows the queue to at most 2 nodes and drops to 0 when it is empty.
const FOLLOW: &str = "$TargetDedicatedNodes = min(2, max(0, $PendingTasks.GetSample(1))); $NodeDeallocationOption = taskcompletion;";

/// Azure's documented scale-to-zero formula, which the 1,000 pools run.
const DOCUMENTED: &str = "$samples = $PendingTasks.GetSamplePercent(TimeInterval_Minute * 15);
$tasks = $samples < 70 ? max(0, $PendingTasks.GetSample(1)) : max($PendingTasks.GetSample(1), avg($PendingTasks.GetSample(TimeInterval_Minute * 15)));
$targetVMs = $tasks > 0 ? $tasks : max(0, $TargetDedicatedNodes / 2);
$TargetDedicatedNodes = max(0, min($targetVMs, 25));
$NodeDeallocationOption = taskcompletion;";

pub async fn run(tries: usize, pools: usize) {
    wake_up(tries).await;
    cost(pools).await;
}

/// Submit -> running on a pool at zero, `tries` times (waiting for zero nodes between).
async fn wake_up(tries: usize) {
    let s = Server::start("local").await;
    let pool = json!({"id": "elastic", "vmSize": "standard_a1", "enableAutoScale": true,
        "autoScaleFormula": FOLLOW, "autoScaleEvaluationInterval": "PT5S"});
    s.create("/pools", pool, 201).await;
    s.create(
        "/jobs",
        json!({"id": "wake", "poolInfo": {"poolId": "elastic"}}),
        201,
    )
    .await;
    let mut waits = vec![];
    for i in 0..tries {
        let id = format!("w{i}");
        let sent_at = chrono::Utc::now();
        s.create(
            "/jobs/wake/tasks",
            json!({"id": id, "commandLine": "true"}),
            201,
        )
        .await;
        let task = loop {
            let t = s.get(&format!("/jobs/wake/tasks/{id}")).await;
            if t["state"] == "completed" {
                break t;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let started: chrono::DateTime<chrono::Utc> = task["executionInfo"]["startTime"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        waits.push((started - sent_at).num_milliseconds() as f64 / 1000.0);
        // Back to zero nodes before the next try.
        while s.get("/pools/elastic").await["currentDedicatedNodes"] != 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    s.stop().await;
    let w = sorted(waits);
    println!(
        "autoscale: submit -> running on a pool at zero (interval PT5S, samples every 5 s): p50 {:.1} s, max {:.1} s ({tries} tries)",
        percentile(&w, 0.5),
        percentile(&w, 1.0)
    );
}

/// The share of a core the server and its PostgreSQL used over `window`. (PostgreSQL is not the
/// server's descendant: `pg_ctl` leaves the postmaster to init.)
async fn core_share(s: &Server, window: Duration) -> f64 {
    let before = cpu::sample(s.pid(), s.data_dir()).server_and_postgres();
    let started = Instant::now();
    tokio::time::sleep(window).await;
    (cpu::sample(s.pid(), s.data_dir()).server_and_postgres() - before)
        / started.elapsed().as_secs_f64()
}

async fn cost(pools: usize) {
    let mut shares = vec![];
    for autoscaled in [false, true] {
        let s = Server::start("local").await;
        for i in 0..pools {
            let body = if autoscaled {
                json!({"id": format!("p{i}"), "vmSize": "standard_a1", "enableAutoScale": true,
                    "autoScaleFormula": DOCUMENTED, "autoScaleEvaluationInterval": "PT5S"})
            } else {
                json!({"id": format!("p{i}"), "vmSize": "standard_a1"})
            };
            s.create("/pools", body, 201).await;
        }
        // Past the first evaluations, then a minute of steady state.
        tokio::time::sleep(Duration::from_secs(10)).await;
        shares.push(core_share(&s, Duration::from_secs(60)).await);
        s.stop().await;
    }
    println!(
        "autoscale: {pools} pools, each sampled and evaluated every 5 s: {:.1}% of a core (server and its PostgreSQL), against {:.1}% with {pools} fixed-size pools; {:.1}% for autoscale",
        shares[1] * 100.0,
        shares[0] * 100.0,
        (shares[1] - shares[0]) * 100.0
    );
}
