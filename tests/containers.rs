//! A container per task (Azure's `containerSettings` on a pool with a `containerConfiguration`):
//! seed 002's provider, which packs each job's tasks into nodes by their slots and runs each in
//! a container of its own. The task image is built here from the node image (no registry). And
//! a node image with a user of its own still runs its tasks as root.

mod common;

use common::{docker_containers, run_ok, wait_for, Rt, TestServer};
use serde_json::{json, Value};

/// The task image: the node's busybox with a marker file in its own working directory, a
/// default command that prints it, and a volume it declares (each container gets one of its own).
const TASK_IMAGE: &str = "batchpool-test/task-image:2";

fn build_task_image() {
    let dockerfile = "FROM batchpool/node:latest\nWORKDIR /app\nRUN echo from-the-task-image > /app/marker\nVOLUME /scratch\nCMD [\"cat\", \"/app/marker\"]\n";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("Dockerfile"), dockerfile).unwrap();
    run_ok(
        std::process::Command::new("docker")
            .args(["build", "-q", "--network", "none", "-t", TASK_IMAGE])
            .arg(dir.path()),
    );
}

/// A pool whose nodes run containers, with task slots as vCPUs (seed 002's rule).
async fn container_pool(s: &TestServer, pool: &str) {
    container_pool_with(s, pool, json!({})).await
}

/// As `container_pool`, with the properties of `extra` too.
async fn container_pool_with(s: &TestServer, pool: &str, extra: Value) {
    build_task_image();
    let mut body = json!({
        "id": pool, "vmSize": "standard_a2_v2", "targetDedicatedNodes": 1, "taskSlotsPerNode": 2,
        "virtualMachineConfiguration": {
            "imageReference": {"publisher": "microsoft-azure-batch", "offer": "ubuntu-server-container", "sku": "20-04-lts"},
            "nodeAgentSKUId": "batch.node.ubuntu 20.04",
            "containerConfiguration": {"type": "dockerCompatible", "containerImageNames": ["batchpool/node:latest", TASK_IMAGE]},
        },
    });
    for (name, value) in extra.as_object().unwrap() {
        body[name] = value.clone();
    }
    let (status, answer) = s.post("/pools", &body).await;
    assert_eq!(status, 201, "{answer}");
    s.wait_nodes(pool, 1, "idle").await;
}

/// The task containers of this server that exist now.
fn task_containers(server_id: &str) -> Vec<Value> {
    docker_containers(server_id)
        .into_iter()
        .filter(|c| c["Config"]["Labels"]["batchpool.task"].is_string())
        .collect()
}

/// The anonymous volumes a container's image gave it.
fn anonymous_volumes(container: &Value) -> Vec<String> {
    let mounts = container["Mounts"].as_array().cloned().unwrap_or_default();
    let names: Vec<String> = mounts
        .iter()
        .filter(|m| m["Type"] == "volume" && m["Destination"] == "/scratch")
        .filter_map(|m| m["Name"].as_str().map(String::from))
        .collect();
    assert!(!names.is_empty(), "the image's volume: {container}");
    names
}

/// The anonymous volumes of a container (as inspected while it ran) went with it.
fn assert_volumes_gone(container: &Value) {
    for volume in anonymous_volumes(container) {
        let inspected = std::process::Command::new("docker")
            .args(["volume", "inspect", &volume])
            .output()
            .expect("docker volume inspect");
        assert!(
            !inspected.status.success(),
            "the image's volume {volume} stayed after its container went"
        );
    }
}

fn engine_nests_cgroups() -> bool {
    run_ok(std::process::Command::new("docker").args([
        "info",
        "--format",
        "{{.CgroupVersion}} {{.CgroupDriver}}",
    ]))
    .trim()
        == "1 cgroupfs"
}

