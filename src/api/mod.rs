//! HTTP only: extract, validate, call the store, map to wire JSON.

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
    Router::new()
        .merge(batch::router())
        .nest("/billing", billing::router())
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
        .layer(DefaultBodyLimit::max(4 * 1024 * 1024))
        .layer(axum::middleware::from_fn(request_id::layer))
        .with_state(state)
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
