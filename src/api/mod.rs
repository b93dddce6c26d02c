//! HTTP only: extract, validate, call the store, map to wire JSON.

pub mod auth;
pub mod batch;
pub mod billing;
pub mod error;
pub mod json;
pub mod request_id;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, FromRequestParts};
use axum::http::request::Parts;
use axum::routing::get;
use axum::Router;

use crate::app::AppState;
use error::ApiError;

pub fn router(state: Arc<AppState>) -> Router {
    // Everything but /health needs a Shared Key signature and a known api-version.
    let authenticated = Router::new()
        .merge(batch::router())
        .nest("/billing", billing::router())
        .route_layer(axum::middleware::from_fn(check_api_version))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::layer,
        ));
    Router::new()
        .merge(authenticated)
        .route(
            "/health",
            get(|| async { axum::Json(serde_json::json!({"status": "ok"})) }),
        )
        .fallback(|| async {
            ApiError::new(
                axum::http::StatusCode::NOT_FOUND,
                "ResourceNotFound",
                "The specified resource does not exist.",
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                "UnsupportedHttpVerb",
                "The resource does not support this HTTP verb.",
            )
        })
        .layer(DefaultBodyLimit::max(4 * 1024 * 1024))
        .layer(axum::middleware::from_fn(request_id::layer))
        .with_state(state)
}

/// The api-versions of the SDKs this server answers (15.x and 14.x).
pub const API_VERSIONS: [&str; 2] = ["2025-06-01", "2024-02-01.19.0"];

/// A request naming another api-version is refused; one naming none is served (curl users).
async fn check_api_version(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let version = req.uri().query().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "api-version")
            .map(|(_, v)| v.into_owned())
    });
    match version {
        Some(v) if !API_VERSIONS.contains(&v.as_str()) => {
            axum::response::IntoResponse::into_response(
                ApiError::new(
                    axum::http::StatusCode::BAD_REQUEST,
                    "InvalidApiVersionParameter",
                    format!(
                        "The api-version {v:?} is not supported; use one of: {}.",
                        API_VERSIONS.join(", ")
                    ),
                )
                .with("QueryParameterName", "api-version")
                .with("QueryParameterValue", v),
            )
        }
        _ => next.run(req).await,
    }
}

/// What a handler works with: the app, and the account the request was signed by. It derefs to
/// the app state, so handlers read `app.db` and `app.account` alike.
pub struct Ctx {
    app: Arc<AppState>,
    pub account: String,
}

impl std::ops::Deref for Ctx {
    type Target = AppState;
    fn deref(&self) -> &AppState {
        &self.app
    }
}

impl FromRequestParts<Arc<AppState>> for Ctx {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, ApiError> {
        let account = parts.extensions.get::<auth::Account>().ok_or_else(|| {
            ApiError::new(
                axum::http::StatusCode::UNAUTHORIZED,
                "AuthenticationFailed",
                "The request is not authenticated.",
            )
        })?;
        Ok(Ctx {
            app: state.clone(),
            account: account.0.clone(),
        })
    }
}

/// The URL clients reached us at, from the Host header: resource URLs and links are built on it.
pub struct BaseUrl(pub String);

impl<S: Send + Sync> FromRequestParts<S> for BaseUrl {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let host = parts
            .headers
            .get(axum::http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        Ok(BaseUrl(format!("http://{host}")))
    }
}

/// RFC 3339 with microseconds, as the SDKs parse it.
pub fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// RFC 1123, for headers such as Last-Modified.
pub fn rfc1123(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

/// Azure's ETag: the last modification time in FILETIME ticks, in hex.
pub fn etag(t: chrono::DateTime<chrono::Utc>) -> String {
    const UNIX_EPOCH_IN_FILETIME_TICKS: i64 = 116_444_736_000_000_000;
    format!(
        "0x{:X}",
        t.timestamp_micros() * 10 + UNIX_EPOCH_IN_FILETIME_TICKS
    )
}

/// `maxresults` and `$skiptoken` of a list request, and the link to its next page.
pub struct Paging {
    pub max_results: i64,
    pub skip_token: Option<String>,
    api_version: Option<String>,
}

impl Paging {
    pub fn from_query(query: &std::collections::HashMap<String, String>) -> Result<Self, ApiError> {
        let max_results = match query.get("maxresults") {
            None => 1000,
            Some(v) => match v.parse::<i64>() {
                Ok(n) if (1..=1000).contains(&n) => n,
                _ => {
                    return Err(ApiError::invalid_query(
                        "maxresults",
                        v,
                        "must be a whole number from 1 to 1000",
                    ))
                }
            },
        };
        Ok(Self {
            max_results,
            skip_token: query.get("$skiptoken").cloned(),
            api_version: query.get("api-version").cloned(),
        })
    }

    /// `{"value": [...], "odata.nextLink": ...}`: a next link when the page is full. The token is
    /// made of URL-safe characters; the request's own api-version is echoed, never a fixed one.
    pub fn page(
        &self,
        base: &str,
        path: &str,
        items: Vec<serde_json::Value>,
        last_token: Option<String>,
    ) -> serde_json::Value {
        let full = items.len() as i64 >= self.max_results;
        let mut body = serde_json::json!({ "value": items });
        if let (true, Some(token)) = (full, last_token) {
            let mut link = format!("{base}{path}?");
            if let Some(v) = &self.api_version {
                link.push_str(&format!("api-version={v}&"));
            }
            link.push_str(&format!(
                "maxresults={}&$skiptoken={token}",
                self.max_results
            ));
            body["odata.nextLink"] = serde_json::json!(link);
        }
        body
    }
}

/// Encodes a resource id as a skip token of `[A-Za-z0-9._~-]` (ids have only letters, digits,
/// `-` and `_`, so they are tokens already).
pub fn id_token(id: &str) -> String {
    id.to_string()
}
