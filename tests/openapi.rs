//! `openapi/openapi.yaml` and the router describe the same API: every documented operation is
//! routed, and every route is documented.
//!
//! axum cannot list a router's routes, so the routes are read from where they are written: every
//! `.route(...)` and `.nest(...)` call under `src/api/` (the router lives there, DESIGN "Layout"),
//! with `format!` paths expanded over the `for prefix in [...]` loop that builds them, and each
//! nested router's routes given the prefixes it is nested under. The reading is strict: a
//! registration it cannot read fails the test with its file and line, so a new way of writing
//! routes cannot slip past it. And it is checked against the running server, where every route
//! read from the source must be routed, so a misread path fails instead of passing unseen. The
//! document is read with a few lines of string handling (the tree has no YAML parser): under
//! `paths:`, a path is a line indented two spaces, an operation a `get:`/`put:`/... line
//! indented four.
//!
//! Paths are compared with their parameters' names dropped (`{pool_id}` = `{poolId}`, and the
//! catch-all `{*path}` = `{filePath}`). HEAD: axum answers HEAD on every GET route, so HEAD is
//! documented only where a client uses it (pool and file properties) and need not be elsewhere;
//! a documented HEAD counts as routed where its path has GET. On the running server, each
//! documented path answers 405 `UnsupportedHttpVerb` to every method the document does not list.
mod common;
#[path = "openapi/routes.rs"]
mod routes;

use std::collections::BTreeSet;

use common::{Rt, TestServer};
use reqwest::{Method, StatusCode};
use routes::{documented, routed_in_source, Operations, METHODS};
use serde_json::json;

/// Whether `op` is among `ops`; with `head_by_get`, a HEAD also where GET is (axum answers HEAD
/// on GET routes).
fn covers(ops: &Operations, (method, shape): &(String, String), head_by_get: bool) -> bool {
    ops.contains_key(&(method.clone(), shape.clone()))
        || head_by_get && method == "head" && ops.contains_key(&("get".to_string(), shape.clone()))
}

/// The operations of `from` that `to` lacks, as `GET /path` lines.
fn missing(from: &Operations, to: &Operations, head_by_get: bool) -> Vec<String> {
    from.iter()
        .filter(|(op, _)| !covers(to, op, head_by_get))
        .map(|((m, _), path)| format!("{} {path}", m.to_uppercase()))
        .collect()
}

#[test]
fn every_route_is_documented_and_every_documented_operation_routed() {
    let (documented, routed) = (documented(), routed_in_source());
    // A route's own HEAD (`.head(...)`) must be documented; the HEAD axum adds to GET need not.
    let undocumented = missing(&routed, &documented, false);
    let unrouted = missing(&documented, &routed, true);
    assert!(
        undocumented.is_empty() && unrouted.is_empty(),
        "routes missing in openapi/openapi.yaml: {undocumented:#?}\n\
         documented but not routed (src/api/): {unrouted:#?}"
    );
}

/// A path with sample values for its parameters.
fn sample(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let close = open + rest[open..].find('}').unwrap();
        out.push_str(&rest[..open]);
        let name = &rest[open + 1..close];
        out.push_str(
            if name.starts_with('*') || name.to_lowercase().contains("path") {
                "stdout.txt"
            } else {
                "probe-id"
            },
        );
        rest = &rest[close + 1..];
    }
    out + rest
}

/// What the router answers to `method path`: `Err` when it has no such route or no such method.
async fn probe(s: &TestServer, method: &str, path: &str) -> Result<StatusCode, String> {
    let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
    let body = matches!(method, Method::POST | Method::PUT | Method::PATCH).then(|| json!({}));
    let (status, body) = s
        .request(method.clone(), &sample(path), body.as_ref())
        .await;
    match (status, body["code"].as_str()) {
        (StatusCode::NOT_FOUND, Some("ResourceNotFound")) => {
            Err(format!("{method} {path}: no such route"))
        }
        (StatusCode::METHOD_NOT_ALLOWED, _) => Err(format!("{method} {path}: 405")),
        (status, _) => Ok(status),
    }
}

#[tokio::test]
async fn the_running_server_routes_what_the_document_and_the_source_say() {
    let s = TestServer::start(Rt::Local).await;
    let (documented, routed) = (documented(), routed_in_source());
    let mut wrong = Vec::new();
    for ((method, _), path) in documented.iter().chain(&routed) {
        // A HEAD answer has no body to tell "no such route" by: GET finds the route, HEAD the verb.
        let found = if method == "head" {
            probe(&s, "get", path)
                .await
                .and(probe(&s, "head", path).await)
        } else {
            probe(&s, method, path).await
        };
        wrong.extend(found.err());
    }
    let paths: BTreeSet<(&String, &String)> = documented
        .iter()
        .map(|((_, shape), path)| (shape, path))
        .collect();
    for (shape, path) in paths {
        for method in METHODS {
            let op = (method.to_string(), shape.clone());
            if covers(&documented, &op, true) {
                continue;
            }
            let answer = match probe(&s, method, path).await {
                Err(e) if e.ends_with("405") => continue,
                Err(e) => e,
                Ok(status) => format!("{} {path}: {status}", method.to_uppercase()),
            };
            wrong.push(format!("{answer}, where the document says 405"));
        }
    }
    assert!(
        wrong.is_empty(),
        "the router and openapi.yaml disagree: {wrong:#?}"
    );
}
