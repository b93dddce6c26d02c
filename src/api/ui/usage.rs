//! Compute hours over time, per pool and per billing plan, as a chart (or, once the account has
//! prices, what they cost: `?show=cost`); and the BES jobs of the account's web services.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use axum::extract::Query;
use axum::http::StatusCode;
use chrono::{DateTime, Duration, Utc};

use super::html::{page, when, Esc, Section};
use super::{problem, unavailable, Page, Ui};
use crate::domain::metering::{compute_hours, UsageInterval};
use crate::store;

/// Bars in the chart, whatever the window.
const BARS: i64 = 24;
const W: f64 = 720.0;
const H: f64 = 200.0;
/// Colours the chart gives pools, in turn.
const COLOURS: usize = 8;

pub async fn chart(ui: Ui, Query(q): Query<HashMap<String, String>>) -> Page {
    let hours: i64 = match q.get("hours").map(|h| h.parse()) {
        None => 24,
        Some(Ok(h)) if (1..=24 * 31).contains(&h) => h,
        Some(_) => {
            return Err(problem(
                StatusCode::BAD_REQUEST,
                "Bad window",
                "hours is a whole number from 1 to 744.",
            ))
        }
    };
    let show_cost = match q.get("show").map(String::as_str) {
        None | Some("hours") => false,
        Some("cost") => true,
        Some(_) => {
            let why = "show is hours (node-hours, the default) or cost.";
            return Err(problem(StatusCode::BAD_REQUEST, "Bad measure", why));
        }
    };
    let now = Utc::now();
    let from = now - Duration::hours(hours);
    let rows = store::usage::in_range(&ui.app.db, &ui.s.account, None, from, now)
        .await
        .map_err(unavailable)?;
    // pool -> (plan, its intervals)
    let mut pools: BTreeMap<String, (Option<String>, Vec<UsageInterval>)> = BTreeMap::new();
    for r in &rows {
        let entry = pools
            .entry(r.pool_id.clone())
            .or_insert_with(|| (r.billing_plan.clone(), Vec::new()));
        entry.1.push(r.interval());
    }
    let step = Duration::seconds(hours * 3600 / BARS);
    let buckets: Vec<(DateTime<Utc>, DateTime<Utc>)> = (0..BARS)
        .map(|i| (from + step * i as i32, from + step * (i as i32 + 1)))
        .collect();
    let costs = costs(&ui, &rows, (from, now)).await?;
    let (series, unit) = match &costs {
        Some(c) if show_cost => (cost_series(&pools, &rows, &buckets, c), c.currency.clone()),
        _ => (hour_series(&pools, &buckets, now), "node-hours".to_string()),
    };
    let measure = if show_cost && costs.is_some() {
        "Cost"
    } else {
        "Node-hours"
    };
    let mut main = format!("<h1>Compute hours</h1><p>{measure} in the last {hours} hours, {BARS} bars of {} minutes. \
        <a href=\"/ui/usage?hours=24\">24 h</a> <a href=\"/ui/usage?hours=168\">7 days</a> <a href=\"/ui/usage?hours=720\">30 days</a>",
        step.num_minutes());
    if costs.is_some() {
        let other = if show_cost { "hours" } else { "cost" };
        let _ = write!(main, " · <a class=\"measure\" href=\"/ui/usage?hours={hours}&amp;show={other}\">show {other}</a>");
    }
    main += "</p>";
    main += &svg(&series, &buckets, &unit);
    main += &totals(&pools, from, now, costs.as_ref());
    Ok(page(&ui.s, Section::Usage, "Compute hours", 10, &main))
}

/// Each pool's node-hours in each bucket.
fn hour_series<'a>(
    pools: &'a BTreeMap<String, (Option<String>, Vec<UsageInterval>)>,
    buckets: &[(DateTime<Utc>, DateTime<Utc>)],
    now: DateTime<Utc>,
) -> Vec<(&'a String, Vec<f64>)> {
    pools
        .iter()
        .map(|(pool, (_, iv))| {
            let values = buckets
                .iter()
                .map(|(a, b)| compute_hours(iv, *a, *b, now))
                .collect();
            (pool, values)
        })
        .collect()
}

