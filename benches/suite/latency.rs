//! Latency on an idle local pool (2 nodes x 16 slots): one task at a time, `tries` times.
//! Submit -> running is the task's executionInfo.startTime (the server's clock at placement)
//! minus the client's clock just before it sent the add; submit -> completed is what the client
//! sees, polling the task every millisecond until it reads `completed`.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{percentile, sorted, Server};

pub async fn run(tries: usize) {
    let s = Server::with_pool("local", "idle", 2, 16, "lat").await;
    let (mut to_running, mut to_completed, mut to_end) = (vec![], vec![], vec![]);
    for i in 0..tries {
        let id = format!("l{i}");
        let sent_at = chrono::Utc::now();
        let sent = Instant::now();
        s.create(
            "/jobs/lat/tasks",
            json!({"id": id, "commandLine": "true"}),
            201,
        )
        .await;
        let task = loop {
            let t = s.get(&format!("/jobs/lat/tasks/{id}")).await;
            if t["state"] == "completed" {
                break t;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        to_completed.push(sent.elapsed().as_secs_f64() * 1000.0);
        let at = |field: &str| -> f64 {
            let t: chrono::DateTime<chrono::Utc> = task["executionInfo"][field]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            (t - sent_at).num_microseconds().unwrap() as f64 / 1000.0
        };
        assert_eq!(task["executionInfo"]["exitCode"], 0, "{task}");
        to_running.push(at("startTime"));
        to_end.push(at("endTime"));
    }
    s.stop().await;
    for (what, v) in [
        ("submit -> running (startTime)", to_running),
        ("submit -> ended (endTime)", to_end),
        ("submit -> completed (seen by the client)", to_completed),
    ] {
        let v = sorted(v);
        println!(
            "latency: {what}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({tries} tries)",
            percentile(&v, 0.5),
            percentile(&v, 0.99),
            percentile(&v, 1.0)
        );
    }
}
