//! `POST /pools/{pool}/nodes/{node}/uploadbatchservicelogs`: what a support person asks for
//! when a node misbehaves, uploaded to a container the caller names with a SAS URL. Here that is
//! the node's agent log (its container's output on Docker, its log file on `local`) between
//! `startTime` and `endTime`, and the server's record of the node (its state, errors and start
//! task) as JSON.

use axum::extract::Path;
use axum::Json;
use chrono::{DateTime, Utc};
use object_store::{ObjectStoreExt, PutPayload};
use serde_json::{json, Value};

use super::nodes::{find_node, node_json};
use super::pools::find;
use crate::api::error::{ApiError, ApiResult};
use crate::api::json::AzureJson;
use crate::api::{BaseUrl, Ctx};
use crate::storage::{self, Container};

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UploadLogs {
    container_url: Option<String>,
    start_time: Option<DateTime<Utc>>,
    end_time: Option<DateTime<Utc>>,
    identity_reference: Option<Value>,
}

pub async fn upload(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path((pool_id, node_id)): Path<(String, String)>,
    AzureJson(body): AzureJson<UploadLogs>,
) -> ApiResult<Json<Value>> {
    let url = body
        .container_url
        .ok_or_else(|| ApiError::missing_property("containerUrl"))?;
    let since = body
        .start_time
        .ok_or_else(|| ApiError::missing_property("startTime"))?;
    if body
        .identity_reference
        .as_ref()
        .is_some_and(|v| !v.is_null())
    {
        return Err(ApiError::invalid_property(
            "identityReference",
            "",
            "not supported by this server: managed identities; give a containerUrl with a SAS that allows writing",
        ));
    }
    let pool = find(&app, &pool_id).await?;
    let node = find_node(&app, &pool, &node_id).await?;
    let bad_url =
        |why: String| ApiError::invalid_property("containerUrl", storage::without_query(&url), why);
    storage::check_url(&url, app.settings.allow_local_urls)
        .await
        .map_err(bad_url)?;
    let container = Container::open(&url).map_err(|e| bad_url(e.message))?;
    let until = body.end_time.map_or(0, |t| t.timestamp());
    let log = app
        .runtime
        .agent_log(&node.id, since.timestamp(), until)
        .await
        .unwrap_or_else(|e| format!("the agent's log could not be read: {e:#}\n").into_bytes());
    let record = json!({"node": node_json(&pool, &node, &base), "uploadedAt": crate::api::rfc3339(Utc::now())});
    let dir = format!("{}/{}/{}", pool.id, node.id, uuid::Uuid::new_v4().simple());
    let files = [
        ("batchpool-agent.log", log),
        (
            "batchpool-node.json",
            serde_json::to_vec_pretty(&record).expect("JSON"),
        ),
    ];
    for (name, bytes) in &files {
        let blob = container
            .blob(&format!("{dir}/{name}"))
            .map_err(|e| bad_url(e.message))?;
        blob.store
            .put(&blob.path, PutPayload::from(bytes.clone()))
            .await
            .map_err(|e| bad_url(format!("the upload of {name} failed: {e}")))?;
    }
    Ok(Json(json!({
        "virtualDirectoryName": format!("{dir}/"),
        "numberOfFilesUploaded": files.len(),
    })))
}
