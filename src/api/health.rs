//! `/health` (liveness: the process answers) and `/health/ready` (readiness: it can serve, for a
//! load balancer or an orchestrator to route by). Neither needs a signature.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::api::state::AppState;

/// A probe that takes longer than this counts as failed: readiness must answer while the
/// database hangs, not after the pool's 30 s acquire timeout.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub async fn live() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// 200 when the database and the runtime answer, 503 while either does not; the body says which,
/// and whether this server leads the scheduler (a follower is ready too: it serves the API).
pub async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let database = async {
        crate::store::ping(&state.db)
            .await
            .map_err(|e| tracing::warn!(error = %e, "readiness: the database does not answer"))
            .is_ok()
    };
    let runtime = state.probes.runtime.reachable();
    let (database, runtime) = tokio::join!(within_timeout(database), within_timeout(runtime));
    let ready = database && runtime;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({
        "status": if ready { "ready" } else { "unavailable" },
        "databaseReachable": database,
        "runtime": state.probes.runtime.name(),
        "runtimeReachable": runtime,
        "leadsScheduler": state.probes.leads(),
    });
    (status, Json(body)).into_response()
}

async fn within_timeout(probe: impl std::future::Future<Output = bool>) -> bool {
    tokio::time::timeout(PROBE_TIMEOUT, probe)
        .await
        .unwrap_or(false)
}
