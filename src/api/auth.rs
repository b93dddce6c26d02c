//! Shared Key authentication, exactly as the Azure Batch SDKs sign (see the wire reference,
//! section 3): every Batch API request carries `Authorization: SharedKey <account>:<signature>`,
//! an HMAC-SHA256 with the account's key over a canonical string of the request. The request's
//! account is then the only one whose pools, jobs and files it can see. A task's
//! authentication token (`Authorization: Bearer <token>`, `domain::task_token`) is taken too,
//! for its own job's operations only, while the attempt it was given to runs.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;

use super::error::ApiError;
use crate::api::state::AppState;
use crate::store;

/// The authenticated account of a request.
#[derive(Clone, Debug)]
pub struct Account(pub String);

/// How far a request's date may be from ours.
const MAX_SKEW_SECS: i64 = 15 * 60;

pub use crate::domain::signing::{signature, string_to_sign, strings_to_sign};

/// Compares without an early exit, so the time taken says nothing about where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A new key: 64 random bytes, base64, as Azure's keys are.
pub fn new_key() -> String {
    let bytes: Vec<u8> = (0..4)
        .flat_map(|_| uuid::Uuid::new_v4().into_bytes())
        .collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn refused(status: StatusCode, detail: &str) -> Response {
    ApiError::new(status, "AuthenticationFailed", "Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature.")
        .with("AuthenticationErrorDetail", detail)
        .into_response()
}

/// Refuses a request that is not made with a task's authentication token, where only tasks
/// are served (the node agents' listener): a Shared Key goes to the server's own address.
pub async fn task_tokens_only(req: Request, next: Next) -> Response {
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    if auth.is_some_and(|a| a.starts_with("Bearer ")) {
        return next.run(req).await;
    }
    refused(
        StatusCode::UNAUTHORIZED,
        "This address serves the Batch API to tasks only, with their authentication token \
         (Authorization: Bearer $AZ_BATCH_AUTHENTICATION_TOKEN); send Shared Key requests to \
         the server's own address.",
    )
}

pub async fn layer(State(app): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let headers = req.headers();
    let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) else {
        return refused(
            StatusCode::UNAUTHORIZED,
            "The request has no Authorization header; sign it with Shared Key.",
        );
    };
    if let Some(token) = auth.strip_prefix("Bearer ") {
        return match task_token_account(&app, token.trim(), req.uri().path()).await {
            Ok(account) => {
                req.extensions_mut().insert(account);
                next.run(req).await
            }
            Err(refusal) => refusal,
        };
    }
    let Some((account, given)) = auth
        .strip_prefix("SharedKey ")
        .and_then(|rest| rest.split_once(':'))
    else {
        return refused(
            StatusCode::UNAUTHORIZED,
            "The Authorization header is not of the form 'SharedKey account:signature'.",
        );
    };
    let date = headers
        .get("ocp-date")
        .or_else(|| headers.get("date"))
        .and_then(|v| v.to_str().ok());
    let Some(date) = date.and_then(|d| chrono::DateTime::parse_from_rfc2822(d).ok()) else {
        return refused(
            StatusCode::FORBIDDEN,
            "The request has no valid ocp-date or Date header (RFC 1123).",
        );
    };
    if (chrono::Utc::now() - date.with_timezone(&chrono::Utc))
        .num_seconds()
        .abs()
        > MAX_SKEW_SECS
    {
        return refused(
            StatusCode::FORBIDDEN,
            "The request's date is more than 15 minutes from the server's time.",
        );
    }
    let keys = match store::accounts::get(&app.db, account).await {
        Ok(Some(keys)) => keys,
        Ok(None) => {
            return refused(
                StatusCode::FORBIDDEN,
                "The signature does not match (or the account is unknown).",
            )
        }
        Err(e) => return ApiError::from(e).into_response(),
    };
    let expected = strings_to_sign(req.method(), req.uri(), req.headers(), account);
    let matches = [&keys.primary_key, &keys.secondary_key]
        .iter()
        .flat_map(|key| expected.iter().filter_map(|s| signature(key, s)))
        .fold(false, |ok, sig| {
            ok | constant_time_eq(sig.as_bytes(), given.as_bytes())
        });
    if !matches {
        return refused(
            StatusCode::FORBIDDEN,
            "The signature does not match (or the account is unknown).",
        );
    }
    let account = Account(keys.name);
    req.extensions_mut().insert(account);
    next.run(req).await
}

