//! [`Schedule`]: what a cron schedule enqueues, and when.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::missed::{DEFAULT_GRACE, MIN_GRACE, Missed};
use super::timing::{DEFAULT_TIME_ZONE, Timing};
use crate::error::Result;
use crate::limits::{Backoff, Limits, MAX_DELAY};

pub use crate::validate::MAX_SCHEDULE_NAME_BYTES;

/// The most ticks one [`Schedule::ticks_after`] previews (a preview is
/// computed here, in the caller's task: it must stay short).
pub const MAX_PREVIEW_TICKS: usize = 10_000;

/// A cron schedule: its name, its cron expression and time zone, what to
/// do about missed ticks, and the options of the jobs it makes. Store it
/// with [`Queue::upsert_schedule`](crate::Queue::upsert_schedule) (with the
/// payload every job carries); values are checked there.
///
/// The expression has 5 fields (minute, hour, day of month, month, day of
/// week; at second 0), 6 (a seconds field first) or 7 (a year last), or is
/// a nickname (`@yearly`, `@monthly`, `@weekly`, `@daily`, `@hourly`); `L`,
/// `W`, `#` and `+` work as in croner (`L` the last day, `5#2` the second
/// Friday, `+` joins day of month and day of week with AND instead of OR).
/// It is read on the wall clock of the time zone (default UTC); the guide's
/// [schedules](crate::guide::schedules) chapter says what happens at daylight-saving changes.
///
/// ```
/// use std::time::Duration;
/// use echomq::schedule::{Missed, Schedule};
/// // Every day at 02:30 in Berlin; a night the workers were down is skipped.
/// let nightly = Schedule::new("nightly-report", "0 30 2 * * *")
///     .time_zone("Europe/Berlin")
///     .missed(Missed::Skip)
///     .priority(5)
///     .max_attempts(5)
///     .timeout(Duration::from_secs(600));
/// // Every 10 seconds, in UTC.
/// let poll = Schedule::new("poll-feeds", "*/10 * * * * *");
/// # let _ = (nightly, poll);
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Schedule {
    pub(crate) name: String,
    pub(crate) cron: String,
    pub(crate) time_zone: String,
    pub(crate) missed: Missed,
    pub(crate) grace: Duration,
    pub(crate) priority: i8,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) max_stalls: Option<u32>,
    pub(crate) backoff: Option<Backoff>,
    pub(crate) timeout: Option<Duration>,
    /// The jobs' kind (a router picks their handler by it).
    pub(crate) kind: Option<String>,
}

/// A schedule whose values passed [`Schedule::check`].
pub(crate) struct Checked {
    pub timing: Timing,
    pub grace_ms: u64,
}

