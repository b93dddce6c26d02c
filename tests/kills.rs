//! Ending work ends its processes: deleting a running task, its job or its pool kills the
//! process before its slot is handed on, so a 1-slot node never runs two tasks at once. And a
//! deleted task's directory goes without taking a new task's of the same id.

#[macro_use]
mod common;

use common::{wait_for, Rt, TestServer};
use serde_json::json;

/// A command line no other test's process has.
fn marker(rt: Rt, case: u32) -> String {
    common::marker(rt, (41000, 42000), case)
}

/// A task that records in the node's shared `alive-<case>` how many processes run `marker`
/// as it starts (the pattern written so that it does not match itself).
fn witness(marker: &str, case: u32) -> String {
    let (head, last) = marker.split_at(marker.len() - 1);
    format!(
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done | grep -c '{head}[{last}]' \
         > $AZ_BATCH_NODE_SHARED_DIR/alive-{case}; true"
    )
}

async fn job(s: &TestServer, id: &str) {
    let (status, body) = s
        .post("/jobs", &json!({"id": id, "poolInfo": {"poolId": "one"}}))
        .await;
    assert_eq!(status, 201, "{body}");
}

/// Starts `sleep <marker>` as `job/task` and waits until its process runs.
async fn victim(s: &TestServer, job: &str, task: &str, marker: &str) {
    s.add_tasks(job, vec![json!({"id": task, "commandLine": marker})])
        .await;
    s.wait_task(job, task, "running").await;
    wait_for(&format!("{marker} to run"), || async {
        s.process_running(marker).await.then_some(())
    })
    .await;
}

/// Runs the witness of `case` in `job` on the 1-slot node and returns what it saw.
async fn witnessed(s: &TestServer, node: &str, job: &str, marker: &str, case: u32) -> String {
    let id = format!("witness-{case}");
    s.add_tasks(
        job,
        vec![json!({"id": id, "commandLine": witness(marker, case)})],
    )
    .await;
    s.wait_task(job, &id, "completed").await;
    s.shared_file("one", node, &format!("alive-{case}")).await
}

async fn ending_work_kills_its_processes(rt: Rt) {
    let s = TestServer::start(rt).await;
    let node = s.one_slot_node("one").await;

    // Deleting a running task.
    let m = marker(rt, 1);
    job(&s, "j").await;
    victim(&s, "j", "victim", &m).await;
    let victim_dir = "workitems/j/job-1/victim";
    assert!(s.exists_on_node(&node, victim_dir).await);
    assert_eq!(s.delete("/jobs/j/tasks/victim").await.0, 200);
    assert_eq!(
        witnessed(&s, &node, "j", &m, 1).await,
        "0\n",
        "the next task ran beside the deleted one"
    );
    assert!(!s.process_running(&m).await);
    // Its directory goes once its process has (removed by the node's agent).
    wait_for("the deleted task's directory to go", || async {
        (!s.exists_on_node(&node, victim_dir).await).then_some(())
    })
    .await;

    // Deleting a job with a running task.
    let m = marker(rt, 2);
    job(&s, "doomed").await;
    victim(&s, "doomed", "victim", &m).await;
    assert_eq!(s.delete("/jobs/doomed").await.0, 202);
    wait_for("the job to be deleted", || async {
        (s.get("/jobs/doomed").await.0 == 404).then_some(())
    })
    .await;
    assert_eq!(
        witnessed(&s, &node, "j", &m, 2).await,
        "0\n",
        "the next task ran beside the deleted job's"
    );
    assert!(!s.process_running(&m).await);

    // Deleting the pool.
    let m = marker(rt, 3);
    victim(&s, "j", "last", &m).await;
    assert_eq!(s.delete("/pools/one").await.0, 202);
    wait_for("the pool to be deleted", || async {
        (s.get("/pools/one").await.0 == 404).then_some(())
    })
    .await;
    wait_for(&format!("{m} to be killed with its pool"), || async {
        (!s.process_running(&m).await).then_some(())
    })
    .await;
}
on_both_runtimes!(
    ending_work_kills_its_processes_first,
    ending_work_kills_its_processes
);

/// How many removals a local node's agent has moved aside and not finished (its trash).
fn in_trash(s: &TestServer, node: &str) -> usize {
    let trash = s
        .data_dir
        .path()
        .join("nodes")
        .join(node)
        .join(".batchpool-trash");
    std::fs::read_dir(trash).map_or(0, |d| d.count())
}

/// A task added with a deleted task's id while the deleted one's directory is being removed
/// (on the node it would run on) runs in a directory of its own: the removal never takes the
/// new task's files. The old directory leaves its path at once (moved aside by the node's
/// agent) and its files go in the background.
#[tokio::test]
async fn a_task_added_again_while_its_old_directory_goes_keeps_its_files() {
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("one").await;
    let node = s.nodes("one").await[0]["id"].as_str().unwrap().to_string();
    s.job_on("j", "one").await;
    // Enough files beside its output that removing them takes a while, and a removal that went
    // on past the new task's start would likely take its output too. (With attempts that did not
    // wait, this failed in each of 4 runs; with 100,000 files the removal was over too soon.)
    let many =
        json!({"id": "t", "commandLine": "cd $AZ_BATCH_TASK_DIR && seq 1 200000 | xargs touch"});
    s.add_tasks("j", vec![many]).await;
    s.wait_task("j", "t", "completed").await;
    let dir = "workitems/j/job-1/t";
    assert!(s.exists_on_node(&node, &format!("{dir}/200000")).await);

    assert_eq!(s.delete("/jobs/j/tasks/t").await.0, 200);
    wait_for("the deleted task's directory to leave its path", || async {
        (!s.exists_on_node(&node, dir).await).then_some(())
    })
    .await;
    // What goes in the background is the node's own business: never listed.
    let (status, listed) = s
        .get(&format!("/pools/one/nodes/{node}/files?recursive=true"))
        .await;
    assert_eq!(status, 200, "{listed}");
    assert!(!listed.to_string().contains("trash"), "{listed}");
    let again = json!({"id": "t", "commandLine": "echo again > again.txt; echo again"});
    s.add_tasks("j", vec![again]).await;
    s.wait_task("j", "t", "completed").await;
    wait_for("the old files to be gone", || async {
        (in_trash(&s, &node) == 0).then_some(())
    })
    .await;
    assert!(!s.exists_on_node(&node, &format!("{dir}/200000")).await);
    assert_eq!(
        s.file("/jobs/j/tasks/t/files/stdout.txt").await.as_deref(),
        Some("again\n"),
        "the new task's output is its own and still there"
    );
    assert!(
        s.exists_on_node(&node, &format!("{dir}/wd/again.txt"))
            .await
    );
}
