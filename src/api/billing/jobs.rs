//! `/billing/jobs`: the hours and the cost attributed to each job, by the slot-seconds its task
//! attempts used (a task using 1 of 4 slots for an hour is a quarter of a compute hour), and
//! for each pool an idle line: what no task used. A job's cost on a pool is each attempt's share
//! of its node's cost (the node priced as `/billing/pools` prices it); the jobs' costs and the
//! idle line add up to the pool's cost exactly (`domain::pricing::Shares`).

use std::collections::{BTreeMap, HashMap};

use axum::extract::Query;
use axum::http::HeaderMap;
use axum::response::Response;
use chrono::Utc;
use serde_json::{json, Value};

use super::{record_of, respond, rfc3339, window, Priced, Range};
use crate::api::error::ApiResult;
use crate::api::Ctx;
use crate::domain::metering::{compute_hours, UsageInterval};
use crate::domain::pricing::{Shares, SlotUse};
use crate::store::{self, usage::PoolUsageRow};

/// (job, pool) -> (plan, slot hours, compute hours, task attempts)
type JobUse<'a> = (Option<&'a str>, f64, f64, usize);

/// A pool's node records, and its attempts' use of them, by (job, pool).
type PoolUse<'a> = (Vec<&'a PoolUsageRow>, Vec<((&'a str, &'a str), SlotUse)>);

pub async fn job_hours(
    app: Ctx,
    headers: HeaderMap,
    Query(range): Query<Range>,
) -> ApiResult<Response> {
    let (start, end) = window(&range)?;
    let now = Utc::now();
    let pool = range.pool_id.as_deref();
    let attempts = store::usage::slots_in_range(&app.db, &app.account, pool, start, end).await?;
    let records = store::usage::in_range(&app.db, &app.account, pool, start, end).await?;
    let priced = Priced::of(&app, (start, end, now)).await?;
    let mut by_node: HashMap<&str, Vec<&PoolUsageRow>> = HashMap::new();
    let mut by_pool: BTreeMap<String, PoolUse> = BTreeMap::new();
    for r in &records {
        by_node.entry(&r.node_id).or_default().push(r);
        by_pool
            .entry(r.pool_id.to_lowercase())
            .or_default()
            .0
            .push(r);
    }
    let mut by_job: BTreeMap<(&str, &str), JobUse> = BTreeMap::new();
    for r in &attempts {
        let interval = UsageInterval {
            started: r.started_at,
            ended: r.ended_at,
        };
        let hours = compute_hours(&[interval], start, end, now);
        let entry = by_job.entry((&r.job_id, &r.pool_id)).or_insert((
            r.billing_plan.as_deref(),
            0.0,
            0.0,
            0,
        ));
        entry.1 += hours * r.slots as f64;
        entry.2 += hours * r.slots as f64 / r.slots_per_node.max(1) as f64;
        entry.3 += 1;
        // Priced as the node it ran on: the record of its node that was open as it started.
        let cost = record_of(&by_node, r).map_or_else(Default::default, |rec| {
            priced.on_node(rec, (r.started_at, r.ended_at)).0
        });
        let key = (r.job_id.as_str(), r.pool_id.as_str());
        let share = (key, (cost, r.slots, r.slots_per_node));
        by_pool
            .entry(r.pool_id.to_lowercase())
            .or_default()
            .1
            .push(share);
    }
    let rows = rows(by_job, by_pool, &priced, (start, end, now));
    let body = json!({"startTime": rfc3339(start), "endTime": rfc3339(end), "currency": priced.currency(), "value": rows});
    respond(
        &range,
        &headers,
        body,
        &[
            "jobId",
            "poolId",
            "billingPlan",
            "slotHours",
            "computeHours",
            "taskAttempts",
            "cost",
        ],
    )
}

/// The jobs' rows, each with its cost, then each pool's idle line (`jobId` null).
fn rows(
    by_job: BTreeMap<(&str, &str), JobUse>,
    by_pool: BTreeMap<String, PoolUse>,
    priced: &Priced,
    window: (
        chrono::DateTime<Utc>,
        chrono::DateTime<Utc>,
        chrono::DateTime<Utc>,
    ),
) -> Vec<Value> {
    let (start, end, now) = window;
    let mut costs: HashMap<(&str, &str), f64> = HashMap::new();
    let mut idle = Vec::new();
    for (records, uses) in by_pool.into_values() {
        let pool_cost = priced.cost(&records).0;
        let shares = Shares::of(pool_cost, uses);
        for (key, units) in &shares.parts {
            costs.insert(*key, shares.amount(*units));
        }
        let Some(first) = records.first() else {
            continue;
        };
        let intervals: Vec<UsageInterval> = records.iter().map(|r| r.interval()).collect();
        let used: f64 = by_job
            .iter()
            .filter(|((_, pool), _)| pool.eq_ignore_ascii_case(&first.pool_id))
            .map(|(_, u)| u.2)
            .sum();
        let hours = compute_hours(&intervals, start, end, now) - used;
        idle.push(
            json!({"jobId": null, "poolId": first.pool_id, "billingPlan": first.billing_plan,
                         "slotHours": null, "computeHours": hours, "taskAttempts": 0,
                         "cost": shares.amount(shares.idle), "idle": true}),
        );
    }
    let mut jobs: Vec<Value> = by_job
        .into_iter()
        .map(|((job, pool), (plan, slot_hours, compute, attempts))| {
            let cost = costs.get(&(job, pool)).copied().unwrap_or(0.0);
            json!({"jobId": job, "poolId": pool, "billingPlan": plan, "slotHours": slot_hours,
                   "computeHours": compute, "taskAttempts": attempts, "cost": cost})
        })
        .collect();
    jobs.extend(idle);
    jobs
}
