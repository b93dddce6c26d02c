//! Tasks ahead (`--tasks-ahead-per-slot`): a node holds single-slot tasks beyond its slots and
//! its agent starts each the moment a slot frees. A held task is `running` but takes no slot
//! in the node's counts, never starts beside the tasks that fill the slots, is dropped unrun
//! when it is terminated, and runs exactly once across a restart of the server.

#[macro_use]
mod common;

use common::{wait_for, Rt, TestServer};
use serde_json::json;

/// A command line no other test's process has.
fn marker(rt: Rt, case: u32) -> String {
    common::marker(rt, (43000, 44000), case)
}

/// A server whose nodes hold one task a slot ahead, with a pool of one 1-slot node; its id.
async fn one_slot(rt: Rt) -> (TestServer, String) {
    let s = TestServer::start_with(
        rt,
        Some(common::fresh_database().await),
        &["--tasks-ahead-per-slot", "1"],
    )
    .await;
    let node = s.one_slot_node("one").await;
    s.job_on("j", "one").await;
    (s, node)
}

/// A task that appends a line to the node's shared `<name>` (one line a run).
fn leaves(name: &str) -> String {
    format!("echo ran >> $AZ_BATCH_NODE_SHARED_DIR/{name}")
}

/// Starts `long` (`marker`) and waits until its process runs.
async fn long(s: &TestServer, id: &str, marker: &str) {
    s.add_tasks("j", vec![json!({"id": id, "commandLine": marker})])
        .await;
    wait_for(&format!("{marker} to run"), || async {
        s.process_running(marker).await.then_some(())
    })
    .await;
}

async fn held_tasks_wait_for_a_slot(rt: Rt) {
    let (s, node) = one_slot(rt).await;
    let m = marker(rt, 1);
    long(&s, "long", &m).await;

    // Placed on the node, behind the task in its one slot: running, and not started.
    s.add_tasks(
        "j",
        vec![json!({"id": "held", "commandLine": leaves("held")})],
    )
    .await;
    let held = s.wait_task("j", "held", "running").await;
    assert_eq!(held["nodeInfo"]["nodeId"], node.as_str(), "{held}");
    let n = s.get(&format!("/pools/one/nodes/{node}")).await.1;
    assert_eq!(n["runningTasksCount"], 1, "{n}");
    assert_eq!(n["runningTaskSlotsCount"], 1, "{n}");
    assert_eq!(n["state"], "running", "{n}");

    // Terminated while it waits: dropped there, never run.
    let status = s.post("/jobs/j/tasks/held/terminate", &json!({})).await.0;
    assert_eq!(status, 204);
    s.wait_task("j", "held", "completed").await;

    // The next waits too, and starts as soon as the slot frees.
    s.add_tasks(
        "j",
        vec![json!({"id": "next", "commandLine": leaves("next")})],
    )
    .await;
    s.wait_task("j", "next", "running").await;
    assert_eq!(s.shared_file("one", &node, "next").await, "");
    let status = s.post("/jobs/j/tasks/long/terminate", &json!({})).await.0;
    assert_eq!(status, 204);
    let next = s.wait_task("j", "next", "completed").await;
    assert_eq!(next["executionInfo"]["exitCode"], 0, "{next}");
    assert_eq!(s.shared_file("one", &node, "next").await, "ran\n");
    assert_eq!(
        s.shared_file("one", &node, "held").await,
        "",
        "the terminated task ran"
    );
    assert!(!s.process_running(&m).await);
    let n = s.get(&format!("/pools/one/nodes/{node}")).await.1;
    assert_eq!(n["runningTasksCount"], 0, "{n}");
}
on_both_runtimes!(held_tasks_wait_for_a_slot_first, held_tasks_wait_for_a_slot);

/// A server killed while a task waits on its node: the agent drops it as it hears from the
/// next term's leader, which requeues it, and it runs exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_task_runs_once_across_a_restart() {
    let (mut s, node) = one_slot(Rt::Local).await;
    let m = marker(Rt::Local, 2);
    long(&s, "long", &m).await;
    s.add_tasks(
        "j",
        vec![json!({"id": "held", "commandLine": leaves("held")})],
    )
    .await;
    s.wait_task("j", "held", "running").await;
    s.kill().await;
    s.launch().await;
    // Once the restarted server watches `long` again, so that its end reaches the process.
    wait_for("the restarted server to recover its attempts", || async {
        (s.log_count("recovered the attempts of a previous run") == 2).then_some(())
    })
    .await;
    let n = s.get(&format!("/pools/one/nodes/{node}")).await.1;
    assert_eq!(n["runningTasksCount"], 1, "{n}");
    assert_eq!(
        s.post("/jobs/j/tasks/long/terminate", &json!({})).await.0,
        204
    );
    let held = s.wait_task("j", "held", "completed").await;
    assert_eq!(held["executionInfo"]["exitCode"], 0, "{held}");
    assert_eq!(s.shared_file("one", &node, "held").await, "ran\n");
    // Nothing of it is left to run late.
    s.add_tasks("j", vec![json!({"id": "last", "commandLine": "true"})])
        .await;
    s.wait_task("j", "last", "completed").await;
    assert_eq!(s.shared_file("one", &node, "held").await, "ran\n");
}

/// By default (`auto`), tasks are held ahead only for a job whose recent tasks ran short, and
/// only on a node that runs nothing else: with a long task of another job in one node's slot,
/// the short job's tasks all go to the other node (which holds some of them ahead), none waits
/// behind the long task, and all are done long before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_short_job_s_tasks_are_never_held_behind_a_long_task() {
    let rt = Rt::Local;
    let s = TestServer::start(rt).await;
    let pool = json!({"id": "two", "vmSize": "standard_a1", "targetDedicatedNodes": 2, "taskSlotsPerNode": 1});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    s.wait_nodes("two", 2, "idle").await;
    s.job_on("short", "two").await;
    s.job_on("long", "two").await;
    let short = |from: usize, to: usize| -> Vec<serde_json::Value> {
        (from..to)
            .map(|i| json!({"id": format!("s{i}"), "commandLine": "sleep 0.2"}))
            .collect()
    };
    // The short job shows it runs short.
    s.add_tasks("short", short(0, 10)).await;
    s.wait_all_completed("short", 10).await;

    let m = marker(rt, 9);
    s.add_tasks("long", vec![json!({"id": "l", "commandLine": m})])
        .await;
    wait_for(&format!("{m} to run"), || async {
        s.process_running(&m).await.then_some(())
    })
    .await;
    let long_node = s.task("long", "l").await["nodeInfo"]["nodeId"].clone();

    s.add_tasks("short", short(10, 30)).await;
    let done = s.wait_all_completed("short", 30).await;
    assert_eq!(s.task("long", "l").await["state"], "running");
    let mut on_free_node: Vec<(String, String)> = Vec::new();
    for t in done
        .iter()
        .filter(|t| t["id"].as_str().unwrap()[1..].parse::<usize>().unwrap() >= 10)
    {
        assert_ne!(
            t["nodeInfo"]["nodeId"], long_node,
            "held behind the long task: {t}"
        );
        let info = &t["executionInfo"];
        on_free_node.push((
            info["startTime"].as_str().unwrap().to_string(),
            info["endTime"].as_str().unwrap().to_string(),
        ));
    }
    // The free node has one slot: a task placed while another ran there was held ahead.
    on_free_node.sort();
    let held = on_free_node.windows(2).filter(|w| w[1].0 < w[0].1).count();
    assert!(held > 0, "no task was held ahead: {on_free_node:?}");
}
