//! What a job's or a task's attempts cost, for their statistics: each attempt's share of its
//! node's slots times what the node cost over its time, summed exactly.

use chrono::{DateTime, Utc};

use super::{by_node, record_of, Priced};
use crate::api::error::ApiResult;
use crate::api::Ctx;
use crate::domain::pricing::{self, Cost};
use crate::store;

/// What a job's or a task's attempts cost (docs/metering.md, "Prices and cost").
pub struct AttemptsCost {
    pub currency: String,
    /// Every attempt's, a running one up to now.
    pub total: f64,
    /// The ended attempts'.
    pub ended: f64,
    /// The mean of the last [`RECENT`] ended attempts', if one ended.
    pub recent_mean: Option<f64>,
}

/// How many of the latest ended attempts a forecast takes the mean cost of.
pub const RECENT: usize = 256;

/// What the attempts of job `job_id` (since `since`, its creation), or of its task `task_id`,
/// cost in the installation's currency: each its share of its node's slots times what the node
/// cost over its time, summed exactly. None while the account has no prices (then no attempt
/// is read).
pub async fn attempts_cost(
    app: &Ctx,
    (job_id, task_id): (&str, Option<&str>),
    since: DateTime<Utc>,
) -> ApiResult<Option<AttemptsCost>> {
    let always = (
        DateTime::<Utc>::MIN_UTC,
        DateTime::<Utc>::MAX_UTC,
        Utc::now(),
    );
    let priced = Priced::of(app, always).await?;
    let Some(currency) = priced.currency().map(str::to_string) else {
        return Ok(None);
    };
    let attempts =
        store::usage::attempts_of(&app.db, &app.account, (job_id, task_id), since).await?;
    let nodes: std::collections::BTreeSet<String> =
        attempts.iter().filter_map(|a| a.node_id.clone()).collect();
    let nodes: Vec<String> = nodes.into_iter().collect();
    let records = store::usage::of_nodes(&app.db, &app.account, &nodes).await?;
    let by_node = by_node(&records);
    // Keyed by when each ended (running ones last), so the latest ended come last.
    let uses = attempts
        .iter()
        .enumerate()
        .filter_map(|(i, a)| {
            let cost = priced
                .on_node(record_of(&by_node, a)?, (a.started_at, a.ended_at))
                .0;
            Some((
                (a.ended_at.is_none(), a.ended_at, i),
                (cost, a.slots, a.slots_per_node),
            ))
        })
        .collect();
    let shares = pricing::Shares::of(Cost::default(), uses);
    let total: i128 = shares.parts.values().sum();
    let ended: Vec<i128> = shares
        .parts
        .iter()
        .filter(|((running, ..), _)| !running)
        .map(|(_, units)| *units)
        .collect();
    let recent = &ended[ended.len().saturating_sub(RECENT)..];
    let recent_mean = (!recent.is_empty())
        .then(|| shares.amount(recent.iter().sum::<i128>()) / recent.len() as f64);
    Ok(Some(AttemptsCost {
        currency,
        total: shares.amount(total),
        ended: shares.amount(ended.iter().sum()),
        recent_mean,
    }))
}
