//! Scale: `queued` tasks in one job (after `other` tasks of another job) on a pool with no nodes (they live in PostgreSQL, not in the
//! server): the time to add them (the submit rate with no pool work beside it), p50/p99 of a
//! 1,000-task list page read at `pages` points across the queue, then the dispatch pass time
//! with that queue behind it (the pool is resized to 2 nodes x 16 slots while `run` of the
//! tasks complete), and the server's peak RSS after all of it.

use std::time::Instant;

use serde_json::{json, Value};

use super::{add_tasks, pass_summary, percentile, signed, sorted, Server};

pub async fn run(queued: usize, other: usize, clients: usize, pages: usize, run: usize) {
    let s = Server::start("local").await;
    s.create(
        "/pools",
        json!({"id": "empty", "vmSize": "standard_d2s_v3", "targetDedicatedNodes": 0, "taskSlotsPerNode": 16}),
        201,
    )
    .await;
    s.create(
        "/jobs",
        json!({"id": "queue", "poolInfo": {"poolId": "empty"}}),
        201,
    )
    .await;
    // Another job's tasks first, as in any database with history: a page of the big job must
    // not walk past them.
    s.create(
        "/jobs",
        json!({"id": "other", "poolInfo": {"poolId": "empty"}}),
        201,
    )
    .await;
    add_tasks(&s, "other", other, clients, "true").await;
    let add = add_tasks(&s, "queue", queued, clients, "true").await;
    let counts = s.get("/jobs/queue/taskcounts").await;
    assert_eq!(counts["taskCounts"]["active"].as_u64(), Some(queued as u64));
    println!(
        "scale: submit (addtaskcollection, 100 per request, {clients} clients, no pool work): \
         added {queued} tasks in {add:.1} s ({:.0} tasks/s)",
        queued as f64 / add
    );

    let mut page_ms = Vec::new();
    for i in 0..pages {
        // Task pks count from 1 in a fresh database; a skiptoken is the pk read last.
        let after = other + i * queued / pages;
        let url = format!(
            "{}/jobs/queue/tasks?maxresults=1000&$skiptoken={after}",
            s.base
        );
        let started = Instant::now();
        let resp = s
            .http
            .execute(signed(&s.key, s.http.get(url)))
            .await
            .unwrap();
        let bytes = resp.bytes().await.unwrap();
        // The page's time is the server's: until its last byte is here, not the client's parse.
        page_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        if std::env::var_os("BENCH_PAGE_TRACE").is_some() {
            println!("scale: page {i} after {after}: {:.1} ms", page_ms[i]);
        }
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        assert!(!body["value"].as_array().unwrap().is_empty());
    }
    let page_ms = sorted(page_ms);
    println!(
        "scale: 1000-task list page ({pages} reads across the queue) p50 {:.1} ms, p99 {:.1} ms",
        percentile(&page_ms, 0.5),
        percentile(&page_ms, 0.99)
    );

    if run > 0 {
        s.take_passes();
        s.create(
            "/pools/empty/resize",
            json!({"targetDedicatedNodes": 2}),
            202,
        )
        .await;
        loop {
            // The other job's tasks run first (same priority, older job); then the queue's.
            let mut done = 0;
            for job in ["other", "queue"] {
                let c = s.get(&format!("/jobs/{job}/taskcounts")).await;
                done += c["taskCounts"]["completed"].as_u64().unwrap();
            }
            if done >= run as u64 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        println!(
            "scale: dispatch with {queued} queued: {}",
            pass_summary(&s.take_passes())
        );
    }
    println!("scale: server peak RSS {:.1} MiB", s.peak_rss_mib());
    s.stop().await;
}
