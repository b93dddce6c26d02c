//! Node operations as an operator uses them: draining a node (`disablescheduling` with each
//! `nodeDisableSchedulingOption`: requeue, the default; terminate; taskcompletion; and
//! `enablescheduling`), reimaging one, and deallocating and starting one; and a task's
//! affinity for a node.

#[macro_use]
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
async fn node_state(s: &TestServer, node: &str) -> Value {
    s.get(&format!("/pools/d/nodes/{node}")).await.1["state"].clone()
}

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
    // With nothing running and scheduling disabled, the node is `offline`, as on Azure.
    assert_eq!(node_state(&s, &node).await, "offline");
    s.add_tasks("j", vec![task("new", "true")]).await;
    stays_queued(&s, "new").await;
    assert_eq!(s.task("j", "r").await["state"], "active");
    assert_eq!(node_state(&s, &node).await, "offline");

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
    assert_eq!(node_state(&s, &node).await, "running");
    s.add_tasks("j", vec![task("after", "true")]).await;
    let tc = s.wait_task("j", "tc", "completed").await;
    assert_eq!(tc["executionInfo"]["result"], "success", "{tc}");
    stays_queued(&s, "after").await;
    assert_eq!(
        node_state(&s, &node).await,
        "offline",
        "once its last task ended"
    );
    let (_, counts) = s.get("/nodecounts").await;
    assert_eq!(counts["value"][0]["dedicated"]["offline"], 1, "{counts}");
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

