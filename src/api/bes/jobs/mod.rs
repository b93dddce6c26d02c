//! BES jobs: submit, start, status, cancel (DELETE), list. Authenticated with the service's key.

mod submit;

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde_json::{json, Value};

use super::check_version;
use super::error::{BesError, BesResult};
use super::services::authorize;
use crate::api::rfc3339;
use crate::api::state::AppState;
use crate::domain::bes::Phase;
use crate::store;
use crate::store::services::BesJobRow;
pub use submit::submit;

/// The job a request names, once its Bearer key and api-version pass.
async fn find(
    app: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
    (ns, svc, id): &(String, String, String),
) -> BesResult<BesJobRow> {
    let service = authorize(app, headers, ns, svc).await?;
    check_version(query)?;
    store::services::get_job(&app.db, service.pk, id)
        .await?
        .ok_or_else(|| {
            BesError::not_found("JobNotFound", format!("The job {id:?} does not exist."))
        })
}

pub fn status_json(j: &BesJobRow) -> Value {
    json!({
        "StatusCode": j.phase.status_code(),
        "Results": if j.phase == Phase::Finished { j.results.clone().unwrap_or(Value::Null) } else { Value::Null },
        "Details": j.details,
        "CreatedAt": rfc3339(j.creation_time),
        "StartTime": j.start_time.map(rfc3339),
        "EndTime": j.end_time.map(rfc3339),
    })
}

pub async fn start(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    Path(path): Path<(String, String, String)>,
) -> BesResult<StatusCode> {
    let job = find(&app, &headers, query.as_deref(), &path).await?;
    if !store::services::set_phase(&app.db, job.pk, &[Phase::NotStarted], Phase::Staging).await? {
        let now = store::services::get_job_by_pk(&app.db, job.pk)
            .await?
            .unwrap_or(job);
        return Err(BesError::new(
            StatusCode::BAD_REQUEST,
            "InvalidOperation",
            "CannotStartJob",
            format!(
                "The job cannot be started because it is in {} state.",
                now.phase.status_code()
            ),
        ));
    }
    app.wake_bes();
    Ok(StatusCode::OK)
}

pub async fn get(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    Path(path): Path<(String, String, String)>,
) -> BesResult<Json<Value>> {
    Ok(Json(status_json(
        &find(&app, &headers, query.as_deref(), &path).await?,
    )))
}

pub async fn list(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    Path((ns, svc)): Path<(String, String)>,
) -> BesResult<Json<Value>> {
    let service = authorize(&app, &headers, &ns, &svc).await?;
    check_version(query.as_deref())?;
    let jobs = store::services::list_jobs(&app.db, service.pk).await?;
    Ok(Json(Value::Array(
        jobs.iter()
            .map(|j| {
                let mut v = status_json(j);
                v["Id"] = json!(j.id);
                v["AzureBatchPoolId"] = json!(j.pool_id);
                v
            })
            .collect(),
    )))
}

/// DELETE: an unfinished job is cancelled (its Batch job, if it has one, goes with its running
/// task); a finished one stays as it is, so its status and results can still be read.
pub async fn cancel(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    Path(path): Path<(String, String, String)>,
) -> BesResult<StatusCode> {
    let job = find(&app, &headers, query.as_deref(), &path).await?;
    let mut tx = app.db.begin().await?;
    crate::ops::bes::cancel(&mut tx, &job).await?;
    tx.commit().await?;
    app.wake_dispatcher();
    app.wake_bes();
    Ok(StatusCode::OK)
}
