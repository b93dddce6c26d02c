//! Autoscale formulas on pools, for the API (create, enable, evaluate) and the leader's loop
//! (sample, evaluate what is due, apply): the samples a formula reads, one evaluation as
//! Azure's AutoScaleRun, and the target it gives.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool};

use crate::domain::autoscale::{self, Evaluation, Formula, FormulaError, Inputs, MetricHistory};
use crate::domain::pool::{NodeDeallocationOption, Targets};
use crate::domain::{rfc3339, IsoDuration};
use crate::store;
use crate::store::pools::PoolRow;

/// How often the leader samples autoscaled pools (Azure: every 30 s).
pub const SAMPLE_PERIOD: Duration = Duration::seconds(5);
/// How long samples are kept: the longest window a formula can look back over.
pub const HISTORY: Duration = Duration::hours(1);
/// The shortest evaluation interval (Azure's is 5 minutes) and the longest (Azure's, 168 h).
pub const MIN_INTERVAL: Duration = Duration::seconds(5);
pub const MAX_INTERVAL: Duration = Duration::hours(168);
/// Azure's default evaluation interval.
pub const DEFAULT_INTERVAL_TICKS: i64 = 15 * 60 * 10_000_000;

/// A pool's sample histories, by metric name.
pub struct PoolHistory {
    series: BTreeMap<&'static str, Vec<(DateTime<Utc>, f64)>>,
}

impl MetricHistory for PoolHistory {
    fn samples(&self, name: &str) -> Option<&[(DateTime<Utc>, f64)]> {
        self.series.get(name).map(Vec::as_slice)
    }

    fn period(&self) -> Duration {
        SAMPLE_PERIOD
    }
}

