//! When a schedule's ticks fall: a cron expression read on the wall clock
//! of a time zone, turned into instants (milliseconds since the Unix
//! epoch). Pure functions of their inputs, so every scheduler process of
//! one build computes the same ticks; the tests here pin down the
//! daylight-saving behaviour the guide documents ([`crate::guide::schedules`]).
//!
//! Expressions are parsed by `croner` (5 fields: minute to day of week, at
//! second 0; 6 fields: seconds first; 7 fields: a year last; `@hourly`
//! and the other nicknames; `L`, `W`, `#`), zones come from the IANA
//! database bundled into the build by `jiff` (never the host's copy, so
//! hosts with different tzdata still agree).

use std::sync::LazyLock;

use croner::Cron;
use croner::parser::{CronParser, Seconds};
use jiff::Timestamp;
use jiff::tz::{TimeZone, TimeZoneDatabase};

use crate::error::{Error, Result};

/// The time zone a schedule without one uses.
pub const DEFAULT_TIME_ZONE: &str = "UTC";

/// The IANA database compiled into this build.
static ZONES: LazyLock<TimeZoneDatabase> = LazyLock::new(TimeZoneDatabase::bundled);

/// A parsed expression and its zone.
#[derive(Debug, Clone)]
pub(crate) struct Timing {
    cron: Cron,
    zone: TimeZone,
}

impl Timing {
    /// Parses `expr` and looks up `zone`.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] naming the expression or the zone and what
    /// is wrong with it.
    pub(crate) fn parse(expr: &str, zone: &str) -> Result<Timing> {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expr)
            .map_err(|e| Error::InvalidOption {
                name: "cron expression",
                reason: format!("{:?}: {e}", crate::error::excerpt(expr)),
            })?;
        let zone = zone_named(zone)?;
        Ok(Timing { cron, zone })
    }

    /// The first tick strictly after `ms`, or `None` when none follows
    /// (an expression with a year field that has passed, or past year
    /// 5000).
    pub(crate) fn next_after(&self, ms: u64) -> Option<u64> {
        // Ticks fall on whole seconds: after second s (floored) is after ms.
        let start = self.at_second(ms / 1000)?;
        let t = self.cron.find_next_occurrence(&start, false).ok()?;
        millis(t.timestamp())
    }

    /// The last tick at or before `ms`, or `None` when none precedes it.
    pub(crate) fn latest_at_or_before(&self, ms: u64) -> Option<u64> {
        let start = self.at_second(ms / 1000)?;
        let t = self.cron.find_previous_occurrence(&start, true).ok()?;
        millis(t.timestamp()).filter(|&t| t <= ms)
    }

    /// Second `s` since the epoch on this zone's wall clock.
    fn at_second(&self, s: u64) -> Option<jiff::Zoned> {
        let ts = Timestamp::from_second(i64::try_from(s).ok()?).ok()?;
        Some(ts.to_zoned(self.zone.clone()))
    }
}

/// The zone named `name` in the bundled IANA database.
pub(crate) fn zone_named(name: &str) -> Result<TimeZone> {
    ZONES.get(name).map_err(|e| Error::InvalidOption {
        name: "time zone",
        reason: format!(
            "{:?} is not a time zone of the IANA database (e.g. \"Europe/Berlin\", \"UTC\"): {e}",
            crate::error::excerpt(name)
        ),
    })
}

