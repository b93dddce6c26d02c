//! Crashes under load: the server is killed with SIGKILL while it runs thousands of tasks and
//! started again on the same database and data directory. Every task ends exactly once: none
//! lost, none run a second time unless the API says it was requeued.

mod common;

use std::time::Instant;

use common::{wait_for, Rt, TestServer};
use serde_json::{json, Value};

const TASKS: usize = 3000;
/// The server is killed when this many tasks have completed.
const KILL_AT: [u64; 3] = [500, 1300, 2100];

/// Every task leaves its id in its node's shared directory, once per run of its command.
const COMMAND: &str = "echo $AZ_BATCH_TASK_ID >> $AZ_BATCH_NODE_SHARED_DIR/ran";

async fn counts(s: &TestServer, job: &str) -> Value {
    let (status, counts) = s.get(&format!("/jobs/{job}/taskcounts")).await;
    assert_eq!(status, 200, "{counts}");
    counts["taskCounts"].clone()
}

async fn completed(s: &TestServer, job: &str) -> u64 {
    counts(s, job).await["completed"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sigkills_during_3000_tasks_lose_nothing_and_run_nothing_twice() {
    let mut s = TestServer::start(Rt::Local).await;
    let (status, body) = s
        .post(
            "/pools",
            &json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 2, "taskSlotsPerNode": 8}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let nodes: Vec<String> = s
        .wait_nodes("p", 2, "idle")
        .await
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect();
    let (status, body) = s
        .post("/jobs", &json!({"id": "j", "poolInfo": {"poolId": "p"}}))
        .await;
    assert_eq!(status, 201, "{body}");
    let started = Instant::now();
    for chunk in (0..TASKS).collect::<Vec<_>>().chunks(100) {
        s.add_tasks(
            "j",
            chunk
                .iter()
                .map(|i| json!({"id": format!("t{i}"), "commandLine": COMMAND}))
                .collect(),
        )
        .await;
    }

    let (mut recoveries, mut running_at_kill) = (Vec::new(), Vec::new());
    for at in KILL_AT {
        let at_kill = wait_for(&format!("{at} tasks completed"), || async {
            let c = counts(&s, "j").await;
            (c["completed"].as_u64().unwrap() >= at).then_some(c)
        })
        .await;
        running_at_kill.push(at_kill["running"].as_u64().unwrap());
        s.kill().await;
        let killed = Instant::now();
        s.launch().await;
        // Back when the next task completes after the restart.
        let before = completed(&s, "j").await;
        wait_for("a task to complete after the restart", || async {
            (completed(&s, "j").await > before).then_some(())
        })
        .await;
        recoveries.push(killed.elapsed());
    }
    wait_for(&format!("all {TASKS} tasks completed"), || async {
        (completed(&s, "j").await == TASKS as u64).then_some(())
    })
    .await;
    let elapsed = started.elapsed();

    let tally = common::tally_runs(&s, "p", &nodes, "j", TASKS).await;
    eprintln!(
        "reliability: {TASKS} tasks, 3 x SIGKILL (running then: {running_at_kill:?}), in {:.1} s; \
         back after each kill in {:?}; \
         {tally}",
        elapsed.as_secs_f64(),
        recoveries,
    );
    tally.assert_once_each();
    for node in &nodes {
        let (_, n) = s.get(&format!("/pools/p/nodes/{node}")).await;
        assert_eq!(n["state"], "idle", "every slot was given back: {n}");
        assert_eq!(n["runningTaskSlotsCount"], 0, "{n}");
    }
}
