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

    let (status, body) = s
        .post("/pools", &json!({"id": "p", "vmSize": "standard_huge"}))
        .await;
    azure_error(status, &body, 400, "InvalidPropertyValue");
    assert_eq!(value_of(&body, "PropertyName"), Some("vmSize"));
    let reason = value_of(&body, "Reason").unwrap();
    assert!(
        reason.contains("standard_a1") && reason.contains("standard_d2s_v3"),
        "the known sizes are listed: {reason}"
    );

    let (status, body) = s
        .post(
            "/pools",
            &json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": -1}),
        )
        .await;
    azure_error(status, &body, 400, "InvalidPropertyValue");
    assert_eq!(
        value_of(&body, "PropertyName"),
        Some("targetDedicatedNodes")
    );

    let (status, body) = s
        .post(
            "/pools",
            &json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 6}),
        )
        .await;
    azure_error(status, &body, 409, "AccountQuotaExceeded");
    assert_eq!(value_of(&body, "Quota"), Some("5"));

    let (status, body) = s
        .post(
            "/pools",
            &json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": "two"}),
        )
        .await;
    azure_error(status, &body, 400, "InvalidPropertyValue");
    assert_eq!(
        value_of(&body, "PropertyName"),
        Some("targetDedicatedNodes")
    );

    let (status, body) = s
        .post(
            "/pools",
            &json!({"id": "p", "vmSize": "standard_a1", "resizeTimeout": "15 minutes"}),
        )
        .await;
    azure_error(status, &body, 400, "InvalidPropertyValue");
    assert_eq!(value_of(&body, "PropertyName"), Some("resizeTimeout"));

    let (status, body) = s
        .post(
            "/pools",
            &json!({"id": "p", "vmSize": "standard_a1", "taskSlotsPerNode": 0}),
        )
        .await;
    azure_error(status, &body, 400, "InvalidPropertyValue");
    assert_eq!(value_of(&body, "PropertyName"), Some("taskSlotsPerNode"));

    let (status, body) = s.post("/pools", &json!({"id": "p", "vmSize": "standard_a1", "taskSchedulingPolicy": {"nodeFillType": "random"}})).await;
    azure_error(status, &body, 400, "InvalidPropertyValue");

    let (status, body) = s
        .post(
            "/pools",
            &json!({"id": "p", "vmSize": "standard_a1", "startTask": {"waitForSuccess": true}}),
        )
        .await;
    azure_error(status, &body, 400, "MissingRequiredProperty");
    assert_eq!(
        value_of(&body, "PropertyName"),
        Some("startTask.commandLine")
    );

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
