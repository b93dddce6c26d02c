//! Output that outlives its node (docs/data.md): a task's stdout.txt and stderr.txt are kept as
//! its attempt ends, bounded, and read through the files API, the SDK's routes and the CLI after
//! its node is gone (resized away, preempted) or no longer has them (reimaged), marked as the
//! kept copy. Other files go with the node, as on Azure.

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
    let db = s.db().await;
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
