//! Every published api-version of the data plane, spoken as raw HTTP with bodies in that
//! version's own shape (its property names, its answers), as its SDK sends and reads them:
//! a pool with a start task that downloads a resource file, a job, tasks through the collection
//! route, task counts. The shapes are Azure's specifications'
//! (specification/batch/data-plane/Microsoft.Batch/stable/*/BatchService.json).

mod common;

use batchpool::api::versions::PUBLISHED;
use common::blobs::{container, put_blob};
use common::{Rt, TestServer};
use serde_json::{json, Value};

/// What `version` calls a pool's task slots and a resource file's URL.
fn names(version: &str) -> (&'static str, &'static str) {
    let before = |v: &str| {
        PUBLISHED.iter().position(|p| *p == version) < PUBLISHED.iter().position(|p| *p == v)
    };
    (
        if before("2020-09-01.12.0") {
            "maxTasksPerNode"
        } else {
            "taskSlotsPerNode"
        },
        if before("2018-12-01.8.0") {
            "blobSource"
        } else {
            "httpUrl"
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_published_version_runs_a_pool_job_and_tasks_in_its_own_shape() {
    let s = TestServer::start_allowing_local_urls(Rt::Local, &[]).await;
    let (name, url) = container("r").await;
    put_blob(&format!("{name}/in.txt"), "resource\n").await;
    let (base, sas) = url.split_once('?').unwrap();
    let file_url = format!("{base}/in.txt?{sas}");
    for (i, version) in PUBLISHED.iter().enumerate() {
        let (slots, file) = names(version);
        let q = format!("api-version={version}");
        let (pool, job) = (format!("p{i}"), format!("j{i}"));
        let body = json!({"id": pool, "vmSize": "standard_a1", "targetDedicatedNodes": 1, slots: 2,
            "startTask": {"commandLine": "cp in.txt $AZ_BATCH_NODE_SHARED_DIR/in.txt",
                "waitForSuccess": true, "resourceFiles": [{file: file_url, "filePath": "in.txt"}]}});
        let (status, answer) = s.post(&format!("/pools?{q}"), &body).await;
        assert_eq!(status, 201, "{version}: {answer}");
        let (_, got) = s.get(&format!("/pools/{pool}?{q}")).await;
        assert_eq!(got[slots], 2, "{version}: {got}");
        let other = if slots == "taskSlotsPerNode" {
            "maxTasksPerNode"
        } else {
            "taskSlotsPerNode"
        };
        assert!(got.get(other).is_none(), "{version} has no {other}: {got}");
        assert_eq!(
            got["startTask"]["resourceFiles"][0][file],
            json!(file_url),
            "{version}"
        );

        let (status, answer) = s
            .post(
                &format!("/jobs?{q}"),
                &json!({"id": job, "poolInfo": {"poolId": pool}}),
            )
            .await;
        assert_eq!(status, 201, "{version}: {answer}");
        let tasks =
            json!({"value": [{"id": "t1", "commandLine": "cat $AZ_BATCH_NODE_SHARED_DIR/in.txt"}]});
        let (status, answer) = s
            .post(&format!("/jobs/{job}/addtaskcollection?{q}"), &tasks)
            .await;
        assert_eq!(
            (status.as_u16(), &answer["value"][0]["status"]),
            (200, &json!("success")),
            "{version}: {answer}"
        );
        s.wait_task(&job, "t1", "completed").await;
        assert_eq!(s.stdout(&job, "t1").await, "resource\n", "{version}");

        let (status, counts) = s.get(&format!("/jobs/{job}/taskcounts?{q}")).await;
        assert_eq!(status, 200, "{version}: {counts}");
        let counts: &Value = if slots == "maxTasksPerNode" {
            assert!(
                counts.get("taskCounts").is_none(),
                "{version} gets TaskCounts bare: {counts}"
            );
            &counts
        } else {
            &counts["taskCounts"]
        };
        assert_eq!(
            (&counts["completed"], &counts["succeeded"]),
            (&json!(1), &json!(1)),
            "{version}: {counts}"
        );
        assert_eq!(
            s.delete(&format!("/pools/{pool}?{q}")).await.0,
            202,
            "{version}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpublished_version_is_refused_with_the_list() {
    let s = TestServer::start(Rt::Local).await;
    let (status, body) = s.get("/pools?api-version=2021-13-01.14.0").await;
    assert_eq!(status, 400);
    assert_eq!(body["code"], "InvalidApiVersionParameter");
    let message = body["message"]["value"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    for version in PUBLISHED {
        assert!(message.contains(version), "{version} not in {message}");
    }
}

/// Seed 003's `az batch pool create --json-file pooldef.json`, in the shape of its time
/// (api-version 2018-08-01.7.0: `maxTasksPerNode`, a resource file's `blobSource`, an integer as
/// a string), with its Windows parts made Linux (Ubuntu's image, a bash start task) and without
/// its application package: the pool's three nodes run the start task as admin, and the pool
/// reads back in the newest version with `taskSlotsPerNode`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_003_s_pool_definition_runs_in_its_own_version() {
    let s = TestServer::start_allowing_local_urls(Rt::Docker, &[]).await;
    let (name, url) = container("r").await;
    put_blob(&format!("{name}/setup.sh"), "id -u\n").await;
    let (base, sas) = url.split_once('?').unwrap();
    let pooldef = json!({
      "id": "pool01",
      "virtualMachineConfiguration": {
        "imageReference": {
          "publisher": "Canonical",
          "offer": "0001-com-ubuntu-server-jammy",
          "sku": "22_04-lts",
          "version": "latest"
        },
        "nodeAgentSKUId": "batch.node.ubuntu 22.04"
      },
      "vmSize": "Standard_A1",
      "targetDedicatedNodes": "3",
      "enableInterNodeCommunication": true,
      "maxTasksPerNode": 1,
      "startTask": {
        "commandLine": "/bin/bash -c 'bash setup.sh > $AZ_BATCH_NODE_SHARED_DIR/uid'",
        "resourceFiles": [
          {
            "blobSource": format!("{base}/setup.sh?{sas}"),
            "filePath": "setup.sh"
          }
        ],
        "userIdentity": {
          "autoUser": {
            "elevationLevel": "admin"
          }
        },
        "waitForSuccess": true
      }
    });
    let (status, answer) = s.post("/pools?api-version=2018-08-01.7.0", &pooldef).await;
    assert_eq!(status, 201, "{answer}");
    for node in s.wait_nodes("pool01", 3, "idle").await {
        let node = node["id"].as_str().unwrap();
        assert_eq!(s.shared_file("pool01", node, "uid").await, "0\n", "{node}");
    }
    let (_, pool) = s.get("/pools/pool01").await;
    assert_eq!(
        (
            &pool["taskSlotsPerNode"],
            &pool["enableInterNodeCommunication"]
        ),
        (&json!(1), &json!(true)),
        "{pool}"
    );
}
