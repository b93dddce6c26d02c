//! Every property the official SDKs can send in a pool, job, task or start task body either works,
//! or is refused with a 400 that names it. None is stored and then ignored. The SDKs' properties are
//! tests/data/batch_properties.json (scripts/batch-properties.py reads them from azure-batch 15.1.0
//! and 14.2.0). What the server does with each one is `api::batch::support`.

mod common;

use std::path::Path;

use batchpool::api::batch::support::{self, Support, Table};
use common::{Rt, TestServer};
use serde_json::{json, Value};

/// Each SDK body, its table, and the name prefix a refusal gives.
const BODIES: &[(&str, Table, &str)] = &[
    ("pool add", support::POOL_ADD, ""),
    ("job add", support::JOB_ADD, ""),
    ("task add", support::TASK_ADD, ""),
    ("start task", support::START_TASK, "startTask."),
    ("pool patch", support::POOL_PATCH, ""),
    ("pool replace", support::POOL_REPLACE, ""),
    ("pool resize", support::POOL_RESIZE, ""),
    ("job update", support::JOB_UPDATE, ""),
    ("task update", support::TASK_UPDATE, ""),
    (
        "exit conditions",
        support::EXIT_CONDITIONS,
        "exitConditions.",
    ),
    (
        "job preparation task",
        support::JOB_PREPARATION_TASK,
        "jobPreparationTask.",
    ),
    (
        "job release task",
        support::JOB_RELEASE_TASK,
        "jobReleaseTask.",
    ),
    (
        "job manager task",
        support::JOB_MANAGER_TASK,
        "jobManagerTask.",
    ),
    ("job schedule add", support::JOB_SCHEDULE_ADD, ""),
    ("job schedule update", support::JOB_SCHEDULE_UPDATE, ""),
    ("schedule", support::SCHEDULE, "schedule."),
    // A job add body without the id: the schedule names its jobs.
    ("job specification", support::JOB_ADD, "jobSpecification."),
    (
        "virtual machine configuration",
        support::VM_CONFIGURATION,
        "virtualMachineConfiguration.",
    ),
    (
        "auto pool specification",
        support::AUTO_POOL,
        "poolInfo.autoPoolSpecification.",
    ),
    // A pool add body without the id: the server names auto pools.
    (
        "pool specification",
        support::POOL_ADD,
        "poolInfo.autoPoolSpecification.pool.",
    ),
];

fn sdk_properties() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/batch_properties.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The text of the test function `file.rs::name`, if there is one.
fn test_body(reference: &str) -> Option<String> {
    let (file, name) = reference.split_once("::")?;
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(file);
    let text = std::fs::read_to_string(path).ok()?;
    let start = text.find(&format!("fn {name}("))?;
    let rest = &text[start..];
    let end = rest[1..]
        .find("\nasync fn ")
        .or_else(|| rest[1..].find("\nfn "))
        .map_or(rest.len(), |e| e + 1);
    Some(rest[..end].to_string())
}

/// A value of the JSON kind the SDK gives a property that asks for something.
fn asking_value(kind: &str) -> Value {
    match kind {
        "array" => json!([{}]),
        "boolean" => json!(true),
        "integer" => json!(1),
        "string" => json!("x"),
        _ => json!({"x": 1}),
    }
}

