//! Compute hours: a node counts from ready to removed, whatever it ran.

#[macro_use]
mod common;

use chrono::{DateTime, Duration, TimeZone, Utc};
use common::{wait_for, Rt, TestServer};
use serde_json::{json, Value};

/// Records `count` nodes of `pool` alive for `hours` from `start`, as the allocator would have.
async fn record_nodes(
    db: &sqlx::PgPool,
    pool: &str,
    count: usize,
    start: DateTime<Utc>,
    hours: i64,
) {
    for i in 0..count {
        sqlx::query(
            "INSERT INTO usage_records (account, pool_pk, pool_id, node_id, vm_size, vcpus, started_at, ended_at) \
             VALUES ('batchpool', 0, $1, $2, 'standard_d2s_v3', 2, $3, $4)",
        )
        .bind(pool)
        .bind(format!("{pool}-node-{i}"))
        .bind(start)
        .bind(start + Duration::hours(hours))
        .execute(db)
        .await
        .unwrap();
    }
}

fn hours_of<'a>(report: &'a Value, pool: &str) -> &'a Value {
    &report["value"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["poolId"] == pool)
        .unwrap_or_else(|| panic!("{pool} in {report}"))["computeHours"]
}

/// The seed's rule, with a clock the test sets: 2 nodes for 24 hours = 48 compute hours =
/// 4 nodes for 12 hours, regardless of tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_for_a_day_cost_what_four_cost_for_half_a_day() {
    let s = TestServer::start(Rt::Local).await;
    let db = s.db().await;
    let day = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
    record_nodes(&db, "two", 2, day, 24).await;
    record_nodes(&db, "four", 4, day, 12).await;

    let (status, report) = s
        .get("/billing/pools?startTime=2026-03-01T00:00:00Z&endTime=2026-03-03T00:00:00Z")
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(hours_of(&report, "two"), &json!(48.0));
    assert_eq!(hours_of(&report, "four"), &json!(48.0));
    assert_eq!(report["totalComputeHours"], json!(96.0));
    assert_eq!(
        report["value"][1]["coreHours"],
        json!(96.0),
        "standard_d2s_v3 has 2 cores"
    );

    // Only the part of a node's life inside the range counts.
    let (_, report) = s
        .get(
            "/billing/pools?startTime=2026-03-01T06:00:00Z&endTime=2026-03-01T18:00:00Z&poolId=two",
        )
        .await;
    assert_eq!(hours_of(&report, "two"), &json!(24.0));
    assert_eq!(report["value"].as_array().unwrap().len(), 1);

    let (status, body) = s.get("/billing/pools?startTime=yesterday").await;
    assert_eq!(status, 400);
    assert_eq!(body["code"], "InvalidQueryParameterValue");
}

/// Real nodes open a record when they are ready and close it when they go: after a resize to
/// zero the hours stop growing.
async fn metering_follows_nodes(rt: Rt) {
    let s = TestServer::start(rt).await;
    let db = s.db().await;
    assert_eq!(
        s.post(
            "/pools",
            &json!({"id": "m", "vmSize": "standard_a1", "targetDedicatedNodes": 2})
        )
        .await
        .0,
        201
    );
    let nodes = s.wait_nodes("m", 2, "idle").await;
    let open: Vec<(String,)> =
        sqlx::query_as("SELECT node_id FROM usage_records WHERE ended_at IS NULL ORDER BY node_id")
            .fetch_all(&db)
            .await
            .unwrap();
    let mut node_ids: Vec<String> = nodes
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect();
    node_ids.sort();
    assert_eq!(open.into_iter().map(|r| r.0).collect::<Vec<_>>(), node_ids);

    assert_eq!(
        s.post("/pools/m/resize", &json!({"targetDedicatedNodes": 0}))
            .await
            .0,
        202
    );
    s.wait_nodes("m", 0, "idle").await;
    let open: i64 = sqlx::query_scalar("SELECT count(*) FROM usage_records WHERE ended_at IS NULL")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(open, 0, "a removed node is no longer metered");
    let closed: i64 = sqlx::query_scalar("SELECT count(*) FROM usage_records")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(closed, 2);

    let range = "/billing/pools?startTime=2026-01-01T00:00:00Z&endTime=2099-01-01T00:00:00Z";
    let (_, first) = s.get(range).await;
    let hours = hours_of(&first, "m").as_f64().unwrap();
    assert!(hours > 0.0);
    // Time passes (observed, not slept for): the total must not move.
    let later = Utc::now() + Duration::milliseconds(20);
    wait_for("the clock to move on", || async {
        (Utc::now() > later).then_some(())
    })
    .await;
    let (_, second) = s.get(range).await;
    assert_eq!(hours_of(&second, "m").as_f64().unwrap(), hours);
}
on_both_runtimes!(
    metering_starts_at_ready_and_stops_at_removal,
    metering_follows_nodes
);

/// A job's hours count every attempt of its tasks once: one for a task that succeeds, one for
/// each try of a task that fails and is retried, one for a task terminated while it runs, and
/// nothing for a task that never started (it waits on the task that failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_of_a_job_s_tasks_counts_once() {
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("p").await;
    let job = json!({"id": "j", "poolInfo": {"poolId": "p"}, "usesTaskDependencies": true});
    assert_eq!(s.post("/jobs", &job).await.0, 201);
    s.add_tasks(
        "j",
        vec![
            json!({"id": "ok", "commandLine": "true"}),
            json!({"id": "retried", "commandLine": "exit 3", "constraints": {"maxTaskRetryCount": 2}}),
            json!({"id": "long", "commandLine": "sleep 300"}),
            json!({"id": "waits", "commandLine": "true", "dependsOn": {"taskIds": ["retried"]}}),
        ],
    )
    .await;
    s.wait_task("j", "ok", "completed").await;
    let retried = s.wait_task("j", "retried", "completed").await;
    assert_eq!(retried["executionInfo"]["retryCount"], 2, "{retried}");
    s.wait_task("j", "long", "running").await;
    let (status, body) = s.post("/jobs/j/tasks/long/terminate", &json!({})).await;
    assert_eq!(status, 204, "{body}");
    s.wait_task("j", "long", "completed").await;

    let range = "/billing/jobs?startTime=2026-01-01T00:00:00Z&endTime=2099-01-01T00:00:00Z";
    let (status, report) = s.get(range).await;
    assert_eq!(status, 200, "{report}");
    let jobs = report["value"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{report}");
    assert_eq!(jobs[0]["jobId"], "j");
    assert_eq!(jobs[0]["poolId"], "p");
    assert_eq!(jobs[0]["taskAttempts"], 5, "1 + 3 + 1: {report}");
    assert!(jobs[0]["slotHours"].as_f64().unwrap() > 0.0, "{report}");
}
