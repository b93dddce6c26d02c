//! Account-wide listings: node counts per pool, the images this server can run, and pool usage.

use std::collections::{BTreeMap, HashMap};

use axum::extract::Query;
use axum::Json;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::api::error::{ApiError, ApiResult};
use crate::api::{rfc3339, BaseUrl, Ctx, ListQuery};
use crate::domain::metering::compute_hours;
use crate::domain::pool::NodeState;
use crate::store;

/// `GET /nodecounts`: each pool's nodes by state, in Azure's BatchPoolNodeCounts shape.
pub async fn node_counts(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let list = ListQuery::from_query(&query, &["poolId"])?;
    let mut out = Vec::new();
    for pool in store::pools::list(&app.db, &app.account).await? {
        let nodes = store::nodes::list_for_pool(&app.db, pool.pk).await?;
        let (dedicated, low_priority): (Vec<_>, Vec<_>) =
            nodes.iter().partition(|n| n.is_dedicated);
        out.push((
            pool.id.clone(),
            json!({"poolId": pool.id, "dedicated": counts_by_state(&dedicated), "lowPriority": counts_by_state(&low_priority)}),
        ));
    }
    Ok(Json(list.page_of(&base, "/nodecounts", out)))
}

/// Azure's NodeCounts: nodes by state.
fn counts_by_state(nodes: &[&store::nodes::NodeRow]) -> Value {
    let count = |state: NodeState| nodes.iter().filter(|n| n.state == state).count();
    json!({
        "creating": count(NodeState::Creating), "idle": count(NodeState::Idle), "offline": count(NodeState::Offline),
        "preempted": count(NodeState::Preempted), "rebooting": count(NodeState::Rebooting), "reimaging": count(NodeState::Reimaging), "running": count(NodeState::Running),
        "starting": count(NodeState::Starting), "startTaskFailed": count(NodeState::StartTaskFailed),
        "leavingPool": count(NodeState::LeavingPool), "unknown": count(NodeState::Unknown),
        "unusable": count(NodeState::Unusable), "waitingForStartTask": count(NodeState::WaitingForStartTask),
        "deallocated": count(NodeState::Deallocated), "deallocating": count(NodeState::Deallocating), "upgradingOS": 0, "total": nodes.len(),
    })
}

/// The images a pool can name here: the image map's and the default.
fn images(app: &Ctx) -> Vec<(Value, String)> {
    let mut images: BTreeMap<String, String> = app.settings.image_map.clone().into_iter().collect();
    images
        .entry("batchpool/node/default".into())
        .or_insert_with(|| app.settings.default_image.clone());
    images
        .into_iter()
        .map(|(key, image)| {
            let mut parts = key.splitn(3, '/');
            let reference = json!({
                "publisher": parts.next().unwrap_or_default(),
                "offer": parts.next().unwrap_or_default(),
                "sku": parts.next().unwrap_or_default(),
                "version": "latest",
            });
            (reference, image)
        })
        .collect()
}

const NODE_AGENT_SKU: &str = "batch.node.batchpool";

/// `GET /supportedimages`.
pub async fn supported_images(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let list = ListQuery::from_query(&query, &["osType", "verificationType", "nodeAgentSKUId"])?;
    let items = images(&app).into_iter().enumerate().map(|(i, (reference, image))| {
        (i.to_string(), json!({
            "nodeAgentSKUId": NODE_AGENT_SKU, "imageReference": reference, "osType": "linux",
            "verificationType": "verified", "capabilities": [format!("DockerImage:{image}")],
        }))
    });
    Ok(Json(list.page_of(&base, "/supportedimages", items)))
}

/// `GET /nodeagentskus` (older API versions).
pub async fn node_agent_skus(app: Ctx) -> ApiResult<Json<Value>> {
    let references: Vec<Value> = images(&app).into_iter().map(|(r, _)| r).collect();
    Ok(Json(
        json!({"value": [{"id": NODE_AGENT_SKU, "verifiedImageReferences": references, "osType": "linux"}]}),
    ))
}

fn time(name: &str, value: Option<&String>) -> ApiResult<Option<DateTime<Utc>>> {
    value
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| ApiError::invalid_query(name, v, e.to_string()))
        })
        .transpose()
}

/// `GET /poolusagemetrics?startTime=&endtime=`: core hours per pool over the range (default:
/// the last 24 hours), from the same usage records as /billing.
pub async fn pool_usage_metrics(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let list = ListQuery::from_query(&query, &["poolId"])?;
    let now = Utc::now();
    let end = time(
        "endtime",
        query.get("endtime").or_else(|| query.get("endTime")),
    )?
    .unwrap_or(now);
    let start = time(
        "startTime",
        query.get("startTime").or_else(|| query.get("starttime")),
    )?
    .unwrap_or(end - chrono::Duration::hours(24));
    if start >= end {
        return Err(ApiError::invalid_query(
            "startTime",
            &rfc3339(start),
            "must be before endtime",
        ));
    }
    let rows = store::usage::in_range(&app.db, &app.account, None, start, end).await?;
    let mut by_pool: BTreeMap<(String, String), f64> = BTreeMap::new();
    for r in &rows {
        *by_pool
            .entry((r.pool_id.clone(), r.vm_size.clone()))
            .or_default() += r.vcpus * compute_hours(&[r.interval()], start, end, now);
    }
    let items = by_pool.into_iter().map(|((pool_id, vm_size), core_hours)| {
        (format!("{pool_id}/{vm_size}"), json!({"poolId": pool_id, "startTime": rfc3339(start), "endTime": rfc3339(end), "vmSize": vm_size, "totalCoreHours": core_hours}))
    });
    Ok(Json(list.page_of(&base, "/poolusagemetrics", items)))
}
