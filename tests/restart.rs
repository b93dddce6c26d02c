//! Restarts: SIGKILL the server and start it again; nothing is lost, duplicated or orphaned.

#[macro_use]
mod common;

use std::collections::HashSet;

use common::{Rt, TestServer};
use serde_json::json;

async fn usage(
    db: &sqlx::PgPool,
) -> Vec<(
    String,
    String,
    chrono::DateTime<chrono::Utc>,
    Option<chrono::DateTime<chrono::Utc>>,
)> {
    sqlx::query_as(
        "SELECT pool_id, node_id, started_at, ended_at FROM usage_records ORDER BY node_id",
    )
    .fetch_all(db)
    .await
    .unwrap()
}

async fn restart_adopts_nodes(rt: Rt) {
    let mut s = TestServer::start(rt).await;
    let db = s.db().await;
    assert_eq!(
        s.post(
            "/pools",
            &json!({"id": "stay", "vmSize": "standard_a1", "targetDedicatedNodes": 3})
        )
        .await
        .0,
        201
    );
    assert_eq!(
        s.post(
            "/pools",
            &json!({"id": "gone", "vmSize": "standard_a1", "targetDedicatedNodes": 1})
        )
        .await
        .0,
        201
    );
    let stay: HashSet<String> = s
        .wait_nodes("stay", 3, "idle")
        .await
        .iter()
        .map(|n| n["id"].as_str().unwrap().into())
        .collect();
    let gone = s.wait_nodes("gone", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let containers_before: HashSet<String> = match rt {
        Rt::Docker => common::docker_containers(&s.server_id().await)
            .iter()
            .map(|c| c["Id"].as_str().unwrap().into())
            .collect(),
        Rt::Local => HashSet::new(),
    };
    let usage_before = usage(&db).await;
    assert_eq!(usage_before.len(), 4);

    s.kill().await;
    // While no server runs, pool "gone" is deleted from the database (as another server sharing it would).
    sqlx::query("DELETE FROM pools WHERE id = 'gone'")
        .execute(&db)
        .await
        .unwrap();
    s.launch().await;

    // The same three nodes, no more, and the deleted pool's node removed from the runtime.
    let nodes = s.wait_nodes("stay", 3, "idle").await;
    assert_eq!(
        nodes
            .iter()
            .map(|n| n["id"].as_str().unwrap().to_string())
            .collect::<HashSet<_>>(),
        stay
    );
    // Removed from the runtime first, then its usage record ends: wait for both.
    common::wait_for("the orphan to be removed", || async {
        let on_runtime: HashSet<String> = s.runtime_nodes().await.into_iter().collect();
        let metered = usage(&db)
            .await
            .iter()
            .any(|u| u.1 == gone && u.3.is_none());
        (on_runtime == stay && !metered).then_some(())
    })
    .await;
    if rt == Rt::Docker {
        let after: HashSet<String> = common::docker_containers(&s.server_id().await)
            .iter()
            .map(|c| c["Id"].as_str().unwrap().into())
            .collect();
        let kept: HashSet<String> = containers_before
            .iter()
            .filter(|id| after.contains(*id))
            .cloned()
            .collect();
        assert_eq!(
            kept, after,
            "the same containers were adopted, none made anew"
        );
        assert_eq!(after.len(), 3);
    }

    // Metering: the adopted nodes keep their records (no gap, no second record); the orphan's ends.
    let usage_after = usage(&db).await;
    assert_eq!(
        usage_after.len(),
        4,
        "no record added or lost: {usage_after:?}"
    );
    for (before, after) in usage_before.iter().zip(&usage_after) {
        assert_eq!(before.1, after.1);
        assert_eq!(before.2, after.2, "start times unchanged");
        if after.1 == gone {
            assert!(
                after.3.is_some(),
                "the deleted pool's node is no longer metered"
            );
        } else {
            assert_eq!(after.3, None, "an adopted node is still metered");
        }
    }
    // The server still manages what it adopted.
    assert_eq!(
        s.post("/pools/stay/resize", &json!({"targetDedicatedNodes": 1}))
            .await
            .0,
        202
    );
    s.wait_nodes("stay", 1, "idle").await;
    assert_eq!(s.runtime_nodes().await.len(), 1);
}
on_both_runtimes!(
    sigkill_then_restart_adopts_the_same_nodes,
    restart_adopts_nodes
);

/// A node row written before its container existed (the server died in between) is completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_half_made_before_a_crash_is_finished_after_restart() {
    let mut s = TestServer::start(Rt::Docker).await;
    let db = s.db().await;
    assert_eq!(
        s.post(
            "/pools",
            &json!({"id": "half", "vmSize": "standard_a1", "targetDedicatedNodes": 1})
        )
        .await
        .0,
        201
    );
    s.wait_nodes("half", 1, "idle").await;
    s.kill().await;
    // As if the server had recorded a second node and died before making its container.
    sqlx::query("UPDATE pools SET target_dedicated_nodes = 2, allocation_state = 'resizing'")
        .execute(&db)
        .await
        .unwrap();
    sqlx::query("INSERT INTO nodes (pool_pk, id, state, state_transition_time, allocation_time) SELECT pk, 'tvmps_halfmade_d', 'creating', now(), now() FROM pools")
        .execute(&db)
        .await
        .unwrap();
    s.launch().await;
    let nodes = s.wait_nodes("half", 2, "idle").await;
    assert!(nodes.iter().any(|n| n["id"] == "tvmps_halfmade_d"));
    assert_eq!(s.runtime_nodes().await.len(), 2);
}