/// A reimage makes the node again from its image: a new disk (what the start task wrote is gone
/// and written once more, and the task files of what ran there with it), the running task
/// requeued and run again; with retaineddata, not before the task files' retention ran out.
async fn reimage(rt: Rt) {
    let s = TestServer::start(rt).await;
    let pool = json!({"id": "ri", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 2,
        "startTask": {"commandLine": "sh -c 'echo boot >> $AZ_BATCH_NODE_SHARED_DIR/boots'", "waitForSuccess": true}});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    let node = s.wait_nodes("ri", 1, "idle").await[0].clone();
    let id = node["id"].as_str().unwrap().to_string();
    let boots = format!("/pools/ri/nodes/{id}/files/shared/boots");
    assert_eq!(s.file(&boots).await.as_deref(), Some("boot\n"));
    s.job_on("j", "ri").await;
    let task = |id: &str, cmd: &str| json!({"id": id, "commandLine": cmd});
    s.add_tasks(
        "j",
        vec![task("done", "echo kept"), task("long", "sleep 30")],
    )
    .await;
    s.wait_task("j", "done", "completed").await;
    s.wait_task("j", "long", "running").await;

    let (status, body) = s
        .post(
            &format!("/pools/ri/nodes/{id}/reimage"),
            &json!({"nodeReimageOption": "later"}),
        )
        .await;
    assert_eq!(
        (status.as_u16(), body["code"].as_str()),
        (400, Some("InvalidPropertyValue")),
        "{body}"
    );
    let (status, body) = s
        .post(&format!("/pools/ri/nodes/{id}/reimage"), &json!({}))
        .await;
    assert_eq!(status, 202, "{body}");
    let again = common::wait_for("the reimaged node", || async {
        let (_, n) = s.get(&format!("/pools/ri/nodes/{id}")).await;
        let up = n["state"] == "idle" || n["state"] == "running";
        (up && n["lastBootTime"] != node["lastBootTime"]).then_some(n)
    })
    .await;
    assert_eq!(again["id"], id.as_str());
    // One boot on the new disk, not two.
    assert_eq!(s.file(&boots).await.as_deref(), Some("boot\n"), "{again}");
    let long = s.wait_task("j", "long", "running").await;
    assert_eq!(long["executionInfo"]["requeueCount"], 1, "{long}");
    // The task's files went with the old disk, but for its kept stdout.txt and stderr.txt.
    let (status, body) = s.get("/jobs/j/tasks/done/files/wd").await;
    assert_eq!(status, 404, "{body}");
    let resp = s
        .http
        .get(format!("{}/jobs/j/tasks/done/files/stdout.txt", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["ocp-batchpool-kept-copy"], "true");
    assert_eq!(resp.text().await.unwrap(), "kept\n");

    // taskcompletion: what runs finishes first, then the node is made again.
    assert_eq!(
        s.post("/jobs/j/tasks/long/terminate", &json!({})).await.0,
        204
    );
    s.wait_task("j", "long", "completed").await;
    s.add_tasks("j", vec![task("last", "sh -c 'sleep 2; echo finished'")])
        .await;
    s.wait_task("j", "last", "running").await;
    let finish = json!({"nodeReimageOption": "taskcompletion"});
    assert_eq!(
        s.post(&format!("/pools/ri/nodes/{id}/reimage"), &finish)
            .await
            .0,
        202
    );
    let last = s.wait_task("j", "last", "completed").await;
    assert_eq!(last["executionInfo"]["result"], "success", "{last}");
    assert_eq!(last["executionInfo"]["requeueCount"], 0, "{last}");
    s.wait_nodes("ri", 1, "idle").await;
}
on_both_runtimes!(
    reimaging_gives_a_node_a_new_disk_and_requeues_its_task,
    reimage
);

/// A deallocate requeues the node's running task and stops the node, its disk kept: it runs
/// nothing and is not billed while deallocated. A start boots it again: the start task runs
/// once more beside what it wrote before, and the task runs again.
async fn deallocate_and_start(rt: Rt) {
    let mut s = TestServer::start(rt).await;
    let pool = json!({"id": "da", "vmSize": "standard_a1", "targetDedicatedNodes": 1,
        "startTask": {"commandLine": "sh -c 'echo boot >> $AZ_BATCH_NODE_SHARED_DIR/boots'", "waitForSuccess": true}});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    let node = s.wait_nodes("da", 1, "idle").await[0].clone();
    let id = node["id"].as_str().unwrap().to_string();
    let at = format!("/pools/da/nodes/{id}");
    let op = |verb: &str| format!("{at}/{verb}");
    s.job_on("j", "da").await;
    s.add_tasks("j", vec![json!({"id": "long", "commandLine": "sleep 30"})])
        .await;
    s.wait_task("j", "long", "running").await;
    let (status, body) = s.post(&op("start"), &json!({})).await;
    assert_eq!(
        (status.as_u16(), body["code"].as_str()),
        (409, Some("NodeNotDeallocated")),
        "{body}"
    );
    let bad = json!({"nodeDeallocateOption": "later"});
    let (status, body) = s.post(&op("deallocate"), &bad).await;
    assert_eq!(
        (status.as_u16(), body["code"].as_str()),
        (400, Some("InvalidPropertyValue")),
        "{body}"
    );

    assert_eq!(s.post(&op("deallocate"), &json!({})).await.0, 202);
    common::wait_for("the node to be deallocated", || async {
        (s.get(&at).await.1["state"] == "deallocated").then_some(())
    })
    .await;
    let long = s.task("j", "long").await;
    assert_eq!(
        long["state"], "active",
        "requeued, with nowhere to run: {long}"
    );
    assert_eq!(long["executionInfo"]["requeueCount"], 1, "{long}");
    let (_, counts) = s.get("/nodecounts").await;
    assert_eq!(
        counts["value"][0]["dedicated"]["deallocated"], 1,
        "{counts}"
    );
    let billed: (i64,) = sqlx::query_as(
        "SELECT count(*) FROM usage_records WHERE node_id = $1 AND ended_at IS NULL",
    )
    .bind(&id)
    .fetch_one(&s.db().await)
    .await
    .unwrap();
    assert_eq!(billed.0, 0, "a deallocated node is not billed");
    if rt == Rt::Docker {
        let server = s.server_id().await;
        let container = common::docker_containers(&server)
            .into_iter()
            .find(|c| c["Config"]["Labels"]["batchpool.node"] == id.as_str())
            .expect("the node's container stays");
        assert_eq!(
            container["State"]["Running"], false,
            "its container is stopped"
        );
    }
    let (status, body) = s.post(&op("deallocate"), &json!({})).await;
    assert_eq!(status, 409, "{body}");
    // A restart leaves it deallocated: its adoption neither makes nor starts it again.
    s.kill().await;
    s.launch().await;
    common::wait_for("the restarted server's adoption", || async {
        (s.log_count("adopted existing nodes") == 2).then_some(())
    })
    .await;
    assert_eq!(s.get(&at).await.1["state"], "deallocated");
    if rt == Rt::Docker {
        assert!(
            !container_running(&s, &id).await,
            "its container is still stopped"
        );
    }

    assert_eq!(s.post(&op("start"), &json!({})).await.0, 202);
    let long = s.wait_task("j", "long", "running").await;
    assert_eq!(long["executionInfo"]["requeueCount"], 1, "{long}");
    let (_, again) = s.get(&at).await;
    assert_ne!(again["lastBootTime"], node["lastBootTime"], "{again}");
    let boots = s
        .file(&format!("/pools/da/nodes/{id}/files/shared/boots"))
        .await;
    assert_eq!(boots.as_deref(), Some("boot\nboot\n"), "the disk was kept");
}
on_both_runtimes!(
    a_deallocated_node_runs_nothing_until_it_is_started_again,
    deallocate_and_start
);

/// Whether the Docker node `id`'s container, which must exist, is running.
async fn container_running(s: &TestServer, id: &str) -> bool {
    let server = s.server_id().await;
    let container = common::docker_containers(&server)
        .into_iter()
        .find(|c| c["Config"]["Labels"]["batchpool.node"] == id)
        .expect("the node's container stays");
    container["State"]["Running"] == true
}

/// A reimage with retaineddata keeps the node's disk until the retention of the files of the
/// tasks that ran there has run out, then makes the node anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reimage_with_retained_data_waits_for_the_task_files_retention() {
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("rd").await;
    let node = s.nodes("rd").await[0].clone();
    let id = node["id"].as_str().unwrap().to_string();
    s.job_on("j", "rd").await;
    let kept =
        json!({"id": "kept", "commandLine": "echo kept", "constraints": {"retentionTime": "PT4S"}});
    s.add_tasks("j", vec![kept]).await;
    let kept = s.wait_task("j", "kept", "completed").await;
    let ended =
        chrono::DateTime::parse_from_rfc3339(kept["executionInfo"]["endTime"].as_str().unwrap())
            .unwrap();
    let retain = json!({"nodeReimageOption": "retaineddata"});
    assert_eq!(
        s.post(&format!("/pools/rd/nodes/{id}/reimage"), &retain)
            .await
            .0,
        202
    );
    let file = "/jobs/j/tasks/kept/files/stdout.txt";
    assert_eq!(s.file(file).await.as_deref(), Some("kept\n"));
    common::wait_for("the node reimaged", || async {
        let (_, n) = s.get(&format!("/pools/rd/nodes/{id}")).await;
        (n["state"] == "idle" && n["lastBootTime"] != node["lastBootTime"]).then_some(())
    })
    .await;
    let waited = chrono::Utc::now() - ended.with_timezone(&chrono::Utc);
    assert!(
        waited >= chrono::Duration::milliseconds(3500),
        "reimaged {waited} after the task ended, within its retention"
    );
    // Its kept copy is read until the retention ends too, then it is gone.
    common::wait_for("the task's files to expire", || async {
        (s.get(file).await.0 == 404).then_some(())
    })
    .await;
    let waited = chrono::Utc::now() - ended.with_timezone(&chrono::Utc);
    assert!(waited >= chrono::Duration::seconds(4), "{waited}");
}

