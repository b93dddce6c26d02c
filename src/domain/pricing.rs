//! Money (docs/metering.md, "Prices and cost"): a billing plan's prices per compute hour, by
//! vmSize and apart for low-priority nodes, each in force from when it was set until the next;
//! and costs, summed exactly (microseconds times billionths of the currency per hour, in an
//! integer) and turned into an amount only when shown.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

/// An amount of the currency per compute hour, in billionths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rate(pub i128);

/// The most decimals a price may have.
const DECIMALS: usize = 9;
/// The highest price of a compute hour: a billion of the currency.
const MOST: i128 = 1_000_000_000 * 1_000_000_000;

impl Rate {
    /// A price as written (`0.12`, `3`, `0.000000001`): not negative, at most 9 decimals.
    pub fn parse(text: &str) -> Result<Rate, String> {
        let bad = || {
            format!("{text:?} is not an amount: digits, a point and at most {DECIMALS} decimals, not negative")
        };
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(fraction) || fraction.len() > DECIMALS {
            return Err(bad());
        }
        if text.ends_with('.') || whole.len() > 10 {
            return Err(bad());
        }
        let whole: i128 = whole.parse().map_err(|_| bad())?;
        let fraction: i128 = format!("{fraction:0<DECIMALS$}")
            .parse()
            .map_err(|_| bad())?;
        let rate = whole * 1_000_000_000 + fraction;
        if rate > MOST {
            return Err(format!(
                "{text} is over the highest price, 1000000000 an hour"
            ));
        }
        Ok(Rate(rate))
    }

    /// The price as it was written, without trailing zeros.
    pub fn text(self) -> String {
        let (whole, fraction) = (self.0 / 1_000_000_000, self.0 % 1_000_000_000);
        let fraction = format!("{fraction:09}");
        let fraction = fraction.trim_end_matches('0');
        match fraction {
            "" => whole.to_string(),
            f => format!("{whole}.{f}"),
        }
    }
}

/// Whether `code` is a currency's code as ISO 4217 writes them: three capital letters.
pub fn valid_currency(code: &str) -> bool {
    code.len() == 3 && code.bytes().all(|b| b.is_ascii_uppercase())
}

/// A cost, exactly: microseconds of compute hours times their [`Rate`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cost(pub i128);

impl Cost {
    pub fn of(micros: i64, rate: Rate) -> Cost {
        Cost(i128::from(micros.max(0)) * rate.0)
    }

    /// The amount in the currency.
    pub fn amount(self) -> f64 {
        self.0 as f64 / 3.6e18
    }
}

impl std::ops::Add for Cost {
    type Output = Cost;
    fn add(self, other: Cost) -> Cost {
        Cost(self.0 + other.0)
    }
}

impl std::iter::Sum for Cost {
    fn sum<I: Iterator<Item = Cost>>(iter: I) -> Cost {
        iter.fold(Cost::default(), |a, b| a + b)
    }
}

/// A plan's prices from `from` on (until the next prices of the plan).
#[derive(Clone, Debug, PartialEq)]
pub struct Prices {
    pub from: DateTime<Utc>,
    pub currency: String,
    /// A dedicated node's compute hour, unless its vmSize has a price of its own.
    pub compute_hour: Rate,
    /// A low-priority node's compute hour, whatever its size; None: as a dedicated one's.
    pub low_priority_hour: Option<Rate>,
    /// By vmSize, lowercase.
    pub vm_sizes: BTreeMap<String, Rate>,
    /// Compute hours each calendar month includes, in billionths ([`super::allowance`]).
    pub included_hours: Option<Rate>,
}

impl Prices {
    /// The price of a compute hour of a node of `vm_size`.
    pub fn rate(&self, vm_size: &str, dedicated: bool) -> Rate {
        match (dedicated, self.low_priority_hour) {
            (false, Some(rate)) => rate,
            _ => self
                .vm_sizes
                .get(&vm_size.to_ascii_lowercase())
                .copied()
                .unwrap_or(self.compute_hour),
        }
    }
}

