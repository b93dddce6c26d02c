//! `/batchpool/operator/hosts`: the Docker hosts of the installation, as `batchpool host` keeps
//! them, over HTTP. `GET` lists every host that was added or has nodes, with its nodes by state;
//! `POST` adds a host or changes one added before (201 or 200); `DELETE ?url=` removes an added
//! host, which then takes no new nodes (204). The leader's runtime takes a change within seconds.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::super::error::{ApiError, ApiResult};
use super::super::state::AppState;
use super::check_operator;
use crate::domain::host::{HostField, HostSpec};
use crate::store;

/// Every host added or holding nodes: its caps if it was added, and its nodes by state.
pub async fn list(State(app): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult<Json<Value>> {
    check_operator(&app, &headers).await?;
    let added = store::hosts::list(&app.db).await?;
    let mut nodes: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for c in store::metrics::node_counts(&app.db).await? {
        if c.host.is_empty() {
            continue; // not started on any host yet
        }
        let by_state = nodes.entry(c.host).or_default();
        let before = by_state.get(&c.state).and_then(Value::as_i64).unwrap_or(0);
        by_state.insert(c.state, json!(before + c.count));
    }
    let mut value: Vec<Value> = added
        .iter()
        .map(|h| {
            let tls = h.tls.as_ref().map(|d| d.to_string_lossy().into_owned());
            json!({
                "url": h.url, "added": true, "cpus": h.cpus, "memoryMiB": h.memory_mib,
                "tlsDir": tls, "nodes": nodes.remove(&h.url).unwrap_or_default(),
            })
        })
        .collect();
    // Hosts given with `serve --docker-host` (and `local`) are known by their nodes alone.
    value.extend(nodes.into_iter().map(|(url, by_state)| {
        json!({"url": url, "added": false, "cpus": null, "memoryMiB": null, "tlsDir": null, "nodes": by_state})
    }));
    Ok(Json(json!({ "value": value })))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddBody {
    url: Option<String>,
    cpus: Option<f64>,
    #[serde(rename = "memoryMiB")]
    memory_mib: Option<i64>,
    tls_dir: Option<String>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// Adds a host (201), or changes the caps and certificates of one added before (200).
pub async fn add(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<impl IntoResponse> {
    check_operator(&app, &headers).await?;
    let body: AddBody = super::super::json::parse(&body)?;
    super::only_known(&body.rest, "a host (url, cpus, memoryMiB, tlsDir)")?;
    let url = body.url.ok_or_else(|| ApiError::missing_property("url"))?;
    let tls = body.tls_dir.clone().filter(|d| !d.is_empty());
    let host = HostSpec::new(url.clone(), tls.map(Into::into), body.cpus, body.memory_mib)
        .map_err(|(field, reason)| {
            let (name, value) = match field {
                HostField::Url => ("url", url.clone()),
                HostField::Tls => ("tlsDir", body.tls_dir.clone().unwrap_or_default()),
                HostField::Cpus => ("cpus", body.cpus.unwrap_or_default().to_string()),
                HostField::Memory => ("memoryMiB", body.memory_mib.unwrap_or_default().to_string()),
            };
            ApiError::invalid_property(name, value, reason)
        })?;
    let known = store::hosts::list(&app.db)
        .await?
        .iter()
        .any(|h| h.url == host.url);
    store::hosts::add(&app.db, &host).await?;
    let status = if known {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(json!({ "url": host.url }))))
}

/// Removes an added host: it takes no new nodes, and its nodes stay until their pools let them
/// go. A host given with `serve --docker-host` is not the API's to remove.
pub async fn remove(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: Uri,
) -> ApiResult<StatusCode> {
    // Who asks is checked before what is asked is read.
    check_operator(&app, &headers).await?;
    let query = Query::<HashMap<String, String>>::try_from_uri(&uri)
        .map_err(|e| ApiError::invalid_query("url", uri.query().unwrap_or(""), e.body_text()))?;
    let Some(url) = query.0.get("url").filter(|u| !u.is_empty()).cloned() else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "MissingRequiredQueryParameter",
            "Give the host to remove as ?url=.",
        )
        .with("QueryParameterName", "url"));
    };
    if !store::hosts::remove(&app.db, &url).await? {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "HostNotFound",
            format!("No host {url:?} was added; hosts given with serve --docker-host are removed by restarting without them."),
        ));
    }
    Ok(StatusCode::NO_CONTENT)
}
