//! Nodes across several Docker engines: the machine's own and the two extra engines
//! scripts/test-env.sh starts (BATCHPOOL_TEST_DOCKER_HOSTS), each a host of its own.

mod common;
#[path = "common/engine.rs"]
mod engine;

use common::{fresh_database, run_ok, wait_for, Rt, TestServer};
use engine::OwnEngine;
use reqwest::Method;
use serde_json::json;

const GET: Method = Method::GET;
const POST: Method = Method::POST;

/// These tests start and stop engines and lose hosts on purpose: one at a time, so that no test's
/// timing (a host declared lost after a few silent seconds) depends on what the others load the
/// machine's engines with.
async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static ONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    ONE.lock().await
}

/// The three hosts as `--docker-host` values, each with `suffix` (caps) appended.
fn host_args(suffix: &str) -> Vec<String> {
    let extra = std::env::var("BATCHPOOL_TEST_DOCKER_HOSTS")
        .expect("BATCHPOOL_TEST_DOCKER_HOSTS (run the tests through scripts/test.sh)");
    let mut hosts = vec!["unix:///var/run/docker.sock".to_string()];
    hosts.extend(extra.split_whitespace().map(String::from));
    hosts
        .into_iter()
        .flat_map(|h| ["--docker-host".to_string(), format!("{h}{suffix}")])
        .collect()
}

/// The test node image on every host (the machine's own engine has it already).
fn images_on_every_host() {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        for pair in host_args("").chunks(2).skip(1) {
            run_ok(
                std::process::Command::new(env!("CARGO_BIN_EXE_batchpool"))
                    .args([
                        "build-node-image",
                        "--tag",
                        common::TEST_IMAGE,
                        "--docker-host",
                    ])
                    .arg(&pair[1]),
            );
        }
    });
}

const METRICS_TOKEN: &str = "hosts-test";