/// What support asks for when a node misbehaves: its agent's log and the server's record of it,
/// uploaded to a container the caller gives with a SAS URL; and the node's tasks that run now.
async fn service_logs(rt: Rt) {
    let s = TestServer::start_allowing_local_urls(rt, &[]).await;
    let pool = json!({"id": "logs", "vmSize": "standard_a1", "targetDedicatedNodes": 1});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    let id = s.wait_nodes("logs", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    s.job_on("j", "logs").await;
    s.add_tasks("j", vec![json!({"id": "long", "commandLine": "sleep 30"})])
        .await;
    s.wait_task("j", "long", "running").await;
    let (_, node) = s.get(&format!("/pools/logs/nodes/{id}")).await;
    let recent = &node["recentTasks"][0];
    assert_eq!(
        (&recent["jobId"], &recent["taskId"], &recent["taskState"]),
        (&json!("j"), &json!("long"), &json!("running")),
        "{node}"
    );

    let (name, url) = common::blobs::container("rwl").await;
    let since = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    let path = format!("/pools/logs/nodes/{id}/uploadbatchservicelogs");
    let (status, answer) = s
        .post(&path, &json!({"containerUrl": url, "startTime": since}))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["numberOfFilesUploaded"], 2, "{answer}");
    let dir = answer["virtualDirectoryName"].as_str().unwrap();
    assert!(dir.starts_with(&format!("logs/{id}/")), "{answer}");
    let log = common::blobs::get_blob(&format!("{name}/{dir}batchpool-agent.log")).await;
    let log = log.expect("the agent's log").0;
    assert!(log.contains("the node agent runs"), "{log}");
    let record = common::blobs::get_blob(&format!("{name}/{dir}batchpool-node.json")).await;
    assert!(record.expect("the node's record").0.contains(&id));

    // Bad bodies are refused by name.
    let (status, answer) = s.post(&path, &json!({"startTime": since})).await;
    assert_eq!(
        (status.as_u16(), answer["code"].as_str()),
        (400, Some("MissingRequiredProperty")),
        "{answer}"
    );
    let managed =
        json!({"containerUrl": url, "startTime": since, "identityReference": {"resourceId": "x"}});
    let (status, answer) = s.post(&path, &managed).await;
    assert_eq!(
        (status.as_u16(), answer["code"].as_str()),
        (400, Some("InvalidPropertyValue")),
        "{answer}"
    );
}
on_both_runtimes!(
    service_logs_are_uploaded_and_a_node_shows_its_tasks,
    service_logs
);

