//! Compute hours: a node counts from the moment it is provisioned (its container started) until
//! it is removed, whatever it ran.

use chrono::{DateTime, Utc};

/// One node's life in a pool: `ended` is `None` while the node still exists.
#[derive(Clone, Copy, Debug)]
pub struct UsageInterval {
    pub started: DateTime<Utc>,
    pub ended: Option<DateTime<Utc>>,
}

/// Node-hours of `intervals` that fall inside `[from, to)`; an open interval runs until `now`.
pub fn compute_hours(
    intervals: &[UsageInterval],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
) -> f64 {
    let micros: i64 = intervals
        .iter()
        .map(|i| {
            let start = i.started.max(from);
            let end = i.ended.unwrap_or(now).min(to);
            (end - start).num_microseconds().unwrap_or(i64::MAX).max(0)
        })
        .sum();
    micros as f64 / 3_600_000_000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
    }

    fn nodes(count: usize, hours: i64) -> Vec<UsageInterval> {
        (0..count)
            .map(|_| UsageInterval {
                started: t0(),
                ended: Some(t0() + Duration::hours(hours)),
            })
            .collect()
    }

    #[test]
    fn two_nodes_for_a_day_equal_four_nodes_for_half_a_day() {
        let end = t0() + Duration::days(2);
        assert_eq!(compute_hours(&nodes(2, 24), t0(), end, end), 48.0);
        assert_eq!(compute_hours(&nodes(4, 12), t0(), end, end), 48.0);
    }

    #[test]
    fn only_the_part_inside_the_range_counts() {
        let from = t0() + Duration::hours(6);
        let to = t0() + Duration::hours(10);
        assert_eq!(compute_hours(&nodes(2, 24), from, to, to), 8.0);
        assert_eq!(
            compute_hours(&nodes(1, 4), t0() + Duration::hours(5), to, to),
            0.0
        );
    }

    #[test]
    fn a_live_node_counts_until_now() {
        let live = [UsageInterval {
            started: t0(),
            ended: None,
        }];
        let now = t0() + Duration::minutes(90);
        assert_eq!(
            compute_hours(&live, t0(), now + Duration::days(1), now),
            1.5
        );
    }
}