/// The account of a request made with a task's token: the token must be one this installation
/// signed, its attempt must still run, and the request must be about that attempt's job
/// (`/jobs/{job}` or below).
async fn task_token_account(app: &AppState, token: &str, path: &str) -> Result<Account, Response> {
    let Some(opened) = app.task_key.open(token) else {
        return Err(refused(
            StatusCode::UNAUTHORIZED,
            "The bearer token is not a task authentication token of this server.",
        ));
    };
    let job = match store::tasks::token_job(&app.db, &opened).await {
        Ok(Some(job)) => job,
        Ok(None) => {
            return Err(refused(
                StatusCode::UNAUTHORIZED,
                "The task attempt this token was given to has ended; a token is good while its attempt runs.",
            ))
        }
        Err(e) => return Err(ApiError::from(e).into_response()),
    };
    let mut segments = path.trim_start_matches('/').split('/');
    let own_job = segments.next() == Some("jobs")
        && segments
            .next()
            .is_some_and(|j| j.eq_ignore_ascii_case(&job));
    if !own_job {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "AuthorizationFailure",
            format!("This request is not authorized to perform this operation: a task's authentication token grants access to its job {job:?} (/jobs/{job} and below) only."),
        )
        .into_response());
    }
    Ok(Account(opened.account))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, Method, Uri};

    const KEY: &str =
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+Pw==";
    const DATE: &str = "Thu, 02 Jan 2025 03:04:05 GMT";

    fn check(method: Method, uri: &str, headers: &[(&str, &str)], sts: &str, sig: &str) {
        let mut map = HeaderMap::new();
        map.insert("ocp-date", DATE.parse().unwrap());
        for (k, v) in headers {
            map.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let uri: Uri = uri.parse().unwrap();
        let s = string_to_sign(&method, &uri, &map, "testacct");
        assert_eq!(s, sts);
        assert_eq!(signature(KEY, &s).unwrap(), sig);
    }

    #[test]
    fn vector_1_list_pools_with_query() {
        check(
            Method::GET,
            "/pools?api-version=2025-06-01&timeOut=30&maxresults=10&$filter=state%20eq%20%27active%27&$select=id,state",
            &[("accept", "application/json"), ("client-request-id", "00000000-0000-0000-0000-000000000001")],
            "GET\n\n\n\n\n\n\n\n\n\n\n\nocp-date:Thu, 02 Jan 2025 03:04:05 GMT\n/testacct/pools\n$filter:state eq 'active'\n$select:id,state\napi-version:2025-06-01\nmaxresults:10\ntimeOut:30",
            "+0ZdX+/VrJj27IfTpxBugas+BXndL3gyrAtUzTlVTuI=",
        );
    }

    #[test]
    fn vector_2_create_task_with_body() {
        check(
            Method::POST,
            "/jobs/job1/tasks?api-version=2025-06-01",
            &[("content-type", "application/json; odata=minimalmetadata"), ("content-length", "54")],
            "POST\n\n\n54\n\napplication/json; odata=minimalmetadata\n\n\n\n\n\n\nocp-date:Thu, 02 Jan 2025 03:04:05 GMT\n/testacct/jobs/job1/tasks\napi-version:2025-06-01",
            "ehqFSnLnEvLojgJwhA4nmC/W4HfkO1lOMOb4BR6UDqE=",
        );
    }

    #[test]
    fn vector_3_delete_without_body_signs_length_zero() {
        for headers in [&[][..], &[("content-length", "0")][..]] {
            check(
                Method::DELETE,
                "/pools/pool1?api-version=2025-06-01",
                headers,
                "DELETE\n\n\n0\n\n\n\n\n\n\n\n\nocp-date:Thu, 02 Jan 2025 03:04:05 GMT\n/testacct/pools/pool1\napi-version:2025-06-01",
                "VlkhpCr1jtm59pzRjagG48hsue0IXXSJfpEckRuNNuk=",
            );
        }
    }

    /// The JavaScript SDK (@azure/batch 10.x) signs a DELETE without a body with an empty
    /// Content-Length line; Python's with `0`. Both are taken, for a request with no body only.
    #[test]
    fn a_request_without_a_body_may_sign_its_length_empty_or_zero() {
        let uri: Uri = "/pools/pool1?api-version=2025-06-01".parse().unwrap();
        let mut map = HeaderMap::new();
        map.insert("ocp-date", DATE.parse().unwrap());
        let lines = |all: Vec<String>| -> Vec<String> {
            all.iter()
                .map(|s| s.split('\n').nth(3).unwrap().to_string())
                .collect()
        };
        for length in [None, Some("0")] {
            let mut map = map.clone();
            if let Some(l) = length {
                map.insert("content-length", l.parse().unwrap());
            }
            let all = strings_to_sign(&Method::DELETE, &uri, &map, "testacct");
            assert_eq!(lines(all.clone()), ["0", ""]);
            assert_eq!(
                all[0],
                string_to_sign(&Method::DELETE, &uri, &map, "testacct")
            );
            let all = strings_to_sign(&Method::GET, &uri, &map, "testacct");
            assert_eq!(
                lines(all),
                [
                    length.unwrap_or(""),
                    if length.is_some() { "" } else { "0" }
                ]
            );
        }
        map.insert("content-length", "54".parse().unwrap());
        let all = strings_to_sign(&Method::POST, &uri, &map, "testacct");
        assert_eq!(
            lines(all),
            ["54"],
            "a body's length is signed as it is, one way only"
        );
    }

    #[test]
    fn vector_4_file_path_stays_encoded_and_ocp_range_is_signed() {
        check(
            Method::GET,
            "/jobs/job1/tasks/task1/files/wd%2Fout%20put.txt?api-version=2025-06-01",
            &[("ocp-range", "bytes=0-99"), ("accept", "application/octet-stream")],
            "GET\n\n\n\n\n\n\n\n\n\n\n\nocp-date:Thu, 02 Jan 2025 03:04:05 GMT\nocp-range:bytes=0-99\n/testacct/jobs/job1/tasks/task1/files/wd%2Fout%20put.txt\napi-version:2025-06-01",
            "UjW4w122tfE6C0aG2w3HcncYls9AHnP6AnoT5S2zRBk=",
        );
    }

    #[test]
    fn vector_5_if_match_is_signed_with_its_quotes() {
        check(
            Method::POST,
            "/jobs/job1/tasks/task1/terminate?api-version=2025-06-01",
            &[("if-match", "\"0x8DC0000000000001\""), ("content-length", "0")],
            "POST\n\n\n0\n\n\n\n\n\"0x8DC0000000000001\"\n\n\n\nocp-date:Thu, 02 Jan 2025 03:04:05 GMT\n/testacct/jobs/job1/tasks/task1/terminate\napi-version:2025-06-01",
            "4wvuOH/Daz89nyQ0ois91P/vfltH4Iu9fiyuVjjFqXE=",
        );
    }

    #[test]
    fn keys_are_64_random_bytes() {
        let (a, b) = (new_key(), new_key());
        assert_ne!(a, b);
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(&a)
                .unwrap()
                .len(),
            64
        );
        assert!(
            constant_time_eq(b"abc", b"abc")
                && !constant_time_eq(b"abc", b"abd")
                && !constant_time_eq(b"ab", b"abc")
        );
    }
}
