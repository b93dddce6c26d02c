//! Bad input gets Azure's error body (code, message.value, values naming the field), a 4xx,
//! and changes nothing.

#[macro_use]
mod common;

use common::{Rt, TestServer};
use serde_json::{json, Value};

fn value_of<'a>(body: &'a Value, key: &str) -> Option<&'a str> {
    body["values"]
        .as_array()?
        .iter()
        .find(|v| v["key"] == key)?["value"]
        .as_str()
}

/// Checks the Azure error shape and returns the body.
fn azure_error(status: reqwest::StatusCode, body: &Value, want_status: u16, want_code: &str) {
    assert_eq!(status.as_u16(), want_status, "{body}");
    assert_eq!(body["code"], want_code, "{body}");
    assert_eq!(body["message"]["lang"], "en-US");
    let message = body["message"]["value"].as_str().expect("message.value");
    assert!(message.contains("RequestId:"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pool_requests_are_refused_and_change_nothing() {
    let s = TestServer::start_with(
        Rt::Local,
        Some(common::fresh_database().await),
        &["--max-nodes-per-pool", "5"],
    )
    .await;
    assert_eq!(
        s.post(
            "/pools",
            &json!({"id": "keep", "vmSize": "standard_a1", "targetDedicatedNodes": 1})
        )
        .await
        .0,
        201
    );
    s.wait_nodes("keep", 1, "idle").await;
    let (_, before) = s.get("/pools").await;

    let (status, body) = s.post_raw("/pools", "{\"id\": \"x\", ").await;
    azure_error(status, &body, 400, "InvalidRequestBody");

    let (status, body) = s.post("/pools", &json!({"vmSize": "standard_a1"})).await;
    azure_error(status, &body, 400, "MissingRequiredProperty");
    assert_eq!(value_of(&body, "PropertyName"), Some("id"));

    for bad_id in ["has space", "slash/y", &"a".repeat(65), ""] {
        let (status, body) = s
            .post("/pools", &json!({"id": bad_id, "vmSize": "standard_a1"}))
            .await;
        azure_error(status, &body, 400, "InvalidPropertyValue");
        assert_eq!(value_of(&body, "PropertyName"), Some("id"), "{body}");
    }

    // A value of the wrong type: the error repeats it, as the API's own checks do.
    let (status, body) = s
        .post(
            "/pools",
            &json!({"id": "p", "vmSize": "standard_a1", "metadata": [{"name": "n", "value": 7}]}),
        )
        .await;
    azure_error(status, &body, 400, "InvalidPropertyValue");
    assert_eq!(value_of(&body, "PropertyName"), Some("metadata[0].value"));
    assert_eq!(value_of(&body, "PropertyValue"), Some("7"), "{body}");

    let (status, body) = s
        .post("/pools", &json!({"id": "p", "vmSize": "standard_huge"}))
        .await;
    azure_error(status, &body, 400, "InvalidPropertyValue");
    assert_eq!(value_of(&body, "PropertyName"), Some("vmSize"));
    let reason = value_of(&body, "Reason").unwrap();
    assert!(
        reason.contains("804 Azure sizes") && reason.contains("--vm-sizes FILE"),
        "it says how to add a size: {reason}"
    );
    // A size with GPUs, which nodes are not given, is refused by name, in any case.
    let (status, body) = s
        .post("/pools", &json!({"id": "p", "vmSize": "Standard_NC6s_v3"}))
        .await;
    azure_error(status, &body, 400, "InvalidPropertyValue");
    let reason = value_of(&body, "Reason").unwrap();
    assert!(reason.contains("standard_nc6s_v3 has 1 GPU(s)"), "{reason}");

    // Each bad property of a pool: the status, the code and the detail Azure names.
    let base = json!({"id": "p", "vmSize": "standard_a1"});
    let cases = [
        (
            json!({"targetDedicatedNodes": -1}),
            400,
            "InvalidPropertyValue",
            ("PropertyName", "targetDedicatedNodes"),
        ),
        (
            json!({"targetDedicatedNodes": 6}),
            409,
            "AccountQuotaExceeded",
            ("Quota", "5"),
        ),
        (
            json!({"targetDedicatedNodes": "two"}),
            400,
            "InvalidPropertyValue",
            ("PropertyName", "targetDedicatedNodes"),
        ),
        (
            json!({"resizeTimeout": "15 minutes"}),
            400,
            "InvalidPropertyValue",
            ("PropertyName", "resizeTimeout"),
        ),
        (
            json!({"taskSlotsPerNode": 0}),
            400,
            "InvalidPropertyValue",
            ("PropertyName", "taskSlotsPerNode"),
        ),
        (
            json!({"taskSchedulingPolicy": {"nodeFillType": "random"}}),
            400,
            "InvalidPropertyValue",
            ("PropertyName", "taskSchedulingPolicy.nodeFillType"),
        ),
        (
            json!({"taskSchedulingPolicy": {"jobDefaultOrder": "fifo"}}),
            400,
            "InvalidPropertyValue",
            ("PropertyName", "taskSchedulingPolicy.jobDefaultOrder"),
        ),
        (
            json!({"startTask": {"waitForSuccess": true}}),
            400,
            "MissingRequiredProperty",
            ("PropertyName", "startTask.commandLine"),
        ),
    ];
    for (bad, status, code, (key, value)) in cases {
        let mut body = base.clone();
        body.as_object_mut()
            .unwrap()
            .extend(bad.as_object().unwrap().clone());
        let (got, answer) = s.post("/pools", &body).await;
        azure_error(got, &answer, status, code);
        assert_eq!(value_of(&answer, key), Some(value), "{bad}: {answer}");
    }

    // Ids are unique regardless of case, as on Azure.
    let (status, body) = s
        .post("/pools", &json!({"id": "KEEP", "vmSize": "standard_a2_v2"}))
        .await;
    azure_error(status, &body, 409, "PoolExists");

    for (method, path) in [
        ("GET", "/pools/nope"),
        ("DELETE", "/pools/nope"),
        ("GET", "/pools/nope/nodes"),
    ] {
        let (status, body) = s.request(method.parse().unwrap(), path, None).await;
        azure_error(status, &body, 404, "PoolNotFound");
    }
    let (status, body) = s
        .post("/pools/nope/resize", &json!({"targetDedicatedNodes": 1}))
        .await;
    azure_error(status, &body, 404, "PoolNotFound");
    let (status, body) = s
        .post("/pools/keep/resize", &json!({"targetDedicatedNodes": 99}))
        .await;
    azure_error(status, &body, 409, "AccountQuotaExceeded");
    let (status, body) = s
        .post(
            "/pools/keep/resize",
            &json!({"targetDedicatedNodes": 1, "nodeDeallocationOption": "later"}),
        )
        .await;
    azure_error(status, &body, 400, "InvalidPropertyValue");
    let (status, body) = s.get("/pools/keep/nodes/tvmps_nope_d").await;
    azure_error(status, &body, 404, "NodeNotFound");

    // Nothing changed: the same pool, the same node, the same eTag.
    let (_, after) = s.get("/pools").await;
    assert_eq!(after, before);
    assert_eq!(s.nodes("keep").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_being_deleted_refuses_changes() {
    let s = TestServer::start(Rt::Local).await;
    // A start task that never ends keeps the node (and so the pool) around until it is removed.
    let (status, _) = s
        .post("/pools", &json!({"id": "going", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "startTask": {"commandLine": "true"}}))
        .await;
    assert_eq!(status, 201);
    s.wait_nodes("going", 1, "idle").await;
    sqlx::query("UPDATE pools SET state = 'deleting'")
        .execute(&s.db().await)
        .await
        .unwrap();
    let (status, body) = s
        .post("/pools/going/resize", &json!({"targetDedicatedNodes": 2}))
        .await;
    // The allocator may already have finished the deletion.
    assert!(
        (status == 409 && body["code"] == "PoolBeingDeleted")
            || (status == 404 && body["code"] == "PoolNotFound"),
        "{status} {body}"
    );
}

/// The Azure error body of a 400 naming `property`.
fn names_property(status: reqwest::StatusCode, body: &Value, property: &str) {
    azure_error(status, body, 400, "InvalidPropertyValue");
    assert_eq!(value_of(body, "PropertyName"), Some(property), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_filters_are_refused_and_the_server_lives() {
    let s = TestServer::start(Rt::Local).await;
    // 2,400 parentheses (4.8 KB) used to overflow the stack and abort the process.
    let deep = format!(
        "{}state%20eq%20'active'{}",
        "(".repeat(2_400),
        ")".repeat(2_400)
    );
    let nots = "not%20".repeat(5_000) + "state%20eq%20'active'";
    for list in [
        "/pools",
        "/jobs",
        "/jobs/nojob/tasks",
        "/pools/nopool/nodes",
    ] {
        for filter in [&deep, &nots] {
            let (status, body) = s.get(&format!("{list}?$filter={filter}")).await;
            azure_error(status, &body, 400, "InvalidQueryParameterValue");
            assert_eq!(value_of(&body, "QueryParameterName"), Some("$filter"));
            assert!(
                value_of(&body, "Reason")
                    .unwrap()
                    .contains("at most 64 deep"),
                "{body}"
            );
        }
    }
    // Nesting within the limit and a long flat chain are still served.
    let ok = format!("{}state%20eq%20'active'{}", "(".repeat(64), ")".repeat(64));
    let chain = vec!["id%20eq%20'x'"; 2_000].join("%20or%20");
    for filter in [ok, chain] {
        let (status, body) = s.get(&format!("/pools?$filter={filter}")).await;
        assert_eq!(status, 200, "{body}");
    }
}

/// The peak resident memory of a process (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status");
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependency_ranges_are_checked_and_never_expanded() {
    let s = TestServer::start(Rt::Local).await;
    for (job, deps) in [("plain", false), ("deps", true)] {
        let (status, body) = s
            .post(
                "/jobs",
                &json!({"id": job, "poolInfo": {"poolId": "p"}, "usesTaskDependencies": deps}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    // 1,000 ranges of 9,999 ids in a 27 KB request: once 10 million ids in memory (486 MB, 5 s).
    let ranges = vec![json!({"start": 1, "end": 9_999}); 1_000];
    let wide = json!({"id": "wide", "commandLine": "true", "dependsOn": {"taskIdRanges": ranges}});
    let started = std::time::Instant::now();
    let paths: Vec<String> = ["plain", "deps", "plain", "deps"]
        .iter()
        .map(|job| format!("/jobs/{job}/tasks"))
        .collect();
    let answers =
        futures_util::future::join_all(paths.iter().map(|path| s.post(path, &wide))).await;
    let elapsed = started.elapsed();
    for (i, (status, body)) in answers.into_iter().enumerate() {
        if i % 2 == 0 {
            azure_error(status, &body, 400, "TaskDependenciesNotSpecifiedOnJob");
        } else {
            names_property(status, &body, "dependsOn.taskIdRanges");
            assert_eq!(value_of(&body, "PropertyValue"), Some("1"), "{body}");
        }
    }
    let peak = peak_rss(s.pid());
    // RELIABILITY.md quotes these (`-- --nocapture`).
    eprintln!(
        "four 1,000-range requests: {elapsed:?}, server peak RSS {} MB",
        peak >> 20
    );
    assert!(elapsed < std::time::Duration::from_secs(3), "{elapsed:?}");
    assert!(peak < 150 << 20, "peak RSS {} MB", peak >> 20);

    // i64::MIN once panicked with "capacity overflow" (an empty reply).
    for (range, field) in [
        (
            json!({"start": i64::MIN, "end": 3}),
            "dependsOn.taskIdRanges[0].start",
        ),
        (
            json!({"start": 0, "end": -1}),
            "dependsOn.taskIdRanges[0].end",
        ),
        (json!({"start": 5, "end": 4}), "dependsOn.taskIdRanges[0]"),
    ] {
        let (status, body) = s
            .post(
                "/jobs/deps/tasks",
                &json!({"id": "t", "commandLine": "true", "dependsOn": {"taskIdRanges": [range]}}),
            )
            .await;
        names_property(status, &body, field);
    }
    // The widest range there is: refused by what is missing, without an overflow.
    let (status, body) = s
        .post(
            "/jobs/deps/tasks",
            &json!({"id": "t", "commandLine": "true", "dependsOn": {"taskIdRanges": [{"start": 0, "end": i64::MAX}]}}),
        )
        .await;
    names_property(status, &body, "dependsOn.taskIdRanges");
    assert_eq!(value_of(&body, "PropertyValue"), Some("0"), "{body}");

    // Ranges over tasks that exist (overlapping, and with the batch's own tasks) are accepted.
    let (status, body) = s
        .post(
            "/jobs/deps/addtaskcollection",
            &json!({"value": [
                {"id": "1", "commandLine": "true"},
                {"id": "2", "commandLine": "true"},
                {"id": "02", "commandLine": "true"},
                {"id": "after", "commandLine": "true", "dependsOn": {"taskIdRanges": [{"start": 1, "end": 2}, {"start": 2, "end": 2}]}},
                {"id": "self", "commandLine": "true", "dependsOn": {"taskIdRanges": [{"start": 1, "end": 3}]}},
            ]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let results: Vec<(&str, &str)> = body["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["taskId"].as_str().unwrap(), r["status"].as_str().unwrap()))
        .collect();
    assert!(results.contains(&("after", "success")), "{body}");
    assert!(
        results.contains(&("self", "clienterror")),
        "3 is no task: {body}"
    );
    let deps: i64 = sqlx::query_scalar("SELECT count(*) FROM task_deps")
        .fetch_one(&s.db().await)
        .await
        .unwrap();
    assert_eq!(deps, 2, "'after' depends on tasks 1 and 2 (not 02)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_characters_are_refused_with_the_field_named() {
    let s = TestServer::start(Rt::Local).await;
    let (status, body) = s.get("/pools/a%00b").await;
    azure_error(status, &body, 400, "InvalidUri");
    let (status, body) = s.get("/jobs?$skiptoken=a%00").await;
    azure_error(status, &body, 400, "InvalidQueryParameterValue");

    let (status, body) = s
        .post("/pools", &json!({"id": "p\u{0}", "vmSize": "standard_a1"}))
        .await;
    names_property(status, &body, "id");
    let (status, body) = s
        .post("/jobs", &json!({"id": "j", "poolInfo": {"poolId": "p"}}))
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = s
        .post(
            "/jobs/j/tasks",
            &json!({"id": "t", "commandLine": "echo \u{0}"}),
        )
        .await;
    names_property(status, &body, "commandLine");
    let (status, body) = s
        .post(
            "/jobs/j/tasks",
            &json!({"id": "t", "commandLine": "true", "environmentSettings": [{"name": "A", "value": "x\u{0}y"}]}),
        )
        .await;
    names_property(status, &body, "environmentSettings[0].value");
    let (status, body) = s
        .post(
            "/jobs/j/addtaskcollection",
            &json!({"value": [{"id": "u", "commandLine": "true", "displayName": "\u{0}"}]}),
        )
        .await;
    names_property(status, &body, "value[0].displayName");

    // The BES side answers in its own shape, with the field as the target.
    let service = "/subscriptions/s1/services/nul";
    let ml_error = |status: reqwest::StatusCode, body: &Value, target: &str| {
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["code"], "BadArgument", "{body}");
        assert_eq!(body["error"]["details"][0]["target"], target, "{body}");
    };
    let register = json!({
        "Title": "Echoes",
        "Command": "echo {param:Label}",
        "GlobalParameters": [{"Name": "Label", "Default": "x"}],
        "BillingPlan": "plan",
    });
    let mut bad = register.clone();
    bad["Title"] = json!("E\u{0}");
    let (status, body) = s.request(reqwest::Method::PUT, service, Some(&bad)).await;
    ml_error(status, &body, "Title");
    let (status, body) = s
        .request(reqwest::Method::PUT, service, Some(&register))
        .await;
    assert_eq!(status, 201, "{body}");
    let key = body["PrimaryKey"].as_str().unwrap().to_string();
    let http = reqwest::Client::new();
    for (job, target) in [
        (
            json!({"GlobalParameters": {"Label": "a\u{0}"}}),
            "GlobalParameters.Label",
        ),
        (
            json!({"Inputs": {"in\u{0}": {"RelativeLocation": "x"}}}),
            r"Inputs.in\u0000",
        ),
    ] {
        let response = http
            .post(format!("{}{service}/jobs?api-version=2.0", s.base))
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .body(job.to_string())
            .send()
            .await
            .unwrap();
        let status = response.status();
        ml_error(status, &response.json().await.unwrap(), target);
    }
    let (status, body) = s
        .get(&format!("{service}/jobs/a%00b?api-version=2.0"))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["details"][0]["code"], "InvalidUri", "{body}");
}

/// A number beyond 64-bit integers was stored exactly by PostgreSQL and could not be read back:
/// the task answered 500 and every dispatch pass failed while it was queued. It is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbers_that_cannot_be_read_back_are_refused() {
    let s = TestServer::start(Rt::Local).await;
    let (status, body) = s
        .post(
            "/pools",
            &json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = s
        .post("/jobs", &json!({"id": "j", "poolInfo": {"poolId": "p"}}))
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = s
        .post_raw(
            "/jobs/j/tasks",
            r#"{"id": "huge", "commandLine": "true",
                "exitConditions": {"default": {"jobAction": "none", "x": 1.7976931348623157e308}}}"#,
        )
        .await;
    names_property(status, &body, "exitConditions.default.x");
    // The queue still moves.
    s.add_tasks("j", vec![json!({"id": "after", "commandLine": "true"})])
        .await;
    s.wait_task("j", "after", "completed").await;
}

/// A raw connection to the server, for clients that misbehave below HTTP.
async fn connect(s: &TestServer) -> tokio::net::TcpStream {
    tokio::net::TcpStream::connect(s.base.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Reads until the server closes the connection; what it sent and when it closed.
async fn read_to_close(stream: &mut tokio::net::TcpStream) -> (String, std::time::Duration) {
    use tokio::io::AsyncReadExt;
    let started = std::time::Instant::now();
    let mut got = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        stream.read_to_end(&mut got),
    )
    .await;
    assert!(read.is_ok(), "the server never closed the connection");
    (
        String::from_utf8_lossy(&got).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_dropped_and_connections_bounded() {
    use tokio::io::AsyncWriteExt;
    let s = TestServer::start_with(
        Rt::Local,
        Some(common::fresh_database().await),
        &[
            "--header-read-timeout",
            "2",
            "--body-read-timeout",
            "2",
            "--max-connections",
            "3",
        ],
    )
    .await;
    let limit = std::time::Duration::from_secs(5);

    // Half a header line, then nothing.
    let mut slow = connect(&s).await;
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: x")
        .await
        .unwrap();
    let (_, after) = read_to_close(&mut slow).await;
    assert!(after < limit, "closed after {after:?}");

    // A body that is declared and never sent.
    let mut slow = connect(&s).await;
    slow.write_all(b"POST /pools HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"id\": \"p\"")
        .await
        .unwrap();
    let (answer, after) = read_to_close(&mut slow).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"RequestTimeout\""), "{answer}");
    assert!(after < limit, "closed after {after:?}");

    // 100 MB declared, 10 bytes sent: refused at once, without waiting for the rest.
    let mut slow = connect(&s).await;
    slow.write_all(
        b"POST /pools HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n0123456789",
    )
    .await
    .unwrap();
    let (answer, after) = read_to_close(&mut slow).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(after < limit, "closed after {after:?}");

    // Three idle connections take every slot: a fourth client waits until they go.
    let idle = vec![connect(&s).await, connect(&s).await, connect(&s).await];
    let url = format!("{}/health", s.base);
    let mut waiting = tokio::spawn(async move { reqwest::get(url).await.map(|r| r.status()) });
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(800), &mut waiting)
            .await
            .is_err(),
        "a connection over the bound was served"
    );
    drop(idle);
    let status = tokio::time::timeout(limit, waiting).await.unwrap().unwrap();
    assert_eq!(status.unwrap(), 200);
}

/// A TCP proxy in front of the test PostgreSQL that the test can cut: the database becomes
/// unreachable (refused) without touching the shared server.
struct CuttableProxy {
    /// The database's URL through the proxy.
    url: String,
    cut: tokio_util::sync::CancellationToken,
}

impl CuttableProxy {
    async fn start(database_url: &str) -> Self {
        let mut url = reqwest::Url::parse(database_url).unwrap();
        let port = url.port().unwrap_or(5432);
        // A `host` query parameter names a unix socket directory (as the test script's URL does).
        let socket = url
            .query_pairs()
            .find(|(k, _)| k == "host")
            .map(|(_, dir)| format!("{dir}/.s.PGSQL.{port}"));
        let tcp = format!("{}:{port}", url.host_str().unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        url.set_query(None);
        url.set_host(Some("127.0.0.1")).unwrap();
        url.set_port(Some(listener.local_addr().unwrap().port()))
            .unwrap();
        let cut = tokio_util::sync::CancellationToken::new();
        let stop = cut.clone();
        tokio::spawn(async move {
            loop {
                let (mut client, _) = tokio::select! {
                    _ = stop.cancelled() => return, // the listener closes: refused from now on
                    accepted = listener.accept() => accepted.unwrap(),
                };
                let (socket, tcp, stop) = (socket.clone(), tcp.clone(), stop.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = async {
                            match socket {
                                Some(path) => {
                                    let mut server = tokio::net::UnixStream::connect(path).await.unwrap();
                                    tokio::io::copy_bidirectional(&mut client, &mut server).await
                                }
                                None => {
                                    let mut server = tokio::net::TcpStream::connect(tcp).await.unwrap();
                                    tokio::io::copy_bidirectional(&mut client, &mut server).await
                                }
                            }
                        } => {}
                    }
                });
            }
        });
        Self {
            url: url.to_string(),
            cut,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_database_answers_503_within_seconds() {
    let proxy = CuttableProxy::start(&common::fresh_database().await).await;
    let s = TestServer::start_with(
        Rt::Local,
        Some(proxy.url.clone()),
        &["--db-acquire-timeout", "2"],
    )
    .await;
    assert_eq!(s.get("/pools").await.0, 200);

    proxy.cut.cancel();
    let started = std::time::Instant::now();
    let response = s
        .http
        .get(format!("{}/pools", s.base))
        .send()
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "ServerBusy", "{body}");
    assert!(elapsed < std::time::Duration::from_secs(5), "{elapsed:?}");
}

/// `--worker-threads` sets how many threads run the server's work; zero is refused by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_threads_are_as_set_and_zero_is_refused() {
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_batchpool"))
        .args(["serve", "--worker-threads", "0"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("--worker-threads"), "{said}");

    let s = TestServer::start_with(Rt::Local, None, &["--worker-threads", "3"]).await;
    assert_eq!(s.get("/pools").await.0, 200);
    let workers = std::fs::read_dir(format!("/proc/{}/task", s.pid()))
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.trim() == "tokio-rt-worker")
        })
        .count();
    assert_eq!(workers, 3);
}