impl PoolHistory {
    /// The metrics this server measures, from a pool's samples. `$CPUPercent` and
    /// `$MemoryBytes` have a sample where a node's agent reported; Azure's other resource
    /// metrics ($DiskBytes, $NetworkInBytes, ...) are not measured: a formula that reads one
    /// fails with a message that says so.
    pub fn from_samples(samples: &[store::autoscale::Sample], slots_per_node: i32) -> Self {
        type Pick = fn(&store::autoscale::Sample) -> i32;
        let picks: [(&'static str, Pick); 10] = [
            ("$ActiveTasks", |s| s.active),
            ("$RunningTasks", |s| s.running),
            ("$PendingTasks", |s| s.active + s.running),
            ("$SucceededTasks", |s| s.succeeded),
            ("$FailedTasks", |s| s.failed),
            ("$CurrentDedicatedNodes", |s| s.dedicated),
            ("$SampleNodeCount", |s| s.dedicated),
            ("$UsableNodeCount", |s| s.usable),
            ("$CurrentLowPriorityNodes", |s| s.low_priority),
            ("$PreemptedNodeCount", |s| s.preempted),
        ];
        let mut series: BTreeMap<&'static str, Vec<(DateTime<Utc>, f64)>> = picks
            .iter()
            .map(|(name, pick)| {
                (
                    *name,
                    samples.iter().map(|s| (s.at, pick(s) as f64)).collect(),
                )
            })
            .collect();
        let slots = samples
            .iter()
            .map(|s| (s.at, slots_per_node as f64))
            .collect();
        series.insert("$TaskSlotsPerNode", slots);
        type Measured = fn(&store::autoscale::Sample) -> Option<f64>;
        let measured: [(&'static str, Measured); 2] = [
            ("$CPUPercent", |s| s.cpu_percent),
            ("$MemoryBytes", |s| s.memory_bytes),
        ];
        for (name, pick) in measured {
            let values = samples.iter().filter_map(|s| Some((s.at, pick(s)?)));
            series.insert(name, values.collect());
        }
        PoolHistory { series }
    }
}

/// The pool's history of the last hour.
pub async fn history(
    db: &mut PgConnection,
    pool: &PoolRow,
    now: DateTime<Utc>,
) -> sqlx::Result<PoolHistory> {
    let samples = store::autoscale::samples_of(db, &[pool.pk], now - HISTORY).await?;
    Ok(PoolHistory::from_samples(
        &samples,
        pool.task_slots_per_node,
    ))
}

/// Evaluates `formula` for a pool whose targets are `targets`.
pub fn evaluate(
    formula: &Formula,
    targets: Targets,
    history: &dyn MetricHistory,
    now: DateTime<Utc>,
) -> Result<Evaluation, FormulaError> {
    let inputs = Inputs {
        now,
        target_dedicated: targets.dedicated as f64,
        target_low_priority: targets.low_priority as f64,
        metrics: history,
    };
    autoscale::evaluate(formula, &inputs)
}

/// One evaluation as Azure's AutoScaleRun: its time, the variables' values, or the error.
pub fn run_json(now: DateTime<Utc>, outcome: &Result<Evaluation, FormulaError>) -> Value {
    match outcome {
        Ok(o) => json!({"timestamp": rfc3339(now), "results": o.results}),
        Err(e) => json!({
            "timestamp": rfc3339(now),
            "error": {
                "code": e.code,
                "message": "The autoscale formula could not be evaluated.",
                "values": [{"name": "Message", "value": e.message}],
            },
        }),
    }
}

/// The targets an outcome gives a pool, each within the server's most nodes a pool may have.
pub fn target(outcome: &Evaluation, max_nodes: i32) -> (Targets, NodeDeallocationOption) {
    let nodes = |n: i64| n.clamp(0, max_nodes as i64) as i32;
    let targets = Targets {
        dedicated: nodes(outcome.target_dedicated),
        low_priority: nodes(outcome.target_low_priority),
    };
    let option = NodeDeallocationOption::parse(&outcome.node_deallocation_option)
        .unwrap_or(NodeDeallocationOption::Requeue);
    (targets, option)
}

/// When the run after one at `now` is due, for an interval of `ticks`.
pub fn next_run(now: DateTime<Utc>, ticks: Option<i64>) -> DateTime<Utc> {
    let ticks = ticks.unwrap_or(DEFAULT_INTERVAL_TICKS);
    now + Duration::microseconds(ticks / 10)
}

/// An evaluation interval as given, checked against ours: None when it is out of range.
pub fn interval_ticks(given: Option<&IsoDuration>) -> Result<i64, String> {
    let Some(d) = given else {
        return Ok(DEFAULT_INTERVAL_TICKS);
    };
    let ticks = d.ticks();
    let (min, max) = (
        MIN_INTERVAL.num_seconds() * 10_000_000,
        MAX_INTERVAL.num_seconds() * 10_000_000,
    );
    if (min..=max).contains(&ticks) {
        Ok(ticks)
    } else {
        Err(format!(
            "must be from {} to {} (this server evaluates formulas as often as every 5 seconds)",
            IsoDuration::from_ticks(min),
            IsoDuration::from_ticks(max)
        ))
    }
}

/// How many pools' runs one transaction records: one commit (one flush of PostgreSQL's log)
/// for them all, where each run had its own, without holding the pools' rows for long.
const RUNS_A_COMMIT: usize = 100;

/// Evaluates every autoscaled pool that is due and applies what each gives; returns how many
/// pools had their target changed. A formula that fails leaves the pool as it is. The pools
/// and their samples are read a chunk at a time, and each chunk's runs are recorded in one
/// transaction.
pub async fn run_due(db: &PgPool, max_nodes: i32, now: DateTime<Utc>) -> sqlx::Result<usize> {
    let mut changed = 0;
    for pks in store::autoscale::due(db, now).await?.chunks(RUNS_A_COMMIT) {
        let mut tx = db.begin().await?;
        let pools = store::pools::get_many_by_pk(&mut *tx, pks).await?;
        let samples = store::autoscale::samples_of(&mut *tx, pks, now - HISTORY).await?;
        for pool in &pools {
            let mine = samples.partition_point(|s| s.pool_pk < pool.pk);
            let upto = samples.partition_point(|s| s.pool_pk <= pool.pk);
            let history = PoolHistory::from_samples(&samples[mine..upto], pool.task_slots_per_node);
            let next = next_run(now, pool.auto_scale_interval_ticks);
            let text = pool.auto_scale_formula.as_deref().unwrap_or_default();
            let run = (autoscale::parse(text), Some(next), now);
            match record_run(&mut tx, pool, run, &history, max_nodes).await? {
                Ok(targets) => changed += usize::from(targets != pool.targets()),
                Err(e) => {
                    tracing::info!(pool = %pool.id, code = e.code, message = %e.message, "autoscale formula failed")
                }
            }
        }
        tx.commit().await?;
    }
    Ok(changed)
}

/// One run of a pool's formula at `now`: evaluated against the pool's samples, recorded as its
/// autoScaleRun (with the next run due at `next`, if given), and its targets applied. Returns
/// the targets, or why the formula gave none (then the pool is left as it is).
pub async fn run_once(
    db: &mut PgConnection,
    pool: &PoolRow,
    run: (
        Result<Formula, FormulaError>,
        Option<DateTime<Utc>>,
        DateTime<Utc>,
    ),
    max_nodes: i32,
) -> sqlx::Result<Result<Targets, FormulaError>> {
    let history = match run.0 {
        Ok(_) => history(&mut *db, pool, run.2).await?,
        // Nothing to evaluate: no samples needed.
        Err(_) => PoolHistory::from_samples(&[], pool.task_slots_per_node),
    };
    record_run(db, pool, run, &history, max_nodes).await
}

/// [`run_once`] with the pool's samples read already.
async fn record_run(
    db: &mut PgConnection,
    pool: &PoolRow,
    (formula, next, now): (
        Result<Formula, FormulaError>,
        Option<DateTime<Utc>>,
        DateTime<Utc>,
    ),
    history: &PoolHistory,
    max_nodes: i32,
) -> sqlx::Result<Result<Targets, FormulaError>> {
    let outcome = formula.and_then(|formula| evaluate(&formula, pool.targets(), history, now));
    let apply = outcome.as_ref().ok().map(|o| target(o, max_nodes));
    store::autoscale::apply(&mut *db, pool.pk, &run_json(now, &outcome), next, apply).await?;
    Ok(outcome.map(|_| apply.map_or(pool.targets(), |(targets, _)| targets)))
}
