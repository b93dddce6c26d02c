//! ISO 8601 durations as Azure Batch and its SDKs write them.
//!
//! The SDK sends zero-padded parts (`PT15M00S`), fractional seconds (`PT01.5S`), days (`P1D`)
//! and a bare `P` for zero; the service's "infinite" is `P10675199DT2H48M5.4775807S`, which is
//! `i64::MAX` ticks of 100 ns. Durations are kept in those ticks so that value round-trips.

use std::fmt;

const TICKS_PER_SECOND: i64 = 10_000_000;
const TICKS_PER_MINUTE: i64 = 60 * TICKS_PER_SECOND;
const TICKS_PER_HOUR: i64 = 60 * TICKS_PER_MINUTE;
const TICKS_PER_DAY: i64 = 24 * TICKS_PER_HOUR;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct IsoDuration {
    ticks: i64,
}

impl IsoDuration {
    /// The service's "no limit" value.
    pub const MAX: IsoDuration = IsoDuration { ticks: i64::MAX };

    pub fn from_ticks(ticks: i64) -> Self {
        Self {
            ticks: ticks.max(0),
        }
    }

    pub fn from_secs(secs: i64) -> Self {
        Self::from_ticks(secs.saturating_mul(TICKS_PER_SECOND))
    }

    pub fn ticks(self) -> i64 {
        self.ticks
    }

    /// As a std duration, for timers.
    pub fn to_std(self) -> std::time::Duration {
        let secs = (self.ticks / TICKS_PER_SECOND) as u64;
        let nanos = ((self.ticks % TICKS_PER_SECOND) * 100) as u32;
        std::time::Duration::new(secs, nanos)
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let err = |why: &str| {
            format!("{text:?} is not an ISO 8601 duration ({why}), e.g. PT15M or P1DT2H")
        };
        let rest = text
            .strip_prefix('P')
            .ok_or_else(|| err("it must start with P"))?;
        let mut ticks: i64 = 0;
        let mut in_time = false;
        let mut number = String::new();
        // Each unit may appear once and in order; this rank enforces both.
        let mut last_rank = 0;
        for c in rest.chars() {
            match c {
                '0'..='9' | '.' => number.push(c),
                'T' if !in_time && number.is_empty() => in_time = true,
                _ => {
                    let (rank, unit) = match (in_time, c) {
                        (false, 'W') => (1, 7 * TICKS_PER_DAY),
                        (false, 'D') => (2, TICKS_PER_DAY),
                        (true, 'H') => (3, TICKS_PER_HOUR),
                        (true, 'M') => (4, TICKS_PER_MINUTE),
                        (true, 'S') => (5, TICKS_PER_SECOND),
                        (false, 'Y' | 'M') => {
                            return Err(err("years and months have no fixed length"))
                        }
                        _ => return Err(err(&format!("unexpected {c:?}"))),
                    };
                    if rank <= last_rank {
                        return Err(err("units repeated or out of order"));
                    }
                    last_rank = rank;
                    ticks = ticks
                        .checked_add(
                            scaled(&number, unit, rank == 5)
                                .ok_or_else(|| err("a number is malformed or too large"))?,
                        )
                        .ok_or_else(|| err("too large"))?;
                    number.clear();
                }
            }
        }
        if !number.is_empty() {
            return Err(err("a number has no unit"));
        }
        if in_time && last_rank < 3 {
            return Err(err("T must be followed by hours, minutes or seconds"));
        }
        Ok(Self { ticks })
    }
}

/// `number` (digits, with a fraction only where `fraction_ok`) times `unit` ticks.
fn scaled(number: &str, unit: i64, fraction_ok: bool) -> Option<i64> {
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) if fraction_ok && !f.is_empty() && f.len() <= 7 => (w, f),
        Some(_) => return None,
        None => (number, ""),
    };
    if whole.is_empty() {
        return None;
    }
    let whole: i64 = whole.parse().ok()?;
    let mut frac_ticks: i64 = 0;
    if !fraction.is_empty() {
        frac_ticks = format!("{fraction:0<7}").parse().ok()?;
    }
    whole.checked_mul(unit)?.checked_add(frac_ticks)
}

impl fmt::Display for IsoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut t = self.ticks;
        let days = t / TICKS_PER_DAY;
        t %= TICKS_PER_DAY;
        let hours = t / TICKS_PER_HOUR;
        t %= TICKS_PER_HOUR;
        let minutes = t / TICKS_PER_MINUTE;
        t %= TICKS_PER_MINUTE;
        let seconds = t / TICKS_PER_SECOND;
        let fraction = t % TICKS_PER_SECOND;
        write!(f, "P")?;
        if days > 0 {
            write!(f, "{days}D")?;
        }
        if hours == 0 && minutes == 0 && seconds == 0 && fraction == 0 {
            return if days == 0 { write!(f, "T0S") } else { Ok(()) };
        }
        write!(f, "T")?;
        if hours > 0 {
            write!(f, "{hours}H")?;
        }
        if minutes > 0 {
            write!(f, "{minutes}M")?;
        }
        if seconds > 0 || fraction > 0 {
            write!(f, "{seconds}")?;
            if fraction > 0 {
                let digits = format!("{fraction:07}");
                write!(f, ".{}", digits.trim_end_matches('0'))?;
            }
            write!(f, "S")?;
        }
        Ok(())
    }
}

impl serde::Serialize for IsoDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for IsoDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        IsoDuration::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(text: &str) -> f64 {
        IsoDuration::parse(text).unwrap().ticks() as f64 / TICKS_PER_SECOND as f64
    }

    #[test]
    fn parses_what_the_sdk_sends() {
        assert_eq!(secs("PT15M00S"), 900.0);
        assert_eq!(secs("PT02H00M00S"), 7200.0);
        assert_eq!(secs("P1D"), 86400.0);
        assert_eq!(secs("P1DT02H03M04S"), 93784.0);
        assert_eq!(secs("PT01.5S"), 1.5);
        assert_eq!(secs("P"), 0.0);
        assert_eq!(secs("PT0S"), 0.0);
        assert_eq!(secs("P2W"), 14.0 * 86400.0);
    }

    #[test]
    fn the_infinite_value_round_trips() {
        let max = IsoDuration::parse("P10675199DT2H48M5.4775807S").unwrap();
        assert_eq!(max, IsoDuration::MAX);
        assert_eq!(max.to_string(), "P10675199DT2H48M5.4775807S");
    }

    #[test]
    fn formats_the_shortest_form() {
        assert_eq!(IsoDuration::from_secs(900).to_string(), "PT15M");
        assert_eq!(IsoDuration::from_secs(0).to_string(), "PT0S");
        assert_eq!(IsoDuration::from_secs(86400).to_string(), "P1D");
        assert_eq!(IsoDuration::parse("PT01.5S").unwrap().to_string(), "PT1.5S");
        assert_eq!(
            IsoDuration::parse("P1DT02H03M04S").unwrap().to_string(),
            "P1DT2H3M4S"
        );
    }

    #[test]
    fn rejects_malformed_durations() {
        for bad in [
            "",
            "15M",
            "PT",
            "P1M",
            "P1Y",
            "PT5",
            "PT1.5M",
            "PTS",
            "PT1S1S",
            "PT1S2M",
            "00:15:00",
            "P99999999999999D",
            "PT1.12345678S",
        ] {
            assert!(IsoDuration::parse(bad).is_err(), "{bad} should be rejected");
        }
    }
}
