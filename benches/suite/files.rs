//! The files API through a node's agent (issue 13). On a pool of one node (local, and Docker
//! where an engine answers), a task leaves one BENCH_FILE_MIB (256) MiB file and
//! BENCH_FILE_COUNT (1,000) small ones, read through the files API (the node's agent reads them
//! inside the node and streams them over its own connection):
//! - one whole read of the big file (MiB/s), next to reading the same file straight from the
//!   node's disk on this machine (a local node's directory; a Docker node's volume, where the
//!   engine keeps it), the floor no API can beat;
//! - BENCH_FILE_READS (500) reads of a small file, one after another (p50, p99);
//! - 20 recursive listings of the task's files (p50).

use std::time::Instant;

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
    let [big, small50, small99, list50] = measure(&s, mib, reads).await;
    let task = s.get("/jobs/files/tasks/t").await;
    let node = task["nodeInfo"]["nodeId"].as_str().unwrap().to_string();
    let root = node_root(&s, runtime, &node).await;
    let path = root.join("workitems/files/job-1/t/wd/big");
    let started = Instant::now();
    let bytes = tokio::fs::read(&path).await.map(|b| b.len()).unwrap_or(0);
    let direct = started.elapsed().as_secs_f64();
    assert_eq!(bytes, mib << 20, "{}", path.display());
    s.stop().await;
    println!(
        "files ({runtime}): one {mib} MiB file: {:.0} MiB/s through the agent vs {:.0} MiB/s read from the node's disk directly: {:.2}x",
        mib as f64 / big,
        mib as f64 / direct,
        direct / big
    );
    println!(
        "files ({runtime}): {reads} small reads: p50 {small50:.2} ms, p99 {small99:.2} ms through the agent"
    );
    println!(
        "files ({runtime}): recursive listing of {} entries: p50 {list50:.1} ms through the agent",
        count + 5
    );
}

/// Where the node's root is on this machine: a local node's directory, or the volume a Docker
/// node's root is (the engine runs on this machine in the benchmark).
async fn node_root(s: &Server, runtime: &str, node: &str) -> std::path::PathBuf {
    if runtime == "local" {
        return s.data_dir().join("nodes").join(node);
    }
    let docker = batchpool::runtime::docker::connect(None).await.unwrap();
    let filters = std::collections::HashMap::from([(
        "label".to_string(),
        vec![format!("batchpool.node={node}")],
    )]);
    let options = bollard::query_parameters::ListContainersOptionsBuilder::default()
        .filters(&filters)
        .build();
    let container = docker.list_containers(Some(options)).await.unwrap();
    let id = container[0].id.clone().unwrap();
    let info = docker.inspect_container(&id, None).await.unwrap();
    let mount = info
        .mounts
        .unwrap_or_default()
        .into_iter()
        .find(|m| m.destination.as_deref() == Some("/mnt/batch/tasks"))
        .expect("the node's root volume");
    mount
        .source
        .expect("the volume's place on this machine")
        .into()
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
