//! The files API through a node's agent (issue 13). On a pool of one node (local, and Docker
//! where an engine answers), a task leaves one BENCH_FILE_MIB (256) MiB file and
//! BENCH_FILE_COUNT (1,000) small ones. The same reads are timed twice in one run: while the node
//! lives (its agent reads the files inside the node and streams them over its own connection),
//! then once the pool is resized to 0 (the server reads the same files from its own disk, as it
//! did for every node before the agent served files):
//! - one whole read of the big file (MiB/s);
//! - BENCH_FILE_READS (500) reads of a small file, one after another (p50, p99);
//! - 20 recursive listings of the task's files (p50).

use std::time::{Duration, Instant};

use serde_json::json;

use super::{percentile, signed, sorted, Server};

pub async fn run(runtime: &str, mib: usize, count: usize, reads: usize) {
    let s = Server::with_pool(runtime, "files", 1, 1, "files").await;
    let command = format!(
        "head -c {} /dev/zero > big; mkdir -p many; i=0; while [ $i -lt {count} ]; do echo $i > many/f$i; i=$((i+1)); done",
        mib << 20
    );
    s.create(
        "/jobs/files/tasks",
        json!({"id": "t", "commandLine": command}),
        201,
    )
    .await;
    s.wait_completed("files", 1).await;
    let through_agent = measure(&s, mib, reads).await;
    s.create(
        "/pools/files/resize",
        json!({"targetDedicatedNodes": 0}),
        202,
    )
    .await;
    while !s.get("/pools/files/nodes").await["value"]
        .as_array()
        .unwrap()
        .is_empty()
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let from_disk = measure(&s, mib, reads).await;
    s.stop().await;
    let [big, small50, small99, list50] = through_agent;
    let [dbig, dsmall50, dsmall99, dlist50] = from_disk;
    println!(
        "files ({runtime}): one {mib} MiB file: {:.0} MiB/s through the agent vs {:.0} MiB/s from the server's disk: {:.2}x",
        mib as f64 / big,
        mib as f64 / dbig,
        dbig / big
    );
    println!(
        "files ({runtime}): {reads} small reads: p50 {small50:.2} ms, p99 {small99:.2} ms through the agent vs p50 {dsmall50:.2} ms, p99 {dsmall99:.2} ms from disk"
    );
    println!(
        "files ({runtime}): recursive listing of {} entries: p50 {list50:.1} ms through the agent vs {dlist50:.1} ms from disk",
        count + 5
    );
}

/// Seconds for the big file; p50 and p99 ms of small reads; p50 ms of listings.
async fn measure(s: &Server, mib: usize, reads: usize) -> [f64; 4] {
    let started = Instant::now();
    let bytes = read(s, "/jobs/files/tasks/t/files/wd/big").await;
    let big = started.elapsed().as_secs_f64();
    assert_eq!(bytes, (mib as u64) << 20);
    let mut small = Vec::new();
    for _ in 0..reads {
        let started = Instant::now();
        assert_eq!(read(s, "/jobs/files/tasks/t/files/wd/many/f7").await, 2);
        small.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let mut lists = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let list = s
            .get("/jobs/files/tasks/t/files?recursive=true&maxresults=1000")
            .await;
        assert!(
            list["value"].as_array().is_some_and(|v| !v.is_empty()),
            "{list}"
        );
        lists.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let small = sorted(small);
    let lists = sorted(lists);
    [
        big,
        percentile(&small, 0.5),
        percentile(&small, 0.99),
        percentile(&lists, 0.5),
    ]
}

/// Reads a file to its end; returns how many bytes came.
async fn read(s: &Server, path: &str) -> u64 {
    let req = signed(&s.key, s.http.get(format!("{}{path}", s.base)));
    let mut resp = s.http.execute(req).await.unwrap();
    assert_eq!(resp.status(), 200, "GET {path}");
    let mut n = 0;
    while let Some(chunk) = resp.chunk().await.unwrap() {
        n += chunk.len() as u64;
    }
    n
}
