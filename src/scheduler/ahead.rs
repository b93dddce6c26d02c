//! How many tasks a node may hold beyond its slots (docs/scheduling.md, "Tasks ahead"): a fixed
//! number a slot (`--tasks-ahead-per-slot N`), or by default `auto`: [`AUTO_PER_SLOT`] a slot,
//! only for tasks of jobs whose recent tasks all ran short, and only on nodes that run nothing
//! else, so that no task is ever held behind a task of a job not known to be short.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::complete::{Finished, Outcome};
pub use crate::domain::placement::AheadSetting;

/// Tasks held a slot in `auto`: enough to start the next task the moment a slot frees (the
/// benchmark's 0.80-0.82 of `xargs` with 2, against 0.67-0.71 with none).
pub const AUTO_PER_SLOT: i32 = 2;

/// A task that ran (from its placement to its end) at most this long counts as short.
pub const SHORT: Duration = Duration::from_secs(2);

/// A job is short once this many of its tasks in a row ended short.
const SHORT_STREAK: u32 = 8;

/// The most jobs remembered; past it the memory starts over (every job is then not known to be
/// short until its tasks say so again).
const MAX_JOBS: usize = 100_000;

/// Which jobs ran short lately: the leader's memory only (a new leader learns again).
#[derive(Default)]
pub struct Recent {
    /// Each job's count of tasks in a row that ended short.
    streaks: Mutex<HashMap<i64, u32>>,
}

impl Recent {
    /// Learns from attempts that ended: those that exited count, by how long they took from
    /// their placement.
    pub fn observe(&self, ended: &[Finished]) {
        if ended.is_empty() {
            return;
        }
        let now = chrono::Utc::now();
        let mut streaks = self.streaks.lock().unwrap_or_else(|e| e.into_inner());
        if streaks.len() > MAX_JOBS {
            streaks.clear();
        }
        for (attempt, outcome, _) in ended {
            if !matches!(outcome, Outcome::Exited(_)) {
                continue;
            }
            let Some(start) = attempt.start_time else {
                continue;
            };
            let took = (now - start).to_std().unwrap_or_default();
            let streak = streaks.entry(attempt.job_pk).or_default();
            *streak = if took <= SHORT {
                streak.saturating_add(1)
            } else {
                0
            };
        }
    }

    /// The jobs known to be short now.
    pub fn short_jobs(&self) -> Vec<i64> {
        let streaks = self.streaks.lock().unwrap_or_else(|e| e.into_inner());
        streaks
            .iter()
            .filter(|(_, s)| **s >= SHORT_STREAK)
            .map(|(job, _)| *job)
            .collect()
    }
}

/// What one dispatch pass may hold ahead: a number a slot, and which jobs' tasks may be held
/// (None: every job's) on which nodes (`only_short_nodes`: those running short jobs' tasks
/// only).
#[derive(Clone, Debug, Default)]
pub struct Ahead {
    pub per_slot: i32,
    pub jobs: Option<Vec<i64>>,
}

impl Ahead {
    /// For a pass under `setting`, with `recent` what ended lately.
    pub fn for_pass(setting: AheadSetting, recent: &Recent) -> Self {
        match setting {
            AheadSetting::Fixed(per_slot) => Self {
                per_slot,
                jobs: None,
            },
            AheadSetting::Auto => {
                let jobs = recent.short_jobs();
                Self {
                    per_slot: if jobs.is_empty() { 0 } else { AUTO_PER_SLOT },
                    jobs: Some(jobs),
                }
            }
        }
    }

    /// Whether a task of `job_pk` may be held on a node.
    pub fn may_hold(&self, job_pk: i64) -> bool {
        self.per_slot > 0 && self.jobs.as_ref().is_none_or(|jobs| jobs.contains(&job_pk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_short_jobs_may_have_tasks_held_in_auto() {
        let recent = Recent::default();
        assert_eq!(Ahead::for_pass(AheadSetting::Auto, &recent).per_slot, 0);
        recent.streaks.lock().unwrap().insert(7, SHORT_STREAK);
        recent.streaks.lock().unwrap().insert(8, SHORT_STREAK - 1);
        let ahead = Ahead::for_pass(AheadSetting::Auto, &recent);
        assert_eq!(ahead.per_slot, AUTO_PER_SLOT);
        assert!(ahead.may_hold(7) && !ahead.may_hold(8));
        let fixed = Ahead::for_pass(AheadSetting::Fixed(3), &recent);
        assert!(fixed.may_hold(8) && fixed.per_slot == 3);
        assert!(!Ahead::for_pass(AheadSetting::Fixed(0), &recent).may_hold(7));
    }
}
