//! Job schedules: when a schedule makes its next job, as Azure Batch documents it. A schedule
//! makes jobs from `doNotRunUntil` on, one each `recurrenceInterval` (or one only), never after
//! `doNotRunAfter`, and has at most one job that has not completed. A job due while the last one
//! still runs waits for it, for up to `startWindow` after it was due; past the window that
//! occurrence is lost. A schedule that will make no more jobs completes once its last job has.

use chrono::{DateTime, Duration, Utc};

wire_enum!(JobScheduleState {
    Active = "active",
    Completed = "completed",
    Disabled = "disabled",
    Terminating = "terminating",
    Deleting = "deleting",
});

/// The shortest `recurrenceInterval` and `startWindow` this server takes. Azure's is a minute;
/// the leader looks at schedules every second, so a few seconds work here.
pub const MIN_INTERVAL: Duration = Duration::seconds(1);

/// A schedule's timing (Azure's `schedule`); every field may be left out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timing {
    pub do_not_run_until: Option<DateTime<Utc>>,
    pub do_not_run_after: Option<DateTime<Utc>>,
    pub start_window: Option<Duration>,
    pub recurrence: Option<Duration>,
}

/// What to do with a schedule whose time has come (or that makes no more jobs).
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Make a job now; the next is due at `next` (None: no more jobs).
    Make { next: Option<DateTime<Utc>> },
    /// The occurrence's window passed while its job could not be made: none is made; the next is
    /// due at `next`.
    Lost { next: Option<DateTime<Utc>> },
    /// No more jobs: the schedule completes.
    Complete,
}

impl Timing {
    /// When the first job is due, for a schedule made (or changed) at `now`.
    pub fn first_run(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let at = self.do_not_run_until.map_or(now, |t| t.max(now));
        self.in_time(at)
    }

    /// `at`, unless it is after `doNotRunAfter`.
    fn in_time(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self.do_not_run_after {
            Some(last) if at > last => None,
            _ => Some(at),
        }
    }

    /// The step for a schedule with no job running, whose next job was due at `due` (None: it
    /// makes no more), at `now`.
    pub fn step(&self, due: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Step {
        let Some(due) = due.and_then(|d| self.in_time(d)) else {
            return Step::Complete;
        };
        let window_passed = self
            .start_window
            .is_some_and(|w| due.checked_add_signed(w).is_some_and(|end| now > end));
        let next = self.recurrence.and_then(|r| {
            // The first occurrence after this one still ahead of now (or, for a lost one,
            // whose own window is still open).
            let from = match self.start_window {
                Some(w) if window_passed => now.checked_sub_signed(w).unwrap_or(now),
                _ => now,
            };
            self.in_time(after(due, r, from))
        });
        if window_passed {
            Step::Lost { next }
        } else {
            Step::Make { next }
        }
    }
}

/// The first `due + k * every` (k at least 1) later than `now`.
fn after(due: DateTime<Utc>, every: Duration, now: DateTime<Utc>) -> DateTime<Utc> {
    let every_ms = every.num_milliseconds().max(1);
    let behind = (now - due).num_milliseconds().max(0);
    let k = behind / every_ms + 1;
    due.checked_add_signed(Duration::milliseconds(every_ms.saturating_mul(k)))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn a_schedule_without_recurrence_makes_one_job_then_completes() {
        let once = Timing::default();
        assert_eq!(once.first_run(t(0)), Some(t(0)));
        assert_eq!(once.step(Some(t(0)), t(3)), Step::Make { next: None });
        assert_eq!(once.step(None, t(4)), Step::Complete);
        let later = Timing {
            do_not_run_until: Some(t(60)),
            ..Timing::default()
        };
        assert_eq!(later.first_run(t(0)), Some(t(60)));
        assert_eq!(later.first_run(t(90)), Some(t(90)));
    }

    #[test]
    fn recurrence_keeps_its_beat_and_stops_after_do_not_run_after() {
        let every5 = Timing {
            recurrence: Some(Duration::seconds(5)),
            do_not_run_after: Some(t(12)),
            ..Timing::default()
        };
        assert_eq!(
            every5.step(Some(t(0)), t(0)),
            Step::Make { next: Some(t(5)) }
        );
        // Made a little late: the beat stays on multiples of 5 from the first due time.
        assert_eq!(
            every5.step(Some(t(5)), t(6)),
            Step::Make { next: Some(t(10)) }
        );
        // A job that ran long: the occurrences it overlapped are folded into one.
        assert_eq!(every5.step(Some(t(0)), t(11)), Step::Make { next: None });
        assert_eq!(every5.step(Some(t(10)), t(10)), Step::Make { next: None });
        assert_eq!(every5.step(Some(t(15)), t(15)), Step::Complete);
        assert_eq!(every5.first_run(t(13)), None);
    }

    #[test]
    fn an_occurrence_past_its_start_window_is_lost() {
        let windowed = Timing {
            recurrence: Some(Duration::seconds(10)),
            start_window: Some(Duration::seconds(2)),
            ..Timing::default()
        };
        assert_eq!(
            windowed.step(Some(t(0)), t(2)),
            Step::Make { next: Some(t(10)) }
        );
        assert_eq!(
            windowed.step(Some(t(0)), t(3)),
            Step::Lost { next: Some(t(10)) }
        );
        // Lost twice over: the next one whose window is still open is due now.
        assert_eq!(
            windowed.step(Some(t(0)), t(21)),
            Step::Lost { next: Some(t(20)) }
        );
        let once = Timing {
            start_window: Some(Duration::seconds(2)),
            ..Timing::default()
        };
        assert_eq!(once.step(Some(t(0)), t(5)), Step::Lost { next: None });
    }

    #[test]
    fn the_longest_durations_and_latest_times_do_not_overflow() {
        let forever = Duration::milliseconds(i64::MAX / 10_000);
        let far = Timing {
            recurrence: Some(forever),
            start_window: Some(forever),
            do_not_run_until: Some(DateTime::<Utc>::MAX_UTC),
            ..Timing::default()
        };
        let due = far.first_run(t(0));
        assert_eq!(due, Some(DateTime::<Utc>::MAX_UTC));
        assert!(matches!(far.step(due, t(0)), Step::Make { .. }));
        assert!(matches!(far.step(Some(t(0)), t(1)), Step::Make { .. }));
    }
}
