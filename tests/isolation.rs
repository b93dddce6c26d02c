//! What keeps one account's nodes away from another's on Docker: a network per account, no
//! privilege gain, and a bound on processes.

#[macro_use]
mod common;

use common::{account_cmd, docker_containers, key_line, Rt, TestServer};
use serde_json::{json, Value};

/// A pool of one node, its job, and the node's IP address once it is idle.
async fn pool_with_job(s: &TestServer, id: &str) -> String {
    let (status, body) = s
        .post(
            "/pools",
            &json!({"id": id, "vmSize": "standard_a1", "targetDedicatedNodes": 1,
                    "taskSlotsPerNode": 2}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = s
        .post("/jobs", &json!({"id": id, "poolInfo": {"poolId": id}}))
        .await;
    assert_eq!(status, 201, "{body}");
    let nodes = s.wait_nodes(id, 1, "idle").await;
    nodes[0]["ipAddress"].as_str().unwrap().to_string()
}

/// Runs `command` as a task of `job` and returns (exit code, stdout).
async fn run(s: &TestServer, job: &str, task: &str, command: &str) -> (i64, String) {
    s.add_tasks(job, vec![json!({"id": task, "commandLine": command})])
        .await;
    let t = s.wait_task(job, task, "completed").await;
    let out = s.stdout(job, task).await;
    (t["executionInfo"]["exitCode"].as_i64().unwrap(), out)
}

fn fetch_from(ip: &str) -> String {
    // Retries for a few seconds, so a listener still starting does not pass for a blocked one.
    // (busybox's nc: its static wget crashes without a resolver.)
    format!(
        "for i in 1 2 3 4 5 6; do nc -w 2 {ip} 8080 </dev/null && exit 0; sleep 1; done; exit 1"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounts_nodes_cannot_reach_each_other_on_docker() {
    let s = TestServer::start(Rt::Docker).await;
    let server_ip = pool_with_job(&s, "srv").await;
    let near_ip = pool_with_job(&s, "near").await;
    assert!(!server_ip.is_empty() && !near_ip.is_empty());

    let created = account_cmd(&s, &["create", "other"]);
    let own = s.http.credentials.lock().unwrap().clone().unwrap();
    let other = (
        "other".to_string(),
        key_line(&created, "primary key:").to_string(),
    );
    *s.http.credentials.lock().unwrap() = Some(other.clone());
    pool_with_job(&s, "far").await;

    *s.http.credentials.lock().unwrap() = Some(own);
    s.add_tasks(
        "srv",
        vec![json!({"id": "listen", "commandLine":
            "while :; do echo hello | nc -l -p 8080; done",
            "constraints": {"maxWallClockTime": "PT3M"}})],
    )
    .await;
    s.wait_task("srv", "listen", "running").await;
    // The positive control: a node of the same account reaches it.
    let (code, out) = run(&s, "near", "fetch", &fetch_from(&server_ip)).await;
    assert_eq!((code, out.trim()), (0, "hello"), "same account, other pool");

    *s.http.credentials.lock().unwrap() = Some(other);
    let (code, out) = run(&s, "far", "fetch", &fetch_from(&server_ip)).await;
    assert_ne!(code, 0, "another account's node reached the server: {out}");

    // Every node: its account's network (never the default bridge), no privilege gain, a pids cap.
    let containers = docker_containers(&s.server_id().await);
    assert_eq!(containers.len(), 3);
    let mut networks = std::collections::BTreeMap::<String, Vec<String>>::new();
    for c in &containers {
        let host = &c["HostConfig"];
        assert_eq!(host["PidsLimit"], 4096, "{host}");
        assert_eq!(host["SecurityOpt"], json!(["no-new-privileges:true"]));
        let account = c["Config"]["Labels"]["batchpool.account"].as_str().unwrap();
        let mode = host["NetworkMode"].as_str().unwrap().to_string();
        assert_ne!(mode, "bridge");
        assert_ne!(mode, "default");
        // Named by its id (a name can match two networks on engines before API 1.44).
        let attached: Vec<&Value> = c["NetworkSettings"]["Networks"]
            .as_object()
            .map(|m| m.values().map(|n| &n["NetworkID"]).collect())
            .unwrap_or_default();
        assert_eq!(attached, vec![&json!(mode)], "one network per node");
        networks.entry(account.to_string()).or_default().push(mode);
    }
    assert_eq!(networks["batchpool"][0], networks["batchpool"][1]);
    assert_ne!(networks["batchpool"][0], networks["other"][0]);

    // The account's network goes with its last node.
    let (status, _) = s
        .post("/pools/far/resize", &json!({"targetDedicatedNodes": 0}))
        .await;
    assert_eq!(status, 202);
    let far_network = networks["other"][0].clone();
    common::wait_for("the other account's network to go", || {
        let far_network = far_network.clone();
        async move {
            let out = std::process::Command::new("docker")
                .args(["network", "ls", "-q", "--no-trunc", "--filter"])
                .arg(format!("id={far_network}"))
                .output()
                .unwrap();
            out.stdout.is_empty().then_some(())
        }
    })
    .await;
}
