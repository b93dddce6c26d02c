//! `/billing`: compute hours (node-hours) over a time range, per pool, per billing plan, and
//! attributed to jobs by the slot-seconds their tasks used. `format=csv` (or `Accept: text/csv`)
//! gives the same figures as CSV. And the account's budgets, with the month's cost so far.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::Query;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

mod attempts;
mod budgets;
mod jobs;

pub use attempts::{attempts_cost, AttemptsCost, RECENT};

use super::error::{ApiError, ApiResult};
use super::rfc3339;
use crate::api::state::AppState;
use crate::api::Ctx;
use crate::domain::metering::{compute_hours, UsageInterval};
use crate::domain::pricing::{self, Cost, Prices};
use crate::store;

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/pools", get(pool_hours))
        .route("/plans", get(plan_hours))
        .route("/jobs", get(jobs::job_hours))
        .route("/budgets", get(budgets::budgets))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Range {
    start_time: Option<String>,
    end_time: Option<String>,
    pool_id: Option<String>,
    format: Option<String>,
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

/// `[startTime, endTime)`: `endTime` defaults to now, `startTime` to 24 hours before it.
pub(super) fn window(range: &Range) -> ApiResult<(DateTime<Utc>, DateTime<Utc>)> {
    let end = time("endTime", range.end_time.as_deref())?.unwrap_or_else(Utc::now);
    let start = time("startTime", range.start_time.as_deref())?
        .unwrap_or(end - chrono::Duration::hours(24));
    if start >= end {
        return Err(ApiError::invalid_query(
            "startTime",
            &rfc3339(start),
            "must be before endTime",
        ));
    }
    Ok((start, end))
}

/// JSON, or CSV of `columns` from each item of `value` when the client asks for it.
pub(super) fn respond(
    range: &Range,
    headers: &HeaderMap,
    body: Value,
    columns: &[&str],
) -> ApiResult<Response> {
    let accept_csv = headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/csv"));
    let csv = match range.format.as_deref() {
        None => accept_csv,
        Some("json") => false,
        Some("csv") => true,
        Some(other) => {
            return Err(ApiError::invalid_query(
                "format",
                other,
                "must be json or csv",
            ));
        }
    };
    if !csv {
        return Ok(Json(body).into_response());
    }
    let mut out = columns.join(",") + "\n";
    for item in body["value"].as_array().into_iter().flatten() {
        let cells: Vec<String> = columns
            .iter()
            .map(|c| match &item[*c] {
                Value::Null => String::new(),
                Value::String(s) if s.contains([',', '"', '\n']) => {
                    format!("\"{}\"", s.replace('"', "\"\""))
                }
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    Ok(([("content-type", "text/csv; charset=utf-8")], out).into_response())
}

/// Compute hours of each pool (of this account): every node counts from provisioned (container
/// started) to removed, whether or not tasks ran.
pub async fn pool_hours(
    app: Ctx,
    headers: HeaderMap,
    Query(range): Query<Range>,
) -> ApiResult<Response> {
    let (start, end) = window(&range)?;
    let now = Utc::now();
    let rows =
        store::usage::in_range(&app.db, &app.account, range.pool_id.as_deref(), start, end).await?;
    let mut by_pool: BTreeMap<&str, Vec<&store::usage::PoolUsageRow>> = BTreeMap::new();
    for row in &rows {
        by_pool.entry(&row.pool_id).or_default().push(row);
    }
    let priced = Priced::of(&app, (start, end, now)).await?;
    let (mut total, mut total_cost) = (0.0, Cost::default());
    let pools: Vec<Value> = by_pool
        .into_iter()
        .map(|(pool_id, rows)| {
            let (dedicated, low_priority) = split_hours(&rows, (start, end, now));
            let hours = dedicated + low_priority;
            let core_hours: f64 = rows.iter().map(|r| r.vcpus * compute_hours(&[r.interval()], start, end, now)).sum();
            let (cost, unpriced) = priced.cost(&rows);
            total += hours;
            total_cost = total_cost + cost;
            json!({"poolId": pool_id, "billingPlan": rows[0].billing_plan, "vmSize": rows[0].vm_size,
                   "computeHours": hours, "dedicatedComputeHours": dedicated, "lowPriorityComputeHours": low_priority,
                   "coreHours": core_hours, "usageRecords": rows.len(),
                   "cost": cost.amount(), "unpricedComputeHours": unpriced})
        })
        .collect();
    let body = json!({"startTime": rfc3339(start), "endTime": rfc3339(end), "currency": priced.currency(),
                      "totalComputeHours": total, "totalCost": total_cost.amount(), "value": pools});
    respond(
        &range,
        &headers,
        body,
        &[
            "poolId",
            "billingPlan",
            "vmSize",
            "computeHours",
            "dedicatedComputeHours",
            "lowPriorityComputeHours",
            "coreHours",
            "usageRecords",
            "cost",
            "unpricedComputeHours",
        ],
    )
}

/// The account's prices, for the costs of usage within `(from, to, now)`.
pub(super) struct Priced {
    plans: BTreeMap<String, Vec<Prices>>,
    window: (DateTime<Utc>, DateTime<Utc>, DateTime<Utc>),
}

impl Priced {
    pub(super) async fn of(
        app: &Ctx,
        window: (DateTime<Utc>, DateTime<Utc>, DateTime<Utc>),
    ) -> ApiResult<Self> {
        let plans = store::prices::effective(&app.db, &app.account, (window.0, window.2)).await?;
        Ok(Self { plans, window })
    }

    /// The installation's currency, once the account has prices.
    pub(super) fn currency(&self) -> Option<&str> {
        self.plans
            .values()
            .flatten()
            .next()
            .map(|p| p.currency.as_str())
    }

    /// The cost of the rows' usage, summed exactly, and the compute hours no price covers.
    pub(super) fn cost(&self, rows: &[&store::usage::PoolUsageRow]) -> (Cost, f64) {
        let (mut cost, mut unpriced) = (Cost::default(), 0i64);
        for r in rows {
            let (c, u) = self.on_node(r, (r.started_at, r.ended_at));
            cost = cost + c;
            unpriced += u;
        }
        (cost, unpriced as f64 / 3_600_000_000.0)
    }

    /// The cost of `[start, end)` (None: until now) of the node `r` is the record of, within
    /// the window; and the microseconds no price covers.
    pub(super) fn on_node(
        &self,
        r: &store::usage::PoolUsageRow,
        (start, end): (DateTime<Utc>, Option<DateTime<Utc>>),
    ) -> (Cost, i64) {
        let (from, to, now) = self.window;
        let history = self
            .plans
            .get(r.billing_plan.as_deref().unwrap_or_default());
        let (start, end) = (start.max(from), end.unwrap_or(now).min(to));
        pricing::cost(
            history.map_or(&[][..], Vec::as_slice),
            (&r.vm_size, r.is_dedicated),
            start,
            end,
        )
    }
}

/// Each node's records, oldest first (as `records` has them).
pub(super) fn by_node(
    records: &[store::usage::PoolUsageRow],
) -> std::collections::HashMap<&str, Vec<&store::usage::PoolUsageRow>> {
    let mut by_node: std::collections::HashMap<&str, Vec<&store::usage::PoolUsageRow>> =
        std::collections::HashMap::new();
    for r in records {
        by_node.entry(&r.node_id).or_default().push(r);
    }
    by_node
}

/// The record of the node `r` ran on that was open as it started (of `by_node`, each node's
/// records oldest first).
pub(super) fn record_of<'a>(
    by_node: &std::collections::HashMap<&str, Vec<&'a store::usage::PoolUsageRow>>,
    r: &store::usage::SlotUsageRow,
) -> Option<&'a store::usage::PoolUsageRow> {
    let records = by_node.get(r.node_id.as_deref()?)?;
    let open = records.iter().rev().find(|x| x.started_at <= r.started_at);
    open.or(records.first()).copied()
}

/// Compute hours of dedicated and of low-priority nodes, billed apart, within `(from, to, now)`.
fn split_hours(
    rows: &[&store::usage::PoolUsageRow],
    (from, to, now): (DateTime<Utc>, DateTime<Utc>, DateTime<Utc>),
) -> (f64, f64) {
    let hours = |dedicated: bool| {
        let intervals: Vec<UsageInterval> = rows
            .iter()
            .filter(|r| r.is_dedicated == dedicated)
            .map(|r| r.interval())
            .collect();
        compute_hours(&intervals, from, to, now)
    };
    (hours(true), hours(false))
}

/// Compute hours per billing plan: the pools the Pool Service made for a service bill to its
/// plan; pools made otherwise have none (`billingPlan` null).
pub async fn plan_hours(
    app: Ctx,
    headers: HeaderMap,
    Query(range): Query<Range>,
) -> ApiResult<Response> {
    let (start, end) = window(&range)?;
    let now = Utc::now();
    let rows =
        store::usage::in_range(&app.db, &app.account, range.pool_id.as_deref(), start, end).await?;
    let mut by_plan: BTreeMap<Option<&str>, BTreeMap<&str, Vec<&store::usage::PoolUsageRow>>> =
        BTreeMap::new();
    for row in &rows {
        by_plan
            .entry(row.billing_plan.as_deref())
            .or_default()
            .entry(&row.pool_id)
            .or_default()
            .push(row);
    }
    let priced = Priced::of(&app, (start, end, now)).await?;
    let plans: Vec<Value> = by_plan
        .into_iter()
        .map(|(plan, pools)| {
            let mut plan_cost = Cost::default();
            let pools: Vec<Value> = pools
                .into_iter()
                .map(|(pool, rows)| {
                    let (dedicated, low_priority) = split_hours(&rows, (start, end, now));
                    let (cost, unpriced) = priced.cost(&rows);
                    plan_cost = plan_cost + cost;
                    json!({"poolId": pool, "computeHours": dedicated + low_priority,
                           "dedicatedComputeHours": dedicated, "lowPriorityComputeHours": low_priority,
                           "cost": cost.amount(), "unpricedComputeHours": unpriced})
                })
                .collect();
            let sum = |name: &str| -> f64 { pools.iter().filter_map(|p| p[name].as_f64()).sum() };
            json!({"billingPlan": plan, "computeHours": sum("computeHours"),
                   "dedicatedComputeHours": sum("dedicatedComputeHours"),
                   "lowPriorityComputeHours": sum("lowPriorityComputeHours"),
                   "cost": plan_cost.amount(), "unpricedComputeHours": sum("unpricedComputeHours"), "pools": pools})
        })
        .collect();
    let body = json!({"startTime": rfc3339(start), "endTime": rfc3339(end), "currency": priced.currency(), "value": plans});
    respond(
        &range,
        &headers,
        body,
        &[
            "billingPlan",
            "computeHours",
            "dedicatedComputeHours",
            "lowPriorityComputeHours",
            "cost",
            "unpricedComputeHours",
        ],
    )
}