/// Without DATABASE_URL the server runs its own PostgreSQL in its data directory: it survives a
/// graceful stop (which stops PostgreSQL too) and a SIGKILL (which leaves it running for the next start).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_postgres_in_the_data_directory_keeps_state_across_restarts() {
    let mut s = TestServer::start_with(Rt::Local, None, &[]).await;
    let pg = s.data_dir.path().join("postgres");
    assert!(
        pg.join("PG_VERSION").exists(),
        "the cluster lives in the data directory"
    );
    assert!(pg.join(".s.PGSQL.5432").exists(), "on a unix socket there");
    assert_eq!(
        s.post(
            "/pools",
            &json!({"id": "own", "vmSize": "standard_a1", "targetDedicatedNodes": 1})
        )
        .await
        .0,
        201
    );
    s.wait_nodes("own", 1, "idle").await;

    let status = s.terminate().await;
    assert!(status.success(), "SIGTERM shuts down cleanly: {status}");
    assert!(
        !pg.join("postmaster.pid").exists(),
        "PostgreSQL was stopped with the server"
    );

    s.launch().await;
    assert_eq!(s.get("/pools/own").await.1["currentDedicatedNodes"], 1);
    s.kill().await;
    s.launch().await;
    s.wait_nodes("own", 1, "idle").await;
    assert!(s.terminate().await.success());
}

/// Each task appends its id to the node's shared `ran` file, then takes a moment.
const RAN: &str = "echo $AZ_BATCH_TASK_ID >> $AZ_BATCH_NODE_SHARED_DIR/ran; sleep 1";

fn task_ids(n: usize) -> Vec<serde_json::Value> {
    (0..n)
        .map(|i| json!({"id": format!("t{i}"), "commandLine": RAN}))
        .collect()
}

/// SIGKILL with tasks queued and running: every task ends exactly once, with the outcome of the
/// attempts that ran on while no server watched recovered, not run again.
async fn sigkill_with_tasks_running(rt: Rt) {
    let mut s = TestServer::start(rt).await;
    assert_eq!(s.post("/pools", &json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 2})).await.0, 201);
    let node = s.wait_nodes("p", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        s.post("/jobs", &json!({"id": "j", "poolInfo": {"poolId": "p"}}))
            .await
            .0,
        201
    );
    s.add_tasks("j", task_ids(6)).await;
    // Two tasks have really started (their processes wrote to the node) when the server dies.
    common::wait_for("two tasks running", || async {
        (s.shared_file("p", &node, "ran").await.lines().count() == 2).then_some(())
    })
    .await;
    s.kill().await;
    s.launch().await;
    let tasks = s.wait_all_completed("j", 6).await;
    for t in &tasks {
        assert_eq!(t["executionInfo"]["result"], "success", "{t}");
        assert_eq!(
            t["executionInfo"]["requeueCount"], 0,
            "outcomes were recovered, not rerun: {t}"
        );
    }
    let mut ran: Vec<String> = s
        .shared_file("p", &node, "ran")
        .await
        .lines()
        .map(String::from)
        .collect();
    ran.sort();
    assert_eq!(
        ran,
        (0..6).map(|i| format!("t{i}")).collect::<Vec<_>>(),
        "each task ran exactly once"
    );
    let (_, n) = s.get(&format!("/pools/p/nodes/{node}")).await;
    assert_eq!(n["state"], "idle", "every slot was given back");
    assert_eq!(n["runningTaskSlotsCount"], 0);
    assert_eq!(n["runningTasksCount"], 0);
}
on_both_runtimes!(
    sigkill_with_tasks_running_ends_each_task_once,
    sigkill_with_tasks_running
);

/// Notes in `billing_gaps` each usage record closed while its node is still in use (idle,
/// running, offline, unknown, at its start task) when the closing transaction commits: a moment
/// a reader would see the node in use and not billed.
async fn watch_billing_gaps(db: &sqlx::PgPool) {
    for statement in [
        "CREATE TABLE billing_gaps (node_id text, state text)",
        "CREATE FUNCTION note_billing_gap() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO billing_gaps SELECT n.id, n.state FROM nodes n WHERE n.id = NEW.node_id
                AND n.state IN ('idle', 'running', 'offline', 'unknown', 'waitingforstarttask',
                                'starttaskfailed');
             RETURN NULL;
         END $$",
        "CREATE CONSTRAINT TRIGGER billing_gap AFTER UPDATE ON usage_records
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
             WHEN (OLD.ended_at IS NULL AND NEW.ended_at IS NOT NULL)
             EXECUTE FUNCTION note_billing_gap()",
    ] {
        sqlx::query(statement).execute(db).await.unwrap();
    }
}