/// A task's `affinityInfo` names a node (its `affinityId`, as a node reports it): the task runs
/// there while that node has room, and elsewhere, at once, when it has none. Each node is named
/// in turn, so the first node in the dispatcher's order cannot pass for the named one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_runs_on_the_node_its_affinity_names_when_it_has_room() {
    let s = TestServer::start(Rt::Local).await;
    let pool = json!({"id": "near", "vmSize": "standard_a1", "targetDedicatedNodes": 2});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    let nodes = s.wait_nodes("near", 2, "idle").await;
    let affinity: Vec<String> = nodes
        .iter()
        .map(|n| n["affinityId"].as_str().unwrap().to_string())
        .collect();
    let node_ids: Vec<&str> = nodes.iter().map(|n| n["id"].as_str().unwrap()).collect();
    s.job_on("j", "near").await;
    let near = |id: &str, command: &str, at: &str| json!({"id": id, "commandLine": command, "affinityInfo": {"affinityId": at}});
    for (i, at) in affinity.iter().enumerate() {
        let id = format!("on{i}");
        s.add_tasks("j", vec![near(&id, "true", at)]).await;
        let done = s.wait_task("j", &id, "completed").await;
        assert_eq!(done["nodeInfo"]["nodeId"], node_ids[i], "{done}");
        assert_eq!(done["affinityInfo"]["affinityId"], *at, "answered as given");
    }
    // The named node busy: the task goes to the other one rather than wait.
    s.add_tasks("j", vec![near("busy", "sleep 600", &affinity[0])])
        .await;
    let busy = s.wait_task("j", "busy", "running").await;
    assert_eq!(busy["nodeInfo"]["nodeId"], node_ids[0], "{busy}");
    s.add_tasks("j", vec![near("elsewhere", "true", &affinity[0])])
        .await;
    let done = s.wait_task("j", "elsewhere", "completed").await;
    assert_eq!(done["nodeInfo"]["nodeId"], node_ids[1], "{done}");
    // An affinityInfo without its affinityId is refused.
    let (status, body) = s
        .post(
            "/jobs/j/tasks",
            &json!({"id": "x", "commandLine": "true", "affinityInfo": {}}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(s.post("/jobs/j/terminate", &json!({})).await.0, 202);
}