/// The cost of a node's `[start, end)` under `history` (a plan's prices, oldest first): each
/// part at the prices in force then. The microseconds before the plan's first prices have
/// none, and are returned apart.
pub fn cost(
    history: &[Prices],
    (vm_size, dedicated): (&str, bool),
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> (Cost, i64) {
    let micros =
        |a: DateTime<Utc>, b: DateTime<Utc>| (b - a).num_microseconds().unwrap_or(0).max(0);
    if end <= start {
        return (Cost::default(), 0);
    }
    let unpriced = match history.first() {
        Some(first) => micros(start, first.from.min(end)),
        None => micros(start, end),
    };
    let mut total = Cost::default();
    for (i, prices) in history.iter().enumerate() {
        let until = history.get(i + 1).map_or(end, |next| next.from.min(end));
        let from = prices.from.max(start);
        if from < until {
            total = total + Cost::of(micros(from, until), prices.rate(vm_size, dedicated));
        }
    }
    (total, unpriced)
}

/// A pool's cost shared among the jobs whose tasks used its slots, and the rest, what no task
/// used (its idle line). A job's part is each of its attempts' cost on its node (as [`cost`]
/// prices the node) times its slots' share of the node's. The parts are kept in units of
/// 1/`scale` of a [`Cost`] (`scale` the least common multiple of the nodes' slots), so none is
/// rounded and the parts and the idle line add up to the pool's cost exactly.
#[derive(Debug)]
pub struct Shares<K> {
    scale: i128,
    pub parts: BTreeMap<K, i128>,
    pub idle: i128,
}

/// An attempt's use of a node: the cost of the node over the attempt's time, its slots, and the
/// node's slots.
pub type SlotUse = (Cost, i32, i32);

impl<K: Ord> Shares<K> {
    pub fn of(pool: Cost, attempts: Vec<(K, SlotUse)>) -> Self {
        let scale = attempts
            .iter()
            .map(|(_, (_, _, of))| i128::from((*of).max(1)))
            .fold(1i128, |scale, of| {
                let lcm = scale / gcd(scale, of) * of;
                // Slots per node are at most a few hundred: past this, a pool's records are not sane.
                if lcm > 1 << 40 {
                    scale
                } else {
                    lcm
                }
            });
        let mut parts: BTreeMap<K, i128> = BTreeMap::new();
        for (key, (cost, slots, of)) in attempts {
            let part = cost.0 * i128::from(slots.max(0)) * (scale / i128::from(of.max(1)));
            *parts.entry(key).or_default() += part;
        }
        let idle = pool.0 * scale - parts.values().sum::<i128>();
        Self { scale, parts, idle }
    }

    /// The amount of `units` in the currency.
    pub fn amount(&self, units: i128) -> f64 {
        units as f64 / self.scale as f64 / 3.6e18
    }
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};

    fn t(hours: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + Duration::hours(hours)
    }

    fn prices(from: i64, compute: &str, low: Option<&str>) -> Prices {
        Prices {
            from: t(from),
            currency: "EUR".into(),
            compute_hour: Rate::parse(compute).unwrap(),
            low_priority_hour: low.map(|l| Rate::parse(l).unwrap()),
            vm_sizes: [("standard_d4s_v3".to_string(), Rate::parse("0.48").unwrap())].into(),
            included_hours: None,
        }
    }

    #[test]
    fn the_jobs_parts_and_the_idle_line_add_up_to_the_pool_s_cost() {
        let hour = |n: i64| Cost::of(n * 3_600_000_000, Rate(100_000_000));
        // A pool of 3-slot nodes: 10 node-hours at 0.10; a job used 1 slot for 3 hours and 2
        // for 1, another 3 slots for 2 hours.
        let shares = Shares::of(
            hour(10),
            vec![
                ("a", (hour(3), 1, 3)),
                ("a", (hour(1), 2, 3)),
                ("b", (hour(2), 3, 3)),
            ],
        );
        let parts: Vec<f64> = shares.parts.values().map(|p| shares.amount(*p)).collect();
        assert!(
            (parts[0] - 1.0 / 6.0).abs() < 1e-15 && parts[1] == 0.2,
            "{parts:?}"
        );
        assert_eq!(
            shares.parts.values().sum::<i128>() + shares.idle,
            hour(10).0 * 3
        );
        assert!((shares.amount(shares.idle) - (1.0 - 0.5 / 3.0 - 0.2)).abs() < 1e-12);
    }

    #[test]
    fn amounts_are_read_and_written_exactly() {
        assert_eq!(Rate::parse("0.12"), Ok(Rate(120_000_000)));
        assert_eq!(Rate::parse("3"), Ok(Rate(3_000_000_000)));
        assert_eq!(Rate::parse("0.000000001"), Ok(Rate(1)));
        assert_eq!(Rate::parse("1.500").unwrap().text(), "1.5");
        for bad in [
            "",
            "-1",
            "1.",
            ".5",
            "1.0000000001",
            "1e3",
            "0x10",
            "99999999999",
        ] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_part_costs_what_its_prices_said_then() {
        let history = [prices(2, "0.10", None), prices(4, "0.20", Some("0.02"))];
        // Hours 1-6: 1 unpriced, 2 at 0.10, 2 at 0.20.
        let (total, unpriced) = cost(&history, ("standard_a1", true), t(1), t(6));
        assert_eq!(unpriced, 3_600_000_000);
        assert_eq!(
            total,
            Cost::of(2 * 3_600_000_000, Rate(100_000_000))
                + Cost::of(2 * 3_600_000_000, Rate(200_000_000))
        );
        assert!((total.amount() - 0.6).abs() < 1e-12);
        // A size of its own, and a low-priority node once its price is set.
        let (big, _) = cost(&history, ("Standard_D4s_v3", true), t(2), t(3));
        assert_eq!(big.amount(), 0.48);
        let (low, _) = cost(&history, ("standard_d4s_v3", false), t(3), t(5));
        assert_eq!(
            low.amount(),
            0.5,
            "0.48 at its size, then 0.02 low-priority"
        );
    }
}
