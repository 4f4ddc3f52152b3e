//! A job's options as the outbox stores them ([`JobOptions`]): the same as
//! [`echomq::EnqueueOptions`], but a value that survives a trip through a
//! Postgres row.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The longest delay (or run-at time ahead) accepted, echomq's own bound.
pub const MAX_DELAY: Duration = echomq::limits::MAX_DELAY;
/// The longest job id, dedup id, lane or traceparent accepted, in bytes (echomq's bound).
pub const MAX_ID_BYTES: usize = 256;
/// The longest job kind accepted, in bytes (echomq's bound).
pub const MAX_KIND_BYTES: usize = 128;
/// The longest queue name accepted, in bytes (echomq's bound).
pub const MAX_QUEUE_NAME_BYTES: usize = 200;

/// The layout version of [`Stored`]: a relay refuses (marks failed) a row
/// written by a newer layout rather than drop options it does not know.
const LAYOUT: u32 = 1;

/// Options for one job written to the outbox: the
/// [`echomq::EnqueueOptions`] a relay enqueues it with. Build with
/// [`JobOptions::new`] and chain setters; values are checked when the row
/// is inserted ([`Outbox::enqueue`](crate::Outbox::enqueue)).
///
/// ```
/// use std::time::Duration;
/// let opts = echomq_outbox::JobOptions::new()
///     .id("welcome-ada")
///     .delay(Duration::from_secs(30))
///     .priority(5)
///     .kind("welcome_email");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct JobOptions {
    /// The job id; `None`: a fresh UUID made by Postgres at the insert.
    pub(crate) id: Option<String>,
    /// Due this long after the insert (Postgres's clock).
    pub(crate) delay: Option<Duration>,
    /// Due at this time (compared with Postgres's clock by the relay).
    pub(crate) run_at: Option<SystemTime>,
    /// Everything that rides in the row's `options` column.
    pub(crate) stored: Stored,
}

/// The `options` column: what the relay needs besides the id and due time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Stored {
    /// The layout; a row inserted with the column's default (`{}`) is layout 1.
    #[serde(default = "first_layout")]
    pub v: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_stalls: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup: Option<String>,
    /// The dedup marker's TTL; `None` with a dedup id: until the job finishes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replace_waiting: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// A by-states unique mode ([`echomq::Unique`]): the states in which the
    /// job holds its dedup id (the period rides in `dedup_ttl_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_states: Option<Vec<echomq::JobState>>,
    /// The job's expiry, counted from the insert (Postgres's clock), as
    /// [`echomq::EnqueueOptions::discard_after`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discard_after_ms: Option<u64>,
}

fn first_layout() -> u32 {
    1
}

fn is_zero(p: &i8) -> bool {
    *p == 0
}

impl Default for Stored {
    fn default() -> Self {
        Stored {
            v: LAYOUT,
            priority: 0,
            lane: None,
            kind: None,
            max_attempts: None,
            max_stalls: None,
            timeout_ms: None,
            dedup: None,
            dedup_ttl_ms: None,
            replace_waiting: false,
            traceparent: None,
            unique_states: None,
            discard_after_ms: None,
        }
    }
}

impl JobOptions {
    /// Default options: a fresh id, due at once, priority 0, the queue's limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// A caller-chosen job id (not all digits: echomq mints those). As with
    /// [`EnqueueOptions::id`](echomq::EnqueueOptions::id), a second row with
    /// an id whose job still exists makes no second job.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Due `delay` after the row is inserted, by Postgres's clock (at most
    /// [`MAX_DELAY`]); a relay that moves the row later enqueues it with
    /// what is left. Not together with [`run_at`](Self::run_at).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Due at `at` (by Postgres's clock when the relay moves the row; a
    /// time already past is due at once). Not together with
    /// [`delay`](Self::delay).
    pub fn run_at(mut self, at: SystemTime) -> Self {
        self.run_at = Some(at);
        self
    }

    /// As [`EnqueueOptions::priority`](echomq::EnqueueOptions::priority).
    pub fn priority(mut self, priority: i8) -> Self {
        self.stored.priority = priority;
        self
    }

    /// As [`EnqueueOptions::lane`](echomq::EnqueueOptions::lane).
    pub fn lane(mut self, lane: impl Into<String>) -> Self {
        self.stored.lane = Some(lane.into());
        self
    }

