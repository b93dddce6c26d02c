//! Auto pools (`poolInfo.autoPoolSpecification`), as an Azure Batch script uses them: a job
//! that makes its own pool, runs on it, and takes it away when it completes; a pool kept alive;
//! a job schedule whose jobs share one pool until the schedule ends; and specifications that
//! are refused by the property they get wrong, making nothing.

mod common;

use common::{wait_for, Rt, TestServer};
use reqwest::Method;
use serde_json::{json, Value};

/// An auto pool specification of `lifetime`, its pool of `nodes` standard_a1 nodes.
fn spec(prefix: &str, lifetime: &str, keep_alive: bool, nodes: i32) -> Value {
    json!({
        "autoPoolIdPrefix": prefix,
        "poolLifetimeOption": lifetime,
        "keepAlive": keep_alive,
        "pool": {"vmSize": "standard_a1", "targetDedicatedNodes": nodes, "taskSlotsPerNode": 2,
            "metadata": [{"name": "made-by", "value": prefix}]},
    })
}

async fn auto_job(s: &TestServer, id: &str, spec: Value) -> String {
    let body = json!({"id": id, "poolInfo": {"autoPoolSpecification": spec}});
    let (status, answer) = s.post("/jobs", &body).await;
    assert_eq!(status, 201, "{answer}");
    let (_, job) = s.get(&format!("/jobs/{id}")).await;
    job["executionInfo"]["poolId"].as_str().unwrap().to_string()
}

async fn wait_pool_gone(s: &TestServer, pool: &str) {
    wait_for(&format!("pool {pool} to be deleted"), || async {
        let (status, _) = s.get(&format!("/pools/{pool}")).await;
        (status == 404).then_some(())
    })
    .await;
}

