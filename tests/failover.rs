//! PostgreSQL going away under running servers: a restart with two servers on one database (one
//! scheduler leads at a time, fenced by its epoch), and the embedded PostgreSQL killed (restarted
//! by the server itself; readiness says so meanwhile).

mod common;

use std::str::FromStr;
use std::time::{Duration, Instant};

use common::pg::OwnPostgres;
use common::{wait_for, Rt, TestServer};
use serde_json::{json, Value};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

/// (epoch, whether it started or ended, when) of every term a server's log shows (epoch 0 when
/// the log names none).
fn terms(log: &str) -> Vec<(i64, bool, String)> {
    log.lines()
        .filter_map(|line| {
            let starts = line.contains("this server leads the scheduler");
            if !starts && !line.contains("stopped leading the scheduler") {
                return None;
            }
            let epoch = line
                .split("epoch=")
                .nth(1)
                .and_then(|e| e.split_whitespace().next());
            let at = line.split_whitespace().next()?.to_string();
            Some((epoch.and_then(|e| e.parse().ok()).unwrap_or(0), starts, at))
        })
        .collect()
}

fn full_log(s: &TestServer) -> String {
    std::fs::read_to_string(s.data_dir.path().join("server.log")).unwrap_or_default()
}

/// The leader epoch and holder in the database.
async fn leader(db: &sqlx::PgPool) -> (i64, String) {
    sqlx::query_as("SELECT epoch, coalesce(holder, '') FROM leader")
        .fetch_one(db)
        .await
        .expect("leader row")
}

/// Writes as a scheduler of `epoch` would; the error's SQLSTATE if refused.
async fn write_as_epoch(url: &str, epoch: i64) -> Option<String> {
    let mut conn = PgConnectOptions::from_str(url)
        .unwrap()
        .options([("batchpool.leader_epoch", epoch.to_string())])
        .connect()
        .await
        .expect("connect");
    let result = sqlx::query("UPDATE tasks SET last_modified = last_modified WHERE false")
        .execute(&mut conn)
        .await;
    let _ = conn.close().await;
    result.err().map(|e| {
        e.as_database_error()
            .and_then(|d| d.code())
            .unwrap_or_default()
            .to_string()
    })
}

/// Two servers on one database, PostgreSQL restarted under them mid-run (which drops the
/// leader's advisory lock): the old leader stops leading on its own, the terms in the logs never
/// overlap, a stale epoch can no longer write, and every task runs once (or again only when the
/// API reports a requeue).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_restart_leaves_one_leader_at_a_time() {
    let pg = OwnPostgres::start();
    let url = pg.fresh_database().await;
    let first = TestServer::start_with(Rt::Local, Some(url.clone()), &[]).await;
    let db = first.db().await;
    let epoch = wait_for("the first server to lead", || async {
        terms(&full_log(&first)).first().map(|t| t.0)
    })
    .await;
    let second = TestServer::start_with(Rt::Local, Some(url.clone()), &[]).await;

    let traces = tempfile::tempdir().unwrap();
    let ran = traces.path().join("ran");
    assert_eq!(first.post("/pools", &json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 4})).await.0, 201);
    first.wait_nodes("p", 1, "idle").await;
    assert_eq!(
        first
            .post("/jobs", &json!({"id": "j", "poolInfo": {"poolId": "p"}}))
            .await
            .0,
        201
    );
    let command = format!("echo $AZ_BATCH_TASK_ID >> {}; sleep 0.3", ran.display());
    let count = 40;
    let tasks = (0..count)
        .map(|i| json!({"id": format!("t{i}"), "commandLine": command}))
        .collect();
    second.add_tasks("j", tasks).await;
    wait_for("some tasks to run", || async {
        let lines = std::fs::read_to_string(&ran)
            .unwrap_or_default()
            .lines()
            .count();
        (lines >= 8).then_some(())
    })
    .await;

    pg.restart();

    wait_for("the old leader to stop leading", || async {
        terms(&full_log(&first))
            .iter()
            .any(|(e, starts, _)| *e == epoch && !starts)
            .then_some(())
    })
    .await;
    let tasks = second.wait_all_completed("j", count).await;

    // One leader at a time: every term ended before the next one began, whichever server led.
    let mut all: Vec<(i64, bool, String)> = terms(&full_log(&first));
    all.extend(terms(&full_log(&second)));
    all.sort_by(|a, b| a.2.cmp(&b.2));
    let mut leading: Option<i64> = None;
    for (e, starts, at) in &all {
        match (leading, starts) {
            (None, true) => leading = Some(*e),
            (Some(current), false) if current == *e => leading = None,
            _ => panic!(
                "term {e} {} at {at} while term {leading:?} led: {all:?}",
                if *starts { "began" } else { "ended" }
            ),
        }
    }
    let (now, holder) = leader(&db).await;
    assert!(now > epoch, "a new term began after the restart");
    let leads = [first.pid(), second.pid()].map(|pid| holder.ends_with(&format!(" pid {pid}")));
    assert!(
        leads[0] != leads[1],
        "one of the two servers leads: {holder}"
    );

    // The fence: a write of the old epoch is refused; one of the current epoch is not.
    assert_eq!(write_as_epoch(&url, epoch).await.as_deref(), Some("BP001"));
    assert_eq!(write_as_epoch(&url, now).await, None);

    // Every task ran once, or again only after a requeue the API reports.
    let text = std::fs::read_to_string(&ran).unwrap();
    println!(
        "terms {all:?}; {} runs of {count} tasks, {} requeues",
        text.lines().count(),
        tasks
            .iter()
            .map(|t| t["executionInfo"]["requeueCount"].as_u64().unwrap())
            .sum::<u64>()
    );
    for task in &tasks {
        let id = task["id"].as_str().unwrap();
        let runs = text.lines().filter(|l| *l == id).count() as u64;
        let requeues = task["executionInfo"]["requeueCount"].as_u64().unwrap();
        assert!(
            runs >= 1 && runs <= 1 + requeues,
            "{id} ran {runs} times with {requeues} requeues: {task}"
        );
        assert_eq!(task["executionInfo"]["result"], "success", "{task}");
    }
}

