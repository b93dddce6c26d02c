//! Output that outlives its node (docs/data.md): a task's stdout.txt and stderr.txt are kept as
//! its attempt ends, bounded, and read through the files API, the SDK's routes and the CLI after
//! its node is gone (resized away, preempted) or no longer has them (reimaged), marked as the
//! kept copy. Other files go with the node, as on Azure. A follow (`?follow=true`, `batchpool
//! task logs -f`) streams the output as it is written, across a retry and a node's loss.

#[macro_use]
mod common;

use common::{wait_for, Rt, TestServer};
use reqwest::StatusCode;
use serde_json::json;

/// A file as a client reads it: status, whether it is the kept copy (and of which length on
/// the node), and its bytes.
async fn read(
    s: &TestServer,
    path: &str,
    range: Option<&str>,
) -> (StatusCode, Option<String>, Vec<u8>) {
    let mut req = s.http.get(format!("{}{path}", s.base));
    if let Some(range) = range {
        req = req.header("ocp-range", range);
    }
    let resp = req.send().await.unwrap();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    };
    let kept =
        header("ocp-batchpool-kept-copy").map(|_| header("ocp-batchpool-original-length").unwrap());
    (resp.status(), kept, resp.bytes().await.unwrap().to_vec())
}

/// 1 GiB and a little, between two lines that say where it begins and ends.
const GIB: &str = "sh -c 'echo START; head -c 1073741824 /dev/zero | tr \"\\0\" x; echo; echo END; echo warned >&2'";