async fn terminate(s: &TestServer, job: &str) {
    let (status, answer) = s.post(&format!("/jobs/{job}/terminate"), &json!({})).await;
    assert_eq!(status, 202, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_makes_its_own_pool_which_goes_when_the_job_completes() {
    let s = TestServer::start(Rt::Local).await;
    let given = json!({
        "autoPoolIdPrefix": "render",
        "poolLifetimeOption": "job",
        "pool": {"vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 2,
            "metadata": [{"name": "made-by", "value": "render"}]},
    });
    let pool = auto_job(&s, "render", given.clone()).await;
    // The pool is named by the server: the prefix, then a GUID.
    assert!(pool.starts_with("render_"), "{pool}");
    assert_eq!(pool.len(), "render_".len() + 36, "{pool}");
    let (_, job) = s.get("/jobs/render").await;
    assert_eq!(job["poolInfo"], json!({"autoPoolSpecification": given}));
    let (status, made) = s.get(&format!("/pools/{pool}")).await;
    assert_eq!(status, 200, "{made}");
    assert_eq!(made["vmSize"], "standard_a1");
    assert_eq!(made["taskSlotsPerNode"], 2);
    assert_eq!(made["metadata"][0]["value"], "render");
    // It is an ordinary pool of the account's, and the job's tasks run on it.
    let (_, pools) = s.get("/pools").await;
    assert_eq!(common::ids(&pools), std::slice::from_ref(&pool));
    let tasks = (1..=3)
        .map(|i| json!({"id": format!("t{i}"), "commandLine": "echo $AZ_BATCH_POOL_ID"}))
        .collect();
    s.add_tasks("render", tasks).await;
    for task in s.wait_all_completed("render", 3).await {
        assert_eq!(task["executionInfo"]["exitCode"], 0, "{task}");
        assert_eq!(task["nodeInfo"]["poolId"], pool.as_str(), "{task}");
        let id = task["id"].as_str().unwrap();
        let out = s
            .file(&format!("/jobs/render/tasks/{id}/files/stdout.txt"))
            .await;
        assert_eq!(out, Some(format!("{pool}\n")));
    }
    // The pool lives as long as the job: told to end with its tasks, it completes, and the
    // pool goes with its node.
    let patch = json!({"onAllTasksComplete": "terminatejob"});
    let (status, answer) = s.request(Method::PATCH, "/jobs/render", Some(&patch)).await;
    assert_eq!(status, 200, "{answer}");
    wait_pool_gone(&s, &pool).await;
    let (_, job) = s.get("/jobs/render").await;
    assert_eq!(job["state"], "completed", "{job}");
    assert!(s.runtime_nodes().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_auto_pool_stays_until_keep_alive_is_turned_off() {
    let s = TestServer::start(Rt::Local).await;
    let kept = auto_job(&s, "kept", spec("kept", "job", true, 0)).await;
    let gone = auto_job(&s, "gone", spec("gone", "job", false, 0)).await;
    let changed_spec = spec("changed", "job", true, 0);
    let changed = auto_job(&s, "changed", changed_spec.clone()).await;
    // Of the specification, only keepAlive changes, as on Azure.
    let mut other = changed_spec.clone();
    other["pool"]["vmSize"] = json!("standard_a2");
    let patch = json!({"poolInfo": {"autoPoolSpecification": other}});
    let (status, answer) = s
        .request(Method::PATCH, "/jobs/changed", Some(&patch))
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(
        answer["values"][0]["value"],
        "poolInfo.autoPoolSpecification"
    );
    let mut off = changed_spec;
    off["keepAlive"] = json!(false);
    let patch = json!({"poolInfo": {"autoPoolSpecification": off}});
    let (status, answer) = s
        .request(Method::PATCH, "/jobs/changed", Some(&patch))
        .await;
    assert_eq!(status, 200, "{answer}");
    let (_, job) = s.get("/jobs/changed").await;
    assert_eq!(job["poolInfo"]["autoPoolSpecification"]["keepAlive"], false);
    assert_eq!(job["executionInfo"]["poolId"], changed.as_str());
    for job in ["kept", "gone", "changed"] {
        terminate(&s, job).await;
    }
    // The pools whose lifetime is over go in one sweep; the one kept alive stays.
    wait_pool_gone(&s, &gone).await;
    wait_pool_gone(&s, &changed).await;
    let (status, pool) = s.get(&format!("/pools/{kept}")).await;
    assert_eq!(status, 200, "{pool}");
    assert_eq!(pool["state"], "active", "{pool}");
    // It is the user's to delete.
    assert_eq!(s.delete(&format!("/pools/{kept}")).await.0, 202);
    wait_pool_gone(&s, &kept).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedules_jobs_share_one_auto_pool_until_the_schedule_ends() {
    let s = TestServer::start(Rt::Local).await;
    // `shared` makes one pool for all its jobs; `each` makes a pool per job, which goes as its
    // job completes (at once: told to end with its tasks, it has none).
    for (id, lifetime) in [("shared", "jobschedule"), ("each", "job")] {
        let auto = json!({"autoPoolIdPrefix": id, "poolLifetimeOption": lifetime,
            "pool": {"vmSize": "standard_a1"}});
        let body = json!({
            "id": id,
            "schedule": {"recurrenceInterval": "PT1S"},
            "jobSpecification": {
                "poolInfo": {"autoPoolSpecification": auto},
                "onAllTasksComplete": "terminatejob",
            },
        });
        let (status, answer) = s.post("/jobschedules", &body).await;
        assert_eq!(status, 201, "{answer}");
    }
    let pools_of = |id: &'static str| {
        let s = &s;
        async move {
            let (_, jobs) = s.get(&format!("/jobschedules/{id}/jobs")).await;
            let jobs = jobs["value"].as_array().cloned().unwrap_or_default();
            let pools: Vec<String> = jobs
                .iter()
                .map(|j| j["executionInfo"]["poolId"].as_str().unwrap().to_string())
                .collect();
            (pools.len() >= 3).then_some(pools)
        }
    };
    let shared = wait_for("three jobs of shared", || pools_of("shared")).await;
    assert!(shared.iter().all(|p| *p == shared[0]), "{shared:?}");
    assert!(shared[0].starts_with("shared_"), "{shared:?}");
    let each = wait_for("three jobs of each", || pools_of("each")).await;
    let mut distinct = each.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), each.len(), "{each:?}");
    for pool in &each[..3] {
        wait_pool_gone(&s, pool).await;
    }
    // The shared pool outlives its completed jobs, until the schedule ends.
    let (status, pool) = s.get(&format!("/pools/{}", shared[0])).await;
    assert_eq!(status, 200, "{pool}");
    assert_eq!(pool["state"], "active", "{pool}");
    for id in ["shared", "each"] {
        let (status, answer) = s
            .post(&format!("/jobschedules/{id}/terminate"), &json!({}))
            .await;
        assert_eq!(status, 202, "{answer}");
    }
    wait_pool_gone(&s, &shared[0]).await;
    wait_for("no pool left", || async {
        let (_, pools) = s.get("/pools").await;
        common::ids(&pools).is_empty().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_pool_specifications_are_checked_by_property() {
    let s = TestServer::start(Rt::Local).await;
    let good = spec("ok", "job", false, 0);
    let with = |path: &str, value: Value| {
        let mut v = good.clone();
        let (head, tail) = path.split_once('.').unwrap_or((path, ""));
        if tail.is_empty() {
            v[head] = value;
        } else {
            v[head][tail] = value;
        }
        v
    };
    let without = |name: &str| {
        let mut v = good.clone();
        v.as_object_mut().unwrap().remove(name);
        v
    };
    let cases = [
        (
            without("poolLifetimeOption"),
            "poolInfo.autoPoolSpecification.poolLifetimeOption",
        ),
        (
            with("poolLifetimeOption", json!("jobschedule")),
            "poolInfo.autoPoolSpecification.poolLifetimeOption",
        ),
        (
            with("poolLifetimeOption", json!("forever")),
            "poolInfo.autoPoolSpecification.poolLifetimeOption",
        ),
        (
            with("autoPoolIdPrefix", json!("a-prefix-of-21-chars-")),
            "poolInfo.autoPoolSpecification.autoPoolIdPrefix",
        ),
        (
            with("autoPoolIdPrefix", json!("no/slash")),
            "poolInfo.autoPoolSpecification.autoPoolIdPrefix",
        ),
        (without("pool"), "poolInfo.autoPoolSpecification.pool"),
        (
            with("pool.id", json!("mine")),
            "poolInfo.autoPoolSpecification.pool.id",
        ),
        (
            with("pool.vmSize", json!("huge")),
            "poolInfo.autoPoolSpecification.pool.vmSize",
        ),
        (
            with("pool.taskSlotsPerNode", json!(0)),
            "poolInfo.autoPoolSpecification.pool.taskSlotsPerNode",
        ),
        (
            with("pool.userAccounts", json!([{"name": "u"}])),
            "poolInfo.autoPoolSpecification.pool.userAccounts",
        ),
    ];
    for (spec, property) in cases {
        let body = json!({"id": "j", "poolInfo": {"autoPoolSpecification": spec}});
        let (status, answer) = s.post("/jobs", &body).await;
        assert_eq!(status, 400, "{spec} -> {answer}");
        let named = answer["values"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["key"] == "PropertyName");
        assert_eq!(named.unwrap()["value"], property, "{answer}");
    }
    let both = json!({"id": "j", "poolInfo": {"poolId": "p", "autoPoolSpecification": good}});
    let (status, answer) = s.post("/jobs", &both).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["values"][0]["value"], "poolInfo", "{answer}");
    // A schedule's specification is checked as it is created, not when its first job is due.
    let body = json!({"id": "s", "schedule": {"recurrenceInterval": "PT1S"},
        "jobSpecification": {"poolInfo": {"autoPoolSpecification": with("pool.vmSize", json!("huge"))}}});
    let (status, answer) = s.post("/jobschedules", &body).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer
            .to_string()
            .contains("jobSpecification.poolInfo.autoPoolSpecification.pool.vmSize"),
        "{answer}"
    );
    // Nothing was made; a job already made cannot be given an auto pool.
    for list in ["/pools", "/jobs", "/jobschedules"] {
        let (_, all) = s.get(list).await;
        assert!(common::ids(&all).is_empty(), "{list}: {all}");
    }
    let plain = json!({"id": "plain", "vmSize": "standard_a1"});
    assert_eq!(s.post("/pools", &plain).await.0, 201);
    s.job_on("j", "plain").await;
    let patch = json!({"poolInfo": {"autoPoolSpecification": good}});
    let (status, answer) = s.request(Method::PATCH, "/jobs/j", Some(&patch)).await;
    assert_eq!(status, 400, "{answer}");
    let (_, pools) = s.get("/pools").await;
    assert_eq!(common::ids(&pools), ["plain"]);
}
