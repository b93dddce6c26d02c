//! The Azure ML side: web services (our own management API, signed with the account's Shared
//! Key), their BES job API (Bearer service key), and the Pool Service (Bearer pool service key).
//! Errors use Azure ML's body (`error::BesError`).

pub mod error;
pub mod jobs;
pub mod pool_service;
pub mod services;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use serde::de::DeserializeOwned;

use crate::api::state::AppState;
use error::{BesError, BesResult};

/// Routes signed with the account's Shared Key: managing web services. Both URL families
/// (`/subscriptions/{sub}` of Resource-Manager services, `/workspaces/{ws}` of classic ones) name
/// the same services.
pub fn management_router() -> Router<Arc<AppState>> {
    let mut r = Router::new();
    for prefix in ["/subscriptions", "/workspaces"] {
        r = r
            .route(&format!("{prefix}/{{ns}}/services"), get(services::list))
            .route(
                &format!("{prefix}/{{ns}}/services/{{svc}}"),
                get(services::get)
                    .put(services::put)
                    .delete(services::delete),
            )
            .route(
                &format!("{prefix}/{{ns}}/services/{{svc}}/regeneratekey"),
                post(services::regenerate_key),
            );
    }
    r
}

/// Routes that authenticate themselves with a Bearer key: BES jobs, swagger.json, Pool Service.
pub fn bearer_router() -> Router<Arc<AppState>> {
    let mut r = Router::new();
    for prefix in ["/subscriptions", "/workspaces"] {
        r = r
            .route(
                &format!("{prefix}/{{ns}}/services/{{svc}}/swagger.json"),
                get(services::swagger),
            )
            .route(
                &format!("{prefix}/{{ns}}/services/{{svc}}/jobs"),
                get(jobs::list).post(jobs::submit),
            )
            .route(
                &format!("{prefix}/{{ns}}/services/{{svc}}/jobs/{{id}}"),
                get(jobs::get).delete(jobs::cancel),
            )
            .route(
                &format!("{prefix}/{{ns}}/services/{{svc}}/jobs/{{id}}/start"),
                post(jobs::start),
            );
    }
    r.nest("/poolservice", pool_service::router())
}

/// The key of `Authorization: Bearer <key>`.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

/// Compares keys without an early exit.
pub fn same_key(a: &str, b: &str) -> bool {
    crate::api::auth::constant_time_eq(a.as_bytes(), b.as_bytes())
}

/// BES speaks api-version 2.0; a request naming another is refused, one naming none is served.
pub fn check_version(query: Option<&str>) -> BesResult<()> {
    let version = form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .find(|(k, _)| k == "api-version")
        .map(|(_, v)| v.into_owned());
    match version {
        Some(v) if v != "2.0" => Err(BesError::bad(
            "BadVersionCall",
            format!("Invalid version parameter was passed during the API call: {v:?}; use api-version=2.0."),
        )
        .target("api-version")),
        _ => Ok(()),
    }
}

/// A JSON body read whatever its Content-Type says (BES clients send application/json,
/// text/json or nothing); an empty body reads as `{}`.
pub struct BesJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for BesJson<T> {
    type Rejection = BesError;

    async fn from_request(req: Request, state: &S) -> Result<Self, BesError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                BesError::new(
                    e.status(),
                    "MemoryQuotaViolation",
                    "RequestBodyTooLarge",
                    "The request body is too large.",
                )
            } else {
                BesError::bad(
                    "RequestBodyInvalid",
                    format!("The request body could not be read: {e}"),
                )
            }
        })?;
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| BesError::bad("RequestBodyInvalid", "The request body is not UTF-8."))?;
        let text = if text.trim().is_empty() || text.trim() == "\"\"" {
            "{}"
        } else {
            text
        };
        if let Some((path, reason)) = crate::api::json::unstorable(text.as_bytes()) {
            return Err(BesError::bad(
                "RequestBodyInvalid",
                format!("The request body is invalid: {path} {reason}"),
            )
            .target(path));
        }
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de)
            .map(BesJson)
            .map_err(|e| {
                let path = e.path().to_string();
                let target = if path == "." { None } else { Some(path) };
                let mut err = BesError::bad(
                    "RequestBodyInvalid",
                    format!("The request body is invalid: {}", e.inner()),
                );
                err.target = target;
                err
            })
    }
}
