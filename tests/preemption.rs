//! Low-priority (spot) nodes, end to end: a pool of them runs a job; the operator reclaims their
//! capacity mid-run (`POST /batchpool/operator/reclaim`); the nodes go `preempted`, their running
//! tasks are requeued without counting against retries, the nodes come back, and every task
//! ends once. Dedicated nodes that need a capped host's room preempt low-priority ones. Billing
//! keeps the two kinds of hours apart; formulas read `$PreemptedNodeCount`.

mod common;

use common::{fresh_database, wait_for, Rt, TestServer};
use serde_json::{json, Value};

async fn pool(s: &TestServer, id: &str) -> Value {
    let (status, pool) = s.get(&format!("/pools/{id}")).await;
    assert_eq!(status, 200, "{pool}");
    pool
}

/// `POST /batchpool/operator/reclaim` with the operator's token, or with `token` if given.
async fn reclaim(s: &TestServer, body: &Value, token: Option<&str>) -> (u16, Value) {
    s.operator(reqwest::Method::POST, "reclaim", Some(body), token)
        .await
}

/// One string property (`id`, `state`) of each of the pool's nodes, sorted.
async fn of_nodes(s: &TestServer, pool: &str, property: &str) -> Vec<String> {
    let mut values: Vec<String> = s
        .nodes(pool)
        .await
        .iter()
        .map(|n| n[property].as_str().unwrap().to_string())
        .collect();
    values.sort();
    values
}

