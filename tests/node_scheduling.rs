//! Draining a node: `disablescheduling` with each `nodeDisableSchedulingOption` (requeue, the
//! default; terminate; taskcompletion), and `enablescheduling`, as an operator would use them.

mod common;

use std::time::{Duration, Instant};

use common::{Rt, TestServer};
use serde_json::{json, Value};

async fn scheduling(s: &TestServer, node: &str, on: bool, body: Value) -> (u16, Value) {
    let verb = if on {
        "enablescheduling"
    } else {
        "disablescheduling"
    };
    let (status, answer) = s
        .post(&format!("/pools/d/nodes/{node}/{verb}"), &body)
        .await;
    (status.as_u16(), answer)
}

/// The task stays `active` while the only node takes no tasks: watched for a second after the
/// dispatcher, woken by the add, has had its pass.
async fn stays_queued(s: &TestServer, task: &str) {
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        assert_eq!(
            s.task("j", task).await["state"],
            "active",
            "{task} was placed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabling_scheduling_drains_a_node_with_each_option() {
    let s = TestServer::start(Rt::Local).await;
    let pool = json!({"id": "d", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 2});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    let node = s.wait_nodes("d", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    s.job_on("j", "d").await;
    let task = |id: &str, cmd: &str| json!({"id": id, "commandLine": cmd});

    // requeue (the default): the running task goes back to the queue; nothing new is placed.
    s.add_tasks("j", vec![task("r", "sleep 30")]).await;
    s.wait_task("j", "r", "running").await;
    assert_eq!(scheduling(&s, &node, false, json!({})).await.0, 200);
    let (_, n) = s.get(&format!("/pools/d/nodes/{node}")).await;
    assert_eq!(n["schedulingState"], "disabled", "{n}");
    let r = s.wait_task("j", "r", "active").await;
    assert_eq!(r["executionInfo"]["requeueCount"], 1, "{r}");
    s.add_tasks("j", vec![task("new", "true")]).await;
    stays_queued(&s, "new").await;
    assert_eq!(s.task("j", "r").await["state"], "active");

    // Enabled again, the node takes both.
    assert_eq!(scheduling(&s, &node, true, json!({})).await.0, 200);
    s.wait_task("j", "new", "completed").await;
    s.wait_task("j", "r", "running").await;
    let (_, n) = s.get(&format!("/pools/d/nodes/{node}")).await;
    assert_eq!(n["schedulingState"], "enabled", "{n}");

    // terminate: the running task ends, failed, and says why.
    let terminate = json!({"nodeDisableSchedulingOption": "terminate"});
    assert_eq!(scheduling(&s, &node, false, terminate).await.0, 200);
    let r = s.wait_task("j", "r", "completed").await;
    assert_eq!(r["executionInfo"]["result"], "failure", "{r}");
    let why = r["executionInfo"]["failureInfo"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("scheduling was disabled"), "{r}");
    assert_eq!(scheduling(&s, &node, true, json!({})).await.0, 200);

    // taskcompletion: what runs finishes; what comes waits until the node is enabled.
    s.add_tasks("j", vec![task("tc", "sh -c 'sleep 2; echo done'")])
        .await;
    s.wait_task("j", "tc", "running").await;
    let finish = json!({"nodeDisableSchedulingOption": "taskcompletion"});
    assert_eq!(scheduling(&s, &node, false, finish).await.0, 200);
    s.add_tasks("j", vec![task("after", "true")]).await;
    let tc = s.wait_task("j", "tc", "completed").await;
    assert_eq!(tc["executionInfo"]["result"], "success", "{tc}");
    stays_queued(&s, "after").await;
    assert_eq!(scheduling(&s, &node, true, json!({})).await.0, 200);
    s.wait_task("j", "after", "completed").await;

    // A bad option is refused, naming it; an unknown node is 404.
    let (status, body) = scheduling(
        &s,
        &node,
        false,
        json!({"nodeDisableSchedulingOption": "later"}),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("InvalidPropertyValue")),
        "{body}"
    );
    assert_eq!(scheduling(&s, "nope", false, json!({})).await.0, 404);
}
