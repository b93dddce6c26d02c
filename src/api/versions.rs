//! The api-versions of the Azure Batch data plane this server speaks, and what each older one
//! calls by another name. The handlers speak the newest shape only; a request in an older
//! version is translated here, at the edge, into the newest shape, and its answer back into the
//! shape that version was published with, from one table of deltas ([`DELTAS`]). A request in
//! the newest version (or none) passes through untouched.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::error::ApiError;
use super::guard::MAX_BODY_BYTES;

/// Every stable api-version of the data plane Azure published from 2018-08-01.7.0 on, oldest
/// first (specification/batch/data-plane/Microsoft.Batch/stable/ in Azure/azure-rest-api-specs;
/// before 7.0 pools' sizes had other names). The last is the shape the handlers speak. Besides
/// the deltas below, the versions differ in what batchpool refuses by name in any version
/// (`cloudServiceConfiguration`, certificates, `publicIPs`), in routes (`/nodeagentskus` before
/// 2019-06-01.9.0, `/supportedimages` after: both are served) and in properties added, which the
/// SDKs of older versions ignore.
pub const PUBLISHED: [&str; 15] = [
    "2018-08-01.7.0",
    "2018-12-01.8.0",
    "2019-06-01.9.0",
    "2019-08-01.10.0",
    "2020-03-01.11.0",
    "2020-09-01.12.0",
    "2021-01-01.13.0",
    "2021-06-01.14.0",
    "2022-01-01.15.0",
    "2022-10-01.16.0",
    "2023-05-01.17.0",
    "2023-11-01.18.0",
    "2024-02-01.19.0",
    "2024-07-01.20.0",
    NEWEST,
];

/// The version the handlers speak (azure-batch 15.x).
const NEWEST: &str = "2025-06-01";

/// What one version calls otherwise than the newest.
enum Delta {
    /// A property renamed: requests' `old` becomes `new`, answers' `new` becomes `old`,
    /// wherever it stands in the body.
    Renamed {
        old: &'static str,
        new: &'static str,
    },
    /// An answer of a route ending in `route` that the newest version wraps in the property
    /// `field`, which older versions sent bare.
    Wrapped {
        route: &'static str,
        field: &'static str,
    },
}

/// The deltas, each with the first version that has the newest shape: versions before it get
/// the delta.
const DELTAS: &[(&str, Delta)] = &[
    // ResourceFile: one blobSource before 2018-12-01.8.0, httpUrl (and the container forms) since.
    (
        "2018-12-01.8.0",
        Delta::Renamed {
            old: "blobSource",
            new: "httpUrl",
        },
    ),
    // Task slots: a pool's maxTasksPerNode became taskSlotsPerNode in 2020-09-01.12.0, and
    // GET .../taskcounts, which had answered TaskCounts, answers {taskCounts, taskSlotCounts}.
    (
        "2020-09-01.12.0",
        Delta::Renamed {
            old: "maxTasksPerNode",
            new: "taskSlotsPerNode",
        },
    ),
    (
        "2020-09-01.12.0",
        Delta::Wrapped {
            route: "/taskcounts",
            field: "taskCounts",
        },
    ),
];

/// Where `version` stands among the published ones, if it is one.
fn position(version: &str) -> Option<usize> {
    PUBLISHED.iter().position(|v| *v == version)
}

/// The deltas a request in `version` needs (none for the newest).
fn deltas_for(version: &str) -> Vec<&'static Delta> {
    let Some(at) = position(version) else {
        return Vec::new();
    };
    DELTAS
        .iter()
        .filter(|(since, _)| position(since).is_some_and(|s| at < s))
        .map(|(_, delta)| delta)
        .collect()
}

/// The api-version a request names, if it names one.
fn requested(req: &Request) -> Option<String> {
    let query = req.uri().query()?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "api-version")
        .map(|(_, v)| v.into_owned())
}

/// Refuses a request naming an api-version that was never published (one naming none is served
/// in the newest shape: curl users); translates one in an older version.
pub async fn layer(req: Request, next: Next) -> Response {
    let Some(version) = requested(&req) else {
        return next.run(req).await;
    };
    if position(&version).is_none() {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "InvalidApiVersionParameter",
            format!(
                "The api-version {version:?} is not supported; use one of: {}.",
                PUBLISHED.join(", ")
            ),
        )
        .with("QueryParameterName", "api-version")
        .with("QueryParameterValue", version)
        .into_response();
    }
    let deltas = deltas_for(&version);
    if deltas.is_empty() {
        return next.run(req).await;
    }
    let path = req.uri().path().to_string();
    let req = match translate_request(req, &deltas).await {
        Ok(req) => req,
        Err(refused) => return refused,
    };
    translate_answer(next.run(req).await, &deltas, &path).await
}

/// The request's JSON body in the newest shape (whatever its Content-Type says: it is not
/// checked). `guard::read_body_in_time` has read it whole already, within the limit.
async fn translate_request(req: Request, deltas: &[&Delta]) -> Result<Request, Response> {
    let renames = renames(deltas, Direction::In);
    if renames.is_empty() {
        return Ok(req);
    }
    let (mut parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| super::guard::too_large(false))?;
    let bytes = match renamed(&bytes, &renames) {
        Some(json) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            bytes::Bytes::from(json)
        }
        None => bytes,
    };
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// The answer in the shape of the request's version: only JSON answers change.
async fn translate_answer(answer: Response, deltas: &[&Delta], path: &str) -> Response {
    let is_json = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("json"));
    if !is_json {
        return answer;
    }
    let (mut parts, body) = answer.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let renames = renames(deltas, Direction::Out);
    let unwrap = deltas.iter().find_map(|d| match d {
        Delta::Wrapped { route, field } if path.ends_with(route) => Some(*field),
        _ => None,
    });
    let changed = match unwrap {
        Some(field) if parts.status.is_success() => unwrapped(&bytes, field, &renames),
        _ => renamed(&bytes, &renames),
    };
    let Some(json) = changed else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(json))
}