    /// As [`EnqueueOptions::kind`](echomq::EnqueueOptions::kind).
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.stored.kind = Some(kind.into());
        self
    }

    /// As [`EnqueueOptions::max_attempts`](echomq::EnqueueOptions::max_attempts).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.stored.max_attempts = Some(n);
        self
    }

    /// As [`EnqueueOptions::max_stalls`](echomq::EnqueueOptions::max_stalls).
    pub fn max_stalls(mut self, n: u32) -> Self {
        self.stored.max_stalls = Some(n);
        self
    }

    /// As [`EnqueueOptions::timeout`](echomq::EnqueueOptions::timeout)
    /// (kept to the millisecond).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.stored.timeout_ms = Some(millis(timeout));
        self
    }

    /// As [`EnqueueOptions::dedup`](echomq::EnqueueOptions::dedup). A row
    /// with a dedup id of its own gets no redelivery guard marker from the
    /// relay ([`RelayOptions::redelivery_guard`](crate::RelayOptions::redelivery_guard)).
    pub fn dedup(mut self, dedup_id: impl Into<String>) -> Self {
        self.stored.dedup = Some(dedup_id.into());
        self.stored.dedup_ttl_ms = None;
        self.stored.unique_states = None;
        self
    }

    /// As [`EnqueueOptions::unique`](echomq::EnqueueOptions::unique): the
    /// dedup id with a chosen lifetime ([`echomq::Unique`]). A period counts
    /// from the relay's enqueue, not from the insert.
    pub fn unique(mut self, dedup_id: impl Into<String>, unique: echomq::Unique) -> Self {
        self.stored.dedup = Some(dedup_id.into());
        self.stored.dedup_ttl_ms = unique.period().map(millis);
        self.stored.unique_states = unique.states();
        self
    }

    /// As [`EnqueueOptions::discard_after`](echomq::EnqueueOptions::discard_after),
    /// counted from the insert by Postgres's clock (as a delay is): a row
    /// relayed after its expiry becomes a job that ends expired at once, so
    /// echomq counts it, and it never runs.
    pub fn discard_after(mut self, after: Duration) -> Self {
        self.stored.discard_after_ms = Some(millis(after));
        self
    }

    /// As [`EnqueueOptions::dedup_for`](echomq::EnqueueOptions::dedup_for)
    /// (the TTL kept to the millisecond, at least 1 ms). The TTL counts
    /// from the relay's enqueue, not from the insert.
    pub fn dedup_for(mut self, dedup_id: impl Into<String>, ttl: Duration) -> Self {
        self.stored.dedup = Some(dedup_id.into());
        self.stored.dedup_ttl_ms = Some(millis(ttl));
        self.stored.unique_states = None;
        self
    }

    /// As [`EnqueueOptions::replace_waiting`](echomq::EnqueueOptions::replace_waiting).
    pub fn replace_waiting(mut self, replace: bool) -> Self {
        self.stored.replace_waiting = replace;
        self
    }

    /// As [`EnqueueOptions::traceparent`](echomq::EnqueueOptions::traceparent).
    pub fn traceparent(mut self, traceparent: impl Into<String>) -> Self {
        self.stored.traceparent = Some(traceparent.into());
        self
    }

    /// Checks what can be checked without a server, so a bad value fails
    /// the caller's insert instead of parking the row as failed later.
    pub(crate) fn check(&self) -> Result<()> {
        if let Some(id) = &self.id {
            text("job id", id, MAX_ID_BYTES)?;
            if id.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid("job id", "must not be all digits (echomq mints those)"));
            }
        }
        if self.delay.is_some() && self.run_at.is_some() {
            return Err(invalid("run_at", "give either a delay or a run-at time, not both"));
        }
        if self.delay.is_some_and(|d| d > MAX_DELAY) {
            return Err(invalid("delay", format!("must be at most {MAX_DELAY:?}")));
        }
        if let Some(at) = self.run_at {
            if at.duration_since(UNIX_EPOCH).is_err() {
                return Err(invalid("run_at", "must not be before the Unix epoch"));
            }
            if at
                .duration_since(SystemTime::now())
                .is_ok_and(|ahead| ahead > MAX_DELAY)
            {
                return Err(invalid("run_at", format!("must be at most {MAX_DELAY:?} ahead")));
            }
        }
        let s = &self.stored;
        if let Some(lane) = &s.lane {
            text("lane", lane, MAX_ID_BYTES)?;
        }
        if let Some(kind) = &s.kind {
            text("kind", kind, MAX_KIND_BYTES)?;
        }
        if let Some(dedup) = &s.dedup {
            text("dedup id", dedup, MAX_ID_BYTES)?;
        }
        if let Some(ttl) = s.dedup_ttl_ms
            && (ttl == 0 || ttl > millis(MAX_DELAY))
        {
            return Err(invalid(
                "dedup_for",
                format!("the TTL must be within 1ms..={MAX_DELAY:?}"),
            ));
        }
        if s.unique_states.as_ref().is_some_and(Vec::is_empty) {
            return Err(invalid(
                "unique states",
                "name at least one state in which the job keeps the id",
            ));
        }
        if let Some(ms) = s.discard_after_ms {
            let delay = self.delay.map_or(0, millis);
            if ms == 0 || ms > millis(MAX_DELAY) {
                return Err(invalid("discard_after", format!("must be within 1ms..={MAX_DELAY:?}")));
            }
            if ms <= delay {
                return Err(invalid(
                    "discard_after",
                    "the job would expire before it is due: make it longer than the delay",
                ));
            }
        }
        if s.replace_waiting && s.dedup.is_none() {
            return Err(invalid("replace_waiting", "needs a dedup id (dedup or dedup_for)"));
        }
        if let Some(tp) = &s.traceparent {
            text("traceparent", tp, MAX_ID_BYTES)?;
        }
        if s.max_attempts == Some(0) {
            return Err(invalid("max_attempts", "must be at least 1"));
        }
        if s.timeout_ms == Some(0) {
            return Err(invalid("timeout", "must be at least 1ms"));
        }
        Ok(())
    }

    /// The due time as the insert binds it: a delay in ms, or a run-at
    /// time in ms since the Unix epoch.
    pub(crate) fn due(&self) -> (Option<i64>, Option<f64>) {
        let delay = self.delay.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let at = self
            .run_at
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as f64);
        (delay, at)
    }
}

