//! Azure ML's error body, for the BES, web service and Pool Service APIs:
//! `{"error": {"code": <class>, "message": <class message>, "details": [{"code", "target", "message"}]}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug)]
pub struct BesError {
    pub status: StatusCode,
    /// The error class (BadArgument, Unauthorized, NotFound, ...).
    pub class: &'static str,
    /// The detail code (DuplicateInputInBatchCall, ...).
    pub code: &'static str,
    pub message: String,
    pub target: Option<String>,
}

pub type BesResult<T> = Result<T, BesError>;

impl BesError {
    pub fn new(
        status: StatusCode,
        class: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            class,
            code,
            message: message.into(),
            target: None,
        }
    }

    /// 400 BadArgument with a detail code.
    pub fn bad(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadArgument", code, message)
    }

    pub fn target(mut self, target: impl Into<String>) -> Self {
        self.target = Some(target.into());
        self
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NotFound", code, message)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "ScoreRequestUnauthorized",
            "Invalid credentials provided.",
        )
    }

    fn class_message(&self) -> &'static str {
        match self.class {
            "BadArgument" => "Invalid argument provided.",
            "InvalidOperation" => "The operation is not valid in the current state.",
            "Unauthorized" => "Unauthorized access.",
            "NotFound" => "The requested resource was not found.",
            "Conflict" => "The request conflicts with the current state.",
            "MemoryQuotaViolation" => "The request is too large.",
            "RequestTimeout" => "The request timed out.",
            "ServiceUnavailable" => "The service is temporarily unavailable.",
            _ => "The server encountered an internal error.",
        }
    }

    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "InternalError",
            "The server encountered an internal error. Please retry the request.",
        )
    }
}

impl From<sqlx::Error> for BesError {
    fn from(e: sqlx::Error) -> Self {
        if crate::store::unavailable(&e) {
            tracing::warn!(error = %e, "the database is unavailable");
            return Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                "ServiceUnavailable",
                "The service is temporarily unavailable. Please retry the request.",
            );
        }
        Self::internal(format_args!("database: {e}"))
    }
}

impl From<anyhow::Error> for BesError {
    fn from(e: anyhow::Error) -> Self {
        Self::internal(format_args!("{e:#}"))
    }
}

impl From<crate::storage::BlobError> for BesError {
    fn from(e: crate::storage::BlobError) -> Self {
        Self::bad(e.code, e.message)
    }
}

impl IntoResponse for BesError {
    fn into_response(self) -> Response {
        let mut detail = json!({"code": self.code, "message": self.message});
        if let Some(target) = &self.target {
            detail["target"] = json!(target);
        }
        if self.status.is_client_error() {
            tracing::info!(code = self.code, message = %self.message, "request refused");
        }
        let body = json!({"error": {
            "code": self.class,
            "message": self.class_message(),
            "details": [detail],
        }});
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert("Retry-After", crate::api::error::RETRY_AFTER_SECS.into());
        }
        response
    }
}