#[tokio::test]
async fn tasks_run_each_in_a_container_of_their_own() {
    let s = TestServer::start(Rt::Docker).await;
    container_pool(&s, "cp").await;
    s.job_on("j", "cp").await;
    let settings =
        json!({"imageName": TASK_IMAGE, "containerRunOptions": "--rm -e GREETING=hello"});
    // The task's cgroup ends in its container's id, below its node's where the engine nests.
    let command = "echo \"$(grep -m1 memory /proc/self/cgroup) $(cat /app/marker) $GREETING $AZ_BATCH_TASK_ID $(pwd)\"; grep -w hierarchical_memory_limit /sys/fs/cgroup/memory/memory.stat";
    let mut tasks: Vec<Value> = (1..=4)
        .map(|i| json!({"id": format!("1000000{i}"), "commandLine": command, "requiredSlots": 1, "containerSettings": settings}))
        .collect();
    // The image's own directory and command: an empty command line runs the image's CMD.
    tasks.push(json!({"id": "image-default", "commandLine": "", "containerSettings": {"imageName": TASK_IMAGE, "workingDirectory": "containerImageDefault"}}));
    // A task without containerSettings runs in its node, which has no marker.
    tasks.push(
        json!({"id": "on-node", "commandLine": "hostname; test -e /app/marker || echo no-marker"}),
    );
    s.add_tasks("j", tasks).await;
    for t in s.wait_all_completed("j", 6).await {
        assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    }
    let node_out = s.stdout("j", "on-node").await;
    assert!(node_out.ends_with("no-marker\n"), "{node_out}");
    let server = s.server_id().await;
    let node_container = docker_containers(&server)
        .into_iter()
        .find(|c| c["Config"]["Labels"]["batchpool.task"].is_null())
        .unwrap()["Id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut containers = Vec::new();
    for i in 1..=4 {
        let id = format!("1000000{i}");
        let out = s.stdout("j", &id).await;
        let words: Vec<&str> = out.split_whitespace().collect();
        let wd = format!("/mnt/batch/tasks/workitems/j/job-1/{id}/wd");
        let expected = ["from-the-task-image", "hello", id.as_str(), wd.as_str()];
        assert_eq!(&words[1..5], expected, "{out}");
        let (parent, container) = words[0].rsplit_once('/').unwrap();
        if engine_nests_cgroups() {
            // Inside the node's limits: the container's cgroup is in the node's, whose memory
            // (standard_a2_v2's 4 GiB) bounds it.
            assert!(parent.ends_with(&node_container), "{out}");
            assert_eq!(words[6], (4096u64 << 20).to_string(), "{out}");
        }
        // Azure's executionInfo.containerInfo names it.
        let info = &s.task("j", &id).await["executionInfo"]["containerInfo"];
        assert_eq!(info["containerId"], container, "{info}");
        assert_eq!(info["state"], "exited", "{info}");
        containers.push(container.to_string());
    }
    containers.sort();
    containers.dedup();
    assert_eq!(containers.len(), 4, "a container each: {containers:?}");
    assert!(!containers.contains(&node_container));
    assert_eq!(
        s.stdout("j", "image-default").await,
        "from-the-task-image\n"
    );
    let t = s.task("j", "10000001").await;
    assert_eq!(t["containerSettings"], settings);
    wait_for("the task containers to be removed", || async {
        task_containers(&server).is_empty().then_some(())
    })
    .await;
}

#[tokio::test]
async fn terminating_a_job_kills_its_task_containers() {
    let s = TestServer::start(Rt::Docker).await;
    container_pool(&s, "cp").await;
    s.job_on("j", "cp").await;
    let settings = json!({"imageName": TASK_IMAGE});
    s.add_tasks("j", vec![
        json!({"id": "long", "commandLine": "sleep 300", "containerSettings": settings}),
        json!({"id": "queued", "commandLine": "sleep 300", "requiredSlots": 2, "containerSettings": settings}),
    ]).await;
    s.wait_task("j", "long", "running").await;
    let server = s.server_id().await;
    let running = wait_for("the task's container", || async {
        let found = task_containers(&server);
        (!found.is_empty()).then_some(found)
    })
    .await;
    assert_eq!(running.len(), 1, "the queued task needs the whole node");
    assert_eq!(running[0]["Config"]["Image"], TASK_IMAGE);
    assert_eq!(running[0]["Config"]["Labels"]["batchpool.task"], "j/long/1");
    let info = wait_for("the task's containerInfo", || async {
        let t = s.task("j", "long").await;
        let info = t["executionInfo"]["containerInfo"].clone();
        info.is_object().then_some(info)
    })
    .await;
    assert_eq!(info["containerId"], running[0]["Id"], "{info}");
    assert_eq!(info["state"], "running", "{info}");
    let (status, body) = s
        .post(
            "/jobs/j/terminate",
            &json!({"terminateReason": "RemoteBatchJobAbort"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let (_, job) = s.get("/jobs/j").await;
    assert_eq!(
        job["executionInfo"]["terminateReason"],
        "RemoteBatchJobAbort"
    );
    s.wait_task("j", "long", "completed").await;
    wait_for("the task container to be gone", || async {
        task_containers(&server).is_empty().then_some(())
    })
    .await;
    assert_volumes_gone(&running[0]);
    let queued = s.task("j", "queued").await;
    assert!(
        queued["executionInfo"]["startTime"].is_null(),
        "never started: {queued}"
    );
}

/// A pool's resourceTags label its node's container and its tasks' containers
/// (`batchpool.tag.<name>`), as Azure tags a pool's resources; the pool shows them, and tags
/// Azure would refuse are refused by name.
#[tokio::test]
async fn resource_tags_label_the_node_and_task_containers() {
    let s = TestServer::start(Rt::Docker).await;
    let many: serde_json::Map<String, Value> =
        (0..51).map(|i| (format!("t{i}"), json!("v"))).collect();
    for bad in [
        json!({"a/b": "slash"}),
        json!({"n": 42}),
        json!({"n": "v".repeat(257)}),
        json!({"Team": "a", "team": "b"}),
        Value::Object(many),
    ] {
        let body = json!({"id": "bad", "vmSize": "standard_a1", "resourceTags": bad});
        let (status, answer) = s.post("/pools", &body).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert_eq!(answer["values"][0]["value"], "resourceTags", "{answer}");
    }
    assert_eq!(
        s.get("/pools/bad").await.0,
        404,
        "a refused pool is not made"
    );
    let tags = json!({"costCenter": "42", "team": "render farm"});
    container_pool_with(&s, "tagged", json!({"resourceTags": tags})).await;
    let (_, pool) = s.get("/pools/tagged").await;
    assert_eq!(pool["resourceTags"], tags, "{pool}");
    s.job_on("j", "tagged").await;
    let settings = json!({"imageName": TASK_IMAGE});
    let task = json!({"id": "t", "commandLine": "sleep 300", "containerSettings": settings});
    s.add_tasks("j", vec![task]).await;
    let server = s.server_id().await;
    let task_container = wait_for("the task's container", || async {
        task_containers(&server).pop()
    })
    .await;
    let node = docker_containers(&server)
        .into_iter()
        .find(|c| c["Config"]["Labels"]["batchpool.task"].is_null())
        .unwrap();
    for container in [&node, &task_container] {
        let labels = &container["Config"]["Labels"];
        assert_eq!(labels["batchpool.tag.costCenter"], "42", "{labels}");
        assert_eq!(labels["batchpool.tag.team"], "render farm", "{labels}");
    }
}

#[tokio::test]
async fn a_restart_finds_a_task_container_running_and_cleans_up_after_it() {
    let mut s = TestServer::start(Rt::Docker).await;
    container_pool(&s, "cp").await;
    s.job_on("j", "cp").await;
    s.add_tasks("j", vec![json!({"id": "t", "commandLine": "sleep 5; echo finished", "containerSettings": {"imageName": TASK_IMAGE}})]).await;
    s.wait_task("j", "t", "running").await;
    let server = s.server_id().await;
    let running = wait_for("the task's container", || async {
        let found = task_containers(&server);
        (!found.is_empty()).then_some(found)
    })
    .await;
    s.kill().await;
    s.launch().await;
    let t = s.wait_task("j", "t", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    assert_eq!(
        t["executionInfo"]["requeueCount"], 0,
        "adopted, not run again: {t}"
    );
    assert_eq!(s.stdout("j", "t").await, "finished\n");
    wait_for("the task container to be removed", || async {
        task_containers(&server).is_empty().then_some(())
    })
    .await;
    assert_volumes_gone(&running[0]);
}

#[tokio::test]
async fn container_settings_are_checked_and_failures_reported() {
    let s = TestServer::start(Rt::Docker).await;
    container_pool(&s, "cp").await;
    s.job_on("j", "cp").await;
    let refused = |options: &str| json!({"id": "x", "commandLine": "true", "containerSettings": {"imageName": TASK_IMAGE, "containerRunOptions": options}});
    for (options, named) in [
        ("--privileged", "--privileged"),
        ("-v /:/host", "-v"),
        ("--network=host", "--network"),
        ("--gpus all", "--gpus"),
    ] {
        let (status, body) = s.post("/jobs/j/tasks", &refused(options)).await;
        assert_eq!(status, 400, "{body}");
        assert!(
            body["message"]["value"].as_str().unwrap().contains(named),
            "{body}"
        );
        let values = body["values"].as_array().unwrap();
        assert!(
            values.iter().any(|v| v["key"] == "PropertyName"
                && v["value"] == "containerSettings.containerRunOptions"),
            "{body}"
        );
    }
    // A pool without a containerConfiguration runs no task containers, as on Azure.
    s.pool_of_one_idle_node("plain").await;
    s.job_on("jp", "plain").await;
    let (status, body) = s.post("/jobs/jp/tasks", &json!({"id": "x", "commandLine": "true", "containerSettings": {"imageName": TASK_IMAGE}})).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string().contains("containerConfiguration"),
        "{body}"
    );
    // An image the engine lacks, with no registry or with one that cannot be reached: the task
    // fails as Azure reports a failure before the command, and its command never runs.
    s.add_tasks("j", vec![
        json!({"id": "missing", "commandLine": "true", "constraints": {"maxTaskRetryCount": 0}, "containerSettings": {"imageName": "batchpool-test/absent:1"}}),
        json!({"id": "unreachable", "commandLine": "true", "constraints": {"maxTaskRetryCount": 0}, "containerSettings": {"imageName": "127.0.0.1:9/absent:1", "registry": {"registryServer": "127.0.0.1:9", "userName": "u", "password": "secret"}}}),
    ]).await;
    for (task, code) in [
        ("missing", "ContainerImageNotFound"),
        ("unreachable", "ContainerImagePullFailed"),
    ] {
        let t = s.wait_task("j", task, "completed").await;
        assert_eq!(t["executionInfo"]["result"], "failure", "{t}");
        assert_eq!(t["executionInfo"]["failureInfo"]["code"], code, "{t}");
        assert!(t["executionInfo"]["exitCode"].is_null(), "{t}");
    }
    // A pool's containerImageNames are made ready as its nodes start: one the engine lacks
    // (and no registry is given to pull it from) makes the node unusable, saying which.
    let body = json!({"id": "absent", "vmSize": "standard_a1", "targetDedicatedNodes": 1,
        "virtualMachineConfiguration": {"nodeAgentSKUId": "batch.node.ubuntu 20.04",
            "containerConfiguration": {"type": "dockerCompatible", "containerImageNames": ["batchpool/node:latest", "batchpool-test/absent:2"],
                "containerRegistries": [{"registryServer": "registry.example", "userName": "u", "password": "secret"}]}}});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    let node = &s.wait_nodes("absent", 1, "unusable").await[0];
    assert_eq!(
        node["errors"][0]["code"], "ContainerImagePullFailed",
        "{node}"
    );
    assert!(
        node["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("batchpool-test/absent:2"),
        "{node}"
    );
    let (_, pool) = s.get("/pools/absent").await;
    let registry =
        &pool["virtualMachineConfiguration"]["containerConfiguration"]["containerRegistries"][0];
    assert_eq!(registry["userName"], "u");
    assert!(
        registry.get("password").is_none(),
        "the password is never shown: {pool}"
    );
    let t = s.task("j", "unreachable").await;
    assert_eq!(t["containerSettings"]["registry"]["userName"], "u");
    assert!(
        t["containerSettings"]["registry"].get("password").is_none(),
        "the password is never shown: {t}"
    );
}

#[tokio::test]
async fn a_start_task_runs_in_a_container_of_its_own() {
    let s = TestServer::start(Rt::Docker).await;
    build_task_image();
    let pool = |id: &str, image: &str| {
        json!({
            "id": id, "vmSize": "standard_a1", "targetDedicatedNodes": 1,
            "virtualMachineConfiguration": {
                "nodeAgentSKUId": "batch.node.ubuntu 20.04",
                "containerConfiguration": {"type": "dockerCompatible", "containerImageNames": ["batchpool/node:latest", TASK_IMAGE]},
            },
            "startTask": {
                "commandLine": "cat /app/marker > $AZ_BATCH_NODE_SHARED_DIR/from-start",
                "waitForSuccess": true,
                "containerSettings": {"imageName": image},
            },
        })
    };
    assert_eq!(s.post("/pools", &pool("boxed", TASK_IMAGE)).await.0, 201);
    let node = s.wait_nodes("boxed", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        s.shared_file("boxed", &node, "from-start").await,
        "from-the-task-image\n"
    );
    // An image the engine lacks fails the start task, as Azure reports it.
    assert_eq!(
        s.post("/pools", &pool("absent", "batchpool-test/absent:3"))
            .await
            .0,
        201
    );
    let node = &s.wait_nodes("absent", 1, "starttaskfailed").await[0];
    let info = &node["startTaskInfo"];
    assert_eq!(
        info["failureInfo"]["code"], "ContainerImageNotFound",
        "{node}"
    );
    // A pool without a containerConfiguration runs no start task in a container.
    let mut plain = pool("plain", TASK_IMAGE);
    plain["virtualMachineConfiguration"]
        .as_object_mut()
        .unwrap()
        .remove("containerConfiguration");
    let (status, body) = s.post("/pools", &plain).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string().contains("startTask.containerSettings"),
        "{body}"
    );
    // Nor when its start task is replaced later.
    let start_task = plain.as_object_mut().unwrap().remove("startTask").unwrap();
    assert_eq!(s.post("/pools", &plain).await.0, 201);
    let patch = json!({"startTask": start_task});
    let (status, body) = s
        .request(reqwest::Method::PATCH, "/pools/plain", Some(&patch))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string().contains("startTask.containerSettings"),
        "{body}"
    );
}

/// A node runs no more tasks at once than its slots when some run in containers of their own
/// and others in the node, with tasks held ahead: the node's agent counts only the tasks it
/// starts, so a node running a task's container holds none ahead (the Docker soak saw 5 tasks
/// at once on a node of 4 slots). Each task counts the tasks running as it starts.
#[tokio::test]
async fn tasks_in_containers_and_in_the_node_share_its_slots() {
    let args = ["--tasks-ahead-per-slot", "2"];
    let s = TestServer::start_with(Rt::Docker, Some(common::fresh_database().await), &args).await;
    container_pool(&s, "mixed").await;
    s.job_on("j", "mixed").await;
    let counted = |seconds: u32| {
        format!(
            "sh -c 'd=$AZ_BATCH_NODE_SHARED_DIR; mkdir $d/run.$AZ_BATCH_TASK_ID; ls -d $d/run.* | wc -l >> $d/seen; sleep {seconds}; rmdir $d/run.$AZ_BATCH_TASK_ID'"
        )
    };
    let boxed = json!({"id": "boxed", "commandLine": counted(6), "containerSettings": {"imageName": TASK_IMAGE}});
    s.add_tasks("j", vec![boxed]).await;
    let node = s.wait_task("j", "boxed", "running").await["nodeInfo"]["nodeId"]
        .as_str()
        .unwrap()
        .to_string();
    wait_for("the boxed task's count", || async {
        (!s.shared_file("mixed", &node, "seen").await.is_empty()).then_some(())
    })
    .await;
    let plain = (0..4).map(|i| json!({"id": format!("p{i}"), "commandLine": counted(2)}));
    s.add_tasks("j", plain.collect()).await;
    for id in ["boxed", "p0", "p1", "p2", "p3"] {
        let t = s.wait_task("j", id, "completed").await;
        assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    }
    let seen = s.shared_file("mixed", &node, "seen").await;
    let most = seen
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .max();
    assert_eq!(most, Some(2), "tasks running as each started: {seen:?}");
}

#[tokio::test]
async fn preparation_and_release_tasks_run_in_containers_of_their_own() {
    let s = TestServer::start(Rt::Docker).await;
    container_pool(&s, "cp").await;
    let boxed = |file: &str| json!({"commandLine": format!("cat /app/marker > $AZ_BATCH_NODE_SHARED_DIR/{file}"), "containerSettings": {"imageName": TASK_IMAGE}});
    let job = json!({"id": "j", "poolInfo": {"poolId": "cp"},
        "jobPreparationTask": boxed("from-prep"), "jobReleaseTask": boxed("from-release")});
    let (status, body) = s.post("/jobs", &job).await;
    assert_eq!(status, 201, "{body}");
    s.add_tasks(
        "j",
        vec![json!({"id": "t", "commandLine": "cat $AZ_BATCH_NODE_SHARED_DIR/from-prep"})],
    )
    .await;
    let t = s.wait_task("j", "t", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    let node = t["nodeInfo"]["nodeId"].as_str().unwrap().to_string();
    assert_eq!(
        s.file("/jobs/j/tasks/t/files/stdout.txt").await.unwrap(),
        "from-the-task-image\n"
    );
    let (status, _) = s.post("/jobs/j/terminate", &json!({})).await;
    assert_eq!(status, 202);
    wait_for("the release task's file", || async {
        (s.shared_file("cp", &node, "from-release").await == "from-the-task-image\n").then_some(())
    })
    .await;
    // On a pool without a containerConfiguration, they are refused, as on Azure.
    s.pool_of_one_idle_node("plain").await;
    let job =
        json!({"id": "jp", "poolInfo": {"poolId": "plain"}, "jobPreparationTask": boxed("x")});
    let (status, body) = s.post("/jobs", &job).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string()
            .contains("jobPreparationTask.containerSettings"),
        "{body}"
    );
}

#[tokio::test]
async fn the_local_runtime_runs_no_task_containers_and_says_so() {
    let s = TestServer::start(Rt::Local).await;
    let body = json!({
        "id": "lp", "vmSize": "standard_a1", "targetDedicatedNodes": 1,
        "virtualMachineConfiguration": {"nodeAgentSKUId": "batch.node.ubuntu 20.04",
            "containerConfiguration": {"type": "dockerCompatible", "containerImageNames": [TASK_IMAGE]}},
    });
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("lp", 1, "idle").await;
    s.job_on("j", "lp").await;
    let task = json!({"id": "t", "commandLine": "true", "constraints": {"maxTaskRetryCount": 0},
        "containerSettings": {"imageName": TASK_IMAGE}});
    s.add_tasks("j", vec![task]).await;
    let t = s.wait_task("j", "t", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "failure", "{t}");
    assert_eq!(
        t["executionInfo"]["failureInfo"]["code"], "ContainerNotSupported",
        "{t}"
    );
}

#[tokio::test]
async fn cpus_and_memory_run_options_limit_the_task_container() {
    if !engine_nests_cgroups() {
        return; // the cgroup v1 files read below are not there
    }
    let s = TestServer::start(Rt::Docker).await;
    container_pool(&s, "cp").await;
    s.job_on("j", "cp").await;
    let task = json!({"id": "t",
        "commandLine": "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpu/cpu.cfs_quota_us",
        "containerSettings": {"imageName": TASK_IMAGE, "containerRunOptions": "--memory 64m --cpus 0.5"}});
    s.add_tasks("j", vec![task]).await;
    let t = s.wait_task("j", "t", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    assert_eq!(s.stdout("j", "t").await, format!("{}\n50000\n", 64 << 20));
}

/// A node's image may name a user of its own (`USER` in its Dockerfile); the node's agent, and
/// so every task, still runs as root, the node's administrator, which is what a start task that
/// asks for an admin auto-user (as Microsoft's tutorials' installers do) is given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_image_with_a_user_of_its_own_still_runs_tasks_as_root() {
    let s = TestServer::start(Rt::Docker).await;
    let image = "batchpool-test/nobody-node:1";
    let dir = tempfile::tempdir().unwrap();
    let dockerfile = "FROM batchpool/node:latest\nUSER 65534:65534\n";
    std::fs::write(dir.path().join("Dockerfile"), dockerfile).unwrap();
    run_ok(
        std::process::Command::new("docker")
            .args(["build", "-q", "--network", "none", "-t", image])
            .arg(dir.path()),
    );
    let admin = json!({"autoUser": {"scope": "pool", "elevationLevel": "admin"}});
    let body = json!({
        "id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1,
        "virtualMachineConfiguration": {
            "imageReference": {"publisher": "canonical", "offer": "ubuntu", "sku": "22_04-lts"},
            "nodeAgentSKUId": "batch.node.ubuntu 22.04",
            "containerConfiguration": {"type": "dockerCompatible", "containerImageNames": [image]}},
        "startTask": {"commandLine": "id -u > $AZ_BATCH_NODE_SHARED_DIR/start.uid", "userIdentity": admin},
    });
    let (status, answer) = s.post("/pools", &body).await;
    assert_eq!(status, 201, "{answer}");
    let node = s.wait_nodes("p", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(s.shared_file("p", &node, "start.uid").await, "0\n");
    s.job_on("j", "p").await;
    let task = json!({"id": "t", "commandLine": "id -u", "userIdentity": admin});
    assert_eq!(s.post("/jobs/j/tasks", &task).await.0, 201);
    s.wait_task("j", "t", "completed").await;
    assert_eq!(s.stdout("j", "t").await, "0\n");
}

/// A node made again (a reimage gives it a new container of the same name) runs its task
/// containers in its new container: what the server read of the old one is not used again.
#[tokio::test]
async fn a_reimaged_node_runs_task_containers_in_its_new_container() {
    let s = TestServer::start(Rt::Docker).await;
    container_pool(&s, "cp").await;
    s.job_on("j", "cp").await;
    let boxed = |id: &str| json!({"id": id, "commandLine": "echo $AZ_BATCH_TASK_ID", "containerSettings": {"imageName": TASK_IMAGE}});
    s.add_tasks("j", vec![boxed("before")]).await;
    let before = s.wait_task("j", "before", "completed").await;
    assert_eq!(before["executionInfo"]["result"], "success", "{before}");
    let node = s.nodes("cp").await[0].clone();
    let id = node["id"].as_str().unwrap();
    let (status, body) = s
        .post(&format!("/pools/cp/nodes/{id}/reimage"), &json!({}))
        .await;
    assert_eq!(status, 202, "{body}");
    common::wait_for("the reimaged node", || async {
        let (_, n) = s.get(&format!("/pools/cp/nodes/{id}")).await;
        (n["state"] == "idle" && n["lastBootTime"] != node["lastBootTime"]).then_some(())
    })
    .await;
    s.add_tasks("j", vec![boxed("after")]).await;
    let after = s.wait_task("j", "after", "completed").await;
    assert_eq!(after["executionInfo"]["result"], "success", "{after}");
    assert_eq!(s.stdout("j", "after").await, "after\n");
}