/// Which way a body goes: a request's in (older names to the newest), an answer's out.
#[derive(Clone, Copy, PartialEq)]
enum Direction {
    In,
    Out,
}

/// The renames of `deltas`, each (from, to) for a body going `direction`.
fn renames(deltas: &[&Delta], direction: Direction) -> Vec<(&'static str, &'static str)> {
    deltas
        .iter()
        .filter_map(|d| match d {
            Delta::Renamed { old, new } if direction == Direction::In => Some((*old, *new)),
            Delta::Renamed { old, new } => Some((*new, *old)),
            Delta::Wrapped { .. } => None,
        })
        .collect()
}

/// `json` with the keys renamed (from the first of each pair to the second), byte for byte
/// otherwise; None when it holds none of them (then it is left as it came). Keys are found as
/// the quoted name between `{` or `,` and `:` (whitespace allowed): a string value, or a name
/// inside a string (its quotes escaped), is never taken for one. It works on the bytes, never
/// parsing the whole body: a 1,000-task answer costs a scan, not a parse and a serialization.
fn renamed(json: &[u8], renames: &[(&str, &str)]) -> Option<Vec<u8>> {
    let mut changed: Option<Vec<u8>> = None;
    for (from, to) in renames {
        let quoted = format!("\"{from}\"");
        let source = changed.as_deref().unwrap_or(json);
        let mut out = Vec::new();
        let mut copied = 0;
        for at in memchr::memmem::find_iter(source, quoted.as_bytes()) {
            if !is_key(source, at, quoted.len()) {
                continue;
            }
            if out.is_empty() {
                out.reserve(source.len() + 64);
            }
            out.extend_from_slice(&source[copied..at]);
            out.extend_from_slice(format!("\"{to}\"").as_bytes());
            copied = at + quoted.len();
        }
        if copied > 0 {
            out.extend_from_slice(&source[copied..]);
            changed = Some(out);
        }
    }
    changed
}

/// Whether the quoted name at `at` (of `len` bytes) is an object's key.
fn is_key(json: &[u8], at: usize, len: usize) -> bool {
    let before = json[..at].iter().rev().find(|b| !b.is_ascii_whitespace());
    let after = json[at + len..].iter().find(|b| !b.is_ascii_whitespace());
    matches!(before, Some(b'{' | b',')) && after == Some(&b':')
}

/// `json`'s object `field` alone, keys renamed.
fn unwrapped(json: &[u8], field: &str, renames: &[(&str, &str)]) -> Option<Vec<u8>> {
    let value: Value = serde_json::from_slice(json).ok()?;
    let inner = serde_json::to_vec(value.get(field)?).ok()?;
    Some(renamed(&inner, renames).unwrap_or(inner))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_and_unpublished_versions_need_no_delta() {
        assert!(deltas_for(NEWEST).is_empty());
        assert!(deltas_for("2024-02-01.19.0").is_empty());
        assert!(deltas_for("2031-01-01").is_empty());
        assert_eq!(deltas_for("2020-09-01.12.0").len(), 0);
        assert_eq!(deltas_for("2020-03-01.11.0").len(), 2);
        assert_eq!(deltas_for("2018-08-01.7.0").len(), 3);
    }

    #[test]
    fn keys_are_renamed_wherever_they_stand_and_nothing_else_changes() {
        let body =
            br#"{"id":"p","maxTasksPerNode":4,"metadata":[{"name":"maxTasksPerNode","value":"x"}],
            "startTask":{"resourceFiles":[{"blobSource":"http://a/b","filePath":"b"}]}}"#;
        let renames = [
            ("maxTasksPerNode", "taskSlotsPerNode"),
            ("blobSource", "httpUrl"),
        ];
        let out: Value = serde_json::from_slice(&renamed(body, &renames).unwrap()).unwrap();
        assert_eq!(
            out,
            serde_json::json!({"id": "p", "taskSlotsPerNode": 4,
                "metadata": [{"name": "maxTasksPerNode", "value": "x"}],
                "startTask": {"resourceFiles": [{"httpUrl": "http://a/b", "filePath": "b"}]}})
        );
        assert_eq!(renamed(br#"{"id":"p"}"#, &renames), None, "left as it came");
        // Only keys: not a value, not a name inside a string, not an escaped quote's neighbour.
        let tricky =
            br#"{"commandLine":"echo \"maxTasksPerNode\": 1","displayName":"maxTasksPerNode",
            "list":["maxTasksPerNode"], "maxTasksPerNode" : 2}"#;
        let out = String::from_utf8(renamed(tricky, &renames).unwrap()).unwrap();
        assert_eq!(
            out,
            String::from_utf8_lossy(tricky)
                .replace(r#""maxTasksPerNode" : 2"#, r#""taskSlotsPerNode" : 2"#)
        );
    }

    #[test]
    fn an_old_version_gets_task_counts_bare() {
        let body = br#"{"taskCounts":{"active":1,"running":0},"taskSlotCounts":{"active":1}}"#;
        let out: Value =
            serde_json::from_slice(&unwrapped(body, "taskCounts", &[]).unwrap()).unwrap();
        assert_eq!(out, serde_json::json!({"active": 1, "running": 0}));
    }
}
