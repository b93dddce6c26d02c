//! Why a task waits (docs/scheduling.md): every reason made by a real situation on a real
//! server, read as a client reads it (`waitReason` on a task and on its job), and gone or
//! changed once the situation ends.

#[macro_use]
mod common;

use common::{wait_for, Rt, TestServer};
use serde_json::{json, Value};

/// A command line no other test's process has, that runs until the node's shared `go` exists.
fn blocker(rt: Rt, case: u32) -> String {
    let marker = common::marker(rt, (47000, 48000), case);
    format!(
        "sh -c 'while [ ! -f $AZ_BATCH_NODE_SHARED_DIR/go ]; do sleep 0.1; done; echo {marker}'"
    )
}

/// Makes the node's shared `go`, behind the server's back, as another program on it would.
fn go(s: &TestServer, node: &str, server_id: &str) {
    match s.runtime {
        Rt::Local => {
            let path = s.data_dir.path().join("nodes").join(node).join("shared/go");
            std::fs::write(path, "").unwrap();
        }
        Rt::Docker => {
            let container = format!("batchpool-{server_id}-{node}");
            common::run_ok(std::process::Command::new("docker").args([
                "exec",
                &container,
                "touch",
                "/mnt/batch/tasks/shared/go",
            ]));
        }
    }
}

/// Waits until `path` (a task or a job) says it waits with `code`; returns its reason.
async fn waits_with(s: &TestServer, path: &str, code: &str) -> Value {
    wait_for(&format!("{path} to wait with {code}"), || async {
        let (status, body) = s.get(path).await;
        assert_eq!(status, 200, "{body}");
        (body["waitReason"]["code"] == code).then(|| body["waitReason"].clone())
    })
    .await
}

fn says(reason: &Value, text: &str) {
    let message = reason["message"].as_str().unwrap_or_default();
    assert!(message.contains(text), "{reason}");
    assert!(
        reason["since"].is_string() && reason["computedAt"].is_string(),
        "{reason}"
    );
}