async fn kept_after_the_pool_is_resized_to_zero(rt: Rt) {
    let s = TestServer::start(rt).await;
    let node = s.one_slot_node("p").await;
    s.job_on("j", "p").await;
    let tasks = vec![
        json!({"id": "small", "commandLine": "sh -c 'echo hello; echo oops >&2; echo left > left.txt'"}),
        json!({"id": "big", "commandLine": GIB}),
    ];
    s.add_tasks("j", tasks).await;
    s.wait_all_completed("j", 2).await;
    // While the node is there, its own files are read.
    let (status, kept, body) = read(&s, "/jobs/j/tasks/small/files/stdout.txt", None).await;
    assert_eq!(
        (status, kept, body),
        (StatusCode::OK, None, b"hello\n".to_vec())
    );
    // A task terminated while it runs: what it wrote until then is kept too.
    let stopped = json!({"id": "stopped", "commandLine": "sh -c 'echo before the end; sleep 600'"});
    s.add_tasks("j", vec![stopped]).await;
    wait_for("the stopped task's first line", || async {
        let (_, _, body) = read(&s, "/jobs/j/tasks/stopped/files/stdout.txt", None).await;
        (body == b"before the end\n").then_some(())
    })
    .await;
    let (status, _) = s.post("/jobs/j/tasks/stopped/terminate", &json!({})).await;
    assert_eq!(status, 204);
    s.wait_task("j", "stopped", "completed").await;
    // Its process is killed at the scheduler's next sweep, or, as here, when its node is
    // removed at once, before the node goes: what it wrote is kept either way.
    let db = s.db().await;
    let (status, _) = s
        .post("/pools/p/resize", &json!({"targetDedicatedNodes": 0}))
        .await;
    assert_eq!(status, 202);
    wait_for("the node to go", || async {
        s.nodes("p").await.is_empty().then_some(())
    })
    .await;
    let (status, kept, body) = read(&s, "/jobs/j/tasks/small/files/stdout.txt", None).await;
    assert_eq!(
        (status, kept.as_deref(), body),
        (StatusCode::OK, Some("6"), b"hello\n".to_vec())
    );
    let (_, _, body) = read(&s, "/jobs/j/tasks/small/files/stderr.txt", None).await;
    assert_eq!(body, b"oops\n");
    let (status, kept, body) = read(&s, "/jobs/j/tasks/stopped/files/stdout.txt", None).await;
    assert_eq!(
        (status, kept.as_deref(), body),
        (StatusCode::OK, Some("15"), b"before the end\n".to_vec())
    );
    let (_, _, body) = read(
        &s,
        "/jobs/j/tasks/small/files/stdout.txt",
        Some("bytes=1-3"),
    )
    .await;
    assert_eq!(body, b"ell");
    let (status, body) = s.get("/jobs/j/tasks/small/files/wd/left.txt").await;
    assert_eq!(
        (status.as_u16(), body["code"].as_str()),
        (404, Some("NodeNotFound")),
        "{body}"
    );
    let (_, listing) = s.get("/jobs/j/tasks/small/files").await;
    let names: Vec<&str> = listing["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["stderr.txt", "stdout.txt"], "{listing}");

    // The 1 GiB one: its first and last MiB, and a line that says what is cut between them.
    let (status, kept, body) = read(&s, "/jobs/j/tasks/big/files/stdout.txt", None).await;
    let len = 6 + (1u64 << 30) + 1 + 4;
    assert_eq!((status, kept), (StatusCode::OK, Some(len.to_string())));
    let marker = format!(
        "\n[batchpool: {} bytes cut here; the first and last 1048576 bytes of this file are kept]\n",
        len - 2 * (1 << 20)
    );
    assert_eq!(body.len(), 2 * (1 << 20) + marker.len());
    assert!(body.starts_with(b"START\nxxx") && body.ends_with(b"xxx\nEND\n"));
    assert_eq!(&body[1 << 20..(1 << 20) + marker.len()], marker.as_bytes());
    let (_, _, err) = read(&s, "/jobs/j/tasks/big/files/stderr.txt", None).await;
    assert_eq!(err, b"warned\n");
    let stored: i64 = sqlx::query_scalar("SELECT sum(length(data))::bigint FROM task_outputs")
        .fetch_one(&db)
        .await
        .unwrap();
    assert!(
        stored < 64 * 1024,
        "the kept copies are compressed: {stored} bytes"
    );

    // The CLI reads it as any task's log.
    let (account, key) = s.http.credentials.lock().unwrap().clone().unwrap();
    let out = common::run_ok(
        std::process::Command::new(env!("CARGO_BIN_EXE_batchpool"))
            .args(["task", "logs", "j", "small"])
            .envs([
                ("BATCH_URL", s.base.as_str()),
                ("BATCH_ACCOUNT", &account),
                ("BATCH_KEY", &key),
            ]),
    );
    assert_eq!(out, "hello\n");
    let _ = node;
}
on_both_runtimes!(kept_after_resize, kept_after_the_pool_is_resized_to_zero);

/// A low-priority node the operator reclaims: its task's output is read from the kept copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_after_a_preemption() {
    let s = TestServer::start(Rt::Local).await;
    let body = json!({"id": "spot", "vmSize": "standard_a1", "targetLowPriorityNodes": 1});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    let before = s.wait_nodes("spot", 1, "idle").await[0].clone();
    let node = before["id"].as_str().unwrap().to_string();
    s.job_on("j", "spot").await;
    s.add_tasks(
        "j",
        vec![json!({"id": "t", "commandLine": "echo before the reclaim"})],
    )
    .await;
    s.wait_task("j", "t", "completed").await;
    let body = json!({"nodeIds": [node]});
    let (status, answer) = s
        .operator(reqwest::Method::POST, "reclaim", Some(&body), None)
        .await;
    assert_eq!(status, 200, "{answer}");
    // Made again once the capacity is back: a new disk, without the task's files.
    wait_for("the node made again", || async {
        let n = s.nodes("spot").await.pop()?;
        (n["state"] == "idle" && n["lastBootTime"] != before["lastBootTime"]).then_some(())
    })
    .await;
    let (status, kept, body) = read(&s, "/jobs/j/tasks/t/files/stdout.txt", None).await;
    assert_eq!(
        (status, kept.is_some(), body),
        (StatusCode::OK, true, b"before the reclaim\n".to_vec())
    );
}

/// Follows `path` (`?follow=true`) to its end: each chunk with the time it came.
async fn follow(s: &TestServer, path: &str) -> Vec<(std::time::Instant, Vec<u8>)> {
    use futures_util::StreamExt;
    let resp = s
        .http
        .get(format!("{}{path}?follow=true", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["ocp-batchpool-follow"], "true");
    assert!(resp.headers().get("content-length").is_none(), "chunked");
    let mut chunks = Vec::new();
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        chunks.push((std::time::Instant::now(), chunk.unwrap().to_vec()));
    }
    chunks
}

/// When `text` had come, of the chunks followed.
fn came(chunks: &[(std::time::Instant, Vec<u8>)], text: &str) -> std::time::Instant {
    let mut sofar = Vec::new();
    for (at, chunk) in chunks {
        sofar.extend_from_slice(chunk);
        if String::from_utf8_lossy(&sofar).contains(text) {
            return *at;
        }
    }
    panic!("{text:?} never came: {:?}", String::from_utf8_lossy(&sofar))
}

fn joined(chunks: &[(std::time::Instant, Vec<u8>)]) -> String {
    String::from_utf8(chunks.iter().flat_map(|(_, c)| c.clone()).collect()).unwrap()
}

