//! Statistics as an ops team reads them: a task's, a job's and a pool's `stats` with
//! `$expand=stats`, and the account's lifetime statistics; CPU time and storage bytes measured
//! by the node's agent, on both runtimes.

#[macro_use]
mod common;

use batchpool::domain::IsoDuration;
use common::{Rt, TestServer};
use serde_json::{json, Value};

fn secs(v: &Value) -> f64 {
    let text = v.as_str().unwrap_or_else(|| panic!("a duration: {v}"));
    IsoDuration::parse(text).unwrap().to_std().as_secs_f64()
}

async fn stats(rt: Rt) {
    let s = TestServer::start(rt).await;
    let pool = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 2});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    s.wait_nodes("p", 1, "idle").await;
    s.job_on("j", "p").await;
    let burn = "sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done'";
    let write = "sh -c 'dd if=/dev/zero of=big bs=1M count=16 conv=fsync 2>/dev/null; sync'";
    s.add_tasks(
        "j",
        vec![
            json!({"id": "burn", "commandLine": burn}),
            json!({"id": "write", "commandLine": write}),
            json!({"id": "fail", "commandLine": "sh -c 'exit 3'", "constraints": {"maxTaskRetryCount": 1}}),
        ],
    )
    .await;
    s.wait_all_completed("j", 3).await;

    let (_, plain) = s.get("/jobs/j/tasks/burn").await;
    assert!(plain.get("stats").is_none(), "stats only when asked for");
    let (_, burned) = s.get("/jobs/j/tasks/burn?$expand=stats").await;
    let st = &burned["stats"];
    assert!(secs(&st["userCPUTime"]) >= 0.05, "{st}");
    let ran = secs(&st["wallClockTime"]);
    assert!(ran >= secs(&st["userCPUTime"]) * 0.5 && ran < 60.0, "{st}");
    assert!(
        st["url"]
            .as_str()
            .unwrap()
            .ends_with("/jobs/j/tasks/burn/stats"),
        "{st}"
    );
    let (_, wrote) = s.get("/jobs/j/tasks/write?$expand=stats").await;
    let written = wrote["stats"]["writeIOGiB"].as_f64().unwrap() * 1024.0;
    assert!(
        (15.0..64.0).contains(&written),
        "MiB written: {}",
        wrote["stats"]
    );

    let (_, job) = s.get("/jobs/j?$expand=stats").await;
    let js = &job["stats"];
    assert_eq!(
        (
            &js["numSucceededTasks"],
            &js["numFailedTasks"],
            &js["numTaskRetries"]
        ),
        (&json!(2), &json!(1), &json!(1)),
        "{js}"
    );
    assert!(secs(&js["userCPUTime"]) >= secs(&st["userCPUTime"]), "{js}");
    assert!(secs(&js["wallClockTime"]) >= ran, "{js}");
    assert!(
        js["waitTime"].is_string() && js["readIOGiB"].is_number(),
        "{js}"
    );

    let (_, pool) = s.get("/pools/p?$expand=stats").await;
    let core = secs(&pool["stats"]["usageStats"]["dedicatedCoreTime"]);
    assert!(core > 0.0, "{}", pool["stats"]);

    let (status, lifetime) = s.get("/lifetimejobstats").await;
    assert_eq!(status, 200, "{lifetime}");
    assert_eq!(lifetime["numSucceededTasks"], 2, "{lifetime}");
    // What deleted tasks and jobs used stays in the lifetime statistics, counted once.
    assert_eq!(s.delete("/jobs/j/tasks/write").await.0, 200);
    s.job_on("j2", "p").await;
    s.add_tasks("j2", vec![json!({"id": "one", "commandLine": "true"})])
        .await;
    s.wait_all_completed("j2", 1).await;
    assert_eq!(s.delete("/jobs/j").await.0, 202);
    common::wait_for("the job to go", || async {
        (s.get("/jobs/j").await.0 == 404).then_some(())
    })
    .await;
    let (_, after) = s.get("/lifetimejobstats").await;
    assert_eq!(
        (
            &after["numSucceededTasks"],
            &after["numFailedTasks"],
            &after["numTaskRetries"]
        ),
        (&json!(3), &json!(1), &json!(1)),
        "{after}"
    );
    assert!(
        secs(&after["userCPUTime"]) >= secs(&lifetime["userCPUTime"]),
        "{after}"
    );
    assert_eq!(
        after["startTime"], lifetime["startTime"],
        "the first job's creation, though it is gone"
    );
    let (_, lifetime) = s.get("/lifetimepoolstats").await;
    assert!(
        secs(&lifetime["usageStats"]["dedicatedCoreTime"]) >= core,
        "{lifetime}"
    );
}
on_both_runtimes!(task_job_and_pool_statistics_count_what_tasks_used, stats);
