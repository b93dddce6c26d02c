//! HTTP only: extract, validate, call the store, map to wire JSON.

pub mod auth;
pub mod batch;
pub mod bes;
pub mod billing;
pub mod error;
pub mod guard;
pub mod health;
pub mod json;
pub mod odata;
pub mod request_id;
pub mod serve;
pub mod state;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, FromRequestParts};
use axum::http::request::Parts;
use axum::routing::get;
use axum::Router;

use crate::api::state::AppState;
use error::ApiError;

pub fn router(state: Arc<AppState>) -> Router {
    // Everything but /health and /health/ready needs a Shared Key signature and a known api-version.
    let authenticated = Router::new()
        .merge(batch::router())
        .nest("/billing", billing::router())
        .route_layer(axum::middleware::from_fn(check_api_version))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::layer,
        ));
    // Web services are managed with the account's Shared Key, but speak Azure ML's api-version.
    let management = bes::management_router().route_layer(axum::middleware::from_fn_with_state(
        state.clone(),
        auth::layer,
    ));
    Router::new()
        .merge(authenticated)
        .merge(management)
        .merge(bes::bearer_router())
        .route("/health", get(health::live))
        .route("/health/ready", get(health::ready))
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
        .layer(DefaultBodyLimit::max(guard::MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(guard::refuse_nul_in_uri))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::read_body_in_time,
        ))
        .layer(axum::middleware::from_fn(guard::catch_panic))
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

/// Azure's ETag: the last modification time in FILETIME ticks, in hex.
pub fn etag(t: chrono::DateTime<chrono::Utc>) -> String {
    const UNIX_EPOCH_IN_FILETIME_TICKS: i64 = 116_444_736_000_000_000;
    format!(
        "0x{:X}",
        t.timestamp_micros() * 10 + UNIX_EPOCH_IN_FILETIME_TICKS
    )
}

/// A list request's OData options: `$filter`, `$select`, `maxresults`, `$skiptoken`.
pub struct ListQuery {
    pub max_results: usize,
    pub skip_token: Option<String>,
    filter: Option<odata::Filter>,
    filter_text: Option<String>,
    select: Option<Vec<String>>,
    select_text: Option<String>,
    api_version: Option<String>,
}

/// How many rows one request may scan for a filtered page before it answers with what it has
/// (and a link to go on): a rare filter over a million tasks must not hold one request.
const MAX_SCAN_CHUNKS: usize = 20;

impl ListQuery {
    pub fn from_query(
        query: &std::collections::HashMap<String, String>,
        filterable: &[&str],
    ) -> Result<Self, ApiError> {
        let max_results = match query.get("maxresults") {
            None => 1000,
            Some(v) => match v.parse::<usize>() {
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
        let filter_text = query
            .get("$filter")
            .filter(|f| !f.trim().is_empty())
            .cloned();
        let filter = filter_text
            .as_deref()
            .map(|f| odata::Filter::parse(f, filterable))
            .transpose()?;
        let select_text = query.get("$select").cloned();
        Ok(Self {
            max_results,
            skip_token: query.get("$skiptoken").cloned(),
            filter,
            filter_text,
            select: odata::parse_select(select_text.as_deref()),
            select_text,
            api_version: query.get("api-version").cloned(),
        })
    }

    pub fn filter(&self) -> Option<&odata::Filter> {
        self.filter.as_ref()
    }

    fn keep(&self, item: &serde_json::Value) -> bool {
        self.filter.as_ref().is_none_or(|f| f.matches(item))
    }

    /// A page from items sorted by their tokens (the token to resume after an item); a page
    /// resumes after the last token even if that item has gone meanwhile.
    pub fn page_of(
        &self,
        base: &str,
        path: &str,
        items: impl IntoIterator<Item = (String, serde_json::Value)>,
    ) -> serde_json::Value {
        let mut out = Vec::new();
        let mut last = None;
        let mut more = false;
        for (token, item) in items {
            if self
                .skip_token
                .as_deref()
                .is_some_and(|skip| token.as_str() <= skip)
            {
                continue;
            }
            if out.len() == self.max_results {
                more = true;
                break;
            }
            if self.keep(&item) {
                out.push(odata::select(item, self.select.as_deref()));
            }
            last = Some(token);
        }
        self.page(base, path, out, if more { last } else { None })
    }

    /// A page from a source read in chunks after a token: `fetch(after, limit)` returns items
    /// with their tokens in list order.
    pub async fn page_from<F, Fut>(
        &self,
        base: &str,
        path: &str,
        mut fetch: F,
    ) -> Result<serde_json::Value, ApiError>
    where
        F: FnMut(Option<String>, i64) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<(String, serde_json::Value)>, ApiError>>,
    {
        let mut out = Vec::new();
        let mut after = self.skip_token.clone();
        for _ in 0..MAX_SCAN_CHUNKS {
            let limit = self.max_results;
            let rows = fetch(after.clone(), limit as i64).await?;
            let exhausted = rows.len() < limit;
            for (token, item) in rows {
                after = Some(token);
                if self.keep(&item) {
                    out.push(odata::select(item, self.select.as_deref()));
                    if out.len() == self.max_results {
                        return Ok(self.page(base, path, out, after));
                    }
                }
            }
            if exhausted {
                return Ok(self.page(base, path, out, None));
            }
        }
        Ok(self.page(base, path, out, after))
    }

    /// `$select` applied to a single resource.
    pub fn shape(&self, item: serde_json::Value) -> serde_json::Value {
        odata::select(item, self.select.as_deref())
    }

    /// `{"value": [...], "odata.nextLink": ...}`. The link is absolute (from the Host header),
    /// carries the filter, the selection and the request's own api-version, and a token made of
    /// URL-safe characters.
    fn page(
        &self,
        base: &str,
        path: &str,
        items: Vec<serde_json::Value>,
        next: Option<String>,
    ) -> serde_json::Value {
        let mut body = serde_json::json!({ "value": items });
        if let Some(token) = next {
            let mut pairs: Vec<(&str, String)> = Vec::new();
            if let Some(v) = &self.api_version {
                pairs.push(("api-version", v.clone()));
            }
            pairs.push(("maxresults", self.max_results.to_string()));
            if let Some(f) = &self.filter_text {
                pairs.push(("$filter", f.clone()));
            }
            if let Some(s) = &self.select_text {
                pairs.push(("$select", s.clone()));
            }
            pairs.push(("$skiptoken", token));
            let query: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{k}={}", encode(v)))
                .collect();
            body["odata.nextLink"] = serde_json::json!(format!("{base}{path}?{}", query.join("&")));
        }
        body
    }
}

/// Percent-encodes all but `[A-Za-z0-9._~-]` (what the SDK's re-quoting leaves alone).
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"._~-".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `$select` of a single-resource GET.
pub struct Select(Option<Vec<String>>);

impl<S: Send + Sync> FromRequestParts<S> for Select {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let select = parts.uri.query().and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "$select")
                .map(|(_, v)| v.into_owned())
        });
        Ok(Select(odata::parse_select(select.as_deref())))
    }
}