fn millis(t: Timestamp) -> Option<u64> {
    u64::try_from(t.as_millisecond()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Server ms of a UTC wall-clock time.
    fn utc(s: &str) -> u64 {
        let ts: Timestamp = s.parse().unwrap();
        ts.as_millisecond() as u64
    }

    /// The `n` ticks after `from`, as UTC instants ("2026-03-29T01:00:00Z").
    fn ticks(expr: &str, zone: &str, from: &str, n: usize) -> Vec<String> {
        let t = Timing::parse(expr, zone).unwrap();
        let mut at = utc(from);
        let mut out = Vec::new();
        for _ in 0..n {
            at = t.next_after(at).unwrap();
            out.push(Timestamp::from_millisecond(at as i64).unwrap().to_string());
        }
        out
    }

    // Five fields run at second 0, six take seconds first, seven a year; nicknames work.
    #[test]
    fn fields_and_nicknames() {
        assert_eq!(
            ticks("*/20 * * * *", "UTC", "2026-01-01T00:00:00Z", 2),
            ["2026-01-01T00:20:00Z", "2026-01-01T00:40:00Z"]
        );
        assert_eq!(
            ticks("*/15 * * * * *", "UTC", "2026-01-01T00:00:00.500Z", 3),
            ["2026-01-01T00:00:15Z", "2026-01-01T00:00:30Z", "2026-01-01T00:00:45Z"]
        );
        assert_eq!(
            ticks("0 0 12 1 1 * 2030", "UTC", "2026-01-01T00:00:00Z", 1),
            ["2030-01-01T12:00:00Z"]
        );
        assert_eq!(
            ticks("@hourly", "UTC", "2026-01-01T00:00:00Z", 1),
            ["2026-01-01T01:00:00Z"]
        );
    }

    // next_after is strict and latest_at_or_before inclusive, also within a second.
    #[test]
    fn bounds_are_exact() {
        let t = Timing::parse("* * * * * *", "UTC").unwrap();
        let s = utc("2026-01-01T00:00:10Z");
        assert_eq!(t.next_after(s), Some(s + 1000));
        assert_eq!(t.next_after(s + 999), Some(s + 1000));
        assert_eq!(t.latest_at_or_before(s), Some(s));
        assert_eq!(t.latest_at_or_before(s + 999), Some(s));
        assert_eq!(t.latest_at_or_before(s - 1), Some(s - 1000));
        let once = Timing::parse("0 0 0 1 1 * 2020", "UTC").unwrap();
        assert_eq!(once.next_after(utc("2026-01-01T00:00:00Z")), None);
        assert_eq!(
            once.latest_at_or_before(utc("2026-01-01T00:00:00Z")),
            Some(utc("2020-01-01T00:00:00Z"))
        );
    }

    // Europe/Berlin springs forward on 2026-03-29 (02:00 CET becomes 03:00
    // CEST): a time of day inside the gap runs once, at the first instant
    // after it (03:00 CEST); times the gap skips in a repeating pattern are
    // skipped; every other tick keeps its wall-clock time.
    #[test]
    fn spring_forward_in_berlin() {
        // Daily at 02:30: the day before and after at 02:30 local, on the
        // day itself at 03:00 CEST (01:00 UTC).
        assert_eq!(
            ticks("0 30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z", 3),
            ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
        );
        // Daily at 01:30 and 03:30 are untouched (00:30 UTC, then 01:30 UTC in CEST).
        assert_eq!(
            ticks("0 30 1,3 * * *", "Europe/Berlin", "2026-03-28T23:00:00Z", 2),
            ["2026-03-29T00:30:00Z", "2026-03-29T01:30:00Z"]
        );
        // Two hours a day (not a single time of day): the tick inside the
        // gap is skipped, like the repeating patterns below.
        assert_eq!(
            ticks("0 30 1,2 * * *", "Europe/Berlin", "2026-03-28T23:00:00Z", 2),
            ["2026-03-29T00:30:00Z", "2026-03-29T23:30:00Z"]
        );
        // Every 30 minutes: 02:00 and 02:30 do not exist that night, so
        // 01:30 CET is followed by 03:00 CEST, half an hour later in real time.
        assert_eq!(
            ticks("0 */30 * * * *", "Europe/Berlin", "2026-03-29T00:00:00Z", 4),
            [
                "2026-03-29T00:30:00Z", // 01:30 CET
                "2026-03-29T01:00:00Z", // 03:00 CEST
                "2026-03-29T01:30:00Z", // 03:30 CEST
                "2026-03-29T02:00:00Z", // 04:00 CEST
            ]
        );
    }

    // Europe/Berlin falls back on 2026-10-25 (03:00 CEST becomes 02:00
    // CET, so 02:00-02:59 happens twice): a fixed time of day in the
    // repeated hour runs once, at its first occurrence; a pattern with a
    // wildcard or step in its hour, minute or second runs in both passes.
    #[test]
    fn fall_back_in_berlin() {
        assert_eq!(
            ticks("0 30 2 * * *", "Europe/Berlin", "2026-10-23T12:00:00Z", 3),
            ["2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
        );
        assert_eq!(
            ticks("0 30 1,2 * * *", "Europe/Berlin", "2026-10-24T22:00:00Z", 4),
            [
                "2026-10-24T23:30:00Z", // 01:30 CEST
                "2026-10-25T00:30:00Z", // 02:30 CEST
                "2026-10-25T01:30:00Z", // 02:30 CET, the second pass
                "2026-10-26T00:30:00Z", // 01:30 CET the next day
            ]
        );
        assert_eq!(
            ticks("0 30 * * * *", "Europe/Berlin", "2026-10-24T23:00:00Z", 4),
            [
                "2026-10-24T23:30:00Z", // 01:30 CEST
                "2026-10-25T00:30:00Z", // 02:30 CEST
                "2026-10-25T01:30:00Z", // 02:30 CET, the second pass
                "2026-10-25T02:30:00Z", // 03:30 CET
            ]
        );
        // Going back from after the repeated hour finds the second pass first.
        let t = Timing::parse("0 30 2 * * *", "Europe/Berlin").unwrap();
        assert_eq!(
            t.latest_at_or_before(utc("2026-10-25T12:00:00Z")),
            Some(utc("2026-10-25T00:30:00Z"))
        );
    }

    // Ticks computed one after another always move forward in real time, across both transitions.
    #[test]
    fn ticks_only_move_forward() {
        for expr in [
            "* * * * * *",
            "0 */7 * * * *",
            "0 0,30 1-3 * * *",
            "0 30 2 * * *",
            "0 0 * * * *",
        ] {
            let t = Timing::parse(expr, "Europe/Berlin").unwrap();
            for (from, to) in [
                ("2026-03-29T00:30:00Z", "2026-03-29T01:30:00Z"),
                ("2026-10-25T00:00:00Z", "2026-10-25T01:30:00Z"),
            ] {
                let (mut at, end) = (utc(from), utc(to));
                while at < end {
                    let next = t.next_after(at).unwrap();
                    assert!(next > at, "{expr}: {next} after {at}");
                    assert_eq!(t.latest_at_or_before(next), Some(next), "{expr}");
                    at = next;
                }
            }
        }
    }

    // A bad expression or zone is a typed error naming what is wrong.
    #[test]
    fn bad_input_is_refused() {
        for expr in ["", "* * *", "61 * * * *", "* * * * * * * *", "nonsense"] {
            let e = Timing::parse(expr, "UTC").unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::InvalidOption {
                        name: "cron expression",
                        ..
                    }
                ),
                "{expr:?}: {e}"
            );
        }
        let e = Timing::parse("* * * * *", "Mars/Olympus").unwrap_err();
        assert!(matches!(e, Error::InvalidOption { name: "time zone", .. }), "{e}");
    }
}