#[test]
fn every_sdk_property_works_or_is_refused() {
    let sdk = sdk_properties();
    let docs = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/compatibility.md"),
    )
    .unwrap();
    let mut wrong = Vec::new();
    for (body, table, prefix) in BODIES {
        let props = sdk["bodies"][*body].as_object().unwrap();
        for prop in props.keys() {
            let Some((_, support)) = table.iter().find(|(name, _)| name == prop) else {
                wrong.push(format!("{body}: {prop} is neither working nor refused"));
                continue;
            };
            let shown_by = match support {
                Support::Works(test) | Support::Partly { works: test, .. } => Some(test),
                Support::Refused(_) => None,
            };
            if let Some(test) = shown_by {
                match test_body(test) {
                    None => wrong.push(format!(
                        "{body}: {prop} names the test {test}, which does not exist"
                    )),
                    Some(text) if !text.contains(&format!("\"{prop}\"")) => {
                        wrong.push(format!("{body}: {prop}: the test {test} never sends it"))
                    }
                    Some(_) => {}
                }
            }
            if !matches!(support, Support::Works(_)) && !docs.contains(&format!("`{prefix}{prop}`"))
            {
                wrong.push(format!(
                    "{body}: docs/compatibility.md does not list `{prefix}{prop}`"
                ));
            }
        }
        for (name, _) in table.iter() {
            let named_by_server =
                *name == "id" && ["job specification", "pool specification"].contains(body);
            if !props.contains_key(*name) && !named_by_server {
                wrong.push(format!(
                    "{body}: {name} is in the table but no SDK sends it"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Adds `extra` to a JSON object.
fn with(mut base: Value, extra: &[(&str, Value)]) -> Value {
    for (k, v) in extra {
        base[*k] = v.clone();
    }
    base
}

/// The request that sends `prop` in `body`, against pool `p` and job `j`, and the resource it
/// would make or change.
fn request_with(
    body: &str,
    prop: &str,
    value: Value,
) -> (reqwest::Method, &'static str, Value, &'static str) {
    use reqwest::Method;
    let pool = json!({"id": "made", "vmSize": "standard_a1"});
    match body {
        "pool add" => (
            Method::POST,
            "/pools",
            with(pool, &[(prop, value)]),
            "/pools/made",
        ),
        "virtual machine configuration" => {
            let config = json!({"nodeAgentSKUId": "batch.node.ubuntu 22.04"});
            let config = with(config, &[(prop, value)]);
            (
                Method::POST,
                "/pools",
                with(pool, &[("virtualMachineConfiguration", config)]),
                "/pools/made",
            )
        }
        "pool specification" => {
            let spec = json!({"poolLifetimeOption": "job", "pool": with(json!({"vmSize": "standard_a1"}), &[(prop, value)])});
            let job = json!({"id": "made", "poolInfo": {"autoPoolSpecification": spec}});
            (Method::POST, "/jobs", job, "/jobs/made")
        }
        "start task" => {
            let start_task = with(json!({"commandLine": "true"}), &[(prop, value)]);
            (
                Method::POST,
                "/pools",
                with(pool, &[("startTask", start_task)]),
                "/pools/made",
            )
        }
        "job manager task" => {
            let task = with(json!({"id": "jm", "commandLine": "true"}), &[(prop, value)]);
            let job = json!({"id": "made", "poolInfo": {"poolId": "p"}, "jobManagerTask": task});
            (Method::POST, "/jobs", job, "/jobs/made")
        }
        "job preparation task" | "job release task" => {
            let task = with(json!({"commandLine": "true"}), &[(prop, value)]);
            let mut job = json!({"id": "made", "poolInfo": {"poolId": "p"},
                "jobPreparationTask": {"commandLine": "true"}});
            let field = if body == "job preparation task" {
                "jobPreparationTask"
            } else {
                "jobReleaseTask"
            };
            job[field] = task;
            (Method::POST, "/jobs", job, "/jobs/made")
        }
        "job add" => {
            let job = json!({"id": "made", "poolInfo": {"poolId": "p"}});
            (
                Method::POST,
                "/jobs",
                with(job, &[(prop, value)]),
                "/jobs/made",
            )
        }
        "task add" => {
            let task = json!({"id": "made", "commandLine": "true"});
            (
                Method::POST,
                "/jobs/j/tasks",
                with(task, &[(prop, value)]),
                "/jobs/j/tasks/made",
            )
        }
        "pool patch" => (
            Method::PATCH,
            "/pools/p",
            with(json!({}), &[(prop, value)]),
            "/pools/p",
        ),
        "pool replace" => {
            let props = with(json!({"metadata": []}), &[(prop, value)]);
            (Method::POST, "/pools/p/updateproperties", props, "/pools/p")
        }
        "pool resize" => {
            let resize = with(json!({"targetDedicatedNodes": 0}), &[(prop, value)]);
            (Method::POST, "/pools/p/resize", resize, "/pools/p")
        }
        "exit conditions" => {
            let conditions = with(json!({}), &[(prop, value)]);
            let task = json!({"id": "made", "commandLine": "true", "exitConditions": conditions});
            (Method::POST, "/jobs/j/tasks", task, "/jobs/j/tasks/made")
        }
        "job update" => (
            Method::PATCH,
            "/jobs/j",
            with(json!({}), &[(prop, value)]),
            "/jobs/j",
        ),
        "job specification" => {
            let spec = with(json!({"poolInfo": {"poolId": "p"}}), &[(prop, value)]);
            let schedule = json!({"id": "made", "schedule": {}, "jobSpecification": spec});
            (
                Method::POST,
                "/jobschedules",
                schedule,
                "/jobschedules/made",
            )
        }
        other => panic!("no request for {other}"),
    }
}

/// What a GET of `path` shows: the resource, or the error code.
async fn snapshot(s: &TestServer, path: &str) -> (reqwest::StatusCode, Value) {
    let (status, body) = s.get(path).await;
    if status.is_success() {
        (status, body)
    } else {
        (status, body["code"].clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_properties_are_refused_by_name_and_create_nothing() {
    let s = TestServer::start(Rt::Local).await;
    let pool = json!({"id": "p", "vmSize": "standard_a1"});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    s.job_on("j", "p").await;
    let sdk = sdk_properties();
    let mut refused = 0;
    for (body, table, prefix) in BODIES {
        for (prop, support) in table.iter() {
            let value = match support {
                Support::Works(_) => continue,
                Support::Refused(_) => asking_value(sdk["bodies"][*body][*prop].as_str().unwrap()),
                Support::Partly { refuses, .. } => serde_json::from_str(refuses).unwrap(),
            };
            let (method, path, request, watched) = request_with(body, prop, value);
            let before = snapshot(&s, watched).await;
            let (status, answer) = s.request(method, path, Some(&request)).await;
            assert_eq!(status, 400, "{body} {prop}: {request} -> {answer}");
            assert_eq!(answer["code"], "InvalidPropertyValue", "{answer}");
            let named = answer["values"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["key"] == "PropertyName");
            // The property, or the part of it that is refused (poolInfo.autoPoolSpecification).
            let named = named.unwrap()["value"].as_str().unwrap();
            assert!(
                named.starts_with(&format!("{prefix}{prop}")),
                "{body} {prop}: {answer}"
            );
            assert_eq!(
                snapshot(&s, watched).await,
                before,
                "{body} {prop}: a refused request changed {watched}"
            );
            refused += 1;
        }
    }
    assert!(refused >= 25, "only {refused} refusals were tried");
}

/// What asks for nothing is taken: autoscale off, no low-priority nodes, empty lists of refused
/// features. The pool is an ordinary fixed-size pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_size_pools_take_what_asks_for_nothing() {
    let s = TestServer::start(Rt::Local).await;
    let body = json!({
        "id": "fixed", "vmSize": "standard_a1", "targetDedicatedNodes": 1,
        "enableAutoScale": false, "targetLowPriorityNodes": 0, "enableInterNodeCommunication": false,
        "applicationPackageReferences": [], "userAccounts": [],
        "startTask": {"commandLine": "true", "resourceFiles": [], "waitForSuccess": true},
    });
    let (status, answer) = s.post("/pools", &body).await;
    assert_eq!(status, 201, "{answer}");
    s.wait_nodes("fixed", 1, "idle").await;
    let (_, pool) = s.get("/pools/fixed").await;
    assert_eq!(pool["enableAutoScale"], false, "{pool}");
    assert_eq!(pool["targetLowPriorityNodes"], 0, "{pool}");
    assert_eq!(pool["currentDedicatedNodes"], 1, "{pool}");
}

/// A job's display name, metadata, common environment and onTaskFailure, and a task's display
/// name and environment, all do what Azure documents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_and_task_settings_reach_the_task() {
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("p").await;
    let job = json!({
        "id": "j", "displayName": "the job", "poolInfo": {"poolId": "p"},
        "metadata": [{"name": "team", "value": "render"}],
        "commonEnvironmentSettings": [{"name": "FROM_JOB", "value": "job-value"}],
        "onTaskFailure": "performexitoptionsjobaction",
    });
    let (status, answer) = s.post("/jobs", &job).await;
    assert_eq!(status, 201, "{answer}");
    s.add_tasks(
        "j",
        vec![json!({
            "id": "env", "displayName": "the task", "commandLine": "/bin/sh -c 'echo \"$FROM_JOB $FROM_TASK\"'",
            "environmentSettings": [{"name": "FROM_TASK", "value": "task-value"}],
        })],
    )
    .await;
    let task = s.wait_task("j", "env", "completed").await;
    assert_eq!(task["displayName"], "the task");
    assert_eq!(task["executionInfo"]["exitCode"], 0, "{task}");
    let stdout = s.file("/jobs/j/tasks/env/files/stdout.txt").await.unwrap();
    assert_eq!(stdout.trim(), "job-value task-value");
    let (_, read) = s.get("/jobs/j").await;
    assert_eq!(
        (read["displayName"].clone(), read["metadata"].clone()),
        (job["displayName"].clone(), job["metadata"].clone())
    );

    // onTaskFailure=performexitoptionsjobaction: a failure whose exit options say terminate ends
    // the job.
    s.add_tasks(
        "j",
        vec![json!({
            "id": "fails", "commandLine": "/bin/sh -c 'exit 3'",
            "exitConditions": {"exitCodes": [{"code": 3, "exitOptions": {"jobAction": "terminate"}}]},
        })],
    )
    .await;
    s.wait_task("j", "fails", "completed").await;
    let ended = common::wait_for("the job to be completed", || async {
        let (_, j) = s.get("/jobs/j").await;
        (j["state"] == "completed").then_some(j)
    })
    .await;
    assert_eq!(
        ended["executionInfo"]["terminateReason"], "TaskFailed",
        "{ended}"
    );
}

/// PATCH of a job changes what it names: maxParallelTasks, onAllTasksComplete, metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_patch_changes_what_it_names() {
    let s = TestServer::start(Rt::Local).await;
    s.job_on("j", "p").await;
    // The task first: a job set to terminate when its tasks are done, with none, is done at once.
    s.add_tasks("j", vec![json!({"id": "t", "commandLine": "true"})])
        .await;
    let patch = json!({
        "maxParallelTasks": 2, "onAllTasksComplete": "terminatejob",
        "metadata": [{"name": "stage", "value": "two"}],
    });
    let (status, answer) = s
        .request(reqwest::Method::PATCH, "/jobs/j", Some(&patch))
        .await;
    assert_eq!(status, 200, "{answer}");
    let (_, job) = s.get("/jobs/j").await;
    for key in ["maxParallelTasks", "onAllTasksComplete", "metadata"] {
        assert_eq!(job[key], patch[key], "{key}: {job}");
    }
    // onAllTasksComplete=terminatejob acts: the job's one task done, the job completes.
    let pool = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    common::wait_for("the job to complete with its tasks", || async {
        let (_, j) = s.get("/jobs/j").await;
        (j["state"] == "completed").then_some(())
    })
    .await;
}

/// Shrinking a pool with nodeDeallocationOption=terminate ends the running task as failed;
/// targetLowPriorityNodes 0 asks for nothing and is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shrinking_pool_honours_node_deallocation_option() {
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("p").await;
    s.job_on("j", "p").await;
    s.add_tasks("j", vec![json!({"id": "long", "commandLine": "sleep 300"})])
        .await;
    s.wait_task("j", "long", "running").await;
    let resize = json!({"targetDedicatedNodes": 0, "targetLowPriorityNodes": 0, "nodeDeallocationOption": "terminate"});
    let (status, answer) = s.post("/pools/p/resize", &resize).await;
    assert_eq!(status, 202, "{answer}");
    let task = s.wait_task("j", "long", "completed").await;
    assert_eq!(task["executionInfo"]["result"], "failure", "{task}");
    assert_eq!(
        task["executionInfo"]["requeueCount"], 0,
        "terminated, not requeued: {task}"
    );
    s.wait_nodes("p", 0, "idle").await;
}

/// Operations Azure has and this server lacks are answered 400 naming the operation, not 404
/// (which the SDKs report as a missing pool or job); a path Azure does not have stays 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_this_server_lacks_are_refused_by_name() {
    use reqwest::Method;
    let s = TestServer::start(Rt::Local).await;
    let cases = [
        (Method::GET, "/certificates", "certificates"),
        (Method::GET, "/pools/p/nodes/n/extensions", "VM extensions"),
        (
            Method::GET,
            "/pools/p/nodes/n/remoteloginsettings",
            "remote login",
        ),
    ];
    for (method, path, operation) in cases {
        let (status, body) = s.request(method.clone(), path, Some(&json!({}))).await;
        assert_eq!(status, 400, "{method} {path}: {body}");
        assert_eq!(body["code"], "OperationNotSupported", "{body}");
        let message = body["message"]["value"].as_str().unwrap();
        assert!(message.contains(operation), "{method} {path}: {message}");
        // And what to do instead.
        assert!(message.contains("Instead: "), "{method} {path}: {message}");
    }
    let (status, body) = s.get("/no/such/thing").await;
    assert_eq!(
        (status.as_u16(), body["code"].as_str()),
        (404, Some("ResourceNotFound"))
    );
}

/// exitCodeRanges and default decide what a failure means for the task's dependants: both failing
/// tasks here satisfy them, so the task depending on both runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_code_ranges_and_default_decide_what_a_failure_does() {
    let s = TestServer::start(Rt::Local).await;
    let pool = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    let job = json!({"id": "j", "poolInfo": {"poolId": "p"}, "usesTaskDependencies": true});
    assert_eq!(s.post("/jobs", &job).await.0, 201);
    let satisfy = json!({"dependencyAction": "satisfy"});
    s.add_tasks(
        "j",
        vec![
            json!({"id": "ranged", "commandLine": "/bin/sh -c 'exit 7'",
                   "exitConditions": {"exitCodeRanges": [{"start": 5, "end": 9, "exitOptions": satisfy}]}}),
            json!({"id": "defaulted", "commandLine": "/bin/sh -c 'exit 2'",
                   "exitConditions": {"default": satisfy}}),
            json!({"id": "after", "commandLine": "true", "dependsOn": {"taskIds": ["ranged", "defaulted"]}}),
        ],
    )
    .await;
    for id in ["ranged", "defaulted"] {
        let t = s.wait_task("j", id, "completed").await;
        assert_eq!(t["executionInfo"]["result"], "failure", "{t}");
    }
    let after = s.wait_task("j", "after", "completed").await;
    assert_eq!(after["executionInfo"]["exitCode"], 0, "{after}");
}
