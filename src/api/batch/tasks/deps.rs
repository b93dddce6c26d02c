//! A task's `dependsOn`: the ids it names, and its `taskIdRanges` checked and merged.

use serde::Deserialize;
use serde_json::Value;

use crate::api::error::{ApiError, ApiResult};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DependsOn {
    #[serde(default)]
    task_ids: Vec<String>,
    #[serde(default)]
    task_id_ranges: Vec<IdRange>,
}

#[derive(Deserialize)]
pub struct IdRange {
    start: i64,
    end: i64,
}

/// A task's dependencies, checked: ids as sent, and ranges merged (sorted, disjoint). A range is
/// never expanded: a few bytes can name billions of ids.
#[derive(Default)]
pub(super) struct Dependencies {
    pub(super) ids: Vec<String>,
    pub(super) ranges: Vec<(i64, i64)>,
}

/// Azure's rules for `taskIdRanges`: start and end not negative, start <= end.
pub(super) fn dependencies(raw: &Value) -> ApiResult<Dependencies> {
    let deps: DependsOn = serde_json::from_value(raw.clone())
        .map_err(|e| ApiError::invalid_property("dependsOn", raw.to_string(), e.to_string()))?;
    let mut ranges = Vec::with_capacity(deps.task_id_ranges.len());
    for (i, r) in deps.task_id_ranges.iter().enumerate() {
        for (end, value) in [("start", r.start), ("end", r.end)] {
            if value < 0 {
                return Err(ApiError::invalid_property(
                    &format!("dependsOn.taskIdRanges[{i}].{end}"),
                    value.to_string(),
                    "must not be negative",
                ));
            }
        }
        if r.start > r.end {
            return Err(ApiError::invalid_property(
                &format!("dependsOn.taskIdRanges[{i}]"),
                format!("{}-{}", r.start, r.end),
                "start must not be greater than end",
            ));
        }
        ranges.push((r.start, r.end));
    }
    ranges.sort_unstable();
    let mut merged: Vec<(i64, i64)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match merged.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    Ok(Dependencies {
        ids: deps.task_ids,
        ranges: merged,
    })
}

/// The number a task id stands for in a range: decimal, without sign or leading zeros (the
/// `task_number` of the migrations).
pub(super) fn task_number(id: &str) -> Option<i64> {
    let canonical = id.len() <= 18
        && id.bytes().all(|b| b.is_ascii_digit())
        && (id == "0" || !id.starts_with('0'));
    canonical.then(|| id.parse().ok()).flatten()
}

pub(super) fn in_ranges(ranges: &[(i64, i64)], id: &str) -> bool {
    task_number(id).is_some_and(|n| ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&n)))
}
