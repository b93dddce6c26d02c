//! Conditional requests: `If-Match`, `If-None-Match`, `If-Modified-Since` and
//! `If-Unmodified-Since`, as Azure Batch answers them (412 for a write, 304 for a read).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::error::ApiError;
use super::etag;

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