async fn readiness(s: &TestServer) -> (u16, Value) {
    match reqwest::get(format!("{}/health/ready", s.base)).await {
        Ok(r) => (r.status().as_u16(), r.json().await.unwrap_or(Value::Null)),
        Err(_) => (0, Value::Null),
    }
}

/// Without DATABASE_URL the server runs its own PostgreSQL; a SIGKILL of its postmaster in the
/// middle of a run is noticed, PostgreSQL comes back by itself within 15 s with its data,
/// readiness answers 503 in between, liveness stays 200, and every task runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_embedded_postgres_is_restarted() {
    let mut s = TestServer::start_with(Rt::Local, None, &[]).await;
    let (status, body) = readiness(&s).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["databaseReachable"], true);
    assert_eq!(body["runtime"], "local");
    assert_eq!(body["runtimeReachable"], true);
    wait_for("the server to lead its scheduler", || async {
        (readiness(&s).await.1["leadsScheduler"] == true).then_some(())
    })
    .await;
    assert_eq!(
        s.post(
            "/jobs",
            &json!({"id": "kept", "poolInfo": {"poolId": "none"}})
        )
        .await
        .0,
        201
    );
    const TASKS: usize = 300;
    assert_eq!(s.post("/pools", &json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 4})).await.0, 201);
    let nodes = vec![s.wait_nodes("p", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string()];
    assert_eq!(
        s.post("/jobs", &json!({"id": "j", "poolInfo": {"poolId": "p"}}))
            .await
            .0,
        201
    );
    for chunk in (0..TASKS).collect::<Vec<_>>().chunks(100) {
        let tasks = chunk
            .iter()
            .map(|i| json!({"id": format!("t{i}"), "commandLine": "echo $AZ_BATCH_TASK_ID >> $AZ_BATCH_NODE_SHARED_DIR/ran; sleep 0.02"}))
            .collect();
        s.add_tasks("j", tasks).await;
    }
    wait_for("50 tasks to complete", || async {
        let (_, counts) = s.get("/jobs/j/taskcounts").await;
        (counts["taskCounts"]["completed"].as_u64() >= Some(50)).then_some(())
    })
    .await;

    let pid_file = s.data_dir.path().join("postgres").join("postmaster.pid");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: a signal to the postmaster this test's server started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let killed = Instant::now();

    let (status, body) = wait_for("readiness to say the database is gone", || async {
        let (status, body) = readiness(&s).await;
        (status != 200).then_some((status, body))
    })
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["databaseReachable"], false, "{body}");
    let live = reqwest::get(format!("{}/health", s.base)).await.unwrap();
    assert_eq!(live.status(), 200, "liveness is not readiness");

    wait_for("readiness to come back", || async {
        (readiness(&s).await.0 == 200).then_some(())
    })
    .await;
    let back = killed.elapsed();
    assert!(back < Duration::from_secs(15), "back after {back:?}");
    let (status, job) = s.get("/jobs/kept").await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["id"], "kept");
    // pg_ctl may still be waiting for the start it made when the database already answers.
    wait_for("the server to log the restart", || async {
        full_log(&s).contains("restarted PostgreSQL").then_some(())
    })
    .await;
    s.wait_all_completed("j", TASKS).await;
    let tally = common::tally_runs(&s, "p", &nodes, "j", TASKS).await;
    println!("PostgreSQL back {back:?} after its postmaster was killed; {TASKS} tasks: {tally}");
    tally.assert_once_each();
    assert!(s.terminate().await.success());
}
