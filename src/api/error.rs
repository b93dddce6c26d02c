//! One error type at the HTTP edge, rendered in Azure Batch's error body:
//! `{"odata.metadata", "code", "message": {"lang", "value"}, "values": [{"key", "value"}]}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::request_id;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub values: Vec<(String, String)>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            values: Vec::new(),
        }
    }

    /// The same error, with `prefix` before the property it names (a nested body's fields).
    pub fn prefixed(mut self, prefix: &str) -> Self {
        for (key, value) in &mut self.values {
            if key == "PropertyName" {
                *value = format!("{prefix}{value}");
            }
        }
        self
    }

    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.values.push((key.to_string(), value.into()));
        self
    }

    /// 400: a property has a value the service cannot accept.
    pub fn invalid_property(
        name: &str,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        let reason = reason.into();
        Self::new(
            StatusCode::BAD_REQUEST,
            "InvalidPropertyValue",
            format!("The value provided for {name} is invalid: {reason}"),
        )
        .with("PropertyName", name)
        .with("PropertyValue", value)
        .with("Reason", reason)
    }

    /// 400: a required property is absent.
    pub fn missing_property(name: &str) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "MissingRequiredProperty",
            format!("The property {name} is required but was not given."),
        )
        .with("PropertyName", name)
    }

    pub fn invalid_query(name: &str, value: &str, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        Self::new(
            StatusCode::BAD_REQUEST,
            "InvalidQueryParameterValue",
            format!("The value for query parameter {name} is invalid: {reason}"),
        )
        .with("QueryParameterName", name)
        .with("QueryParameterValue", value)
        .with("Reason", reason)
    }

    pub fn pool_not_found(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "PoolNotFound",
            format!("The specified pool {id:?} does not exist."),
        )
    }

    pub fn job_not_found(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "JobNotFound",
            format!("The specified job {id:?} does not exist."),
        )
    }

    /// 500: logged with its cause; the client learns nothing private.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "The server encountered an internal error. Please retry the request.",
        )
    }
}

/// How long a client is told to wait before it retries a 503.
pub const RETRY_AFTER_SECS: u64 = 2;

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        if crate::store::unavailable(&e) {
            tracing::warn!(error = %e, "the database is unavailable");
            return Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServerBusy",
                "The server is currently unable to receive requests. Please retry your request.",
            );
        }
        Self::internal(format_args!("database: {e}"))
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> Self {
        Self::internal(format_args!("{e:#}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status == StatusCode::NOT_MODIFIED {
            return self.status.into_response();
        }
        let request_id = request_id::current().unwrap_or_default();
        let time = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let mut body = json!({
            "odata.metadata": "batchpool/$metadata#Microsoft.Azure.Batch.Protocol.Entities.Container.errors/@Element",
            "code": self.code,
            "message": {"lang": "en-US", "value": format!("{}\nRequestId:{request_id}\nTime:{time}", self.message)},
        });
        if !self.values.is_empty() {
            body["values"] = self
                .values
                .iter()
                .map(|(k, v)| json!({"key": k, "value": v}))
                .collect();
        }
        if self.status.is_client_error() {
            tracing::info!(code = self.code, message = %self.message, "request refused");
        }
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert("Retry-After", RETRY_AFTER_SECS.into());
        }
        response
    }
}
