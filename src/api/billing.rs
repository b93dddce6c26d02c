//! `/billing`: compute hours (node-hours) per pool over a time range.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::Query;
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::rfc3339;
use crate::api::Ctx;
use crate::app::AppState;
use crate::domain::metering::compute_hours;
use crate::store;

pub fn router() -> Router<Arc<AppState>> {
    Router::new().route("/pools", get(pool_hours))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Range {
    start_time: Option<String>,
    end_time: Option<String>,
    pool_id: Option<String>,
}

fn time(name: &str, value: Option<&str>) -> ApiResult<Option<DateTime<Utc>>> {
    value
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| {
                    ApiError::invalid_query(
                        name,
                        v,
                        format!("not an RFC 3339 time ({e}), e.g. 2026-01-01T00:00:00Z"),
                    )
                })
        })
        .transpose()
}

/// Compute hours of each pool (of this account) in `[startTime, endTime)`: every node counts
/// from provisioned (container started) to removed, whether or not tasks ran. `endTime` defaults to now, `startTime` to
/// 24 hours before `endTime`.
pub async fn pool_hours(app: Ctx, Query(range): Query<Range>) -> ApiResult<Json<Value>> {
    let now = Utc::now();
    let end = time("endTime", range.end_time.as_deref())?.unwrap_or(now);
    let start = time("startTime", range.start_time.as_deref())?
        .unwrap_or(end - chrono::Duration::hours(24));
    if start >= end {
        return Err(ApiError::invalid_query(
            "startTime",
            &rfc3339(start),
            "must be before endTime",
        ));
    }
    let rows =
        store::usage::in_range(&app.db, &app.account, range.pool_id.as_deref(), start, end).await?;
    let mut by_pool: BTreeMap<&str, Vec<&store::usage::PoolUsageRow>> = BTreeMap::new();
    for row in &rows {
        by_pool.entry(&row.pool_id).or_default().push(row);
    }
    let mut total = 0.0;
    let pools: Vec<Value> = by_pool
        .into_iter()
        .map(|(pool_id, rows)| {
            let intervals: Vec<_> = rows.iter().map(|r| r.interval()).collect();
            let hours = compute_hours(&intervals, start, end, now);
            let core_hours: f64 = rows.iter().map(|r| r.vcpus * compute_hours(&[r.interval()], start, end, now)).sum();
            total += hours;
            json!({"poolId": pool_id, "vmSize": rows[0].vm_size, "computeHours": hours, "coreHours": core_hours, "usageRecords": rows.len()})
        })
        .collect();
    Ok(Json(
        json!({"startTime": rfc3339(start), "endTime": rfc3339(end), "totalComputeHours": total, "value": pools}),
    ))
}