async fn each_reason_comes_and_goes(rt: Rt) {
    let s = TestServer::start(rt).await;
    let server_id = s.server_id().await;
    // Pool q: one node of two slots. Job m may run one task at a time; job d uses dependencies.
    let body = json!({"id": "q", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 2});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    let node = s.wait_nodes("q", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let body = json!({"id": "m", "poolInfo": {"poolId": "q"}, "maxParallelTasks": 1});
    assert_eq!(s.post("/jobs", &body).await.0, 201);
    s.add_tasks(
        "m",
        vec![
            json!({"id": "x", "commandLine": blocker(rt, 1)}),
            json!({"id": "y", "commandLine": "true"}),
        ],
    )
    .await;
    s.wait_task("m", "x", "running").await;
    let y = waits_with(&s, "/jobs/m/tasks/y", "JobAtMaxParallelTasks").await;
    says(&y, "maxParallelTasks");

    let body = json!({"id": "d", "poolInfo": {"poolId": "q"}, "usesTaskDependencies": true});
    assert_eq!(s.post("/jobs", &body).await.0, 201);
    s.add_tasks("d", vec![json!({"id": "a", "commandLine": blocker(rt, 2)})])
        .await;
    s.wait_task("d", "a", "running").await;
    s.add_tasks(
        "d",
        vec![
            json!({"id": "b", "commandLine": "true", "dependsOn": {"taskIds": ["a"]}}),
            json!({"id": "c", "commandLine": "true"}),
            json!({"id": "e", "commandLine": "true"}),
        ],
    )
    .await;
    says(
        &waits_with(&s, "/jobs/d/tasks/b", "WaitingForDependencies").await,
        "\"a\"",
    );
    let c = waits_with(&s, "/jobs/d/tasks/c", "SlotsBusy").await;
    let e = waits_with(&s, "/jobs/d/tasks/e", "SlotsBusy").await;
    assert_eq!(
        (c["tasksAhead"].as_i64(), e["tasksAhead"].as_i64()),
        (Some(0), Some(1)),
        "{c} {e}"
    );
    says(&e, "1 tasks come before it");
    says(&waits_with(&s, "/jobs/d", "SlotsBusy").await, "busy");
    // The API's filter finds them by reason.
    let (_, list) = s
        .get("/jobs/d/tasks?$filter=waitReason/code%20eq%20'SlotsBusy'&$select=id")
        .await;
    assert_eq!(common::ids(&list), ["c", "e"], "{list}");

    // Job j's pool does not exist, then has no nodes, then its nodes start and fail.
    s.job_on("j", "p").await;
    // A task the pool it will have cannot hold is accepted while there is no pool to check.
    let big = json!({"id": "big", "commandLine": "true", "requiredSlots": 3});
    s.add_tasks("j", vec![json!({"id": "t1", "commandLine": "true"}), big])
        .await;
    says(
        &waits_with(&s, "/jobs/j/tasks/t1", "PoolNotFound").await,
        "\"p\" does not exist",
    );
    says(
        &waits_with(&s, "/jobs/j", "PoolNotFound").await,
        "does not exist",
    );
    let start = json!({"commandLine": "sh -c 'sleep 6; exit 3'", "waitForSuccess": true});
    let body =
        json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 0, "startTask": start});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    says(
        &waits_with(&s, "/jobs/j/tasks/t1", "NoNodes").await,
        "a target of 0",
    );
    let (status, _) = s
        .post("/pools/p/resize", &json!({"targetDedicatedNodes": 1}))
        .await;
    assert_eq!(status, 202);
    says(
        &waits_with(&s, "/jobs/j/tasks/t1", "NodesStarting").await,
        "starting",
    );
    says(
        &waits_with(&s, "/jobs/j/tasks/t1", "StartTaskFailed").await,
        "failed their start task",
    );
    // Disabled, moved to pool q, enabled: it waits its turn there.
    let (status, body) = s
        .post("/jobs/j/disable", &json!({"disableTasks": "requeue"}))
        .await;
    assert_eq!(status, 202, "{body}");
    says(
        &waits_with(&s, "/jobs/j/tasks/t1", "JobDisabled").await,
        "enable it",
    );
    let (status, body) = s
        .request(
            reqwest::Method::PATCH,
            "/jobs/j",
            Some(&json!({"poolInfo": {"poolId": "q"}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(s.post("/jobs/j/enable", &json!({})).await.0, 202);
    waits_with(&s, "/jobs/j/tasks/t1", "SlotsBusy").await;
    let big = waits_with(&s, "/jobs/j/tasks/big", "RequiredSlotsExceedNode").await;
    says(
        &big,
        "IT WILL NEVER RUN: its requiredSlots 3 is more than pool \"q\"'s taskSlotsPerNode 2",
    );

    // An autoscaled pool with no nodes says when its formula runs next.
    let body = json!({"id": "auto", "vmSize": "standard_a1", "enableAutoScale": true,
        "autoScaleFormula": "$TargetDedicatedNodes = 0;", "autoScaleEvaluationInterval": "PT5M"});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.job_on("k", "auto").await;
    s.add_tasks("k", vec![json!({"id": "t", "commandLine": "true"})])
        .await;
    says(
        &waits_with(&s, "/jobs/k/tasks/t", "NoNodes").await,
        "autoscale formula runs next at",
    );

    // The blockers end: every task that can run does, and only the one too big waits on.
    go(&s, &node, &server_id);
    for (job, task) in [("m", "y"), ("d", "b"), ("d", "c"), ("d", "e"), ("j", "t1")] {
        let t = s.wait_task(job, task, "completed").await;
        assert!(t.get("waitReason").is_none(), "{t}");
    }
    says(
        &waits_with(&s, "/jobs/j/tasks/big", "RequiredSlotsExceedNode").await,
        "NEVER",
    );
    // Now that tasks ended on pool q, its pace is known: waiting tasks say when they start.
    let sleeps = (1..=4).map(|i| json!({"id": format!("s{i}"), "commandLine": "sleep 2"}));
    s.add_tasks("d", sleeps.collect()).await;
    let fourth = wait_for("an estimate for s4", || async {
        let t = s.task("d", "s4").await;
        t["waitReason"]
            .get("estimatedStartTime")
            .map(|_| t["waitReason"].clone())
    })
    .await;
    let third = waits_with(&s, "/jobs/d/tasks/s3", "SlotsBusy").await;
    let at = |r: &Value| {
        let text = r["estimatedStartTime"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"));
        chrono::DateTime::parse_from_rfc3339(text).unwrap()
    };
    assert!(at(&fourth) > at(&third), "{third} {fourth}");
    assert_eq!(s.delete("/jobs/j/tasks/big").await.0, 200);
    wait_for("job j's reason to go with its last active task", || async {
        let (_, d) = s.get("/jobs/j").await;
        d.get("waitReason").is_none().then_some(())
    })
    .await;
}
on_both_runtimes!(each_reason_comes_and_goes, each_reason_comes_and_goes);