impl Stored {
    /// The options a relay enqueues a row with. `delay` is what is left of
    /// the row's due time, `age` the time since its insert (both on
    /// Postgres's clock); `guard` the redelivery guard's marker TTL.
    pub(crate) fn enqueue_options(
        &self,
        job_id: &str,
        mut delay: Duration,
        age: Duration,
        guard: Option<Duration>,
    ) -> Result<echomq::EnqueueOptions> {
        if self.v != LAYOUT {
            return Err(invalid(
                "options",
                format!("layout {} is not this relay's ({LAYOUT}): upgrade the relay", self.v),
            ));
        }
        let mut expiry = None;
        if let Some(ms) = self.discard_after_ms {
            // What is left of the expiry; a row relayed too late still becomes
            // a job, one that ends expired at once (never run, but counted).
            let left = Duration::from_millis(ms).saturating_sub(age);
            if left <= delay {
                delay = Duration::ZERO;
                expiry = Some(Duration::from_millis(1));
            } else {
                expiry = Some(left);
            }
        }
        let mut o = echomq::EnqueueOptions::new().id(job_id).priority(self.priority);
        if let Some(e) = expiry {
            o = o.discard_after(e);
        }
        if !delay.is_zero() {
            o = o.delay(delay);
        }
        if let Some(lane) = &self.lane {
            o = o.lane(lane);
        }
        if let Some(kind) = &self.kind {
            o = o.kind(kind);
        }
        if let Some(n) = self.max_attempts {
            o = o.max_attempts(n);
        }
        if let Some(n) = self.max_stalls {
            o = o.max_stalls(n);
        }
        if let Some(ms) = self.timeout_ms {
            o = o.timeout(Duration::from_millis(ms));
        }
        o = match (&self.dedup, self.dedup_ttl_ms, guard) {
            (Some(d), ttl, _) if self.unique_states.is_some() => {
                let mut u = echomq::Unique::by_states(self.unique_states.as_deref().unwrap_or_default());
                if let Some(ms) = ttl {
                    u = u.within(Duration::from_millis(ms));
                }
                o.unique(d, u)
            }
            (Some(d), None, _) => o.dedup(d),
            (Some(d), Some(ms), _) => o.dedup_for(d, Duration::from_millis(ms)),
            (None, _, Some(ttl)) => o.dedup_for(guard_key(job_id), ttl),
            (None, _, None) => o,
        };
        if self.replace_waiting {
            o = o.replace_waiting(true);
        }
        if let Some(tp) = &self.traceparent {
            o = o.traceparent(tp);
        }
        Ok(o)
    }
}