impl Schedule {
    /// A schedule named `name` (unique within its queue: at most
    /// [`MAX_SCHEDULE_NAME_BYTES`], no control characters) on the cron
    /// expression `cron`, in UTC, with the defaults (see each setter).
    pub fn new(name: impl Into<String>, cron: impl Into<String>) -> Self {
        Schedule {
            name: name.into(),
            cron: cron.into(),
            time_zone: DEFAULT_TIME_ZONE.to_owned(),
            missed: Missed::default(),
            grace: DEFAULT_GRACE,
            priority: 0,
            max_attempts: None,
            max_stalls: None,
            backoff: None,
            timeout: None,
            kind: None,
        }
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The IANA time zone whose wall clock the expression is read on
    /// (`"Europe/Berlin"`, `"America/New_York"`; default `"UTC"`). The
    /// zone rules are the IANA database bundled into this build of echomq,
    /// the same on every host.
    pub fn time_zone(mut self, zone: impl Into<String>) -> Self {
        self.time_zone = zone.into();
        self
    }

    /// What to do about missed ticks (default [`Missed::RunLatest`]).
    pub fn missed(mut self, policy: Missed) -> Self {
        self.missed = policy;
        self
    }

    /// How late a tick may be taken and still count as on time (default
    /// [`DEFAULT_GRACE`]; [`MIN_GRACE`] to
    /// [`MAX_DELAY`](crate::limits::MAX_DELAY)). A tick taken later is
    /// missed (see [`Missed`]). After an outage shorter than the grace,
    /// every tick of it still makes its job, so a long grace on a frequent
    /// schedule means a burst of jobs when schedulers come back.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The jobs' priority (default 0; see
    /// [`EnqueueOptions::priority`](crate::EnqueueOptions::priority)).
    pub fn priority(mut self, priority: i8) -> Self {
        self.priority = priority;
        self
    }

    /// The jobs' `max_attempts` (default: the queue's, as the handle
    /// storing the schedule has it).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// The jobs' `max_stalls` (default: the queue's).
    pub fn max_stalls(mut self, n: u32) -> Self {
        self.max_stalls = Some(n);
        self
    }

    /// The jobs' retry backoff (default: the queue's).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// The jobs' per-attempt timeout (default: the queue's; see
    /// [`EnqueueOptions::timeout`](crate::EnqueueOptions::timeout)).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The jobs' kind (default: none; see
    /// [`EnqueueOptions::kind`](crate::EnqueueOptions::kind)), for a
    /// worker that routes by kind ([`Kinds`](crate::Kinds)):
    ///
    /// ```
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct Report;
    /// # impl echomq::JobKind for Report { const KIND: &'static str = "report"; }
    /// use echomq::JobKind;
    /// let nightly = echomq::schedule::Schedule::new("nightly", "0 0 2 * * *").kind(Report::KIND);
    /// ```
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// The first `n` ticks after `after`, computed here, without a server:
    /// a preview of what the schedule will do (daylight-saving changes
    /// included). Fewer come back when no more follow.
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use echomq::schedule::Schedule;
    /// let daily = Schedule::new("d", "0 30 2 * * *").time_zone("Europe/Berlin");
    /// // From 2026-03-28T12:00:00Z: on the 29th, 02:30 does not exist in
    /// // Berlin (the clocks go from 02:00 to 03:00), so the tick is 03:00 CEST.
    /// let ticks = daily.ticks_after(UNIX_EPOCH + Duration::from_secs(1_774_699_200), 2)?;
    /// assert_eq!(ticks[0], UNIX_EPOCH + Duration::from_secs(1_774_746_000)); // 01:00 UTC
    /// # Ok::<(), echomq::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a bad
    /// expression or time zone, or `n` over [`MAX_PREVIEW_TICKS`].
    pub fn ticks_after(&self, after: SystemTime, n: usize) -> Result<Vec<SystemTime>> {
        crate::validate::count("preview ticks", n, 0, MAX_PREVIEW_TICKS)?;
        let timing = Timing::parse(&self.cron, &self.time_zone)?;
        let mut at = after.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let mut out = Vec::new();
        while out.len() < n {
            let Some(t) = timing.next_after(at) else { break };
            out.push(UNIX_EPOCH + Duration::from_millis(t));
            at = t;
        }
        Ok(out)
    }

    /// Checks every value: the name, the expression, the zone, the grace
    /// and the job options.
    pub(crate) fn check(&self) -> Result<Checked> {
        crate::validate::schedule_name(&self.name)?;
        let timing = Timing::parse(&self.cron, &self.time_zone)?;
        crate::validate::duration("grace", self.grace, MIN_GRACE, MAX_DELAY)?;
        if let Some(kind) = &self.kind {
            crate::validate::kind(kind)?;
        }
        if let Some(n) = self.max_attempts {
            Limits::check_attempts(n)?;
        }
        if let Some(n) = self.max_stalls {
            Limits::check_stalls(n)?;
        }
        Limits {
            backoff: self.backoff.unwrap_or(crate::limits::DEFAULT_BACKOFF),
            timeout: self.timeout,
            ..Limits::default()
        }
        .check()?;
        Ok(Checked {
            timing,
            grace_ms: self.grace.as_millis() as u64,
        })
    }

    /// The jobs' limits: these options over the queue's.
    pub(crate) fn limits(&self, queue: &Limits) -> Limits {
        Limits {
            max_attempts: self.max_attempts.unwrap_or(queue.max_attempts),
            max_stalls: self.max_stalls.unwrap_or(queue.max_stalls),
            backoff: self.backoff.unwrap_or(queue.backoff),
            timeout: self.timeout.or(queue.timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    // Every bad value is a typed error naming the setting, found before anything is sent.
    #[test]
    fn bad_values_are_refused() {
        let ok = || Schedule::new("s", "* * * * *");
        assert!(ok().check().is_ok());
        let cases: [(Schedule, &str); 7] = [
            (ok().time_zone("Nowhere/Town"), "time zone"),
            (Schedule::new("s", "* * * *"), "cron expression"),
            (ok().grace(Duration::from_millis(9_999)), "grace"),
            (ok().grace(MAX_DELAY + Duration::from_secs(1)), "grace"),
            (ok().max_attempts(0), "max_attempts"),
            (ok().timeout(Duration::ZERO), "timeout"),
            (ok().backoff(Backoff::Fixed(MAX_DELAY * 2)), "backoff"),
        ];
        for (s, want) in cases {
            match s.check() {
                Err(Error::InvalidOption { name, .. }) => assert_eq!(name, want),
                other => panic!("{want}: {:?}", other.map(|_| ())),
            }
        }
        for name in ["", "tab\there", &"x".repeat(201)] {
            assert!(
                matches!(
                    Schedule::new(name, "* * * * *").check(),
                    Err(Error::InvalidId {
                        what: "schedule name",
                        ..
                    })
                ),
                "{name:?}"
            );
        }
        // The longest name still makes job ids within the id limit.
        let long = "x".repeat(MAX_SCHEDULE_NAME_BYTES);
        assert!(super::super::job_id(&long, u64::MAX).len() <= crate::keys::MAX_ID_BYTES);
    }

    // The preview gives the ticks in order and stops when none follow.
    #[test]
    fn ticks_after_previews() {
        let t = Schedule::new("s", "0 0 12 1 1 * 2030-2031")
            .ticks_after(UNIX_EPOCH, 5)
            .unwrap();
        assert_eq!(t.len(), 2);
        assert!(t[0] < t[1]);
    }
}