impl Select {
    pub fn shape(&self, item: serde_json::Value) -> serde_json::Value {
        odata::select(item, self.0.as_deref())
    }
}

/// The conditional headers of a request (`If-Match`, `If-None-Match`, `If-Modified-Since`,
/// `If-Unmodified-Since`), checked against a resource's eTag and last modification.
pub struct Conditions {
    if_match: Option<String>,
    if_none_match: Option<String>,
    if_modified_since: Option<chrono::DateTime<chrono::Utc>>,
    if_unmodified_since: Option<chrono::DateTime<chrono::Utc>>,
}

impl<S: Send + Sync> FromRequestParts<S> for Conditions {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let text = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim().trim_matches('"').to_string())
        };
        let time = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| chrono::DateTime::parse_from_rfc2822(v).ok())
                .map(|t| t.with_timezone(&chrono::Utc))
        };
        Ok(Conditions {
            if_match: text("if-match"),
            if_none_match: text("if-none-match"),
            if_modified_since: time("if-modified-since"),
            if_unmodified_since: time("if-unmodified-since"),
        })
    }
}

impl Conditions {
    /// Whether the request has no conditional header (nothing to look up).
    pub fn is_empty(&self) -> bool {
        self.if_match.is_none()
            && self.if_none_match.is_none()
            && self.if_modified_since.is_none()
            && self.if_unmodified_since.is_none()
    }

    /// Ok to go on; else 412 (a write, or a failed If-Match) or 304 (a read of what the client has).
    pub fn check(
        &self,
        modified: chrono::DateTime<chrono::Utc>,
        read: bool,
    ) -> Result<(), ApiError> {
        let tag = etag(modified);
        // HTTP dates have whole seconds.
        let modified_s = modified.timestamp();
        let failed = |what: &str| {
            ApiError::new(
                axum::http::StatusCode::PRECONDITION_FAILED,
                "ConditionNotMet",
                format!(
                    "The condition specified using HTTP conditional header(s) is not met ({what})."
                ),
            )
        };
        let not_modified = || {
            ApiError::new(
                axum::http::StatusCode::NOT_MODIFIED,
                "NotModified",
                "The resource has not been modified.",
            )
        };
        if let Some(m) = &self.if_match {
            if m != "*" && *m != tag {
                return Err(failed("If-Match"));
            }
        }
        if let Some(t) = self.if_unmodified_since {
            if modified_s > t.timestamp() {
                return Err(failed("If-Unmodified-Since"));
            }
        }
        if let Some(m) = &self.if_none_match {
            if m == "*" || *m == tag {
                return Err(if read {
                    not_modified()
                } else {
                    failed("If-None-Match")
                });
            }
        }
        if let Some(t) = self.if_modified_since {
            if modified_s <= t.timestamp() {
                return Err(if read {
                    not_modified()
                } else {
                    failed("If-Modified-Since")
                });
            }
        }
        Ok(())
    }
}
