//! Every request gets an id: in its tracing span, in the `request-id` response header and in
//! the error body. `client-request-id` is echoed back when the client sends one.

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

tokio::task_local! {
    static REQUEST_ID: String;
}

/// The id of the request being served on this task, if any.
pub fn current() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

pub async fn layer(req: Request, next: Next) -> Response {
    let id = uuid::Uuid::new_v4().to_string();
    let client_id = req.headers().get("client-request-id").cloned();
    let span =
        tracing::info_span!("request", id = %id, method = %req.method(), path = %req.uri().path());
    let started = std::time::Instant::now();
    let mut response = REQUEST_ID
        .scope(id.clone(), async move {
            let response = next.run(req).await;
            tracing::info!(
                status = response.status().as_u16(),
                ms = started.elapsed().as_millis() as u64,
                "served"
            );
            response
        })
        .instrument(span)
        .await;
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&id) {
        headers.insert("request-id", value);
    }
    if let Some(client_id) = client_id {
        headers.insert("client-request-id", client_id);
    }
    headers.insert("DataServiceVersion", HeaderValue::from_static("3.0"));
    response
}
