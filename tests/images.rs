//! The Debian node image: a pool naming a marketplace image the image map does not (Ubuntu, as
//! Azure's tutorials do) runs it, so their commands find `/bin/bash`, coreutils and `python3`;
//! the server builds it on an engine that lacks it, and says why a build failed.

mod common;

use batchpool::runtime::docker::DEBIAN_IMAGE;
use common::{fresh_database, run_ok, Rt, TestServer};
use serde_json::{json, Value};

/// Azure's Ubuntu 22.04 image, as the tutorials name it.
fn ubuntu_pool(id: &str) -> Value {
    json!({
        "id": id, "vmSize": "STANDARD_D2S_V3", "targetDedicatedNodes": 1,
        "virtualMachineConfiguration": {
            "imageReference": {"publisher": "canonical", "offer": "0001-com-ubuntu-server-jammy", "sku": "22_04-lts", "version": "latest"},
            "nodeAgentSKUId": "batch.node.ubuntu 22.04",
        },
        "startTask": {
            "commandLine": "/bin/bash -c 'python3 -c \"import sys; print(sys.version_info[0])\" > $AZ_BATCH_NODE_SHARED_DIR/python'",
            "userIdentity": {"autoUser": {"scope": "pool", "elevationLevel": "admin"}},
            "waitForSuccess": true,
        },
    })
}

/// Runs a task of a tutorial's kind on the pool's node and checks what it printed.
async fn tutorial_task_runs(s: &TestServer, pool: &str) {
    let node = s.wait_nodes(pool, 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(s.shared_file(pool, &node, "python").await, "3\n");
    s.job_on("j", pool).await;
    let command = "/bin/bash -c 'set -euo pipefail; seq 3 | sort -r | head -n 1; python3 -c \"print(6 * 7)\"; test -d /etc/ssl/certs'";
    let task = json!({"id": "t", "commandLine": command});
    assert_eq!(s.post("/jobs/j/tasks", &task).await.0, 201);
    let done = s.wait_task("j", "t", "completed").await;
    assert_eq!(done["executionInfo"]["exitCode"], 0, "{done}");
    assert_eq!(s.stdout("j", "t").await, "3\n42\n");
}

/// A pool naming Azure's Ubuntu image runs the Debian image, and `/supportedimages` says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_naming_ubuntu_runs_bash_and_python3() {
    let s = TestServer::start(Rt::Docker).await;
    let (status, answer) = s.post("/pools", &ubuntu_pool("ubuntu")).await;
    assert_eq!(status, 201, "{answer}");
    tutorial_task_runs(&s, "ubuntu").await;
    let images: Vec<String> = common::docker_containers(&s.server_id().await)
        .iter()
        .map(|c| c["Config"]["Image"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(images, [DEBIAN_IMAGE]);

    let (_, listed) = s
        .get("/supportedimages?$filter=nodeAgentSKUId%20eq%20'batch.node.ubuntu%2022.04'")
        .await;
    let jammy = listed["value"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["imageReference"]["offer"] == "0001-com-ubuntu-server-jammy")
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(jammy["nodeAgentSKUId"], "batch.node.ubuntu 22.04");
    assert_eq!(
        jammy["capabilities"],
        json!([format!("DockerImage:{DEBIAN_IMAGE}")])
    );
}

/// The extra engine these tests build on: the machine's own keeps its Debian image.
fn extra_engine() -> String {
    std::env::var("BATCHPOOL_TEST_DOCKER_HOSTS")
        .expect("BATCHPOOL_TEST_DOCKER_HOSTS (run the tests through scripts/test.sh)")
        .split_whitespace()
        .last()
        .unwrap()
        .to_string()
}

fn remove_debian_image(host: &str) {
    let _ = std::process::Command::new("docker")
        .args(["-H", host, "rmi", "-f", DEBIAN_IMAGE])
        .output();
}

/// A server whose only host is `host`.
async fn server_on(host: &str) -> TestServer {
    let flags = ["--docker-host", host];
    TestServer::start_with(Rt::Docker, Some(fresh_database().await), &flags).await
}

/// On an engine without the image, the server builds it when a node needs it (here from the
/// root filesystem the tests keep, placed where the server keeps its own: no debootstrap).
/// Where the build fails, the node is unusable and says why and what to run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_builds_the_debian_image_where_a_node_needs_it() {
    let host = extra_engine();
    remove_debian_image(&host);

    // A server that cannot build it: its data directory has a file where the image's root
    // filesystem would go.
    let broken = server_on(&host).await;
    std::fs::write(broken.data_dir.path().join("node-images"), "").unwrap();
    assert_eq!(broken.post("/pools", &ubuntu_pool("p")).await.0, 201);
    let node = &broken.wait_nodes("p", 1, "unusable").await[0];
    let error = &node["errors"][0];
    assert_eq!(error["code"], "ImageNotFound", "{node}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("building it failed")
            && message.contains("batchpool build-node-image --debian"),
        "{message}"
    );
    drop(broken);

    let s = server_on(&host).await;
    let images = s.data_dir.path().join("node-images");
    std::fs::create_dir_all(&images).unwrap();
    run_ok(
        std::process::Command::new("cp")
            .args(["-a", &common::debian_rootfs()])
            .arg(images.join("debian-bookworm")),
    );
    assert_eq!(s.post("/pools", &ubuntu_pool("p")).await.0, 201);
    tutorial_task_runs(&s, "p").await;
    assert!(
        s.log_contains("built the Debian node image"),
        "{}",
        s.log_tail()
    );
    remove_debian_image(&host);
}
