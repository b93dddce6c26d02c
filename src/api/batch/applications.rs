//! `GET /applications` and `GET /applications/{id}`: the account's application packages, as
//! Azure's data plane lists them. Versions are added with `batchpool account package`.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use crate::api::error::{ApiError, ApiResult};
use crate::api::Ctx;
use crate::store::{self, applications::ApplicationRow};

fn application_json(a: ApplicationRow) -> Value {
    json!({"id": a.id, "displayName": a.display_name.unwrap_or_else(|| a.id.clone()), "versions": a.versions})
}

pub async fn list(app: Ctx) -> ApiResult<Json<Value>> {
    let all = store::applications::list(&app.db, &app.account, None).await?;
    let value: Vec<Value> = all.into_iter().map(application_json).collect();
    Ok(Json(json!({ "value": value })))
}

pub async fn get(app: Ctx, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let found = store::applications::list(&app.db, &app.account, Some(&id)).await?;
    let a = found.into_iter().next().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "ApplicationNotFound",
            format!("The specified application {id:?} does not exist."),
        )
    })?;
    Ok(Json(application_json(a)))
}
