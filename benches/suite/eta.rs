//! The eta section: how close `waitReason.estimatedStartTime` comes to when a waiting task
//! starts. A pool of `nodes` simulated nodes x 4 slots runs a job of tasks of `sleep 1`,
//! `sleep 2` and `sleep 3` in turn (so the leader learns the pool's pace), then a job of
//! `tasks` of the same mix, added at once. After a waits pass, every waiting task's estimate is
//! read once; when all have run, p50 and p90 of |estimated - actual start| over those tasks,
//! beside the same for the guess "it starts now".

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::fleet::{empty_pool, fleet_sim, resize, serve_args};
use super::{add_tasks_with, percentile, sorted, Client, Server};

/// Each task's `field` (a time), by id.
async fn times(
    c: &Client,
    job: &str,
    select: &str,
    field: &[&str],
) -> HashMap<String, DateTime<Utc>> {
    let tasks = super::all_tasks(c, job, &format!("id,{select}")).await;
    let mut out = HashMap::new();
    for t in &tasks {
        let at = field.iter().fold(t, |v, k| &v[*k]);
        if let Some(time) = at.as_str().and_then(|s| s.parse().ok()) {
            out.insert(t["id"].as_str().unwrap().to_string(), time);
        }
    }
    out
}

fn mix(i: usize) -> Value {
    json!({"id": format!("t{i}"), "commandLine": format!("sleep {}", 1 + i % 3)})
}

pub async fn run(nodes: usize, tasks: usize) {
    let (_sim, url) = fleet_sim().await;
    let s = Server::start_with("simulated", &serve_args(&url, nodes)).await;
    empty_pool(&s, "p").await;
    resize(&s, "p", nodes).await;
    let job = |id: &str| json!({"id": id, "poolInfo": {"poolId": "p"}});
    let warm = nodes * 4 * 3;
    s.create("/jobs", job("warm"), 201).await;
    add_tasks_with(&s, "warm", warm, 1, mix).await;
    s.wait_completed("warm", warm).await;
    s.create("/jobs", job("w"), 201).await;
    add_tasks_with(&s, "w", tasks, 2, mix).await;
    // A waits pass (every 2 s) has seen them all.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let read = Utc::now();
    let estimates = times(&s, "w", "waitReason", &["waitReason", "estimatedStartTime"]).await;
    s.wait_completed("w", tasks).await;
    let starts = times(&s, "w", "executionInfo", &["executionInfo", "startTime"]).await;
    let secs = |d: chrono::Duration| d.num_milliseconds().abs() as f64 / 1000.0;
    let (mut errors, mut naive) = (Vec::new(), Vec::new());
    for (id, estimate) in &estimates {
        let start = starts[id];
        if start > read {
            errors.push(secs(*estimate - start));
            naive.push(secs(read - start));
        }
    }
    let (errors, naive) = (sorted(errors), sorted(naive));
    println!(
        "eta: {} of {tasks} tasks waited with an estimate ({nodes} nodes x 4 slots, tasks of 1-3 s, the last starting {:.0} s after the read): |estimated - actual start| p50 {:.1} s, p90 {:.1} s; the guess \"now\": p50 {:.1} s, p90 {:.1} s",
        errors.len(),
        naive.last().copied().unwrap_or(0.0),
        percentile(&errors, 0.5),
        percentile(&errors, 0.9),
        percentile(&naive, 0.5),
        percentile(&naive, 0.9),
    );
    s.stop().await;
}