/// The server's `/metrics` (started with `--metrics-token` [`METRICS_TOKEN`]).
async fn metrics(s: &TestServer) -> String {
    reqwest::Client::new()
        .get(format!("{}/metrics", s.base))
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

async fn server_on_three_hosts(suffix: &str) -> TestServer {
    images_on_every_host();
    let mut args = host_args(suffix);
    args.extend(["--metrics-token".to_string(), METRICS_TOKEN.to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestServer::start_with(Rt::Docker, Some(fresh_database().await), &args).await
}
/// Waits until the pool is steady with `idle` idle nodes and one unusable (a node no host had
/// room for); returns its nodes.
async fn steady_with_one_unusable(
    s: &TestServer,
    pool: &str,
    idle: usize,
) -> Vec<serde_json::Value> {
    let what = format!("{idle} idle nodes of {pool} and 1 unusable");
    wait_for(&what, || async {
        let (_, shown) = s.get(&format!("/pools/{pool}")).await;
        let nodes = s.nodes(pool).await;
        let count = |state: &str| nodes.iter().filter(|n| n["state"] == state).count();
        (shown["allocationState"] == "steady" && count("idle") == idle && count("unusable") == 1)
            .then_some(nodes)
    })
    .await
}

/// The nodes of `pool` on each host, in `--docker-host` order.
fn nodes_per_host(server_id: &str, pool: &str) -> Vec<usize> {
    host_args("")
        .chunks(2)
        .map(|pair| nodes_per_host_of(server_id, pool, &pair[1]))
        .collect()
}

#[tokio::test]
async fn a_pool_spreads_over_the_hosts_and_runs_on_all_of_them() {
    let _alone = one_at_a_time().await;
    let s = server_on_three_hosts("").await;
    let body = json!({"id": "wide", "vmSize": "standard_a1", "targetDedicatedNodes": 6, "taskSlotsPerNode": 2});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("wide", 6, "idle").await;
    let server = s.server_id().await;
    assert_eq!(
        nodes_per_host(&server, "wide"),
        [2, 2, 2],
        "2 nodes per host"
    );
    // /metrics counts them per host too.
    let metrics = metrics(&s).await;
    for pair in host_args("").chunks(2) {
        let series = format!(
            "batchpool_nodes{{account=\"batchpool\",pool=\"wide\",host=\"{}\",state=\"idle\"}} 2",
            pair[1]
        );
        assert!(
            metrics.lines().any(|l| l == series),
            "{series} in:\n{metrics}"
        );
    }
    s.job_on("j", "wide").await;
    let tasks = (0..30)
        .map(|i| json!({"id": format!("t{i}"), "commandLine": "echo $AZ_BATCH_NODE_ID"}))
        .collect();
    s.add_tasks("j", tasks).await;
    let mut nodes = std::collections::BTreeSet::new();
    for t in s.wait_all_completed("j", 30).await {
        assert_eq!(t["executionInfo"]["result"], "success", "{t}");
        nodes.insert(t["nodeInfo"]["nodeId"].as_str().unwrap().to_string());
    }
    assert_eq!(nodes.len(), 6, "every node ran tasks: {nodes:?}");
    let (status, _) = s
        .post("/pools/wide/resize", &json!({"targetDedicatedNodes": 0}))
        .await;
    assert_eq!(status, 202);
    wait_for("every host to be empty", || async {
        (nodes_per_host(&server, "wide") == [0, 0, 0]).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_host_at_its_cap_takes_no_more_nodes_and_the_resize_says_so() {
    let _alone = one_at_a_time().await;
    // Each host takes one standard_a1 node (1 CPU) at most: a fourth node has nowhere to go.
    let s = server_on_three_hosts(",cpus=1").await;
    let body = json!({"id": "capped", "vmSize": "standard_a1", "targetDedicatedNodes": 4});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    let nodes = steady_with_one_unusable(&s, "capped", 3).await;
    let unusable = nodes.iter().find(|n| n["state"] == "unusable").unwrap();
    assert_eq!(
        unusable["errors"][0]["code"], "AllocationFailed",
        "{unusable}"
    );
    let (_, pool) = s.get("/pools/capped").await;
    assert_eq!(
        pool["resizeErrors"][0]["code"], "AllocationFailed",
        "{pool}"
    );
    let server = s.server_id().await;
    assert_eq!(nodes_per_host(&server, "capped"), [1, 1, 1]);
}

/// A pool whose nodes talk to each other (enableInterNodeCommunication) keeps them on one host,
/// where a task on one node reaches another node at its ipAddress; where that host is full,
/// the pool stays short of its target and its resizeErrors say why, as on Azure.
#[tokio::test]
async fn a_pool_whose_nodes_talk_to_each_other_stays_on_one_host() {
    let _alone = one_at_a_time().await;
    // Each host takes two standard_a1 nodes (1 CPU each): the third has no room beside them.
    let s = server_on_three_hosts(",cpus=2").await;
    let body = json!({"id": "talk", "vmSize": "standard_a1", "targetDedicatedNodes": 3, "enableInterNodeCommunication": true});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    let nodes = steady_with_one_unusable(&s, "talk", 2).await;
    let (_, pool) = s.get("/pools/talk").await;
    assert_eq!(pool["enableInterNodeCommunication"], true, "{pool}");
    assert_eq!(
        pool["resizeErrors"][0]["code"], "AllocationFailed",
        "{pool}"
    );
    let message = pool["resizeErrors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("enableInterNodeCommunication"),
        "{message}"
    );
    let server = s.server_id().await;
    let mut spread = nodes_per_host(&server, "talk");
    spread.sort();
    assert_eq!(spread, [0, 0, 2], "both idle nodes on one host");

    // One slot per node: the sender runs on the other node, and reaches the listener's.
    s.job_on("j", "talk").await;
    // A connection that brings nothing (seen once: the listener ended with nothing heard) is
    // listened past; what counts is that the sender's words arrive.
    let listen = "sh -c 'until nc -l -p 7000 > heard && [ -s heard ]; do :; done; cat heard'";
    s.add_tasks("j", vec![json!({"id": "listen", "commandLine": listen})])
        .await;
    let listening = s.wait_task("j", "listen", "running").await;
    let on = listening["nodeInfo"]["nodeId"].as_str().unwrap();
    let listener = nodes.iter().find(|n| n["id"] == on).unwrap();
    let ip = listener["ipAddress"].as_str().unwrap();
    assert!(!ip.is_empty(), "{listener}");
    let send = format!(
        "sh -c 'until echo hello from $AZ_BATCH_NODE_ID | nc {ip} 7000; do sleep 0.2; done'"
    );
    s.add_tasks("j", vec![json!({"id": "send", "commandLine": send})])
        .await;
    let done = s.wait_all_completed("j", 2).await;
    for t in &done {
        assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    }
    let sender = s.task("j", "send").await["nodeInfo"]["nodeId"].clone();
    assert_ne!(sender, on, "the two tasks ran on two nodes");
    let heard = s
        .file("/jobs/j/tasks/listen/files/stdout.txt")
        .await
        .unwrap();
    assert_eq!(
        heard.trim(),
        format!("hello from {}", sender.as_str().unwrap())
    );
}

/// A dedicated node with no room takes low-priority nodes' room only where it may go: for a
/// pool whose nodes talk to each other, the host of its other nodes. Preempting elsewhere would
/// gain it nothing, so nothing is preempted and the node is `unusable`.
#[tokio::test]
async fn a_pool_kept_on_one_host_preempts_nothing_on_the_others() {
    let _alone = one_at_a_time().await;
    // Each host takes one standard_a1 node.
    let s = server_on_three_hosts(",cpus=1").await;
    let spot = json!({"id": "spot", "vmSize": "standard_a1", "targetLowPriorityNodes": 2});
    assert_eq!(s.post("/pools", &spot).await.0, 201);
    s.wait_nodes("spot", 2, "idle").await;
    let body = json!({"id": "talk", "vmSize": "standard_a1", "targetDedicatedNodes": 2, "enableInterNodeCommunication": true});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    steady_with_one_unusable(&s, "talk", 1).await;
    let spot = s.nodes("spot").await;
    assert!(
        spot.iter().all(|n| n["state"] == "idle"),
        "no low-priority node was preempted: {spot:?}"
    );
}

#[tokio::test]
async fn a_tcp_host_with_tls_client_certificates_runs_nodes() {
    let _alone = one_at_a_time().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = format!("/tmp/batchpool-engines/tls-{}", std::process::id());
    let engine = OwnEngine::start_tls(&dir, port);
    let host = format!("{},tls={dir}/client", engine.url());
    engine.build_test_image(&host);
    let args = ["--docker-host", host.as_str()];
    let s = TestServer::start_with(Rt::Docker, Some(fresh_database().await), &args).await;
    s.pool_of_one_idle_node("p").await;
    let server = s.server_id().await;
    assert_eq!(
        engine.containers(&server),
        1,
        "the node is on the TLS engine"
    );
    s.job_on("j", "p").await;
    s.add_tasks(
        "j",
        vec![json!({"id": "t", "commandLine": "echo over tls"})],
    )
    .await;
    let t = s.wait_task("j", "t", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    let out = s.file("/jobs/j/tasks/t/files/stdout.txt").await.unwrap();
    assert_eq!(out, "over tls\n");
}

/// The test of a lost host: three engines, a pool of 6 nodes at 2 per engine, 300 tasks;
/// one engine stops mid-run. Every task ends once, successfully, the lost engine's running tasks
/// requeued; the pool is back at 6 usable nodes on the other two; and when the engine comes back
/// the containers of the nodes it lost are removed, not run again.
#[tokio::test]
async fn losing_a_host_requeues_its_tasks_and_the_pool_grows_back_elsewhere() {
    let _alone = one_at_a_time().await;
    images_on_every_host();
    let mut engine = OwnEngine::start(&format!(
        "/tmp/batchpool-engines/lost-{}",
        std::process::id()
    ));
    engine.build_test_image(&engine.url());
    let kept = host_args("");
    let (own, extra) = (kept[1].clone(), kept[3].clone());
    let args = [
        "--docker-host",
        &own,
        "--docker-host",
        &extra,
        "--docker-host",
        &engine.url(),
        // Long enough that a busy machine's own engine, slow to answer a ping, is not lost.
        "--host-timeout",
        "8",
    ];
    let s = TestServer::start_with(Rt::Docker, Some(fresh_database().await), &args).await;
    let body = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 6, "taskSlotsPerNode": 2});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("p", 6, "idle").await;
    let server = s.server_id().await;
    let spread: Vec<usize> = [&own, &extra, &engine.url()]
        .iter()
        .map(|url| nodes_per_host_of(&server, "p", url))
        .collect();
    assert_eq!(spread, [2, 2, 2], "2 nodes per host");
    s.job_on("j", "p").await;
    let tasks: Vec<_> = (0..300)
        .map(|i| json!({"id": format!("t{i}"), "commandLine": "sleep 0.5"}))
        .collect();
    for chunk in tasks.chunks(100) {
        s.add_tasks("j", chunk.to_vec()).await;
    }
    wait_for("a third of the tasks to end, 12 running", || async {
        let (_, counts) = s.get("/jobs/j/taskcounts").await;
        let c = &counts["taskCounts"];
        (c["completed"].as_i64()? >= 100 && c["running"] == 12).then_some(())
    })
    .await;
    engine.stop();
    let mut requeued = 0;
    s.wait_all_completed("j", 300).await;
    let done = common::all_tasks(&s, "j").await;
    assert_eq!(done.len(), 300);
    for t in &done {
        assert_eq!(t["executionInfo"]["result"], "success", "{t}");
        assert_eq!(t["executionInfo"]["retryCount"], 0, "{t}");
        requeued += t["executionInfo"]["requeueCount"].as_i64().unwrap();
    }
    assert!(
        (4..=20).contains(&requeued),
        "the lost host's 4 running tasks (and any placed there before it was found lost) were requeued ({requeued})"
    );
    let (_, counts) = s.get("/jobs/j/taskcounts").await;
    assert_eq!(counts["taskCounts"]["succeeded"], 300, "{counts}");
    let nodes = s.wait_nodes("p", 6, "idle").await;
    assert_eq!(nodes.len(), 6, "the pool is back at its target");
    let spread: Vec<usize> = [&own, &extra]
        .iter()
        .map(|url| nodes_per_host_of(&server, "p", url))
        .collect();
    assert_eq!(spread, [3, 3], "the 6 nodes on the two hosts left");
    // The host comes back: its leftover nodes are removed, not run again.
    engine.launch();
    wait_for("the returning host to be cleared", || async {
        (engine.containers(&server) == 0).then_some(())
    })
    .await;
}

/// A host given with `--docker-host` that does not answer when the server starts: the server
/// waits for it up to `--host-timeout`, then starts without it, and says so in `/health/ready`
/// and `/metrics`.
/// Its node is made again on the other host, and the task that ran there is requeued and runs
/// again; the other host's node and task are adopted as they are. When the host answers, the
/// container left on it is removed, not run again, and the server is ready.
#[tokio::test]
async fn a_server_starts_without_a_host_that_does_not_answer() {
    let _alone = one_at_a_time().await;
    images_on_every_host();
    let mut engine = OwnEngine::start(&format!(
        "/tmp/batchpool-engines/down-{}",
        std::process::id()
    ));
    engine.build_test_image(&engine.url());
    let own = host_args("")[1].clone();
    let args = [
        "--docker-host",
        &own,
        "--docker-host",
        &engine.url(),
        "--host-timeout",
        "5",
        "--metrics-token",
        METRICS_TOKEN,
    ];
    let mut s = TestServer::start_with(Rt::Docker, Some(fresh_database().await), &args).await;
    let body = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 2});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("p", 2, "idle").await;
    let server = s.server_id().await;
    assert_eq!(engine.containers(&server), 1, "a node on each host");
    s.job_on("j", "p").await;
    let tasks =
        ["a", "b"].map(|id| json!({"id": id, "commandLine": "sleep 6; echo $AZ_BATCH_TASK_ID"}));
    s.add_tasks("j", tasks.to_vec()).await;
    for id in ["a", "b"] {
        s.wait_task("j", id, "running").await;
    }

    s.kill().await;
    engine.stop();
    s.launch().await;
    let ready = || async {
        let r = reqwest::get(format!("{}/health/ready", s.base))
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json::<serde_json::Value>().await.unwrap())
    };
    let (status, body) = ready().await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["runtimeReachable"], false, "{body}");
    let up = |url: &str, up: u8| format!("batchpool_docker_host_up{{host=\"{url}\"}} {up}");
    let said = wait_for("the leader to say which hosts answer", || async {
        let metrics = metrics(&s).await;
        metrics.contains("batchpool_leader 1").then_some(metrics)
    })
    .await;
    for series in [up(&own, 1), up(&engine.url(), 0)] {
        assert!(said.lines().any(|l| l == series), "{series} in:\n{said}");
    }
    let done = s.wait_all_completed("j", 2).await;
    let mut requeues: Vec<i64> = done
        .iter()
        .map(|t| {
            assert_eq!(t["executionInfo"]["result"], "success", "{t}");
            t["executionInfo"]["requeueCount"].as_i64().unwrap()
        })
        .collect();
    requeues.sort();
    assert_eq!(
        requeues,
        [0, 1],
        "the task on the host that did not answer ran again"
    );
    for id in ["a", "b"] {
        assert_eq!(s.stdout("j", id).await, format!("{id}\n"));
    }
    s.wait_nodes("p", 2, "idle").await;
    assert_eq!(
        nodes_per_host_of(&server, "p", &own),
        2,
        "both nodes on the host that answers"
    );

    engine.launch();
    wait_for("the returning host to be cleared", || async {
        (engine.containers(&server) == 0).then_some(())
    })
    .await;
    wait_for("the server to be ready", || async {
        (ready().await.0 == 200).then_some(())
    })
    .await;
    let said = metrics(&s).await;
    assert!(said.lines().any(|l| l == up(&engine.url(), 1)), "{said}");
}

/// The nodes of `pool` on one engine.
fn nodes_per_host_of(server_id: &str, pool: &str, url: &str) -> usize {
    let listed = run_ok(
        std::process::Command::new("docker")
            .env("DOCKER_HOST", url)
            .args(["ps", "-q", "--filter"])
            .arg(format!("label=batchpool.server={server_id}"))
            .arg("--filter")
            .arg(format!("label=batchpool.pool={pool}")),
    );
    listed.split_whitespace().count()
}

/// Runs `batchpool host ...` against the server's database.
fn host_cmd(s: &TestServer, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_batchpool"))
        .arg("host")
        .args(args)
        .arg("--database-url")
        .arg(s.database_url.as_ref().unwrap())
        .output()
        .unwrap()
}

#[tokio::test]
async fn hosts_are_added_and_removed_while_the_server_runs() {
    let _alone = one_at_a_time().await;
    images_on_every_host();
    let hosts = host_args("");
    let (own, extra) = (hosts[1].as_str(), hosts[3].as_str());
    let args = ["--docker-host", own];
    let s = TestServer::start_with(Rt::Docker, Some(fresh_database().await), &args).await;
    // Added by the CLI, changed through the operator's route: one list of hosts.
    let added = host_cmd(&s, &["add", &format!("{extra},cpus=4")]);
    assert!(added.status.success(), "{added:?}");
    let changed = json!({"url": extra, "cpus": 8});
    assert_eq!(s.operator(POST, "hosts", Some(&changed), None).await.0, 200);
    let listed = String::from_utf8(host_cmd(&s, &["list"]).stdout).unwrap();
    assert_eq!(listed, format!("{extra}  cpus=8  memory=-  tls=-\n"));
    wait_for("the leader to take the added host", || async {
        s.log_contains("a Docker host was added").then_some(())
    })
    .await;
    let body = json!({"id": "grow", "vmSize": "standard_a1", "targetDedicatedNodes": 2});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("grow", 2, "idle").await;
    let server = s.server_id().await;
    let on = |url: &str| nodes_per_host_of(&server, "grow", url);
    assert_eq!(
        (on(own), on(extra)),
        (1, 1),
        "the pool spreads onto the added host"
    );

    // The operator's list: the added host with its cap, the serving one by its nodes.
    let (status, hosts) = s.operator(GET, "hosts", None, None).await;
    assert_eq!(status, 200, "{hosts}");
    let hosts = hosts["value"].as_array().unwrap();
    let find = |url: &str| hosts.iter().find(|h| h["url"] == url).unwrap().clone();
    assert_eq!(hosts.len(), 2, "{hosts:?}");
    let (mine, theirs) = (find(own), find(extra));
    assert_eq!(
        (&mine["added"], &mine["cpus"]),
        (&json!(false), &json!(null))
    );
    assert_eq!(
        (&theirs["added"], &theirs["cpus"]),
        (&json!(true), &json!(8.0))
    );
    assert_eq!(
        (&mine["nodes"], &theirs["nodes"]),
        (&json!({"idle": 1}), &json!({"idle": 1}))
    );

    let removed = host_cmd(&s, &["remove", extra]);
    assert!(removed.status.success(), "{removed:?}");
    assert!(
        !host_cmd(&s, &["remove", extra]).status.success(),
        "removed already"
    );
    wait_for("the leader to retire the host", || async {
        s.log_contains("takes no new nodes").then_some(())
    })
    .await;
    let resize = json!({"targetDedicatedNodes": 4});
    assert_eq!(s.post("/pools/grow/resize", &resize).await.0, 202);
    s.wait_nodes("grow", 4, "idle").await;
    assert_eq!(
        (on(own), on(extra)),
        (3, 1),
        "no new node on the removed host"
    );
    assert_eq!(
        String::from_utf8(host_cmd(&s, &["list"]).stdout).unwrap(),
        ""
    );
}

/// The operator's hosts route without Docker: what it refuses, and a host added, changed and
/// removed (the local runtime places no node on it).
#[tokio::test]
async fn the_operators_hosts_route_checks_what_it_is_given() {
    let s = TestServer::start(Rt::Local).await;
    let host =
        json!({"url": "tcp://10.9.9.9:2376", "cpus": 2, "memoryMiB": 2048, "tlsDir": "/etc/h"});
    for method in [GET, POST, Method::DELETE] {
        let (status, e) = s
            .operator(method, "hosts", Some(&host), Some("wrong"))
            .await;
        assert_eq!((status, &e["code"]), (401, &json!("AuthenticationFailed")));
    }
    let bad = [
        (json!({"url": "docker.sock"}), "url"),
        (json!({"url": "unix://"}), "url"),
        (json!({"url": "unix:///d.sock", "cpus": 0}), "cpus"),
        (
            json!({"url": "unix:///d.sock", "memoryMiB": -1}),
            "memoryMiB",
        ),
        (
            json!({"url": "unix:///d.sock", "tlsDir": "/etc/h"}),
            "tlsDir",
        ),
        (json!({"url": "unix:///d.sock", "gpus": 1}), "gpus"),
        (
            json!({"url": format!("unix:///{}", "x".repeat(2000))}),
            "url",
        ),
        (json!({"cpus": 2}), "url"),
    ];
    for (body, field) in bad {
        let (status, e) = s.operator(POST, "hosts", Some(&body), None).await;
        assert_eq!(status, 400, "{body} gave {e}");
        let named = e["values"].to_string();
        assert!(named.contains(&format!("\"{field}\"")), "{body} gave {e}");
    }
    assert_eq!(s.operator(POST, "hosts", Some(&host), None).await.0, 201);
    let changed = json!({"url": "tcp://10.9.9.9:2376"});
    assert_eq!(s.operator(POST, "hosts", Some(&changed), None).await.0, 200);
    let (status, listed) = s.operator(GET, "hosts", None, None).await;
    assert_eq!(status, 200);
    let expected = json!([{"url": "tcp://10.9.9.9:2376", "added": true, "cpus": null,
        "memoryMiB": null, "tlsDir": null, "nodes": {}}]);
    assert_eq!(listed["value"], expected, "the change replaced the caps");

    let gone = "hosts?url=tcp%3A%2F%2F10.9.9.9%3A2376";
    assert_eq!(s.operator(Method::DELETE, gone, None, None).await.0, 204);
    let (status, e) = s.operator(Method::DELETE, gone, None, None).await;
    assert_eq!((status, &e["code"]), (404, &json!("HostNotFound")));
    let (status, e) = s.operator(Method::DELETE, "hosts", None, None).await;
    assert_eq!(
        (status, &e["code"]),
        (400, &json!("MissingRequiredQueryParameter"))
    );
    assert_eq!(
        s.operator(GET, "hosts", None, None).await.1["value"],
        json!([])
    );
}

/// A server of another build removes the agent volumes that no container mounts (a rolling
/// upgrade). A server whose nodes all went still names the volume it filled: its next node on
/// that engine must not start from the empty volume the engine would make in its place, nor
/// from one another server of its build has made and not yet filled.
#[tokio::test]
async fn a_node_whose_agent_volume_was_removed_meanwhile_still_gets_its_agent() {
    images_on_every_host();
    let args = host_args("");
    let engine = args.last().expect("an extra engine").clone();
    let docker = |args: &[&str]| {
        let out = std::process::Command::new("docker")
            .args(["-H", &engine])
            .args(args)
            .output()
            .expect("docker");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // What a node of an old build left when it lost its volume so: the empty one the engine
    // made in its place, without a label. It goes with the other builds' volumes.
    let old = "batchpool-agent-0ldbu11d";
    docker(&["volume", "create", old]);
    let s = TestServer::start_with(
        Rt::Docker,
        Some(fresh_database().await),
        &["--docker-host", &engine],
    )
    .await;
    s.pool_of_one_idle_node("v").await;
    let volumes = docker(&["volume", "ls", "-q"]);
    assert!(!volumes.lines().any(|v| v == old), "{volumes}");
    let resize = |n: u32| json!({"targetDedicatedNodes": n});
    let mounts = docker(&[
        "ps",
        "--no-trunc",
        "--filter",
        "label=batchpool.node",
        "--format",
        "{{.Mounts}}",
    ]);
    let volume = mounts
        .split([',', '\n'])
        .find(|name| name.starts_with("batchpool-agent-"))
        .expect("the node mounts the agent's volume")
        .to_string();

    // As another build's server would: every agent volume no container mounts goes. Other
    // tests' nodes on this engine may hold one for a while. The server still names it, and the
    // engine makes an empty one, without a label, for the next node's container.
    let remove_volumes = || async {
        assert_eq!(s.post("/pools/v/resize", &resize(0)).await.0, 202);
        s.wait_nodes("v", 0, "idle").await;
        wait_for("the engine's agent volumes to be removed", || async {
            let names = docker(&["volume", "ls", "-q", "--filter", "name=batchpool-agent-"]);
            if names.is_empty() {
                return Some(());
            }
            for name in names.split_whitespace() {
                docker(&["volume", "rm", name]);
            }
            None
        })
        .await;
    };
    remove_volumes().await;
    assert_eq!(s.post("/pools/v/resize", &resize(1)).await.0, 202);
    s.wait_nodes("v", 1, "idle").await;

    // As a server of this build would leave it mid-fill: made, with its label, and held by the
    // filler container it is unpacking the agent through, with nothing unpacked yet.
    remove_volumes().await;
    docker(&[
        "volume",
        "create",
        "--label",
        "batchpool.agent-files",
        &volume,
    ]);
    let filler = format!("{volume}-fill");
    let mount = format!("type=volume,src={volume},dst=/opt/batchpool");
    // An image every extra engine has (`images_on_every_host`): made from one it may lack, the
    // filler would not exist, and the server would fill the volume through one of its own.
    let image = common::TEST_IMAGE;
    docker(&[
        "create",
        "--name",
        &filler,
        "--network",
        "none",
        "--mount",
        &mount,
        image,
    ]);
    let since = docker(&["info", "--format", "{{.SystemTime}}"]);
    assert_eq!(s.post("/pools/v/resize", &resize(1)).await.0, 202);
    // The node's container is made (it mounts the volume); then the filling server is done,
    // here by giving up.
    let made_by_this_server = format!("label=batchpool.server={}", s.server_id().await);
    wait_for("the node's container to be made", || async {
        let until = docker(&["info", "--format", "{{.SystemTime}}"]);
        let events = [
            "events",
            "--since",
            &since,
            "--until",
            &until,
            "--filter",
            "event=create",
            "--filter",
            &made_by_this_server,
            "--format",
            "{{.ID}}",
        ];
        (!docker(&events).is_empty()).then_some(())
    })
    .await;
    docker(&["rm", "-f", &filler]);
    s.wait_nodes("v", 1, "idle").await;
}

/// A preempted low-priority node whose host is down (not yet lost): the removal of its
/// container fails, and is tried again every few seconds, not at every allocator pass (it was
/// tried, and logged, 11 times a second). Once the host answers, the container goes.
#[tokio::test]
async fn a_preempted_node_on_a_host_that_is_down_is_retried_at_a_pace() {
    let _alone = one_at_a_time().await;
    let mut engine = OwnEngine::start_in(
        &format!("/tmp/batchpool-engines/paced-{}", std::process::id()),
        206,
    );
    engine.build_test_image(&engine.url());
    // A host timeout that outlasts the test's window: the host is down, never lost.
    let args = ["--docker-host", &engine.url(), "--host-timeout", "120"];
    let s = TestServer::start_with(Rt::Docker, Some(fresh_database().await), &args).await;
    let body = json!({"id": "p", "vmSize": "standard_a1", "targetLowPriorityNodes": 1});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("p", 1, "idle").await;
    engine.stop();
    let reclaim = json!({"count": 1, "holdFor": "PT10M"});
    let (status, _) = s.operator(POST, "reclaim", Some(&reclaim), None).await;
    assert_eq!(status, 200);
    let failed = "removing a preempted node's container failed";
    wait_for("the first failed removal", || async {
        s.log_contains(failed).then_some(())
    })
    .await;
    // A window of time, not a condition: how often the removal is tried within it is the check.
    tokio::time::sleep(std::time::Duration::from_secs(8)).await;
    let tries = s.log_count(failed);
    assert!(
        (1..=3).contains(&tries),
        "tried {tries} times in about 8 s; once every 5 s is 2 or 3"
    );
    engine.launch();
    wait_for("the preempted node's container to go", || async {
        s.log_contains("a preempted node's container was removed")
            .then_some(())
    })
    .await;
    assert_eq!(engine.containers(&s.server_id().await), 0);
}

/// A node whose container is paused (frozen) when a new server adopts it: the container is
/// unpaused and the node works, rather than going `unusable` ("cannot start a paused
/// container"), which cost the Docker soak's pools their nodes one by one; and the task it was
/// running goes on, rather than being requeued while it ran on (the soak saw a node of 4 slots
/// run 5 tasks at once so).
#[tokio::test]
async fn a_paused_node_is_thawed_when_adopted() {
    let _alone = one_at_a_time().await;
    let mut s = TestServer::start_with(Rt::Docker, Some(fresh_database().await), &[]).await;
    let body = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    let nodes = s.wait_nodes("p", 1, "idle").await;
    let node = nodes[0]["id"].as_str().unwrap().to_string();
    let container = run_ok(std::process::Command::new("docker").args([
        "ps",
        "-q",
        "--filter",
        &format!("label=batchpool.node={node}"),
    ]));
    let container = container.trim();
    assert!(!container.is_empty(), "the node's container");
    s.job_on("j", "p").await;
    let once = "sh -c 'sleep 3; echo once >> $AZ_BATCH_NODE_SHARED_DIR/ran'";
    s.add_tasks("j", vec![json!({"id": "long", "commandLine": once})])
        .await;
    s.wait_task("j", "long", "running").await;
    s.kill().await;
    run_ok(std::process::Command::new("docker").args(["pause", container]));
    s.launch().await;
    s.add_tasks("j", vec![json!({"id": "t", "commandLine": "echo thawed"})])
        .await;
    let t = s.wait_task("j", "t", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    // The task that ran when the node froze goes on where it stopped: it runs once.
    let long = s.wait_task("j", "long", "completed").await;
    assert_eq!(long["executionInfo"]["result"], "success", "{long}");
    assert_eq!(long["executionInfo"]["requeueCount"], 0, "{long}");
    assert_eq!(s.shared_file("p", &node, "ran").await, "once\n");
    let (_, n) = s.get(&format!("/pools/p/nodes/{node}")).await;
    assert_ne!(n["state"], "unusable", "{n}");
}

/// A node that could not be made because its host's disk was full is `unusable`, and says
/// why; once the disk has room again, the node is made again, without anyone asking (the
/// Docker soak's pools lost their nodes one by one to faults that had passed).
#[tokio::test]
async fn a_node_not_made_for_a_full_disk_is_made_again_once_there_is_room() {
    let _alone = one_at_a_time().await;
    let dir = format!("/tmp/batchpool-engines/full-{}", std::process::id());
    let engine = OwnEngine::start_on_disk(&dir, 205, 512);
    engine.build_test_image(&engine.url());
    let filled = engine::fill(&engine.data()).expect("a file on the engine's disk");
    let args = ["--docker-host", &engine.url()];
    let s = TestServer::start_with(Rt::Docker, Some(fresh_database().await), &args).await;
    let body = json!({"id": "full", "vmSize": "standard_a1", "targetDedicatedNodes": 1});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    let unusable = s.wait_nodes("full", 1, "unusable").await;
    let error = &unusable[0]["errors"][0];
    assert_eq!(error["code"], "NodeCreationFailed", "{error}");
    let message = error["message"].as_str().unwrap().to_lowercase();
    assert!(message.contains("no space left on device"), "{error}");

    std::fs::remove_file(filled).unwrap();
    let idle = s.wait_nodes("full", 1, "idle").await;
    assert_eq!(
        idle[0]["id"], unusable[0]["id"],
        "the same node, made again"
    );
}

/// The engine lists containers from a view it updates only once it has written their state
/// to its disk: a node's container started while that disk was full runs, and is listed as
/// exited. A server that adopted the node then took it for stopped: it "made it again" (the
/// same container, running on), and requeued the task running there, which then ran twice at
/// once (the hour on Docker, seed 7). Now the node is adopted as it runs: its task runs once.
#[tokio::test]
async fn a_node_the_engine_lists_as_stopped_while_it_runs_is_adopted_as_it_runs() {
    let _alone = one_at_a_time().await;
    let dir = format!("/tmp/batchpool-engines/stale-{}", std::process::id());
    let engine = OwnEngine::start_on_disk(&dir, 206, 512);
    engine.build_test_image(&engine.url());
    let args = ["--docker-host", &engine.url()];
    let mut s = TestServer::start_with(Rt::Docker, Some(fresh_database().await), &args).await;
    let body = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("p", 1, "idle").await;
    let label = format!("label=batchpool.server={}", s.server_id().await);
    let listed = || run_ok(engine.cli().args(["ps", "-q", "--filter", &label]));
    let container = listed().trim().to_string();
    start_unlisted(&engine, &container, listed);

    s.wait_nodes("p", 1, "idle").await;
    s.job_on("j", "p").await;
    let task = json!({"id": "t", "commandLine": "/bin/sh -c 'sleep 8'"});
    s.add_tasks("j", vec![task]).await;
    s.wait_task("j", "t", "running").await;
    assert_eq!(
        listed().trim(),
        "",
        "the engine still lists the node as stopped"
    );
    s.kill().await;
    s.launch().await;
    let t = s.wait_task("j", "t", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    assert_eq!(t["executionInfo"]["requeueCount"], 0, "{t}");
    assert!(
        !s.log_contains("making it again"),
        "the running node was taken for stopped"
    );
}

/// Kills `container` and starts it again on a disk with a page or a few free: enough for the
/// engine to start it, too little to write its state, so that `listed` leaves it out.
fn start_unlisted(engine: &OwnEngine, container: &str, listed: impl Fn() -> String) {
    for free in [4, 8, 12, 16, 24, 32] {
        run_ok(engine.cli().args(["kill", container]));
        let filled = engine::fill(&engine.data()).expect("a file on the engine's disk");
        let size = std::fs::metadata(&filled).unwrap().len();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&filled)
            .unwrap();
        file.set_len(size - free * 1024).unwrap();
        let started = engine.cli().args(["start", container]).output().unwrap();
        std::fs::remove_file(filled).unwrap();
        let mut inspect = engine.cli();
        inspect.args(["inspect", "-f", "{{.State.Running}}", container]);
        let running = run_ok(&mut inspect).trim() == "true";
        if started.status.success() && running && listed().trim().is_empty() {
            return;
        }
        if !running {
            run_ok(engine.cli().args(["start", container]));
        }
    }
    panic!("the engine never listed a running container as stopped");
}

/// A server that takes the lead while a Docker host has stopped answering (it answered when
/// the server started) adopts the nodes of the host that answers and runs tasks on them at
/// once. The silent host's node is `unknown`: no task is placed on a node no one can reach
/// (none is requeued, none fails) until the host answers again, and the node is made again.
#[tokio::test]
async fn a_new_leader_sets_aside_the_nodes_of_a_host_that_stopped_answering() {
    let _alone = one_at_a_time().await;
    images_on_every_host();
    let mut engine = OwnEngine::start(&format!(
        "/tmp/batchpool-engines/aside-{}",
        std::process::id()
    ));
    engine.build_test_image(&engine.url());
    let own = host_args("")[1].clone();
    let args = ["--docker-host", &own, "--docker-host", &engine.url()];
    let db = fresh_database().await;
    let mut first = TestServer::start_with(Rt::Docker, Some(db.clone()), &args).await;
    let body = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 2});
    assert_eq!(first.post("/pools", &body).await.0, 201);
    first.wait_nodes("p", 2, "idle").await;
    let server = first.server_id().await;
    assert_eq!(engine.containers(&server), 1, "a node on each host");
    let second = TestServer::start_with(Rt::Docker, Some(db), &args).await;
    // The agents hear of the second server as the leader does.
    wait_for("the leader to know of both servers", || async {
        first
            .log_contains("the installation's servers changed count=2")
            .then_some(())
    })
    .await;

    engine.stop();
    first.kill().await;
    wait_for("the second server to lead", || async {
        second
            .log_contains("this server leads the scheduler")
            .then_some(())
    })
    .await;
    second.job_on("j", "p").await;
    let tasks: Vec<_> = (0..6)
        .map(|i| json!({"id": format!("t{i}"), "commandLine": "echo $AZ_BATCH_TASK_ID"}))
        .collect();
    second.add_tasks("j", tasks).await;
    for t in second.wait_all_completed("j", 6).await {
        assert_eq!(t["executionInfo"]["result"], "success", "{t}");
        assert_eq!(t["executionInfo"]["requeueCount"], 0, "{t}");
    }
    let mut states: Vec<String> = second
        .nodes("p")
        .await
        .iter()
        .map(|n| n["state"].as_str().unwrap().to_string())
        .collect();
    states.sort();
    assert_eq!(
        states,
        ["idle", "unknown"],
        "the silent host's node is unknown"
    );

    engine.launch();
    second.wait_nodes("p", 2, "idle").await;
    assert_eq!(
        engine.containers(&server),
        1,
        "the node is made again on its host"
    );
}