/// Each pool's cost in each bucket, summed exactly before it is shown.
fn cost_series<'a>(
    pools: &'a BTreeMap<String, (Option<String>, Vec<UsageInterval>)>,
    rows: &[store::usage::PoolUsageRow],
    buckets: &[(DateTime<Utc>, DateTime<Utc>)],
    costs: &Costs,
) -> Vec<(&'a String, Vec<f64>)> {
    use crate::domain::pricing::Cost;
    let mut by_pool: HashMap<&str, Vec<&store::usage::PoolUsageRow>> = HashMap::new();
    for r in rows {
        by_pool.entry(&r.pool_id).or_default().push(r);
    }
    pools
        .keys()
        .map(|pool| {
            let records = by_pool.get(pool.as_str()).map_or(&[][..], Vec::as_slice);
            let values = buckets
                .iter()
                .map(|&(a, b)| {
                    let mut sum = Cost::default();
                    for r in records {
                        let end = r.ended_at.map_or(b, |e| e.min(b));
                        sum = sum + costs.priced.on_node(r, (r.started_at.max(a), Some(end))).0;
                    }
                    sum.amount()
                })
                .collect();
            (pool, values)
        })
        .collect()
}

/// Stacked bars: a bar per bucket, a band per pool.
fn svg(
    series: &[(&String, Vec<f64>)],
    buckets: &[(DateTime<Utc>, DateTime<Utc>)],
    unit: &str,
) -> String {
    let top = (0..buckets.len())
        .map(|i| series.iter().map(|(_, v)| v[i]).sum::<f64>())
        .fold(0.0, f64::max)
        .max(1e-9);
    let bw = W / buckets.len() as f64;
    let mut out = format!(
        "<svg class=\"chart\" width=\"{W}\" height=\"{}\" viewBox=\"0 0 {W} {}\" role=\"img\" aria-label=\"{} over time\">",
        H + 20.0,
        H + 20.0,
        Esc(unit),
    );
    for (i, (start, end)) in buckets.iter().enumerate() {
        let mut y = H;
        for (k, (pool, values)) in series.iter().enumerate() {
            let h = values[i] / top * (H - 10.0);
            if h <= 0.0 {
                continue;
            }
            y -= h;
            let _ = write!(
                out,
                "<rect class=\"p{c}\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\">\
                 <title>{pool}: {v} {unit}, {s} to {e}</title></rect>",
                c = k % COLOURS,
                x = i as f64 * bw + 1.0,
                w = bw - 2.0,
                pool = Esc(pool),
                v = figure(values[i]),
                unit = Esc(unit),
                s = start.format("%m-%d %H:%M"),
                e = end.format("%H:%M"),
            );
        }
    }
    let _ =
        write!(
        out,
        "<text x=\"0\" y=\"{}\">{}</text><text x=\"{W}\" y=\"{}\" text-anchor=\"end\">now</text>\
         <text x=\"0\" y=\"12\">{top} {unit}</text></svg>",
        H + 16.0,
        buckets.first().map(|b| b.0.format("%m-%d %H:%M").to_string()).unwrap_or_default(),
        H + 16.0,
        top = figure(top),
        unit = Esc(unit),
    );
    out
}

/// Hours or an amount, with as many decimals as a small number needs.
fn figure(h: f64) -> String {
    match h {
        h if h >= 10.0 => format!("{h:.0}"),
        h if h >= 1.0 => format!("{h:.1}"),
        h if h >= 0.001 || h == 0.0 => format!("{h:.3}"),
        h => format!("{h:.6}"),
    }
}

/// What each pool's hours in the window cost, and the currency, once the account has prices
/// (as `/billing/pools` reckons them).
struct Costs {
    currency: String,
    priced: crate::api::billing::Priced,
    by_pool: BTreeMap<String, crate::domain::pricing::Cost>,
}

