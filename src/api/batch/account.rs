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

/// The marketplace images Azure Batch lists for Linux pools, with the node agent SKU Azure gives
/// each: here each runs `--marketplace-image`, unless the image map names it.
const MARKETPLACE: &[(&str, &str)] = &[
    ("almalinux/almalinux-x86_64/8-gen2", "batch.node.el 8"),
    ("almalinux/almalinux-x86_64/9-gen2", "batch.node.el 9"),
    (
        "canonical/0001-com-ubuntu-server-focal/20_04-lts",
        "batch.node.ubuntu 20.04",
    ),
    (
        "canonical/0001-com-ubuntu-server-jammy/22_04-lts",
        "batch.node.ubuntu 22.04",
    ),
    (
        "canonical/ubuntu-24_04-lts/server",
        "batch.node.ubuntu 24.04",
    ),
    ("debian/debian-11/11", "batch.node.debian 11"),
    ("debian/debian-12/12", "batch.node.debian 12"),
    (
        "microsoft-azure-batch/ubuntu-server-container/20-04-lts",
        "batch.node.ubuntu 20.04",
    ),
    ("microsoft-dsvm/ubuntu-hpc/2204", "batch.node.ubuntu 22.04"),
];

const NODE_AGENT_SKU: &str = "batch.node.batchpool";

/// One image a pool can name here.
struct Listed {
    reference: Value,
    node_agent_sku: &'static str,
    /// The Docker image its nodes run.
    image: String,
}

/// The images a pool can name here: the default first, then the marketplace images Azure lists
/// and the image map's entries, by name (the map's image where it names one of Azure's).
fn images(app: &Ctx) -> Vec<Listed> {
    let settings = &app.settings;
    let mut named: BTreeMap<String, (&'static str, String)> = MARKETPLACE
        .iter()
        .map(|(key, sku)| (key.to_string(), (*sku, settings.marketplace_image.clone())))
        .collect();
    for (key, image) in &settings.image_map {
        named
            .entry(key.clone())
            .or_insert((NODE_AGENT_SKU, String::new()))
            .1 = image.clone();
    }
    let default = (
        "batchpool/node/default".to_string(),
        (NODE_AGENT_SKU, settings.default_image.clone()),
    );
    std::iter::once(default)
        .chain(named)
        .map(|(key, (node_agent_sku, image))| {
            let mut parts = key.splitn(3, '/');
            let reference = json!({
                "publisher": parts.next().unwrap_or_default(),
                "offer": parts.next().unwrap_or_default(),
                "sku": parts.next().unwrap_or_default(),
                "version": "latest",
            });
            Listed {
                reference,
                node_agent_sku,
                image,
            }
        })
        .collect()
}

/// `GET /supportedimages`.
pub async fn supported_images(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let list = ListQuery::from_query(&query, &["osType", "verificationType", "nodeAgentSKUId"])?;
    let items = images(&app).into_iter().enumerate().map(|(i, listed)| {
        (i.to_string(), json!({
            "nodeAgentSKUId": listed.node_agent_sku, "imageReference": listed.reference, "osType": "linux",
            "verificationType": "verified", "capabilities": [format!("DockerImage:{}", listed.image)],
        }))
    });
    Ok(Json(list.page_of(&base, "/supportedimages", items)))
}

/// `GET /nodeagentskus` (older API versions): the same images, by node agent SKU.
pub async fn node_agent_skus(app: Ctx) -> ApiResult<Json<Value>> {
    let mut skus: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for listed in images(&app) {
        skus.entry(listed.node_agent_sku)
            .or_default()
            .push(listed.reference);
    }
    let value: Vec<Value> = skus
        .into_iter()
        .map(|(id, references)| json!({"id": id, "verifiedImageReferences": references, "osType": "linux"}))
        .collect();
    Ok(Json(json!({ "value": value })))
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
