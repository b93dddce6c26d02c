//! The simulated fleet (`batchpool fleet-sim`, `serve --runtime simulated`): hundreds of nodes
//! whose agents speak the agent protocol from one process, placed, run, read, adopted after a
//! restart and removed through the ordinary API.

mod common;

use common::{free_port, fresh_database, wait_for_long, Rt, TestServer};
use serde_json::{json, Value};

const NODES: usize = 300;

/// A `batchpool fleet-sim` on a free port, ended with the test.
async fn fleet_sim() -> (tokio::process::Child, String) {
    batchpool::install_tls();
    let url = format!("http://127.0.0.1:{}", free_port());
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_batchpool"))
        .args(["fleet-sim", "--listen", url.trim_start_matches("http://")])
        .stdout(std::process::Stdio::null())
        // Its agents say so while the server restarts: not the test's to show.
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("starting fleet-sim");
    let health = format!("{url}/health");
    wait_for_long("the fleet simulator to answer", 30, || async {
        reqwest::get(&health)
            .await
            .ok()
            .filter(|r| r.status().is_success())
            .map(|_| ())
    })
    .await;
    (child, url)
}

async fn sim_stats(url: &str) -> Value {
    reqwest::get(format!("{url}/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Waits until the pool has `count` idle nodes.
async fn idle(s: &TestServer, pool: &str, count: u64) {
    wait_for_long(&format!("{count} idle nodes"), 120, || async {
        let (_, counts) = s.get("/nodecounts").await;
        let mine = counts["value"]
            .as_array()?
            .iter()
            .find(|c| c["poolId"] == pool)?
            .clone();
        (mine["dedicated"]["idle"] == count && mine["dedicated"]["total"] == count).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_fleet_runs_tasks_and_is_adopted_after_a_restart() {
    let (_fleet, url) = fleet_sim().await;
    let flags = [
        "--runtime",
        "simulated",
        "--fleet-sim",
        &url,
        "--max-nodes-per-pool",
        "1000",
    ];
    let mut s = TestServer::start_with(Rt::Local, Some(fresh_database().await), &flags).await;
    let pool = json!({"id": "sim", "vmSize": "standard_d2_v3", "targetDedicatedNodes": NODES, "taskSlotsPerNode": 2});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    idle(&s, "sim", NODES as u64).await;
    assert_eq!(sim_stats(&url).await["running"], NODES);

    s.job_on("j", "sim").await;
    let tasks: Vec<Value> = (0..1000)
        .map(|i| json!({"id": format!("t{i}"), "commandLine": format!("/bin/sh -c 'sleep 0.2; exit {}'", i % 2)}))
        .collect();
    for chunk in tasks.chunks(100) {
        let (status, added) = s
            .post("/jobs/j/addtaskcollection", &json!({"value": chunk}))
            .await;
        assert_eq!(status, 200, "{added}");
    }
    wait_for_long("1,000 tasks to complete", 120, || async {
        let (_, counts) = s.get("/jobs/j/taskcounts").await;
        (counts["taskCounts"]["completed"] == 1000).then_some(())
    })
    .await;
    let (_, counts) = s.get("/jobs/j/taskcounts").await;
    assert_eq!(
        (
            &counts["taskCounts"]["succeeded"],
            &counts["taskCounts"]["failed"]
        ),
        (&json!(500), &json!(500))
    );
    assert_eq!(
        s.stdout("j", "t7").await,
        "simulated: /bin/sh -c 'sleep 0.2; exit 1'\n"
    );
    let t7 = s.task("j", "t7").await;
    assert_eq!(t7["executionInfo"]["exitCode"], 1, "{t7}");

    // A restart adopts every node: none is made again, and they run work.
    s.kill().await;
    s.launch().await;
    let adopted = format!("adopted existing nodes adopted={NODES}");
    wait_for_long("the nodes to be adopted", 60, || async {
        s.log_contains(&adopted).then_some(())
    })
    .await;
    idle(&s, "sim", NODES as u64).await;
    assert_eq!(sim_stats(&url).await["nodes"], NODES);
    let late = json!({"id": "late", "commandLine": "sleep 0.1"});
    assert_eq!(s.post("/jobs/j/tasks", &late).await.0, 201);
    let done = s.wait_task("j", "late", "completed").await;
    assert_eq!(done["executionInfo"]["exitCode"], 0, "{done}");

    // Resized to zero, the nodes go from the simulator too.
    let resize = json!({"targetDedicatedNodes": 0});
    assert_eq!(s.post("/pools/sim/resize", &resize).await.0, 202);
    wait_for_long("the simulated nodes to go", 120, || async {
        (sim_stats(&url).await["nodes"] == 0).then_some(())
    })
    .await;
}

/// A pool `sim` of `nodes` nodes x 2 slots and a job `j` with a task of `command` running on
/// each slot.
async fn every_slot_running(s: &TestServer, nodes: usize, command: &str) {
    let pool = json!({"id": "sim", "vmSize": "standard_d2_v3", "targetDedicatedNodes": nodes, "taskSlotsPerNode": 2});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    idle(s, "sim", nodes as u64).await;
    s.job_on("j", "sim").await;
    let tasks: Vec<Value> = (0..nodes * 2)
        .map(|i| json!({"id": format!("t{i}"), "commandLine": command}))
        .collect();
    s.add_tasks("j", tasks).await;
    wait_for_long("a task running on every slot", 30, || async {
        let (_, counts) = s.get("/jobs/j/taskcounts").await;
        (counts["taskCounts"]["running"] == nodes * 2).then_some(())
    })
    .await;
}

/// A second server started after the nodes got their work: the agents hear of it at once, not
/// with their next work, so when the leader is killed right after, they turn to the second,
/// which keeps their running tasks: none is requeued or run twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_hear_of_a_new_server_at_once_and_follow_the_lead_to_it() {
    let (_fleet, url) = fleet_sim().await;
    let flags = ["--runtime", "simulated", "--fleet-sim", &url];
    let db = fresh_database().await;
    let mut first = TestServer::start_with(Rt::Local, Some(db.clone()), &flags).await;
    every_slot_running(&first, 4, "sleep 20").await;

    // The agents' work named the first server alone; their next would come in 20 s.
    let second = TestServer::start_with(Rt::Local, Some(db), &flags).await;
    wait_for_long("the leader to know the second server", 10, || async {
        first
            .log_contains("the installation's servers changed count=2")
            .then_some(())
    })
    .await;
    first.kill().await;

    let done = second.wait_all_completed("j", 8).await;
    for t in &done {
        let info = &t["executionInfo"];
        assert_eq!(
            (&info["result"], &info["requeueCount"], &info["retryCount"]),
            (&json!("success"), &json!(0), &json!(0)),
            "{t}"
        );
    }
    assert!(
        second.log_contains("adopted=8 lost=0"),
        "{}",
        second.log_tail()
    );
}

/// After a restart, a node whose agent asks for work but answers questions late (20 s, past
/// the server's 15 s wait for a file) keeps its running tasks: the new server asks it again
/// rather than taking them for lost, so each runs once. Placement does not wait for it
/// meanwhile: a task added to another pool runs before the slow node's attempts are recovered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_agent_keeps_its_running_tasks_across_a_restart() {
    let (_fleet, url) = fleet_sim().await;
    let flags = ["--runtime", "simulated", "--fleet-sim", &url];
    let mut s = TestServer::start_with(Rt::Local, Some(fresh_database().await), &flags).await;
    every_slot_running(&s, 1, "sleep 30").await;
    let node = s.nodes("sim").await[0]["id"].as_str().unwrap().to_string();
    let other = json!({"id": "other", "vmSize": "standard_d2_v3", "targetDedicatedNodes": 1});
    assert_eq!(s.post("/pools", &other).await.0, 201);
    idle(&s, "other", 1).await;

    s.kill().await;
    let slow = reqwest::Client::new()
        .post(format!("{url}/nodes/{node}/slow?seconds=20"))
        .send()
        .await
        .unwrap();
    assert_eq!(slow.status(), 204);
    s.launch().await;
    s.job_on("k", "other").await;
    s.add_tasks("k", vec![json!({"id": "now", "commandLine": "true"})])
        .await;
    s.wait_all_completed("k", 1).await;
    // Once by the first server, at its start; not yet by this one.
    assert_eq!(
        s.log_count("recovered the attempts of a previous run"),
        1,
        "the new task waited for the slow node's recovery: {}",
        s.log_tail()
    );
    wait_for_long("the tasks to complete", 120, || async {
        let (_, counts) = s.get("/jobs/j/taskcounts").await;
        (counts["taskCounts"]["completed"] == 2).then_some(())
    })
    .await;
    let (_, list) = s.get("/jobs/j/tasks").await;
    for t in list["value"].as_array().unwrap() {
        let info = &t["executionInfo"];
        assert_eq!(
            (&info["result"], &info["requeueCount"]),
            (&json!("success"), &json!(0)),
            "{t}"
        );
    }
    assert!(s.log_contains("asking the agent again"), "{}", s.log_tail());
}