/// The dedup id of a row's redelivery guard marker.
pub(crate) fn guard_key(job_id: &str) -> String {
    format!("echomq-outbox:{job_id}")
}

/// Checks a queue name as echomq does (non-empty, at most
/// [`MAX_QUEUE_NAME_BYTES`], no braces, no control characters).
pub(crate) fn check_queue(name: &str) -> Result<()> {
    text("queue name", name, MAX_QUEUE_NAME_BYTES)?;
    if name.contains(['{', '}']) {
        return Err(invalid(
            "queue name",
            "must not contain '{' or '}' (they delimit the hash tag)",
        ));
    }
    Ok(())
}

fn text(name: &'static str, value: &str, max: usize) -> Result<()> {
    if value.is_empty() {
        Err(invalid(name, "must not be empty"))
    } else if value.len() > max {
        Err(invalid(name, format!("must be at most {max} bytes")))
    } else if value.chars().any(char::is_control) {
        Err(invalid(name, "must not contain control characters"))
    } else {
        Ok(())
    }
}

fn invalid(name: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidOption {
        name,
        reason: reason.into(),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A bad option fails at the insert, with the option's name.
    #[test]
    fn check_names_the_bad_option() {
        let bad = [
            (JobOptions::new().id(""), "job id"),
            (JobOptions::new().id("123"), "job id"),
            (
                JobOptions::new()
                    .delay(Duration::from_secs(1))
                    .run_at(SystemTime::now()),
                "run_at",
            ),
            (JobOptions::new().delay(MAX_DELAY + Duration::from_secs(1)), "delay"),
            (JobOptions::new().kind("a\nb"), "kind"),
            (JobOptions::new().replace_waiting(true), "replace_waiting"),
            (JobOptions::new().dedup_for("d", Duration::ZERO), "dedup_for"),
            (JobOptions::new().max_attempts(0), "max_attempts"),
        ];
        for (opts, name) in bad {
            match opts.check() {
                Err(Error::InvalidOption { name: n, .. }) => assert_eq!(n, name, "{opts:?}"),
                other => panic!("{opts:?}: {other:?}"),
            }
        }
        JobOptions::new()
            .id("a-1")
            .kind("k")
            .dedup("d")
            .replace_waiting(true)
            .check()
            .unwrap();
    }

    // The stored column survives JSON, and a newer layout is refused, not half-read.
    #[test]
    fn stored_round_trips_and_refuses_newer_layouts() {
        let o = JobOptions::new()
            .priority(-3)
            .lane("t1")
            .dedup_for("x", Duration::from_secs(5))
            .max_attempts(2);
        let json = serde_json::to_value(&o.stored).unwrap();
        let back: Stored = serde_json::from_value(json).unwrap();
        assert_eq!(back, o.stored);
        let _ = back.enqueue_options("j", Duration::ZERO, Duration::ZERO, None).unwrap();
        let newer = Stored {
            v: LAYOUT + 1,
            ..Stored::default()
        };
        assert!(
            newer
                .enqueue_options("j", Duration::ZERO, Duration::ZERO, None)
                .is_err()
        );
        assert!(serde_json::from_str::<Stored>(r#"{"v":1,"flow":"f"}"#).is_err());
    }

    // The guard marker is added only when the row has no dedup id of its own.
    #[test]
    fn guard_only_without_own_dedup() {
        let dbg = |o: echomq::EnqueueOptions| format!("{o:?}");
        let guard = Some(Duration::from_secs(60));
        let plain = Stored::default()
            .enqueue_options("j1", Duration::ZERO, Duration::ZERO, guard)
            .unwrap();
        assert!(dbg(plain).contains(&guard_key("j1")));
        let own = JobOptions::new()
            .dedup("mine")
            .stored
            .enqueue_options("j1", Duration::ZERO, Duration::ZERO, guard)
            .unwrap();
        let s = dbg(own);
        assert!(s.contains("mine") && !s.contains(&guard_key("j1")), "{s}");
    }
}