async fn costs(
    ui: &Ui,
    rows: &[store::usage::PoolUsageRow],
    (from, now): (DateTime<Utc>, DateTime<Utc>),
) -> Result<Option<Costs>, super::Problem> {
    let ctx = ui.ctx();
    let priced = crate::api::billing::Priced::of(&ctx, (from, now, now))
        .await
        .map_err(|e| problem(e.status, "Unavailable", e.message))?;
    let Some(currency) = priced.currency().map(str::to_string) else {
        return Ok(None);
    };
    let mut by_pool: BTreeMap<String, crate::domain::pricing::Cost> = BTreeMap::new();
    for r in rows {
        let entry = by_pool.entry(r.pool_id.clone()).or_default();
        *entry = *entry + priced.cost(&[r]).0;
    }
    Ok(Some(Costs {
        currency,
        priced,
        by_pool,
    }))
}

/// The window's totals per pool (with its colour) and per billing plan.
fn totals(
    pools: &BTreeMap<String, (Option<String>, Vec<UsageInterval>)>,
    from: DateTime<Utc>,
    now: DateTime<Utc>,
    costs: Option<&Costs>,
) -> String {
    use crate::domain::pricing::Cost;
    if pools.is_empty() {
        return "<p class=\"empty\">No node ran in this window.</p>".into();
    }
    let cell = |c: Cost| {
        costs.map_or(String::new(), |_| {
            format!("<td class=\"num\">{:.4}</td>", c.amount())
        })
    };
    let mut plans: BTreeMap<&str, (f64, Cost)> = BTreeMap::new();
    let mut rows = String::new();
    for (k, (pool, (plan, iv))) in pools.iter().enumerate() {
        let h = compute_hours(iv, from, now, now);
        let cost = costs
            .and_then(|c| c.by_pool.get(pool).copied())
            .unwrap_or_default();
        let total = plans
            .entry(plan.as_deref().unwrap_or("(none)"))
            .or_default();
        *total = (total.0 + h, total.1 + cost);
        let _ = write!(
            rows,
            "<tr><td><span class=\"key p{}\"></span>{}</td><td>{}</td><td class=\"num\">{h:.3}</td>{}</tr>",
            k % COLOURS,
            Esc(pool),
            Esc(plan.as_deref().unwrap_or("")),
            cell(cost),
        );
    }
    let mut plan_rows = String::new();
    for (plan, (h, cost)) in plans {
        let _ = write!(
            plan_rows,
            "<tr><td>{}</td><td class=\"num\">{h:.3}</td>{}</tr>",
            Esc(plan),
            cell(cost),
        );
    }
    let head = costs.map_or(String::new(), |c| {
        format!("<th>Cost ({})</th>", Esc(&c.currency))
    });
    format!(
        "<div class=\"cols\"><table><thead><tr><th>Pool</th><th>Billing plan</th><th>Node-hours</th>{head}</tr></thead>\
         <tbody>{rows}</tbody></table><table><thead><tr><th>Billing plan</th><th>Node-hours</th>{head}</tr></thead>\
         <tbody>{plan_rows}</tbody></table></div>"
    )
}

pub async fn bes_jobs(ui: Ui) -> Page {
    let jobs = store::ui::bes_jobs(&ui.app.db, &ui.s.account, 200)
        .await
        .map_err(unavailable)?;
    let mut rows = String::new();
    for j in &jobs {
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{}</td><td class=\"state\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            Esc(&j.service),
            Esc(&j.id),
            j.phase.status_code(),
            Esc(j.pool_id.as_deref().unwrap_or("classic")),
            when(j.creation_time),
            j.end_time.map(when).unwrap_or_default(),
            Esc(j.details.as_deref().unwrap_or("")),
        );
    }
    let main = if jobs.is_empty() {
        "<h1>BES jobs</h1><p class=\"empty\">No BES jobs yet.</p>".to_string()
    } else {
        format!(
            "<h1>BES jobs</h1><table><thead><tr><th>Web service</th><th>Job</th><th>Status</th><th>Pool</th>\
             <th>Created</th><th>Ended</th><th>Details</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    };
    Ok(page(&ui.s, Section::Bes, "BES jobs", 5, &main))
}
