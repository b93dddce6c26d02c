//! What every request passes before its handler: a URI without NUL characters, a body read
//! whole within a deadline, and a net that turns a handler's panic into a 500 in the error shape.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::bes::error::BesError;
use super::error::ApiError;
use crate::api::state::AppState;

/// The largest request body any route takes.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Whether a path belongs to the Azure ML side (BES, web services, Pool Service), whose errors
/// have their own shape.
fn is_ml(path: &str) -> bool {
    ["/subscriptions/", "/workspaces/", "/poolservice"]
        .iter()
        .any(|p| path.starts_with(p))
}

/// 400 for a `%00` in the path or the query: ids and query values end up in PostgreSQL text,
/// which cannot hold a NUL, and no valid name has one.
pub async fn refuse_nul_in_uri(req: Request, next: Next) -> Response {
    let uri = req.uri();
    let has_nul = |text: &str| text.as_bytes().windows(3).any(|w| w == b"%00");
    let path = uri.path();
    if let Some(segment) = path.split('/').find(|s| has_nul(s)) {
        let reason = format!("the path segment {segment:?} contains a NUL character (%00)");
        if is_ml(path) {
            return BesError::bad(
                "InvalidUri",
                format!("The request URI is invalid: {reason}."),
            )
            .target(segment)
            .into_response();
        }
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "InvalidUri",
            format!("The request URI is invalid: {reason}."),
        )
        .with("UriSegment", segment)
        .with("Reason", reason)
        .into_response();
    }
    if let Some((name, value)) = uri
        .query()
        .and_then(|q| q.split('&').find(|p| has_nul(p)))
        .map(|p| p.split_once('=').unwrap_or((p, "")))
    {
        let reason = "contains a NUL character (%00)";
        if is_ml(path) {
            return BesError::bad(
                "InvalidUri",
                format!("The query parameter {name} is invalid: it {reason}."),
            )
            .target(name)
            .into_response();
        }
        return ApiError::invalid_query(name, value, format!("the value {reason}")).into_response();
    }
    next.run(req).await
}

/// Reads the request body whole before the handler runs, and gives up after the deadline: a
/// client that declares a large body and sends it slowly (or never) gets 408 and is
/// disconnected instead of holding a connection and a task. A declared length over the limit
/// is refused before anything is read.
pub async fn read_body_in_time(
    State(app): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    // A package upload streams its own body, up to its own limit (api::batch::applications).
    if req.method() == axum::http::Method::PUT
        && req.uri().path().starts_with("/batchpool/applications/")
    {
        return next.run(req).await;
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let ml = is_ml(req.uri().path());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return too_large(ml);
    }
    let (parts, body) = req.into_parts();
    let deadline = app.settings.body_read_timeout;
    let read = Limited::new(body, MAX_BODY_BYTES).collect();
    let bytes = match tokio::time::timeout(deadline, read).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) => {
            // Over the limit (a chunked body) or the client went away.
            if e.is::<LengthLimitError>() {
                return too_large(ml);
            }
            return closing(if ml {
                BesError::bad(
                    "RequestBodyInvalid",
                    format!("The request body could not be read: {e}"),
                )
                .into_response()
            } else {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "InvalidRequestBody",
                    format!("The request body could not be read: {e}"),
                )
                .into_response()
            });
        }
        Err(_) => return closing(timed_out(deadline, ml)),
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

pub(super) fn too_large(ml: bool) -> Response {
    let message =
        format!("The request body is too large; at most {MAX_BODY_BYTES} bytes are accepted.");
    closing(if ml {
        BesError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "MemoryQuotaViolation",
            "RequestBodyTooLarge",
            message,
        )
        .into_response()
    } else {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestBodyTooLarge",
            message,
        )
        .into_response()
    })
}

fn timed_out(deadline: Duration, ml: bool) -> Response {
    let message = format!(
        "The request body was not received within {} s.",
        deadline.as_secs_f64()
    );
    if ml {
        BesError::new(
            StatusCode::REQUEST_TIMEOUT,
            "RequestTimeout",
            "RequestTimeout",
            message,
        )
        .into_response()
    } else {
        ApiError::new(StatusCode::REQUEST_TIMEOUT, "RequestTimeout", message).into_response()
    }
}

/// The rest of an unread body is not worth waiting for: the connection closes after this answer.
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A handler that panics answers 500 in the error shape, logged with the request id (this layer
/// runs inside the request-id layer), instead of dropping the connection.
pub async fn catch_panic(req: Request, next: Next) -> Response {
    match AssertUnwindSafe(next.run(req)).catch_unwind().await {
        Ok(response) => response,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            ApiError::internal(format_args!("handler panicked: {what}")).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::routing::get;
    use axum::Router;

    use crate::api::{request_id, serve};

    /// A panicking handler answers 500 in Azure's error shape, with the request id, and the
    /// server goes on serving.
    #[tokio::test]
    async fn a_panic_is_a_500_in_the_error_shape() {
        let router = Router::new()
            .route(
                "/boom",
                get(|| async {
                    if true {
                        panic!("deliberately");
                    }
                    "unreachable"
                }),
            )
            .route("/fine", get(|| async { "fine" }))
            .layer(axum::middleware::from_fn(super::catch_panic))
            .layer(axum::middleware::from_fn(request_id::layer));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let limits = serve::Limits {
            header_read_timeout: Duration::from_secs(5),
            max_connections: 4,
        };
        tokio::spawn(async move {
            serve::serve(listener, router, &limits, std::future::pending()).await
        });
        crate::install_tls();
        let http = reqwest::Client::new();
        let response = http.get(format!("{base}/boom")).send().await.unwrap();
        assert_eq!(response.status(), 500);
        let id = response.headers()["request-id"]
            .to_str()
            .unwrap()
            .to_string();
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["code"], "InternalError", "{body}");
        let message = body["message"]["value"].as_str().unwrap();
        assert!(message.contains(&format!("RequestId:{id}")), "{message}");
        assert!(
            !message.contains("deliberately"),
            "nothing private: {message}"
        );
        let after = http.get(format!("{base}/fine")).send().await.unwrap();
        assert_eq!(after.text().await.unwrap(), "fine");
    }
}
