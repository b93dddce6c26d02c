//! `GET /applications` and `GET /applications/{id}`: the account's application packages, as
//! Azure's data plane lists them. Versions are added with `batchpool account package`.

use axum::extract::{Path, Query};
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

/// The largest package the upload route takes.
pub const MAX_PACKAGE_BYTES: u64 = 4 << 30;

/// `PUT /batchpool/applications/{id}/versions/{version}` (this server's own route; Azure adds
/// versions on its management plane): the body is the zip, streamed to the data directory.
/// `?default=true` makes it the default version, `?displayName=` names the application. The
/// request guard leaves this body to this handler: it may be large, so it is written as it comes,
/// up to [`MAX_PACKAGE_BYTES`], and a client that sends nothing for the read timeout is dropped.
pub async fn put_version(
    app: Ctx,
    Path((id, version)): Path<(String, String)>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    body: axum::body::Body,
) -> ApiResult<(StatusCode, Json<Value>)> {
    crate::domain::ids::check_id(&id)
        .map_err(|why| ApiError::invalid_property("applicationId", &id, why))?;
    crate::domain::files::check_version(&version)
        .map_err(|why| ApiError::invalid_property("version", &version, why))?;
    let id = crate::ops::applications::canonical_id(&app.db, &app.account, &id).await?;
    let target = app.layout.package_file(&app.account, &id, &version);
    let size = receive(&app, body, &target).await?;
    let make_default = query.get("default").is_some_and(|v| v == "true");
    let display_name = query.get("displayName").map(String::as_str);
    crate::ops::applications::record_package(
        &app.db,
        &app.account,
        &id,
        &version,
        size as i64,
        make_default,
        display_name,
    )
    .await?;
    let found = store::applications::list(&app.db, &app.account, Some(&id)).await?;
    let a = found
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::internal("application vanished"))?;
    Ok((StatusCode::CREATED, Json(application_json(a))))
}

/// Streams the body into `target` (written aside, renamed when whole); its size.
async fn receive(app: &Ctx, body: axum::body::Body, target: &std::path::Path) -> ApiResult<u64> {
    use futures_util::StreamExt;
    use tokio::io::AsyncWriteExt;
    let dir = target.parent().expect("a package file has a directory");
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(ApiError::internal)?;
    let partial = dir.join(format!(".{}.partial", uuid::Uuid::new_v4().simple()));
    let result = async {
        let mut file = tokio::fs::File::create(&partial)
            .await
            .map_err(ApiError::internal)?;
        let mut stream = body.into_data_stream();
        let (mut size, mut head) = (0u64, Vec::<u8>::new());
        let idle = app.settings.body_read_timeout;
        loop {
            let chunk = match tokio::time::timeout(idle, stream.next()).await {
                Err(_) => {
                    return Err(ApiError::new(
                        StatusCode::REQUEST_TIMEOUT,
                        "RequestBodyTimeout",
                        format!("No part of the package arrived for {} s.", idle.as_secs()),
                    ))
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    return Err(ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "InvalidRequestBody",
                        format!("The package could not be read: {e}"),
                    ))
                }
                Ok(Some(Ok(chunk))) => chunk,
            };
            size += chunk.len() as u64;
            if size > MAX_PACKAGE_BYTES {
                return Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "RequestBodyTooLarge",
                    format!("A package may be at most {MAX_PACKAGE_BYTES} bytes."),
                ));
            }
            if head.len() < 4 {
                head.extend(chunk.iter().take(4 - head.len()));
            }
            file.write_all(&chunk).await.map_err(ApiError::internal)?;
        }
        if head.as_slice() != b"PK\x03\x04" {
            return Err(ApiError::invalid_property(
                "package",
                "",
                "the body is not a zip file",
            ));
        }
        file.flush().await.map_err(ApiError::internal)?;
        tokio::fs::rename(&partial, target)
            .await
            .map_err(ApiError::internal)?;
        Ok(size)
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&partial).await;
    }
    result
}
