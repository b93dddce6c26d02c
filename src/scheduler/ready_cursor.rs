//! Where a pass's claim of a job's ready tasks starts: after the last task the leader claimed
//! and placed for it, not at the head of the queue.
//!
//! A task leaves the ready index (`tasks_ready`) when it starts, but its entry stays in the
//! index, dead, until a vacuum. A claim that starts at the head walks every entry of the tasks
//! the job has run so far: at 100,000 tasks, hundreds of index pages a pass, a cost that grows
//! with the job. So each job keeps a cursor, the last task claimed and placed; the next claim
//! starts after it.
//!
//! A task before the cursor can become ready again. One that the dispatcher itself puts back
//! (an attempt that failed and is retried, or is requeued) moves its job's cursor before it when
//! its end is recorded ([`lower`]), so it runs again before the tasks after it, as
//! it did before the cursor. Any other (a reactivation, its dependencies met, a requeue by a
//! node's loss or a preemption, a row another transaction held when the claim skipped it) is
//! found by the next claim from the head, which comes at least every [`RESCAN`], and whenever
//! a claim after the cursor finds fewer tasks than it wants (the end of the queue). It waits at
//! most that long more than it would have; nothing is lost.
//!
//! The cursors are the leader's memory only: a new leader starts at the head.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long claims may start after a job's cursor before one starts at the head again.
pub const RESCAN: Duration = Duration::from_secs(1);

/// The cursors are cleared if they ever cover more jobs than this (jobs that ended leave theirs).
const MAX_JOBS: usize = 10_000;

struct Cursor {
    /// Every ready task up to this pk was claimed and placed, as of `scanned` at least.
    after: i64,
    /// When a claim last started at the head of the queue.
    scanned: Instant,
}

static CURSORS: Mutex<BTreeMap<i64, Cursor>> = Mutex::new(BTreeMap::new());

/// Where the first claim of `job_pk` in a pass starts: after its cursor, or at the head (0) if
/// it has none or its last claim from the head is older than [`RESCAN`].
pub fn start(job_pk: i64) -> i64 {
    let cursors = CURSORS.lock().unwrap_or_else(|e| e.into_inner());
    match cursors.get(&job_pk) {
        Some(c) if c.scanned.elapsed() < RESCAN => c.after,
        _ => 0,
    }
}

/// A cursor's new place, kept until the pass that claimed it commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    pub job_pk: i64,
    pub after: i64,
    /// The claim covered the queue from its head.
    pub from_head: bool,
}

/// Moves the cursors of a pass that committed, in the order it claimed.
pub fn commit(moves: &[Moved]) {
    if moves.is_empty() {
        return;
    }
    let now = Instant::now();
    let mut cursors = CURSORS.lock().unwrap_or_else(|e| e.into_inner());
    if cursors.len() >= MAX_JOBS {
        cursors.clear();
    }
    for m in moves {
        match cursors.get_mut(&m.job_pk) {
            Some(c) => {
                c.after = m.after;
                if m.from_head {
                    c.scanned = now;
                }
            }
            // A job's first cursor comes from a claim at the head; any other is not kept.
            None if m.from_head => {
                cursors.insert(
                    m.job_pk,
                    Cursor {
                        after: m.after,
                        scanned: now,
                    },
                );
            }
            None => {}
        }
    }
}

/// Puts the cursors of the tasks' jobs (job pk, task pk) before them, at once: tasks back in the
/// queue that the next claim must see. Lowering a cursor is always safe: a claim that starts
/// earlier only walks more of the queue.
pub fn lower(tasks: &[(i64, i64)]) {
    if tasks.is_empty() {
        return;
    }
    let mut cursors = CURSORS.lock().unwrap_or_else(|e| e.into_inner());
    for (job_pk, pk) in tasks {
        if let Some(c) = cursors.get_mut(job_pk) {
            c.after = c.after.min(pk - 1);
        }
    }
}

/// Where the cursor goes after a claim of tasks `claimed` (in pk order, with whether each was
/// placed): before the first task not placed, else at the last one claimed; `None` if the
/// claim took nothing.
pub fn after_claim(claimed: impl IntoIterator<Item = (i64, bool)>) -> Option<i64> {
    let mut last = None;
    for (pk, placed) in claimed {
        if !placed {
            return Some(pk - 1);
        }
        last = Some(pk);
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_stops_before_the_first_task_not_placed() {
        assert_eq!(after_claim([(3, true), (5, true), (9, true)]), Some(9));
        assert_eq!(after_claim([(3, true), (5, false), (9, true)]), Some(4));
        assert_eq!(after_claim([(3, false)]), Some(2));
        assert_eq!(after_claim([]), None);
    }

    #[test]
    fn a_job_gets_a_cursor_only_from_a_claim_at_the_head_and_loses_it_after_the_rescan_time() {
        let job = -42;
        commit(&[Moved {
            job_pk: job,
            after: 10,
            from_head: false,
        }]);
        assert_eq!(start(job), 0, "no cursor without a claim from the head");
        commit(&[Moved {
            job_pk: job,
            after: 10,
            from_head: true,
        }]);
        assert_eq!(start(job), 10);
        commit(&[Moved {
            job_pk: job,
            after: 20,
            from_head: false,
        }]);
        assert_eq!(start(job), 20);
        lower(&[(job, 15), (job, 30), (-43, 1)]);
        assert_eq!(
            start(job),
            14,
            "a task back in the queue goes before the cursor"
        );
        assert_eq!(start(-43), 0);
        CURSORS.lock().unwrap().get_mut(&job).unwrap().scanned = Instant::now() - RESCAN;
        assert_eq!(start(job), 0, "a claim from the head is due");
    }
}
