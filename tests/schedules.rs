//! Job schedules (`/jobschedules`) as a CI pipeline uses them: a schedule that recurs every few
//! seconds makes its jobs one at a time until `doNotRunAfter`; its routes change, disable,
//! terminate and delete it; a terminated schedule completes after its job's release tasks; a job
//! due while the server is down is made once when it is back.

mod common;

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::{wait_for, Rt, TestServer};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

fn at(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .unwrap_or_else(|| panic!("a time: {v}"))
        .with_timezone(&Utc)
}

async fn schedule(s: &TestServer, id: &str) -> Value {
    let (status, body) = s.get(&format!("/jobschedules/{id}")).await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn jobs_of(s: &TestServer, id: &str) -> Vec<Value> {
    let (status, body) = s.get(&format!("/jobschedules/{id}/jobs")).await;
    assert_eq!(status, 200, "{body}");
    body["value"].as_array().cloned().unwrap()
}

async fn wait_schedule(s: &TestServer, id: &str, state: &str) -> Value {
    wait_for(&format!("schedule {id} {state}"), || async {
        let v = schedule(s, id).await;
        (v["state"] == state).then_some(v)
    })
    .await
}

async fn pool(s: &TestServer) {
    let pool = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 2});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    s.wait_nodes("p", 1, "idle").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recurring_schedule_makes_a_job_each_interval_until_do_not_run_after() {
    let s = TestServer::start(Rt::Local).await;
    pool(&s).await;
    let start = Utc::now();
    let body = json!({
        "id": "nightly",
        "displayName": "every two seconds",
        "metadata": [{"name": "team", "value": "ci"}],
        "schedule": {
            "doNotRunUntil": at(start),
            "doNotRunAfter": at(start + chrono::Duration::seconds(7)),
            "recurrenceInterval": "PT2S",
            "startWindow": "PT1M",
        },
        "jobSpecification": {
            "poolInfo": {"poolId": "p"},
            "priority": 5,
            "commonEnvironmentSettings": [{"name": "GREETING", "value": "run"}],
            "jobManagerTask": {"id": "jm", "commandLine": "sh -c 'echo $GREETING $AZ_BATCH_JOB_ID'"},
        },
    });
    let (status, answer) = s.post("/jobschedules", &body).await;
    assert_eq!(status, 201, "{answer}");
    let done = wait_schedule(&s, "nightly", "completed").await;
    let jobs = jobs_of(&s, "nightly").await;
    let ids: Vec<&str> = jobs.iter().map(|j| j["id"].as_str().unwrap()).collect();
    // Due at 0, 2, 4 and 6 s after the start; a job that ran long folds the next ones into one.
    assert!((3..=4).contains(&ids.len()), "{ids:?}");
    for (n, job) in jobs.iter().enumerate() {
        let id = format!("nightly:job-{}", n + 1);
        assert_eq!(job["id"], id, "{ids:?}");
        assert_eq!(job["state"], "completed", "{job}");
        assert_eq!(job["priority"], 5, "{job}");
        let manager = s.task(&id, "jm").await;
        assert_eq!(manager["executionInfo"]["exitCode"], 0, "{manager}");
        let out = s
            .file(&format!("/jobs/{id}/tasks/jm/files/stdout.txt"))
            .await;
        assert_eq!(out.as_deref(), Some(format!("run {id}\n").as_str()));
    }
    // One job at a time, on the interval's beat, never after doNotRunAfter. The leader looks
    // once a second, so a job is made up to a second after it is due: job k comes at least
    // 2k - 1.2 s after the first (a job a tick would give less).
    let made: Vec<DateTime<Utc>> = jobs.iter().map(|j| time(&j["creationTime"])).collect();
    for (k, at) in made.iter().enumerate() {
        let beat = chrono::Duration::milliseconds(2000 * k as i64 - 1200);
        assert!(*at - made[0] >= beat, "job {k}: {made:?}");
    }
    // The last one was due by doNotRunAfter (start + 7 s), and made within the next look.
    assert!(
        *made.last().unwrap() <= start + chrono::Duration::milliseconds(8500),
        "{made:?}"
    );
    assert_eq!(
        done["executionInfo"]["recentJob"]["id"],
        *ids.last().unwrap(),
        "{done}"
    );
    assert!(done["executionInfo"]["endTime"].is_string(), "{done}");
    assert!(done["executionInfo"].get("nextRunTime").is_none(), "{done}");
    assert_eq!(done["displayName"], "every two seconds");
    assert_eq!(done["metadata"][0]["value"], "ci");
    assert_eq!(done["schedule"]["recurrenceInterval"], "PT2S");
    assert_eq!(done["schedule"]["startWindow"], "PT1M");
    assert_eq!(done["jobSpecification"]["priority"], 5);
    // The jobs are the account's jobs too.
    let (_, all) = s.get("/jobs").await;
    assert_eq!(common::ids(&all).len(), ids.len(), "{all}");

    // Another account sees none of it, and its own "nightly" is another schedule.
    let created = common::account_cmd(&s, &["create", "other"]);
    let key = common::key_line(&created, "primary key:").to_string();
    *s.http.credentials.lock().unwrap() = Some(("other".to_string(), key));
    assert_eq!(
        common::ids(&s.get("/jobschedules").await.1),
        Vec::<String>::new()
    );
    assert_eq!(s.get("/jobschedules/nightly").await.0, 404);
    assert_eq!(s.get("/jobschedules/nightly/jobs").await.0, 404);
    assert_eq!(s.get("/jobs/nightly:job-1").await.0, 404);
    assert_eq!(s.delete("/jobschedules/nightly").await.0, 404);
    let mine = json!({"id": "nightly", "schedule": {"doNotRunUntil": at(Utc::now() + chrono::Duration::hours(1))},
        "jobSpecification": {"poolInfo": {"poolId": "p"}}});
    assert_eq!(s.post("/jobschedules", &mine).await.0, 201);
}