/// A follow begun before the task runs streams its first attempt as it writes, then the retry
/// after a line that names it, and ends when the task completes.
async fn followed_across_a_retry(rt: Rt) {
    let s = TestServer::start(rt).await;
    let node = s.one_slot_node("p").await;
    s.job_on("j", "p").await;
    let script = "if [ -f tried ]; then echo second; else touch tried; echo first; sleep 3; echo still first; exit 3; fi";
    let task = json!({"id": "t", "commandLine": format!("sh -c '{script}'"),
        "constraints": {"maxTaskRetryCount": 1}});
    s.add_tasks("j", vec![task]).await;
    let chunks = follow(&s, "/jobs/j/tasks/t/files/stdout.txt").await;
    let ended = std::time::Instant::now();
    assert_eq!(
        joined(&chunks),
        format!("first\nstill first\n==> attempt 2 on node {node} <==\nsecond\n")
    );
    // Streamed as written: the first line came seconds before the second was written.
    let gap = came(&chunks, "still first") - came(&chunks, "first");
    assert!(gap >= std::time::Duration::from_secs(2), "{gap:?}");
    let t = s.task("j", "t").await;
    assert_eq!(
        (
            t["state"].as_str(),
            t["executionInfo"]["retryCount"].as_i64()
        ),
        (Some("completed"), Some(1))
    );
    assert!(ended.elapsed() < std::time::Duration::from_secs(30));

    // A completed task's follow is its file, from the range asked for.
    let resp = s
        .http
        .get(format!(
            "{}/jobs/j/tasks/t/files/stdout.txt?follow=true",
            s.base
        ))
        .header("ocp-range", "bytes=2-")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.text().await.unwrap(), "cond\n");
    let (status, body) = s.get("/jobs/j/tasks/t/files/stdout.txt?follow=maybe").await;
    assert_eq!(
        (status.as_u16(), body["code"].as_str()),
        (400, Some("InvalidPropertyValue")),
        "{body}"
    );
    // A follow has no end, and a node's own files are not followed: both refused by name.
    let ended = s
        .http
        .get(format!(
            "{}/jobs/j/tasks/t/files/stdout.txt?follow=true",
            s.base
        ))
        .header("ocp-range", "bytes=0-3")
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), 400);
    assert!(ended.text().await.unwrap().contains("InvalidRange"));
    let path = format!("/pools/p/nodes/{node}/files/workitems/j/job-1/t/stdout.txt?follow=true");
    let (status, body) = s.get(&path).await;
    assert_eq!(status.as_u16(), 400, "{body}");
    assert!(body.to_string().contains("follow"), "{body}");
}
on_both_runtimes!(follow_retry, followed_across_a_retry);

/// The node that runs a followed task leaves its pool: the follow carries on with the attempt
/// on the next node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followed_across_a_nodes_loss() {
    let s = TestServer::start(Rt::Local).await;
    let first = s.one_slot_node("p").await;
    s.job_on("j", "p").await;
    // Local nodes share this host's disk: the mark outlives the first node.
    let mark = s.data_dir.path().join("once");
    let script = format!(
        "if [ -f {m} ]; then echo again; else touch {m}; echo first; sleep 600; fi",
        m = mark.display()
    );
    s.add_tasks(
        "j",
        vec![json!({"id": "t", "commandLine": format!("sh -c '{script}'")})],
    )
    .await;
    let got = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let following = tokio::spawn({
        let (url, http, got) = (
            format!("{}/jobs/j/tasks/t/files/stdout.txt?follow=true", s.base),
            s.http.clone(),
            got.clone(),
        );
        async move {
            use futures_util::StreamExt;
            let mut body = http.get(url).send().await.unwrap().bytes_stream();
            while let Some(chunk) = body.next().await {
                got.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            }
        }
    });
    wait_for("the first line followed", || async {
        (*got.lock().unwrap() == "first\n").then_some(())
    })
    .await;
    let body = json!({"nodeList": [first], "nodeDeallocationOption": "requeue"});
    assert_eq!(s.post("/pools/p/removenodes", &body).await.0, 202);
    wait_for("the node gone", || async {
        s.nodes("p").await.is_empty().then_some(())
    })
    .await;
    let body = json!({"targetDedicatedNodes": 1});
    assert_eq!(s.post("/pools/p/resize", &body).await.0, 202);
    let t = s.wait_task("j", "t", "completed").await;
    let second = t["nodeInfo"]["nodeId"].as_str().unwrap().to_string();
    assert_ne!(second, first);
    tokio::time::timeout(std::time::Duration::from_secs(30), following)
        .await
        .expect("the follow ends with the task")
        .unwrap();
    let followed = got.lock().unwrap().clone();
    assert_eq!(
        followed,
        format!("first\n==> attempt 2 on node {second} <==\nagain\n")
    );
}
