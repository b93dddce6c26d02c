//! Pools and nodes end to end, on both runtimes: what a user with curl would do and check.

#[macro_use]
mod common;

use std::collections::HashSet;

use common::{docker_containers, wait_for, Rt, TestServer};
use reqwest::Method;
use serde_json::{json, Value};

fn ids(nodes: &[Value]) -> HashSet<String> {
    nodes
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect()
}

async fn pool_lifecycle(rt: Rt) {
    let s = TestServer::start(rt).await;
    let (status, body) = s
        .post("/pools", &json!({"id": "life", "vmSize": "STANDARD_A1", "targetDedicatedNodes": 2, "displayName": "Life", "metadata": [{"name": "team", "value": "ml"}]}))
        .await;
    assert_eq!(status, 201, "{body}");

    let nodes = s.wait_nodes("life", 2, "idle").await;
    let (status, pool) = s.get("/pools/life").await;
    assert_eq!(status, 200);
    assert_eq!(pool["id"], "life");
    assert_eq!(pool["displayName"], "Life");
    assert_eq!(
        pool["vmSize"], "standard_a1",
        "Azure reports vmSize in lower case"
    );
    assert_eq!(pool["state"], "active");
    assert_eq!(pool["allocationState"], "steady");
    assert_eq!(pool["currentDedicatedNodes"], 2);
    assert_eq!(pool["targetDedicatedNodes"], 2);
    assert_eq!(pool["taskSlotsPerNode"], 1);
    assert_eq!(pool["taskSchedulingPolicy"]["nodeFillType"], "spread");
    assert_eq!(
        pool["taskSchedulingPolicy"]["jobDefaultOrder"], "creationtime",
        "the default: the oldest of jobs of equal priority first"
    );
    assert_eq!(pool["resizeTimeout"], "PT15M");
    assert_eq!(pool["metadata"], json!([{"name": "team", "value": "ml"}]));
    assert!(pool["eTag"].as_str().unwrap().starts_with("0x"));
    assert!(pool.get("resizeErrors").is_none());
    for node in &nodes {
        assert_eq!(node["vmSize"], "standard_a1");
        assert_eq!(node["isDedicated"], true);
        assert!(node["url"].as_str().unwrap().ends_with(&format!(
            "/pools/life/nodes/{}",
            node["id"].as_str().unwrap()
        )));
    }
    let (_, one) = s
        .get(&format!(
            "/pools/life/nodes/{}",
            nodes[0]["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(one["id"], nodes[0]["id"]);

    // The runtime holds exactly the nodes the API shows.
    assert_eq!(
        s.runtime_nodes().await.into_iter().collect::<HashSet<_>>(),
        ids(&nodes)
    );
    if rt == Rt::Docker {
        let server_id = s.server_id().await;
        for c in docker_containers(&server_id) {
            assert_eq!(
                c["HostConfig"]["NanoCpus"], 1_000_000_000i64,
                "standard_a1 has 1 vCPU"
            );
            assert_eq!(
                c["HostConfig"]["Memory"],
                1792i64 * 1024 * 1024,
                "standard_a1 has 1.75 GiB"
            );
            assert_eq!(c["HostConfig"]["Privileged"], false);
            assert_eq!(c["State"]["Running"], true);
            let labels = &c["Config"]["Labels"];
            assert_eq!(labels["batchpool.server"], server_id.as_str());
            assert_eq!(labels["batchpool.pool"], "life");
            assert_eq!(labels["batchpool.account"], "batchpool");
            assert!(ids(&nodes).contains(labels["batchpool.node"].as_str().unwrap()));
        }
    }

    // Grow, shrink, and shrink to nothing.
    let (status, _) = s
        .post("/pools/life/resize", &json!({"targetDedicatedNodes": 3}))
        .await;
    assert_eq!(status, 202);
    let grown = s.wait_nodes("life", 3, "idle").await;
    assert!(
        ids(&nodes).is_subset(&ids(&grown)),
        "growing keeps the existing nodes"
    );
    assert_eq!(s.runtime_nodes().await.len(), 3);

    let (status, _) = s
        .post(
            "/pools/life/resize",
            &json!({"targetDedicatedNodes": 1, "resizeTimeout": "PT10M00S"}),
        )
        .await;
    assert_eq!(status, 202);
    let shrunk = s.wait_nodes("life", 1, "idle").await;
    assert_eq!(
        s.runtime_nodes().await,
        vec![shrunk[0]["id"].as_str().unwrap().to_string()]
    );
    assert_eq!(s.get("/pools/life").await.1["resizeTimeout"], "PT10M");

    let (status, _) = s
        .post("/pools/life/resize", &json!({"targetDedicatedNodes": 0}))
        .await;
    assert_eq!(status, 202);
    s.wait_nodes("life", 0, "idle").await;
    assert!(
        s.runtime_nodes().await.is_empty(),
        "resize to 0 removes every node"
    );
    assert_eq!(s.get("/pools/life").await.1["currentDedicatedNodes"], 0);

    // Delete: accepted, then the pool is gone together with its nodes.
    let (status, _) = s
        .post("/pools/life/resize", &json!({"targetDedicatedNodes": 2}))
        .await;
    assert_eq!(status, 202);
    s.wait_nodes("life", 2, "idle").await;
    let (status, _) = s.delete("/pools/life").await;
    assert_eq!(status, 202);
    let (status, body) = s.get("/pools/life").await;
    assert!(
        status == 404 || body["state"] == "deleting",
        "{status} {body}"
    );
    wait_for("the pool to be deleted", || async {
        (s.get("/pools/life").await.0 == 404).then_some(())
    })
    .await;
    assert!(
        s.runtime_nodes().await.is_empty(),
        "deleting a pool removes its nodes"
    );
    assert_eq!(s.get("/pools").await.1["value"], json!([]));
}
on_both_runtimes!(pool_lifecycle_create_resize_delete, pool_lifecycle);

async fn start_task(rt: Rt) {
    let s = TestServer::start(rt).await;
    let command = "echo pool=$AZ_BATCH_POOL_ID node=$AZ_BATCH_NODE_ID greeting=$GREETING; \
                   echo shared=$AZ_BATCH_NODE_SHARED_DIR; pwd; echo oops >&2; touch $AZ_BATCH_NODE_SHARED_DIR/ready";
    let (status, body) = s
        .post(
            "/pools",
            &json!({"id": "st", "vmSize": "standard_a1_v2", "targetDedicatedNodes": 2,
                    "startTask": {"commandLine": command, "waitForSuccess": true,
                                  "environmentSettings": [{"name": "GREETING", "value": "hello world"}]}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let nodes = s.wait_nodes("st", 2, "idle").await;
    for node in &nodes {
        let id = node["id"].as_str().unwrap();
        let info = &node["startTaskInfo"];
        assert_eq!(info["state"], "completed", "{node}");
        assert_eq!(info["result"], "success");
        assert_eq!(info["exitCode"], 0);
        assert_eq!(info["retryCount"], 0);
        assert_eq!(node["startTask"]["commandLine"], command);
        let stdout = s
            .http
            .get(format!(
                "{}/pools/st/nodes/{id}/files/startup/stdout.txt",
                s.base
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(stdout.status(), 200);
        let stdout = stdout.text().await.unwrap();
        let root = match rt {
            Rt::Docker => "/mnt/batch/tasks".to_string(),
            Rt::Local => s
                .data_dir
                .path()
                .join("nodes")
                .join(id)
                .display()
                .to_string(),
        };
        assert_eq!(
            stdout,
            format!(
                "pool=st node={id} greeting=hello world\nshared={root}/shared\n{root}/startup/wd\n"
            ),
        );
        let stderr = s
            .http
            .get(format!(
                "{}/pools/st/nodes/{id}/files/startup%2Fstderr.txt",
                s.base
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(stderr.text().await.unwrap(), "oops\n");
        let (status, body) = s
            .get(&format!("/pools/st/nodes/{id}/files/..%2F..%2Fserver.log"))
            .await;
        assert_eq!(status, 400, "no path escapes the node: {body}");
    }

    // A failing start task is retried, then leaves the node starttaskfailed with the reason.
    let (status, _) = s
        .post(
            "/pools",
            &json!({"id": "bad-start", "vmSize": "standard_a1", "targetDedicatedNodes": 1,
                    "startTask": {"commandLine": "echo try >> $AZ_BATCH_NODE_SHARED_DIR/tries; exit 3", "maxTaskRetryCount": 2}}),
        )
        .await;
    assert_eq!(status, 201);
    let nodes = s.wait_nodes("bad-start", 1, "starttaskfailed").await;
    let info = &nodes[0]["startTaskInfo"];
    assert_eq!(info["result"], "failure");
    assert_eq!(info["exitCode"], 3);
    assert_eq!(info["retryCount"], 2);
    assert_eq!(info["failureInfo"]["category"], "usererror");
    let id = nodes[0]["id"].as_str().unwrap();
    let tries = s
        .http
        .get(format!(
            "{}/pools/bad-start/nodes/{id}/files/shared/tries",
            s.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(
        tries.text().await.unwrap(),
        "try\ntry\ntry\n",
        "1 run + 2 retries"
    );
}
on_both_runtimes!(start_task_runs_as_each_node_joins, start_task);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_image_gives_a_clear_error_not_a_hang() {
    let s = TestServer::start(Rt::Docker).await;
    let (status, _) = s
        .post(
            "/pools",
            &json!({"id": "noimg", "vmSize": "standard_a1", "targetDedicatedNodes": 2,
                    "virtualMachineConfiguration": {"nodeAgentSKUId": "batch.node.ubuntu 22.04",
                        "containerConfiguration": {"type": "dockerCompatible", "containerImageNames": ["batchpool-absent:1.0"]}}}),
        )
        .await;
    assert_eq!(status, 201);
    let nodes = s.wait_nodes("noimg", 2, "unusable").await;
    for node in &nodes {
        assert_eq!(node["errors"][0]["code"], "ImageNotFound");
        assert!(node["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("batchpool-absent:1.0"));
    }
    let (_, pool) = s.get("/pools/noimg").await;
    assert_eq!(pool["allocationState"], "steady");
    assert_eq!(
        pool["resizeErrors"].as_array().unwrap().len(),
        1,
        "one error, not one per node: {pool}"
    );
    assert_eq!(pool["resizeErrors"][0]["code"], "ImageNotFound");
    assert_eq!(
        pool["virtualMachineConfiguration"]["containerConfiguration"]["containerImageNames"][0],
        "batchpool-absent:1.0"
    );
    assert!(s.runtime_nodes().await.is_empty(), "no container was made");
    // The pool can still be emptied and deleted.
    assert_eq!(s.delete("/pools/noimg").await.0, 202);
    wait_for("the pool to be deleted", || async {
        (s.get("/pools/noimg").await.0 == 404).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_metadata_and_start_task_can_be_updated() {
    let s = TestServer::start(Rt::Local).await;
    assert_eq!(
        s.post("/pools", &json!({"id": "upd", "vmSize": "standard_a1"}))
            .await
            .0,
        201
    );
    let (_, before) = s.get("/pools/upd").await;
    let patched = s
        .request(
            reqwest::Method::PATCH,
            "/pools/upd",
            Some(&json!({"metadata": [{"name": "a", "value": "1"}]})),
        )
        .await;
    assert_eq!(patched.0, 200, "{}", patched.1);
    let (_, after) = s.get("/pools/upd").await;
    assert_eq!(after["metadata"], json!([{"name": "a", "value": "1"}]));
    assert_ne!(after["eTag"], before["eTag"], "a change makes a new eTag");

    // The display name and the scheduling policy change too; what the PATCH leaves out stays.
    let patch =
        json!({"displayName": "Renamed", "taskSchedulingPolicy": {"jobDefaultOrder": "none"}});
    let patched = s
        .request(reqwest::Method::PATCH, "/pools/upd", Some(&patch))
        .await;
    assert_eq!(patched.0, 200, "{}", patched.1);
    let (_, after) = s.get("/pools/upd").await;
    assert_eq!(after["displayName"], "Renamed");
    let policy = json!({"nodeFillType": "spread", "jobDefaultOrder": "none"});
    assert_eq!(after["taskSchedulingPolicy"], policy);
    assert_eq!(after["metadata"], json!([{"name": "a", "value": "1"}]));
    let patch = json!({"taskSchedulingPolicy": {"nodeFillType": "pack"}});
    let patched = s
        .request(reqwest::Method::PATCH, "/pools/upd", Some(&patch))
        .await;
    assert_eq!(patched.0, 200, "{}", patched.1);
    let policy = json!({"nodeFillType": "pack", "jobDefaultOrder": "none"});
    assert_eq!(s.get("/pools/upd").await.1["taskSchedulingPolicy"], policy);
    let patch =
        json!({"taskSchedulingPolicy": {"nodeFillType": "pack", "jobDefaultOrder": "fifo"}});
    let patched = s
        .request(reqwest::Method::PATCH, "/pools/upd", Some(&patch))
        .await;
    assert_eq!(patched.0, 400, "a bad value changes nothing: {}", patched.1);
    assert_eq!(s.get("/pools/upd").await.1["taskSchedulingPolicy"], policy);

    let (status, _) = s
        .post(
            "/pools/upd/updateproperties",
            &json!({"metadata": [], "startTask": {"commandLine": "true"}}),
        )
        .await;
    assert_eq!(status, 204);
    let (_, after) = s.get("/pools/upd").await;
    assert!(after.get("metadata").is_none());
    assert_eq!(after["startTask"]["commandLine"], "true");
    let (status, _) = s
        .post("/pools/upd/updateproperties", &json!({"metadata": []}))
        .await;
    assert_eq!(status, 204);
    assert!(
        s.get("/pools/upd").await.1.get("startTask").is_none(),
        "updateproperties replaces: no startTask removes it"
    );

    // Stop resize on a steady pool has nothing to stop, and the poller's condition holds at once.
    assert_eq!(s.post("/pools/upd/stopresize", &json!({})).await.0, 202);
    assert_eq!(s.get("/pools/upd").await.1["allocationState"], "steady");
}

async fn reboot_and_remove(rt: Rt) {
    let s = TestServer::start(rt).await;
    let (status, _) = s
        .post("/pools", &json!({"id": "rr", "vmSize": "standard_a1", "targetDedicatedNodes": 3,
                                "startTask": {"commandLine": "echo boot >> $AZ_BATCH_NODE_SHARED_DIR/boots"}}))
        .await;
    assert_eq!(status, 201);
    let nodes = s.wait_nodes("rr", 3, "idle").await;
    let first = nodes[0]["id"].as_str().unwrap().to_string();
    let boots_path = format!("/pools/rr/nodes/{first}/files/shared/boots");
    let boots = || s.file(&boots_path);
    wait_for("the first boot", || async {
        (boots().await.as_deref() == Some("boot\n")).then_some(())
    })
    .await;

    // A reboot keeps the node's disk and runs the start task again.
    assert_eq!(
        s.post(
            &format!("/pools/rr/nodes/{first}/reboot"),
            &json!({"nodeRebootOption": "requeue"})
        )
        .await
        .0,
        202
    );
    wait_for("the second boot", || async {
        (boots().await.as_deref() == Some("boot\nboot\n")).then_some(())
    })
    .await;
    s.wait_nodes("rr", 3, "idle").await;

    // removenodes takes exactly the named node and shrinks the target.
    let second = nodes[1]["id"].as_str().unwrap().to_string();
    assert_eq!(
        s.post(
            "/pools/rr/removenodes",
            &json!({"nodeList": [second.clone()]})
        )
        .await
        .0,
        202
    );
    let left = s.wait_nodes("rr", 2, "idle").await;
    assert!(left.iter().all(|n| n["id"] != second.as_str()));
    assert_eq!(s.get("/pools/rr").await.1["targetDedicatedNodes"], 2);
    assert!(!s.runtime_nodes().await.contains(&second));
    let (status, body) = s
        .post(
            "/pools/rr/removenodes",
            &json!({"nodeList": ["tvmps_nope_d"]}),
        )
        .await;
    assert_eq!(
        (status.as_u16(), body["code"].as_str()),
        (404, Some("NodeNotFound"))
    );

    let (_, counts) = s.get("/nodecounts").await;
    assert_eq!(counts["value"][0]["dedicated"]["idle"], 2);
    let (_, images) = s.get("/supportedimages").await;
    assert!(
        images["value"][0]["capabilities"][0]
            .as_str()
            .unwrap()
            .contains(common::TEST_IMAGE),
        "{images}"
    );
}
on_both_runtimes!(
    reboot_reruns_the_start_task_and_removenodes_takes_the_named_node,
    reboot_and_remove
);

/// A node that leaves with `retaineddata` keeps its tasks' files, readable, until their
/// retention has run out, then goes: a task's files live on its node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_leaving_with_retained_data_keeps_its_tasks_files_until_their_retention() {
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("p").await;
    s.job_on("j", "p").await;
    let task = json!({"id": "t", "commandLine": "printf kept > out",
                      "constraints": {"retentionTime": "PT6S"}});
    s.add_tasks("j", vec![task]).await;
    let done = s.wait_task("j", "t", "completed").await;
    let ended =
        chrono::DateTime::parse_from_rfc3339(done["executionInfo"]["endTime"].as_str().unwrap())
            .unwrap();
    let resize = json!({"targetDedicatedNodes": 0, "nodeDeallocationOption": "retaineddata"});
    assert_eq!(s.post("/pools/p/resize", &resize).await.0, 202);
    let file = "/jobs/j/tasks/t/files/wd/out";
    wait_for("the node to leave", || async {
        let nodes = s.nodes("p").await;
        (nodes.len() == 1 && nodes[0]["state"] == "leavingpool").then_some(())
    })
    .await;
    assert_eq!(s.file(file).await.as_deref(), Some("kept"));
    wait_for("the node to go", || async {
        s.nodes("p").await.is_empty().then_some(())
    })
    .await;
    let gone = chrono::Utc::now();
    assert!(
        gone - ended.with_timezone(&chrono::Utc) >= chrono::Duration::milliseconds(5500),
        "the node went at {gone}, before the retention from {ended} ran out"
    );
    let (status, body) = s.get(file).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["code"], "NodeNotFound", "{body}");
}

/// A pool's `imageReference` chooses its nodes' image through `--image-map`: by
/// publisher/offer/sku regardless of case, or by `virtualMachineImageId` or a gallery's image id;
/// one the map lacks gets
/// the Debian image (`--marketplace-image`), and `containerConfiguration`'s first image wins over
/// either.
/// `nodeAgentSKUId` is taken whatever it names and returned as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_reference_chooses_the_node_image_through_the_image_map() {
    const MAPPED: &str = "batchpool-test/mapped-node:1";
    const GALLERY: &str = "/subscriptions/s/galleries/g/images/tools/versions/1.0.0";
    const SHARED: &str = "/SharedGalleries/g/Images/tools/Versions/2";
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("images.json");
    let entries = json!({"Canonical/Ubuntu/22_04-LTS": MAPPED, GALLERY: MAPPED, SHARED: MAPPED});
    std::fs::write(&map, entries.to_string()).unwrap();
    let flags = ["--image-map", map.to_str().unwrap()];
    let s = TestServer::start_with(Rt::Docker, Some(common::fresh_database().await), &flags).await;
    common::run_ok(std::process::Command::new("docker").args(["tag", common::TEST_IMAGE, MAPPED]));

    let sku = "batch.node.ubuntu 22.04";
    let unmapped = json!({"publisher": "other", "offer": "os", "sku": "1"});
    let pools = [
        (
            "by-name",
            json!({"imageReference": {"publisher": "canonical", "offer": "ubuntu", "sku": "22_04-lts", "version": "latest"}, "nodeAgentSKUId": sku}),
            MAPPED,
        ),
        (
            "by-id",
            json!({"imageReference": {"virtualMachineImageId": GALLERY}, "nodeAgentSKUId": sku}),
            MAPPED,
        ),
        (
            "unmapped",
            json!({"imageReference": unmapped, "nodeAgentSKUId": sku}),
            batchpool::runtime::docker::DEBIAN_IMAGE,
        ),
        (
            "named",
            json!({"imageReference": unmapped, "nodeAgentSKUId": sku,
            "containerConfiguration": {"type": "dockerCompatible", "containerImageNames": [MAPPED]}}),
            MAPPED,
        ),
    ];
    for (id, config, _) in &pools {
        let body = json!({"id": id, "vmSize": "standard_a1", "targetDedicatedNodes": 1,
            "virtualMachineConfiguration": config});
        let (status, answer) = s.post("/pools", &body).await;
        assert_eq!(status, 201, "{answer}");
    }
    for (id, config, _) in &pools {
        s.wait_nodes(id, 1, "idle").await;
        let (_, pool) = s.get(&format!("/pools/{id}")).await;
        assert_eq!(&pool["virtualMachineConfiguration"], config, "{pool}");
    }
    let containers = docker_containers(&s.server_id().await);
    for (id, _, image) in &pools {
        let images: Vec<&Value> = containers
            .iter()
            .filter(|c| c["Config"]["Labels"]["batchpool.pool"] == *id)
            .map(|c| &c["Config"]["Image"])
            .collect();
        assert_eq!(images, [image], "the node of {id}");
    }
}

/// As on Azure, a PATCH changes `vmSize`, `taskSlotsPerNode`, `virtualMachineConfiguration`,
/// `enableInterNodeCommunication`, `displayName`, `taskSchedulingPolicy` and `upgradePolicy`
/// only while the pool has no nodes; the nodes made after it have the new size, slots and image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_pool_changes_its_node_size_slots_and_image() {
    const RETAGGED: &str = "batchpool-test/reshaped-node:1";
    let s = TestServer::start_with(Rt::Docker, Some(common::fresh_database().await), &[]).await;
    common::run_ok(std::process::Command::new("docker").args([
        "tag",
        common::TEST_IMAGE,
        RETAGGED,
    ]));
    let body = json!({"id": "reshaped", "vmSize": "standard_a1", "targetDedicatedNodes": 1});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("reshaped", 1, "idle").await;
    let config = json!({"nodeAgentSKUId": "batch.node.ubuntu 22.04", "containerConfiguration":
        {"type": "dockerCompatible", "containerImageNames": [RETAGGED]}});
    let reshape = json!({"vmSize": "standard_d1_v2", "taskSlotsPerNode": 3,
        "virtualMachineConfiguration": config, "enableInterNodeCommunication": true});
    let patch = |body: Value| {
        let s = &s;
        async move {
            s.request(reqwest::Method::PATCH, "/pools/reshaped", Some(&body))
                .await
        }
    };
    let (status, answer) = patch(reshape.clone()).await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["code"], "OperationInvalidForCurrentState");
    let (_, pool) = s.get("/pools/reshaped").await;
    assert_eq!(
        pool["vmSize"], "standard_a1",
        "a refused PATCH changes nothing"
    );
    let policy = json!({"nodeFillType": "pack"});
    for only_empty in [
        json!({"displayName": "renamed", "metadata": [{"name": "m", "value": "v"}]}),
        json!({"taskSchedulingPolicy": policy}),
        json!({"upgradePolicy": {"mode": "manual"}}),
    ] {
        let (status, answer) = patch(only_empty.clone()).await;
        assert_eq!(status, 409, "{only_empty}: {answer}");
    }
    let (_, pool) = s.get("/pools/reshaped").await;
    assert!(pool.get("displayName").is_none(), "{pool}");
    assert!(pool.get("metadata").is_none(), "{pool}");
    let (status, _) = patch(json!({"metadata": [{"name": "m", "value": "v"}]})).await;
    assert_eq!(status, 200, "metadata changes on a pool with nodes");
    let resize = json!({"targetDedicatedNodes": 0});
    assert_eq!(s.post("/pools/reshaped/resize", &resize).await.0, 202);
    s.wait_nodes("reshaped", 0, "idle").await;
    // Bad values are refused by name, empty or not.
    for (bad, name) in [
        (json!({"vmSize": "standard_huge"}), "vmSize"),
        (json!({"taskSlotsPerNode": 0}), "taskSlotsPerNode"),
        (
            json!({"virtualMachineConfiguration": {"osDisk": {"caching": "none"}}}),
            "virtualMachineConfiguration.osDisk",
        ),
    ] {
        let (status, answer) = patch(bad).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["values"][0]["value"], name, "{answer}");
    }
    let (status, answer) = patch(reshape).await;
    assert_eq!(status, 200, "{answer}");
    let renamed = json!({"displayName": "renamed", "taskSchedulingPolicy": policy});
    assert_eq!(patch(renamed).await.0, 200);
    let (_, pool) = s.get("/pools/reshaped").await;
    assert_eq!(pool["displayName"], "renamed", "{pool}");
    assert_eq!(
        pool["taskSchedulingPolicy"]["nodeFillType"], "pack",
        "{pool}"
    );
    // Nor can a node get fewer slots than a waiting task needs.
    s.job_on("j", "reshaped").await;
    let wide = json!({"id": "wide", "commandLine": "true", "requiredSlots": 2});
    assert_eq!(s.post("/jobs/j/tasks", &wide).await.0, 201);
    let (status, answer) = patch(json!({"taskSlotsPerNode": 1})).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["values"][0]["value"], "taskSlotsPerNode", "{answer}");
    let (_, pool) = s.get("/pools/reshaped").await;
    assert_eq!(pool["vmSize"], "standard_d1_v2");
    assert_eq!(pool["taskSlotsPerNode"], 3);
    assert_eq!(pool["virtualMachineConfiguration"], config);
    assert_eq!(pool["enableInterNodeCommunication"], true);
    let resize = json!({"targetDedicatedNodes": 1});
    assert_eq!(s.post("/pools/reshaped/resize", &resize).await.0, 202);
    s.wait_nodes("reshaped", 1, "idle").await;
    let containers = docker_containers(&s.server_id().await);
    let node = containers
        .iter()
        .find(|c| c["Config"]["Labels"]["batchpool.pool"] == "reshaped")
        .unwrap();
    assert_eq!(node["Config"]["Image"], RETAGGED);
    assert_eq!(
        node["HostConfig"]["Memory"],
        3584i64 * 1024 * 1024,
        "standard_d1_v2's memory"
    );
    // Its three slots run three tasks at once (beside the one that needed two, done by now).
    s.wait_task("j", "wide", "completed").await;
    let tasks = (1..=3)
        .map(|i| json!({"id": format!("t{i}"), "commandLine": "sleep 600"}))
        .collect();
    s.add_tasks("j", tasks).await;
    wait_for("three tasks running on the one node", || async {
        let (_, counts) = s.get("/jobs/j/taskcounts").await;
        (counts["taskCounts"]["running"] == 3).then_some(())
    })
    .await;
    assert_eq!(s.post("/jobs/j/terminate", &json!({})).await.0, 202);
}

/// Azure retired classic node communication: scripts now ask for `simplified`, where nodes
/// connect out to the service. Every node's agent here connects out to the server, so
/// `default` and `simplified` are taken and shown, the current mode is always `simplified`,
/// and `classic` is refused by name, changing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_take_simplified_node_communication_and_refuse_classic() {
    let s = TestServer::start(Rt::Local).await;
    let mode = |p: &Value| {
        (
            p["targetNodeCommunicationMode"].clone(),
            p["currentNodeCommunicationMode"].clone(),
        )
    };
    let body = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1,
        "targetNodeCommunicationMode": "simplified"});
    let (code, answer) = s.post("/pools", &body).await;
    assert_eq!(code, 201, "{answer}");
    s.wait_nodes("p", 1, "idle").await;
    let simplified = (json!("simplified"), json!("simplified"));
    let default = (json!("default"), json!("simplified"));
    assert_eq!(mode(&s.get("/pools/p").await.1), simplified);
    let plain = json!({"id": "q", "vmSize": "standard_a1"});
    assert_eq!(s.post("/pools", &plain).await.0, 201);
    assert_eq!(mode(&s.get("/pools/q").await.1), default);

    let patch = |m: &str| json!({ "targetNodeCommunicationMode": m });
    let (code, answer) = s
        .request(Method::PATCH, "/pools/p", Some(&patch("default")))
        .await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(mode(&s.get("/pools/p").await.1), default);
    let (code, _) = s
        .request(Method::PATCH, "/pools/p", Some(&patch("Simplified")))
        .await;
    assert_eq!(code, 200);
    assert_eq!(mode(&s.get("/pools/p").await.1), simplified);
    for bad in ["classic", "fast"] {
        let (code, answer) = s
            .request(Method::PATCH, "/pools/p", Some(&patch(bad)))
            .await;
        assert_eq!(code, 400, "{answer}");
        let named = answer["values"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["key"] == "PropertyName");
        assert_eq!(
            named.unwrap()["value"],
            "targetNodeCommunicationMode",
            "{answer}"
        );
        assert_eq!(mode(&s.get("/pools/p").await.1), simplified);
    }
    // updateproperties replaces it: left out, it is `default` again.
    let replace =
        json!({"metadata": [], "applicationPackageReferences": [], "certificateReferences": []});
    let (code, answer) = s.post("/pools/p/updateproperties", &replace).await;
    assert_eq!(code, 204, "{answer}");
    assert_eq!(mode(&s.get("/pools/p").await.1), default);
}

/// An upgradePolicy of mode `manual` is taken and shown on pool add and PATCH (nothing on a node
/// is upgraded by itself; a reimage gives it the pool's image anew); automatic and rolling
/// upgrades, and their settings, are refused by name and make nothing.
#[tokio::test]
async fn a_manual_upgrade_policy_is_taken_and_automatic_ones_refused() {
    let s = TestServer::start(Rt::Local).await;
    for (policy, name) in [
        (json!({"mode": "automatic"}), "upgradePolicy.mode"),
        (json!({"mode": "rolling"}), "upgradePolicy.mode"),
        (
            json!({"mode": "manual", "automaticOSUpgradePolicy": {"enableAutomaticOSUpgrade": true}}),
            "upgradePolicy.automaticOSUpgradePolicy",
        ),
        (
            json!({"automaticOSUpgradePolicy": {}}),
            "upgradePolicy.mode",
        ),
        (json!("manual"), "upgradePolicy"),
    ] {
        let body = json!({"id": "up", "vmSize": "standard_a1", "upgradePolicy": policy});
        let (status, answer) = s.post("/pools", &body).await;
        assert_eq!(status, 400, "{policy}: {answer}");
        assert_eq!(answer["values"][0]["value"], name, "{policy}: {answer}");
    }
    assert_eq!(
        s.get("/pools/up").await.0,
        404,
        "a refused pool is not made"
    );
    let body = json!({"id": "up", "vmSize": "standard_a1", "upgradePolicy": {"mode": "manual"}});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    let (_, pool) = s.get("/pools/up").await;
    assert_eq!(pool["upgradePolicy"], json!({"mode": "manual"}), "{pool}");
    let body = json!({"id": "plain", "vmSize": "standard_a1"});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    let (_, pool) = s.get("/pools/plain").await;
    assert!(pool.get("upgradePolicy").is_none(), "{pool}");
    let patch = |body: Value| {
        let s = &s;
        async move {
            s.request(reqwest::Method::PATCH, "/pools/plain", Some(&body))
                .await
        }
    };
    let (status, answer) = patch(json!({"upgradePolicy": {"mode": "automatic"}})).await;
    assert_eq!(status, 400, "{answer}");
    let (_, pool) = s.get("/pools/plain").await;
    assert!(
        pool.get("upgradePolicy").is_none(),
        "a refused PATCH changes nothing: {pool}"
    );
    let (status, answer) = patch(json!({"upgradePolicy": {"mode": "Manual"}})).await;
    assert_eq!(status, 200, "{answer}");
    let (_, pool) = s.get("/pools/plain").await;
    assert_eq!(pool["upgradePolicy"], json!({"mode": "manual"}), "{pool}");
}