/// Bad schedules are refused by name and make nothing.
async fn refused(s: &TestServer, body: Value, property: &str) {
    let (status, answer) = s.post("/jobschedules", &body).await;
    assert_eq!(status, 400, "{body} -> {answer}");
    let named = answer["values"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["key"] == "PropertyName"))
        .map(|v| v["value"].clone());
    assert_eq!(named, Some(json!(property)), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_routes_change_disable_terminate_and_delete_it() {
    let s = TestServer::start(Rt::Local).await;
    pool(&s).await;
    let later = Utc::now() + chrono::Duration::hours(1);
    let spec = json!({"poolInfo": {"poolId": "p"},
        "jobManagerTask": {"id": "jm", "commandLine": "sleep 60"}});
    let body = json!({"id": "s", "schedule": {"doNotRunUntil": at(later), "recurrenceInterval": "PT1S"},
        "jobSpecification": spec});
    assert_eq!(s.post("/jobschedules", &body).await.0, 201);
    let (status, answer) = s.post("/jobschedules", &body).await;
    assert_eq!(
        (status, &answer["code"]),
        (StatusCode::CONFLICT, &json!("JobScheduleExists"))
    );
    let v = schedule(&s, "s").await;
    assert_eq!(v["state"], "active");
    assert_eq!(
        time(&v["executionInfo"]["nextRunTime"]).timestamp(),
        later.timestamp()
    );
    assert_eq!(
        s.request(Method::HEAD, "/jobschedules/s", None).await.0,
        200
    );
    assert_eq!(
        s.request(Method::HEAD, "/jobschedules/none", None).await.0,
        404
    );
    let (status, answer) = s.get("/jobschedules/none").await;
    assert_eq!(
        (status, &answer["code"]),
        (StatusCode::NOT_FOUND, &json!("JobScheduleNotFound"))
    );

    let bad = |schedule: Value, spec: Value| json!({"id": "bad", "schedule": schedule, "jobSpecification": spec});
    refused(
        &s,
        bad(json!({"recurrenceInterval": "PT0.5S"}), spec.clone()),
        "schedule.recurrenceInterval",
    )
    .await;
    refused(
        &s,
        bad(
            json!({"doNotRunUntil": at(later), "doNotRunAfter": at(Utc::now())}),
            spec.clone(),
        ),
        "schedule.doNotRunAfter",
    )
    .await;
    refused(
        &s,
        bad(json!({}), json!({"priority": 1})),
        "jobSpecification.poolInfo",
    )
    .await;
    refused(
        &s,
        bad(
            json!({}),
            json!({"poolInfo": {"poolId": "p"}, "networkConfiguration": {"subnetId": "x"}}),
        ),
        "jobSpecification.networkConfiguration",
    )
    .await;
    refused(
        &s,
        json!({"id": "bad", "jobSpecification": spec}),
        "schedule",
    )
    .await;
    let (_, list) = s.get("/jobschedules").await;
    assert_eq!(common::ids(&list), ["s"], "{list}");

    // A PATCH of the schedule runs it from now; one job at a time however short the interval.
    let (status, answer) = s
        .request(
            Method::PATCH,
            "/jobschedules/s",
            Some(&json!({"schedule": {"recurrenceInterval": "PT1S"}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    wait_for("the first job", || async {
        (s.get("/jobs/s:job-1").await.0 == 200).then_some(())
    })
    .await;
    s.wait_task("s:job-1", "jm", "running").await;
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        assert_eq!(
            jobs_of(&s, "s").await.len(),
            1,
            "a second job while the first runs"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A new job specification is for the jobs made from now on: the next one has it.
    let spec2 = json!({"jobSpecification": {"poolInfo": {"poolId": "p"}, "priority": 7,
        "jobManagerTask": {"id": "jm", "commandLine": "sleep 60"}}});
    assert_eq!(
        s.request(Method::PATCH, "/jobschedules/s", Some(&spec2))
            .await
            .0,
        200
    );
    assert_eq!(s.get("/jobs/s:job-1").await.1["priority"], 0);
    assert_eq!(s.post("/jobs/s:job-1/terminate", &json!({})).await.0, 202);
    wait_for("the next job", || async {
        (s.get("/jobs/s:job-2").await.0 == 200).then_some(())
    })
    .await;
    assert_eq!(s.get("/jobs/s:job-2").await.1["priority"], 7);
    s.wait_task("s:job-2", "jm", "running").await;
    // The metadata PATCH leaves the schedule and the job specification as they are.
    let meta = json!({"metadata": [{"name": "k", "value": "v"}]});
    assert_eq!(
        s.request(Method::PATCH, "/jobschedules/s", Some(&meta))
            .await
            .0,
        200
    );
    let v = schedule(&s, "s").await;
    assert_eq!(
        (
            &v["metadata"][0]["name"],
            &v["schedule"]["recurrenceInterval"]
        ),
        (&json!("k"), &json!("PT1S")),
        "{v}"
    );

    assert_eq!(s.post("/jobschedules/s/disable", &json!({})).await.0, 204);
    assert_eq!(schedule(&s, "s").await["state"], "disabled");
    let (status, answer) = s.post("/jobschedules/s/disable", &json!({})).await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(s.post("/jobschedules/s/enable", &json!({})).await.0, 204);
    let v = schedule(&s, "s").await;
    assert_eq!(
        (&v["state"], &v["previousState"]),
        (&json!("active"), &json!("disabled"))
    );

    // Terminate: the schedule completes, its running job is terminated.
    assert_eq!(s.post("/jobschedules/s/terminate", &json!({})).await.0, 202);
    assert_eq!(schedule(&s, "s").await["state"], "completed");
    let (_, job) = s.get("/jobs/s:job-2").await;
    assert_eq!(job["state"], "completed", "{job}");
    s.wait_task("s:job-2", "jm", "completed").await;
    assert_eq!(jobs_of(&s, "s").await.len(), 2);
    let (status, answer) = s
        .request(Method::PATCH, "/jobschedules/s", Some(&meta))
        .await;
    assert_eq!(
        (status, &answer["code"]),
        (StatusCode::CONFLICT, &json!("JobScheduleCompleted"))
    );

    // Delete: the schedule and its jobs go.
    assert_eq!(s.delete("/jobschedules/s").await.0, 202);
    assert_eq!(s.get("/jobschedules/s").await.0, 404);
    wait_for("the schedule's jobs to go", || async {
        let (_, all) = s.get("/jobs").await;
        common::ids(&all).is_empty().then_some(())
    })
    .await;
}

/// As on Azure, a terminated schedule is `terminating` while its job is, and its job while the
/// release tasks of its nodes run; both complete after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_schedule_completes_after_its_job_s_release_tasks() {
    let s = TestServer::start(Rt::Local).await;
    pool(&s).await;
    let spec = json!({"poolInfo": {"poolId": "p"}, "jobPreparationTask": {"commandLine": "true"},
        "jobReleaseTask": {"commandLine": "sleep 2; echo released > $AZ_BATCH_NODE_SHARED_DIR/r"}});
    let body = json!({"id": "s", "schedule": {}, "jobSpecification": spec});
    assert_eq!(s.post("/jobschedules", &body).await.0, 201);
    wait_for("the schedule's job", || async {
        (s.get("/jobs/s:job-1").await.0 == 200).then_some(())
    })
    .await;
    let task = json!({"id": "t", "commandLine": "true"});
    assert_eq!(s.post("/jobs/s:job-1/tasks", &task).await.0, 201);
    s.wait_task("s:job-1", "t", "completed").await;

    assert_eq!(s.post("/jobschedules/s/terminate", &json!({})).await.0, 202);
    assert_eq!(schedule(&s, "s").await["state"], "terminating");
    assert_eq!(s.get("/jobs/s:job-1").await.1["state"], "terminating");
    let (status, answer) = s.post("/jobschedules/s/terminate", &json!({})).await;
    assert_eq!(
        (status, &answer["code"]),
        (StatusCode::CONFLICT, &json!("JobScheduleBeingTerminated"))
    );
    let done = wait_schedule(&s, "s", "completed").await;
    assert_eq!(done["previousState"], "terminating", "{done}");
    let (_, job) = s.get("/jobs/s:job-1").await;
    assert_eq!(
        (&job["state"], &job["previousState"]),
        (&json!("completed"), &json!("terminating")),
        "{job}"
    );
    let node = s.nodes("p").await[0]["id"].as_str().unwrap().to_string();
    assert_eq!(s.shared_file("p", &node, "r").await, "released\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_due_while_the_server_is_down_is_made_once_when_it_is_back() {
    let mut s = TestServer::start(Rt::Local).await;
    pool(&s).await;
    let due = Utc::now() + chrono::Duration::seconds(2);
    let body = json!({"id": "once", "schedule": {"doNotRunUntil": at(due)},
        "jobSpecification": {"poolInfo": {"poolId": "p"}, "jobManagerTask": {"id": "jm", "commandLine": "true"}}});
    assert_eq!(s.post("/jobschedules", &body).await.0, 201);
    s.kill().await;
    while Utc::now() < due + chrono::Duration::seconds(1) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s.launch().await;
    let done = wait_schedule(&s, "once", "completed").await;
    let jobs = jobs_of(&s, "once").await;
    assert_eq!(
        common::ids(&json!({"value": jobs})),
        ["once:job-1"],
        "{done}"
    );
    s.wait_task("once:job-1", "jm", "completed").await;
}
