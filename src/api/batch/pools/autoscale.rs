//! Autoscale formulas: at pool creation, `enableautoscale`, `disableautoscale` and
//! `evaluateautoscale`, as Azure Batch has them, with evaluation intervals from 5 seconds.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::Deserialize;
use serde_json::Value;

use super::{answer, check_write, find};
use crate::api::error::{ApiError, ApiResult};
use crate::api::json::AzureJson;
use crate::api::{BaseUrl, Conditions, Ctx};
use crate::domain::autoscale::{self, Formula, FormulaError};
use crate::domain::pool::Targets;
use crate::domain::IsoDuration;
use crate::ops::autoscale::{
    evaluate, history, interval_ticks, next_run, run_json, run_once, target, PoolHistory,
    DEFAULT_INTERVAL_TICKS,
};
use crate::store;

/// A formula that cannot be parsed, in Azure's terms.
fn formula_error(e: FormulaError) -> ApiError {
    let message = match e.code {
        "AutoScaleFormulaTooLong" => "The autoscale formula is longer than 8192 characters.",
        _ => "The autoscale formula has a syntax error.",
    };
    ApiError::new(
        StatusCode::BAD_REQUEST,
        e.code,
        format!("{message} {}", e.message),
    )
    .with("Message", e.message)
}

fn parse(text: &str) -> ApiResult<Formula> {
    autoscale::parse(text).map_err(formula_error)
}

fn checked_interval(given: Option<&IsoDuration>) -> ApiResult<i64> {
    interval_ticks(given).map_err(|why| {
        ApiError::invalid_property(
            "autoScaleEvaluationInterval",
            given.map(|d| d.to_string()).unwrap_or_default(),
            &why,
        )
    })
}

/// What a new pool keeps of its autoscale: the formula, its interval (ticks), the first run.
type Kept = (String, i64, Value);

/// The autoscale settings of a new pool: its first target (from an evaluation with no samples
/// yet), and the formula, interval and run to keep. None: a fixed-size pool.
pub(super) fn at_create(
    enable: Option<bool>,
    formula: Option<String>,
    interval: Option<IsoDuration>,
    (targets_given, slots, max_nodes): ([(&str, Option<i32>); 2], i32, i32),
) -> ApiResult<Option<(Targets, Kept)>> {
    if enable != Some(true) {
        for (name, given) in [
            ("autoScaleFormula", formula.is_some()),
            ("autoScaleEvaluationInterval", interval.is_some()),
        ] {
            if given {
                return Err(ApiError::invalid_property(
                    name,
                    "",
                    "is allowed only with enableAutoScale true",
                ));
            }
        }
        return Ok(None);
    }
    for (name, given) in targets_given {
        if let Some(given) = given {
            return Err(ApiError::invalid_property(
                name,
                given.to_string(),
                "must not be given with enableAutoScale true: the formula sets it",
            ));
        }
    }
    let text = formula.ok_or_else(|| ApiError::missing_property("autoScaleFormula"))?;
    let ticks = checked_interval(interval.as_ref())?;
    let now = Utc::now();
    let outcome = evaluate(
        &parse(&text)?,
        Targets::dedicated(0),
        &PoolHistory::from_samples(&[], slots),
        now,
    );
    let first = outcome
        .as_ref()
        .map_or(Targets::dedicated(0), |o| target(o, max_nodes).0);
    Ok(Some((first, (text, ticks, run_json(now, &outcome)))))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnableBody {
    auto_scale_formula: Option<String>,
    auto_scale_evaluation_interval: Option<IsoDuration>,
}

/// Turns autoscale on (or changes its formula or interval) and evaluates the formula at once.
pub async fn enable(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(pool_id): Path<String>,
    conditions: Conditions,
    AzureJson(body): AzureJson<EnableBody>,
) -> ApiResult<Response> {
    check_write(&app, &pool_id, &conditions).await?;
    let pool = find(&app, &pool_id).await?;
    let kept = |v: Option<String>| v.filter(|_| pool.enable_auto_scale);
    let text = body
        .auto_scale_formula
        .or_else(|| kept(pool.auto_scale_formula.clone()))
        .ok_or_else(|| ApiError::missing_property("autoScaleFormula"))?;
    let formula = parse(&text)?;
    let ticks = match body.auto_scale_evaluation_interval {
        Some(given) => checked_interval(Some(&given))?,
        None => pool
            .auto_scale_interval_ticks
            .filter(|_| pool.enable_auto_scale)
            .unwrap_or(DEFAULT_INTERVAL_TICKS),
    };
    let now = Utc::now();
    let next = next_run(now, Some(ticks));
    if !store::autoscale::enable(&app.db, pool.pk, &text, ticks, next).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "PoolBeingDeleted",
            format!("The pool {pool_id:?} is being deleted."),
        ));
    }
    let run = (Ok(formula), None, now);
    // A formula that fails is the pool's autoScaleRun, and the pool stays as it is.
    let mut db = app.db.acquire().await?;
    let _ = run_once(&mut db, &pool, run, app.settings.max_nodes_per_pool).await?;
    drop(db);
    app.wake_allocator();
    answer(&app, &base, &pool_id, StatusCode::OK).await
}

/// Turns autoscale off: the pool keeps the target the last evaluation gave it.
pub async fn disable(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path(pool_id): Path<String>,
) -> ApiResult<Response> {
    let pool = find(&app, &pool_id).await?;
    store::autoscale::disable(&app.db, pool.pk).await?;
    answer(&app, &base, &pool_id, StatusCode::OK).await
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluateBody {
    auto_scale_formula: Option<String>,
}

/// Evaluates a formula against the pool's samples, without changing the pool: Azure's
/// AutoScaleRun, with the error when the evaluation failed.
pub async fn evaluate_formula(
    app: Ctx,
    Path(pool_id): Path<String>,
    AzureJson(body): AzureJson<EvaluateBody>,
) -> ApiResult<Response> {
    let pool = find(&app, &pool_id).await?;
    let text = body
        .auto_scale_formula
        .ok_or_else(|| ApiError::missing_property("autoScaleFormula"))?;
    let formula = parse(&text)?;
    if !pool.enable_auto_scale {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "OperationInvalidForCurrentState",
            format!("The pool {pool_id:?} does not have autoscale enabled; enable it (enableautoscale) before evaluating formulas."),
        ));
    }
    let now = Utc::now();
    let history = history(&mut *app.db.acquire().await?, &pool, now).await?;
    let outcome = evaluate(&formula, pool.targets(), &history, now);
    Ok((StatusCode::OK, axum::Json(run_json(now, &outcome))).into_response())
}