async fn node_ids(s: &TestServer, pool: &str) -> Vec<String> {
    of_nodes(s, pool, "id").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_on_low_priority_nodes_loses_them_mid_run_and_every_task_ends_once() {
    let s = TestServer::start(Rt::Local).await;
    let body = json!({"id": "spot", "vmSize": "standard_a1", "taskSlotsPerNode": 2,
        "targetLowPriorityNodes": 2});
    let (status, answer) = s.post("/pools", &body).await;
    assert_eq!(status, 201, "{answer}");
    let nodes = s.wait_nodes("spot", 2, "idle").await;
    assert!(nodes.iter().all(|n| n["isDedicated"] == false), "{nodes:?}");
    let p = pool(&s, "spot").await;
    assert_eq!(
        (
            &p["currentLowPriorityNodes"],
            &p["targetLowPriorityNodes"],
            &p["currentDedicatedNodes"]
        ),
        (&json!(2), &json!(2), &json!(0)),
        "{p}"
    );
    let ids = node_ids(&s, "spot").await;

    // Each run leaves a line outside the node, where the test can count it afterwards.
    let marks = tempfile::tempdir().unwrap();
    let ran = marks.path().join("ran");
    s.job_on("work", "spot").await;
    let tasks = (0..12)
        .map(|i| {
            let cmd = format!("sleep 2 && echo $AZ_BATCH_TASK_ID >> {}", ran.display());
            json!({"id": format!("t{i:02}"), "commandLine": cmd})
        })
        .collect();
    s.add_tasks("work", tasks).await;
    wait_for("4 tasks running", || async {
        let (_, counts) = s.get("/jobs/work/taskcounts").await;
        (counts["taskCounts"]["running"] == 4).then_some(())
    })
    .await;

    // The operator takes both nodes' capacity back for 3 seconds.
    let body = json!({"nodeIds": ids, "holdFor": "PT3S"});
    let (status, answer) = reclaim(&s, &body, Some("not-the-token")).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (401, Some("AuthenticationFailed"))
    );
    let (status, _) = reclaim(&s, &json!("not even a reclaim"), Some("nor a token")).await;
    assert_eq!(status, 401, "who asks is checked first");
    let (status, answer) = reclaim(&s, &body, None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["preempted"].as_array().unwrap().len(), 2, "{answer}");
    assert_eq!(answer["preempted"][0]["poolId"], "spot", "{answer}");
    let preempted = s.wait_nodes("spot", 2, "preempted").await;
    assert!(preempted.iter().all(|n| n["isDedicated"] == false));
    let p = pool(&s, "spot").await;
    assert_eq!(
        p["currentLowPriorityNodes"], 2,
        "preempted nodes still count: {p}"
    );
    let (_, counts) = s.get("/nodecounts").await;
    let spot = &counts["value"][0];
    assert_eq!(spot["lowPriority"]["preempted"], 2, "{counts}");
    assert_eq!(spot["dedicated"]["total"], 0, "{counts}");
    // A second reclaim of the same nodes preempts nothing more.
    let (status, again) = reclaim(&s, &json!({"nodeIds": ids}), None).await;
    assert_eq!(
        (status, again["preempted"].as_array().map(Vec::len)),
        (200, Some(0))
    );

    // The same nodes come back once the hold is over, and the job finishes on them.
    let back = s.wait_nodes("spot", 2, "idle").await;
    assert_eq!(node_ids(&s, "spot").await, ids, "{back:?}");
    let tasks = s.wait_all_completed("work", 12).await;
    let mut requeued = 0;
    for t in &tasks {
        let info = &t["executionInfo"];
        assert_eq!(info["result"], "success", "{t}");
        assert_eq!(info["retryCount"], 0, "a preemption is no retry: {t}");
        requeued += usize::from(info["requeueCount"].as_u64().unwrap() > 0);
    }
    assert!(
        requeued >= 4,
        "the 4 running tasks were requeued: {requeued}"
    );
    // Every task's command ran to its end, and none more often than it was requeued allows.
    let text = std::fs::read_to_string(&ran).unwrap();
    for t in &tasks {
        let id = t["id"].as_str().unwrap();
        let runs = text.lines().filter(|l| *l == id).count() as u64;
        let requeues = t["executionInfo"]["requeueCount"].as_u64().unwrap();
        assert!(
            runs >= 1 && runs <= 1 + requeues,
            "{id} ran to its end {runs} times, requeued {requeues}"
        );
    }

    // Their hours are billed as low-priority hours.
    let (_, billing) = s.get("/billing/pools").await;
    let spot = &billing["value"][0];
    assert_eq!(spot["poolId"], "spot", "{billing}");
    assert!(
        spot["lowPriorityComputeHours"].as_f64().unwrap() > 0.0,
        "{billing}"
    );
    assert_eq!(spot["dedicatedComputeHours"], 0.0, "{billing}");

    // Resized to no low-priority nodes, the pool lets them go.
    let resize = json!({"targetDedicatedNodes": 0, "targetLowPriorityNodes": 0});
    assert_eq!(s.post("/pools/spot/resize", &resize).await.0, 202);
    s.wait_nodes("spot", 0, "idle").await;
    assert_eq!(pool(&s, "spot").await["currentLowPriorityNodes"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaims_and_targets_that_are_wrong_are_refused_by_name() {
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("dedicated").await;
    let dedicated = node_ids(&s, "dedicated").await;
    let (status, body) = reclaim(&s, &json!({"nodeIds": dedicated}), None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("NodeIsDedicated")),
        "{body}"
    );
    let (status, body) = reclaim(&s, &json!({"nodeIds": ["tvmps_nope"]}), None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("NodeNotFound")),
        "{body}"
    );
    for wrong in [
        json!({}),
        json!({"count": 0}),
        json!({"count": 1, "nodeIds": dedicated}),
        json!({"count": 1, "holdFor": "P2D"}),
        json!({"count": 1, "colour": "red"}),
    ] {
        let (status, body) = reclaim(&s, &wrong, None).await;
        assert_eq!(status, 400, "{wrong}: {body}");
    }
    // With no low-priority node anywhere, a count preempts nothing.
    let (status, body) = reclaim(&s, &json!({"count": 3}), None).await;
    assert_eq!(
        (status, body["preempted"].as_array().map(Vec::len)),
        (200, Some(0))
    );
    assert_eq!(s.wait_nodes("dedicated", 1, "idle").await.len(), 1);

    let body = json!({"id": "p", "vmSize": "standard_a1", "targetLowPriorityNodes": -1});
    let (status, answer) = s.post("/pools", &body).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.to_string().contains("targetLowPriorityNodes"),
        "{answer}"
    );
    let resize = json!({"targetDedicatedNodes": 1, "targetLowPriorityNodes": 100000});
    let (status, answer) = s.post("/pools/dedicated/resize", &resize).await;
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer.to_string().contains("targetLowPriorityNodes"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn formulas_size_low_priority_nodes_and_see_them_preempted() {
    let s = TestServer::start(Rt::Local).await;
    let formula = "$TargetLowPriorityNodes = 1; $TargetDedicatedNodes = 0;";
    let body = json!({"id": "auto", "vmSize": "standard_a1", "enableAutoScale": true,
        "autoScaleFormula": formula, "autoScaleEvaluationInterval": "PT5S"});
    let (status, answer) = s.post("/pools", &body).await;
    assert_eq!(status, 201, "{answer}");
    s.wait_nodes("auto", 1, "idle").await;
    assert_eq!(pool(&s, "auto").await["targetLowPriorityNodes"], 1);
    let (status, answer) = reclaim(&s, &json!({"count": 1, "holdFor": "PT1M"}), None).await;
    assert_eq!(status, 200, "{answer}");
    let probe = json!({"autoScaleFormula":
        "$preempted = $PreemptedNodeCount.GetSample(1); $spot = $CurrentLowPriorityNodes.GetSample(1);"});
    wait_for("a sample that sees the preempted node", || async {
        let (_, run) = s.post("/pools/auto/evaluateautoscale", &probe).await;
        let results = run["results"].as_str().unwrap_or_default().to_string();
        (results.contains("$preempted=[1]") || results.contains("preempted=1")).then_some(results)
    })
    .await;
}

/// On a Docker host capped at 2 CPUs, two 1-CPU low-priority nodes fill it; a dedicated node
/// then takes one's room (it is preempted, not an error), and when the dedicated node goes the
/// low-priority one comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedicated_nodes_take_the_room_of_low_priority_ones() {
    let args = ["--docker-host", "unix:///var/run/docker.sock,cpus=2"];
    let s = TestServer::start_with(Rt::Docker, Some(fresh_database().await), &args).await;
    let body = json!({"id": "spot", "vmSize": "standard_a1", "targetLowPriorityNodes": 2});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("spot", 2, "idle").await;
    s.pool_of_one_idle_node("dedicated").await;
    assert_eq!(of_nodes(&s, "spot", "state").await, ["idle", "preempted"]);
    // While there is no room, the preempted node stays preempted: it does not go `creating`
    // (and back) each time it would try to come back, every 10 s.
    let preempted_since = || async {
        let nodes = s.nodes("spot").await;
        let node = nodes.iter().find(|n| n["state"] == "preempted").cloned();
        node.map(|n| n["stateTransitionTime"].clone())
    };
    let since = preempted_since().await.expect("a preempted node");
    tokio::time::sleep(std::time::Duration::from_secs(12)).await;
    assert_eq!(
        preempted_since().await,
        Some(since),
        "no state change meanwhile"
    );
    let p = pool(&s, "dedicated").await;
    assert_eq!(p["resizeErrors"], Value::Null, "no error: {p}");
    assert_eq!(p["currentDedicatedNodes"], 1, "{p}");

    let (status, _) = s
        .post(
            "/pools/dedicated/resize",
            &json!({"targetDedicatedNodes": 0}),
        )
        .await;
    assert_eq!(status, 202);
    s.wait_nodes("spot", 2, "idle").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_manager_kept_off_low_priority_nodes_waits_for_a_dedicated_one() {
    let s = TestServer::start(Rt::Local).await;
    let body = json!({"id": "mixed", "vmSize": "standard_a1", "taskSlotsPerNode": 2,
        "targetLowPriorityNodes": 1});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("mixed", 1, "idle").await;
    let job = json!({"id": "j", "poolInfo": {"poolId": "mixed"},
        "jobManagerTask": {"id": "manager", "commandLine": "echo managed", "runExclusive": false,
            "killJobOnCompletion": false, "allowLowPriorityNode": false}});
    let (status, answer) = s.post("/jobs", &job).await;
    assert_eq!(status, 201, "{answer}");
    s.add_tasks(
        "j",
        vec![json!({"id": "t", "commandLine": "echo any node"})],
    )
    .await;
    s.wait_task("j", "t", "completed").await;
    assert_eq!(
        s.task("j", "manager").await["state"],
        "active",
        "no dedicated node yet"
    );

    let resize = json!({"targetDedicatedNodes": 1, "targetLowPriorityNodes": 1});
    assert_eq!(s.post("/pools/mixed/resize", &resize).await.0, 202);
    let manager = s.wait_task("j", "manager", "completed").await;
    let node = manager["nodeInfo"]["nodeId"].as_str().unwrap();
    let (_, node) = s.get(&format!("/pools/mixed/nodes/{node}")).await;
    assert_eq!(node["isDedicated"], true, "{node}");
    let (_, job) = s.get("/jobs/j").await;
    assert_eq!(
        job["jobManagerTask"]["allowLowPriorityNode"], false,
        "{job}"
    );
}