/// When an attempt's process died while no server watched and left no exit code (its node's
/// agent died with it), its outcome cannot be known: the task is requeued (requeueCount + 1) and
/// runs again, on the node made again.
async fn lost_attempt_is_requeued(rt: Rt) {
    let mut s = TestServer::start(rt).await;
    assert_eq!(
        s.post(
            "/pools",
            &json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1})
        )
        .await
        .0,
        201
    );
    let node = s.wait_nodes("p", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        s.post("/jobs", &json!({"id": "j", "poolInfo": {"poolId": "p"}}))
            .await
            .0,
        201
    );
    s.add_tasks("j", vec![json!({"id": "victim", "commandLine": "echo run >> $AZ_BATCH_NODE_SHARED_DIR/runs; sleep 30"})]).await;
    s.wait_task("j", "victim", "running").await;
    let pid_file = "workitems/j/job-1/victim/.batchpool.1";
    // The attempt's record: its pid on the first line, and the boot of the agent that started it.
    let pid: i32 = common::wait_for("the attempt's pid", || async {
        let text = s.on_node(&node, pid_file).await?;
        let (pid, _boot) = text.strip_suffix('\n')?.split_once(' ')?;
        pid.parse().ok()
    })
    .await;
    let container = format!("batchpool-{}-{node}", s.server_id().await);
    let db = s.db().await;
    watch_billing_gaps(&db).await;
    s.kill().await;
    // The node's agent dies with the task (a node that crashed), so no one records its end.
    match rt {
        Rt::Local => {
            let labels: serde_json::Value = serde_json::from_slice(
                &std::fs::read(
                    s.data_dir
                        .path()
                        .join("nodes")
                        .join(&node)
                        .join(".batchpool-node.json"),
                )
                .unwrap(),
            )
            .unwrap();
            let agent = labels["agent"]["pid"].as_i64().unwrap() as i32;
            // SAFETY: killing the test's own node agent and task process group.
            unsafe {
                libc::kill(agent, libc::SIGKILL);
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        Rt::Docker => {
            common::run_ok(std::process::Command::new("docker").args(["kill", &container]));
        }
    }
    s.launch().await;
    let t = common::wait_for("the task to run again", || async {
        let t = s.task("j", "victim").await;
        (t["executionInfo"]["requeueCount"] == 1 && t["state"] == "running").then_some(t)
    })
    .await;
    assert_eq!(
        t["executionInfo"]["retryCount"], 0,
        "a requeue is not a retry"
    );
    common::wait_for("the second run to start", || async {
        (s.shared_file("p", &node, "runs").await == "run\nrun\n").then_some(())
    })
    .await;
    // The node made again was billed up to the moment it was not in use, never less.
    let gaps: Vec<(String, String)> = sqlx::query_as("SELECT node_id, state FROM billing_gaps")
        .fetch_all(&db)
        .await
        .unwrap();
    assert!(gaps.is_empty(), "billing closed while in use: {gaps:?}");
}
on_both_runtimes!(
    a_lost_attempt_is_requeued_after_restart,
    lost_attempt_is_requeued
);

/// Two servers on one database: one leads the scheduler, the other serves the API; tasks added
/// through either run exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_database_run_each_task_once() {
    // A 10-minute backup tick: the leader can learn of the other server's writes only through
    // NOTIFY within the test's patience.
    let slow_tick = ["--backup-tick-ms", "600000"];
    let first =
        TestServer::start_with(Rt::Local, Some(common::fresh_database().await), &slow_tick).await;
    let url = first.database_url.clone();
    let second = TestServer::start_with(Rt::Local, url, &slow_tick).await;
    assert_eq!(second.post("/pools", &json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 4})).await.0, 201);
    let node = first.wait_nodes("p", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        second
            .post("/jobs", &json!({"id": "j", "poolInfo": {"poolId": "p"}}))
            .await
            .0,
        201
    );
    second.add_tasks("j", (0..10).map(|i| json!({"id": format!("t{i}"), "commandLine": "echo $AZ_BATCH_TASK_ID >> $AZ_BATCH_NODE_SHARED_DIR/ran"})).collect()).await;
    first.wait_all_completed("j", 10).await;
    let mut ran: Vec<String> = first
        .shared_file("p", &node, "ran")
        .await
        .lines()
        .map(String::from)
        .collect();
    ran.sort();
    let mut expected: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
    expected.sort();
    assert_eq!(ran, expected);
    assert!(
        second
            .log_tail()
            .contains("another server leads the scheduler"),
        "{}",
        second.log_tail()
    );
}
