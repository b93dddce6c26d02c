//! HTTP only: extract, validate, call the store, map to wire JSON.

pub mod auth;
pub mod batch;
pub mod bes;
pub mod billing;
mod conditions;
pub mod error;
pub mod guard;
pub mod health;
pub mod json;
pub mod metrics;
pub mod odata;
pub mod operator;
mod query;
pub mod request_id;
pub mod serve;
pub mod state;
pub mod ui;
pub mod unsupported;
pub mod versions;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, FromRequestParts};
use axum::http::request::Parts;
use axum::routing::get;
use axum::Router;

use crate::api::state::AppState;
pub use conditions::Conditions;
use error::ApiError;
pub use query::{Expand, ListQuery, Select};

pub fn router(state: Arc<AppState>) -> Router {
    // Everything but /health and /health/ready needs a Shared Key signature and a known api-version.
    let authenticated = Router::new()
        .merge(batch::router())
        .nest("/billing", billing::router())
        .route_layer(axum::middleware::from_fn(versions::layer))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::layer,
        ));
    // Web services are managed with the account's Shared Key, but speak Azure ML's api-version.
    let management = bes::management_router().route_layer(axum::middleware::from_fn_with_state(
        state.clone(),
        auth::layer,
    ));
    let routes = Router::new()
        .merge(authenticated)
        .merge(management)
        .merge(bes::bearer_router())
        .merge(operator::router())
        .merge(ui::router(state.clone()))
        .route("/health", get(health::live))
        .route("/health/ready", get(health::ready))
        .route("/metrics", get(metrics::scrape));
    guarded(routes, state)
}

/// The Batch API as the node agents' listener serves it to tasks: only to a task's
/// authentication token (`AZ_BATCH_AUTHENTICATION_TOKEN`), which reaches its own job and
/// nothing else. Nodes reach that listener where they may not reach the server's own address
/// (a Docker node's network has the listener at its gateway).
pub fn tasks_router(state: Arc<AppState>) -> Router {
    let routes = Router::new()
        .merge(batch::router())
        .route_layer(axum::middleware::from_fn(versions::layer))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::layer,
        ))
        .route_layer(axum::middleware::from_fn(auth::task_tokens_only));
    guarded(routes, state)
}

/// `routes` with what every route of the server has: the answers to unknown routes and verbs,
/// the guards on requests, compression, metrics and request ids.
fn guarded(routes: Router<Arc<AppState>>, state: Arc<AppState>) -> Router {
    routes
        .fallback(unsupported::fallback)
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                "UnsupportedHttpVerb",
                "The resource does not support this HTTP verb.",
            )
        })
        .layer(DefaultBodyLimit::max(guard::MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(guard::refuse_nul_in_uri))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::read_body_in_time,
        ))
        .layer(axum::middleware::from_fn(guard::catch_panic))
        .layer(compression())
        .layer(axum::middleware::from_fn(metrics::count))
        .layer(axum::middleware::from_fn(request_id::layer))
        .with_state(state)
}

/// gzip, for a client that accepts it, of answers worth it: JSON, HTML, CSV and the dashboard's
/// files of 1 KiB or more. Never file contents (`application/octet-stream`): a ranged read's
/// length must stay the file's bytes, and SDKs stream those without decoding them.
fn compression(
) -> tower_http::compression::CompressionLayer<impl tower_http::compression::Predicate> {
    use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
    let worth_it = SizeAbove::new(1024)
        .and(NotForContentType::const_new("application/octet-stream"))
        .and(NotForContentType::IMAGES)
        .and(NotForContentType::SSE)
        .and(NotForContentType::GRPC);
    tower_http::compression::CompressionLayer::new()
        .gzip(true)
        .compress_when(worth_it)
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

impl Ctx {
    /// The account's job `id`, or JobNotFound.
    pub async fn job(&self, id: &str) -> Result<crate::store::jobs::JobRow, ApiError> {
        crate::store::jobs::get(&self.db, &self.account, id, crate::store::jobs::Lock::None)
            .await?
            .ok_or_else(|| ApiError::job_not_found(id))
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

/// The URL clients reached us at: resource URLs and links are built on it. `--public-url` if
/// given; else what a proxy in front says (`X-Forwarded-Proto`, `X-Forwarded-Host`), else
/// `http://` and the `Host` header.
pub struct BaseUrl(pub String);

impl FromRequestParts<Arc<AppState>> for BaseUrl {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        if let Some(url) = &state.settings.public_url {
            return Ok(BaseUrl(url.clone()));
        }
        Ok(BaseUrl(base_url(&parts.headers)))
    }
}

/// The base URL the request's headers say it came to.
fn base_url(headers: &axum::http::HeaderMap) -> String {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|h| h.to_str().ok())
            // A proxy chain lists its hops; the first is the client's.
            .and_then(|v| v.split(',').next())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let scheme = match header("x-forwarded-proto") {
        Some(p) if p.eq_ignore_ascii_case("https") => "https",
        _ => "http",
    };
    // Only what a host (and port) can be: a header cannot smuggle a path or another URL in.
    let host_like = |h: &&str| {
        h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b))
    };
    let host = header("x-forwarded-host")
        .filter(host_like)
        .or_else(|| header("host").filter(host_like))
        .unwrap_or("localhost");
    format!("{scheme}://{host}")
}

pub use crate::domain::rfc3339;

/// RFC 1123, for headers such as Last-Modified.
pub fn rfc1123(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

/// A header value from text that is known to be printable (URLs, times, eTags).
pub fn header_value(value: &str) -> axum::http::HeaderValue {
    axum::http::HeaderValue::from_str(value)
        .unwrap_or_else(|_| axum::http::HeaderValue::from_static(""))
}

/// ETag and Last-Modified of a resource last changed at `modified`.
pub fn resource_headers(modified: chrono::DateTime<chrono::Utc>) -> axum::http::HeaderMap {
    let mut headers = axum::http::HeaderMap::new();
    headers.insert("ETag", header_value(&etag(modified)));
    headers.insert("Last-Modified", header_value(&rfc1123(modified)));
    headers
}

/// 201 Created for a new resource at `url`, last changed at `modified`.
pub fn created(url: &str, modified: chrono::DateTime<chrono::Utc>) -> axum::response::Response {
    let mut headers = resource_headers(modified);
    headers.insert("Location", header_value(url));
    headers.insert("DataServiceId", header_value(url));
    axum::response::IntoResponse::into_response((axum::http::StatusCode::CREATED, headers))
}

/// Azure's ETag: the last modification time in FILETIME ticks, in hex.
pub fn etag(t: chrono::DateTime<chrono::Utc>) -> String {
    const UNIX_EPOCH_IN_FILETIME_TICKS: i64 = 116_444_736_000_000_000;
    format!(
        "0x{:X}",
        t.timestamp_micros() * 10 + UNIX_EPOCH_IN_FILETIME_TICKS
    )
}
