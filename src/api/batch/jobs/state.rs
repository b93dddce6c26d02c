//! `/jobs/{job}/terminate`, `disable` and `enable`: a job's state changes by request.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::{accepted, check_write, lock_open_job};
use crate::api::error::{ApiError, ApiResult};
use crate::api::json::AzureJson;
use crate::api::{Conditions, Ctx};
use crate::domain::job::{DisableTasks, JobState};
use crate::ops;
use crate::store;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TerminateBody {
    terminate_reason: Option<String>,
}

pub async fn terminate(
    app: Ctx,
    Path(job_id): Path<String>,
    conditions: Conditions,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    check_write(&app, &job_id, &conditions).await?;
    // The SDKs send no body, an empty one, or {"terminateReason": ...}.
    let body: TerminateBody = if body.is_empty() {
        TerminateBody::default()
    } else {
        crate::api::json::parse(&body)?
    };
    let mut tx = app.db.begin().await?;
    let job = lock_open_job(&mut tx, &app, &job_id).await?;
    ops::jobs::terminate_job(
        &mut tx,
        job.pk,
        body.terminate_reason.as_deref().unwrap_or("UserTerminate"),
    )
    .await?;
    tx.commit().await?;
    app.wake_dispatcher();
    accepted(&app, &job_id).await
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisableBody {
    disable_tasks: Option<String>,
}

pub async fn disable(
    app: Ctx,
    Path(job_id): Path<String>,
    conditions: Conditions,
    AzureJson(body): AzureJson<DisableBody>,
) -> ApiResult<Response> {
    check_write(&app, &job_id, &conditions).await?;
    let mode = body
        .disable_tasks
        .ok_or_else(|| ApiError::missing_property("disableTasks"))?;
    let mode = DisableTasks::parse(&mode).ok_or_else(|| {
        ApiError::invalid_property("disableTasks", &mode, "must be requeue, terminate or wait")
    })?;
    let mut tx = app.db.begin().await?;
    let job = lock_open_job(&mut tx, &app, &job_id).await?;
    if job.state != JobState::Active {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "JobNotActive",
            format!(
                "The job {job_id:?} is {}; only an active job can be disabled.",
                job.state
            ),
        ));
    }
    ops::jobs::disable_job(&mut tx, job.pk, mode).await?;
    tx.commit().await?;
    app.wake_dispatcher();
    accepted(&app, &job_id).await
}

pub async fn enable(
    app: Ctx,
    Path(job_id): Path<String>,
    conditions: Conditions,
) -> ApiResult<Response> {
    check_write(&app, &job_id, &conditions).await?;
    let mut tx = app.db.begin().await?;
    let job = lock_open_job(&mut tx, &app, &job_id).await?;
    if job.state != JobState::Disabled {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "JobNotDisabled",
            format!(
                "The job {job_id:?} is {}; only a disabled job can be enabled.",
                job.state
            ),
        ));
    }
    store::jobs::set_state(&mut *tx, job.pk, JobState::Active).await?;
    tx.commit().await?;
    app.wake_dispatcher();
    accepted(&app, &job_id).await
}
