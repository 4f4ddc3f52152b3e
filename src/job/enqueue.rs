//! What a producer asks of one enqueue ([`EnqueueOptions`]) and what it is
//! answered ([`Enqueued`]).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::job::Unique;
use crate::limits::{Backoff, Limits, MAX_DELAY};

/// Options for one enqueue. Build with [`EnqueueOptions::new`] and chain
/// setters; values are checked when the job is enqueued.
///
/// ```
/// use std::time::Duration;
/// let opts = echomq::EnqueueOptions::new()
///     .id("invoice-2231")
///     .delay(Duration::from_secs(30))
///     .priority(5)
///     .max_attempts(3);
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct EnqueueOptions {
    pub(crate) id: Option<String>,
    pub(crate) delay: Duration,
    /// Run at this time (ms since the Unix epoch) instead of after `delay`.
    pub(crate) run_at: Option<std::time::SystemTime>,
    pub(crate) priority: i8,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) max_stalls: Option<u32>,
    pub(crate) backoff: Option<Backoff>,
    pub(crate) timeout: Option<Duration>,
    /// The dedup id, and how long the job holds it.
    pub(crate) dedup: Option<(String, Unique)>,
    /// Debounce: a waiting holder of the dedup marker takes this enqueue's
    /// payload and due time instead of the enqueue answering `Deduplicated`.
    pub(crate) replace_waiting: bool,
    /// The job's lane (tenant, customer, group): claims take lanes in turn.
    pub(crate) lane: Option<String>,
    /// The job's kind: a router runs the kind's handler.
    pub(crate) kind: Option<String>,
    /// The W3C traceparent of the enqueuing span, handed to each claim.
    pub(crate) traceparent: Option<String>,
    /// When a job not started by then never runs (`lua/lib/expiry.lua`).
    pub(crate) expiry: Option<Expiry>,
    /// The job's sequence key: strict FIFO per key (`lua/lib/sequence.lua`).
    pub(crate) sequence: Option<String>,
}

/// An expiry as given: after a time counted from the server's now at
/// enqueue, or at a time on the server's clock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Expiry {
    After(Duration),
    At(std::time::SystemTime),
}

impl EnqueueOptions {
    /// Default options: a minted id, no delay, priority 0, and the queue's
    /// limits ([`QueueOptions`](crate::QueueOptions)).
    pub fn new() -> Self {
        Self::default()
    }

    /// A caller-chosen job id (not all digits: those are minted ids).
    /// Enqueueing the same id again while its record exists yields one job
    /// (the second call answers [`EnqueueStatus::Existing`]), which makes an
    /// enqueue whose reply was lost safe to retry. Once the record is gone
    /// (retention), the same id makes a new job; a worker still holding a
    /// lease of the old one cannot touch it (fencing tokens never repeat
    /// for a queue).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Run no earlier than `delay` from now, measured on the server's clock
    /// (at most [`MAX_DELAY`]).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Run no earlier than `at`, compared with the server's clock: the job
    /// is due when the server's `TIME` reaches `at` (a time already past
    /// runs now). The time itself comes from the caller, so a caller
    /// whose clock is off shifts it; [`delay`](Self::delay) is measured
    /// on the server alone. At most [`MAX_DELAY`] after the Unix epoch's
    /// present; not together with `delay`.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// let nine_tomorrow = SystemTime::now() + Duration::from_secs(86_400);
    /// let opts = echomq::EnqueueOptions::new().run_at(nine_tomorrow);
    /// ```
    pub fn run_at(mut self, at: std::time::SystemTime) -> Self {
        self.run_at = Some(at);
        self
    }

    /// Higher runs first; equal priorities run in enqueue order. Default 0.
    /// With lanes, priority orders the jobs within a lane (and within the
    /// jobs without a lane); it does not let one lane's jobs pass another
    /// lane's turn.
    pub fn priority(mut self, priority: i8) -> Self {
        self.priority = priority;
        self
    }

    /// The job's lane: a tenant, customer or group whose jobs share fairly
    /// with other lanes' ([`crate::guide::lanes`]). Claims take the lanes that
    /// have pending jobs in turn (weighted per lane, see
    /// [`Queue::set_lane_weight`](crate::Queue::set_lane_weight)), so one
    /// lane's backlog cannot starve another's, and a lane's cap
    /// ([`Queue::set_lane_cap`](crate::Queue::set_lane_cap)) bounds its
    /// active jobs across every consumer. Validated like an id (1 to
    /// [`MAX_ID_BYTES`](crate::keys::MAX_ID_BYTES) bytes, no control
    /// characters) when the job is enqueued. Default: none (the job takes
    /// its turn with the other jobs without a lane).
    ///
    /// ```
    /// let opts = echomq::EnqueueOptions::new().lane("customer-42");
    /// ```
    pub fn lane(mut self, lane: impl Into<String>) -> Self {
        self.lane = Some(lane.into());
        self
    }

    /// The job's sequence key: the jobs of one key run strictly one after
    /// another, in the order they were enqueued. The next job of a key
    /// starts only once the one before it has ended for good — completed,
    /// failed for good, cancelled, expired or removed — so also not while
    /// that one waits for a retry. Jobs of other keys, and jobs without
    /// one, run beside them as usual. Validated like an id when the job is
    /// enqueued; a job with a sequence takes no delay or run-at time (its
    /// turn decides when it runs). See the guide's
    /// [sequences chapter](crate::guide::sequences). Default: none.
    ///
    /// ```
    /// let opts = echomq::EnqueueOptions::new().sequence("account-42");
    /// ```
    pub fn sequence(mut self, key: impl Into<String>) -> Self {
        self.sequence = Some(key.into());
        self
    }

    /// The job's kind, recorded on the job (`JobInfo::kind`, `Job::kind`)
    /// for a router ([`Kinds`](crate::kinds::Kinds)) to pick its handler:
    /// 1 to [`MAX_KIND_BYTES`](crate::job::MAX_KIND_BYTES) bytes, no
    /// control characters, checked when the job is enqueued. Usually set
    /// for you from a typed job's [`JobKind::KIND`](crate::JobKind::KIND)
    /// by [`Queue::enqueue_job`](crate::Queue::enqueue_job). Default: none.
    ///
    /// ```
    /// let opts = echomq::EnqueueOptions::new().kind("send_email");
    /// ```
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// The W3C `traceparent` of the span that enqueues the job
    /// (`00-TRACE_ID-SPAN_ID-FLAGS`, lowercase hex: 2, 32, 16 and 2
    /// digits), kept with the job and handed to every claim of it
    /// ([`Job::traceparent`](crate::Job::traceparent), the job span's
    /// `traceparent` field), so the handler's span can join the trace of
    /// the request that enqueued it. Checked when the job is enqueued.
    ///
    /// Default: with feature `otel`, the current `tracing` span's
    /// OpenTelemetry context, if a tracing-opentelemetry layer gives it
    /// one, and the worker makes the job span a child of the traceparent
    /// (see the `otel` module); without the feature, none. Set it for a
    /// context that did not come from the current span (a message header,
    /// say): it wins over the current span's.
    ///
    /// ```
    /// let opts = echomq::EnqueueOptions::new()
    ///     .traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    /// ```
    pub fn traceparent(mut self, traceparent: impl Into<String>) -> Self {
        self.traceparent = Some(traceparent.into());
        self
    }

    /// Handler failures allowed before the job fails for good (1 to
    /// [`MAX_LIMIT`](crate::limits::MAX_LIMIT)); default: the queue's.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Expired leases tolerated before the job fails as "stalled" (0 to
    /// [`MAX_LIMIT`](crate::limits::MAX_LIMIT)); default: the queue's.
    pub fn max_stalls(mut self, n: u32) -> Self {
        self.max_stalls = Some(n);
        self
    }

    /// The delay before each retry of this job; default: the queue's.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// The longest one attempt's handler may run (1 ms to
    /// [`MAX_DELAY`]); at the timeout the handler is cancelled and the
    /// attempt counts as a failure with error `"timeout"`. Default: the
    /// queue's (none: only the lease bounds an attempt).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Producer dedup: while a marker for `dedup_id` stands, another enqueue
    /// with it returns the holder's id instead of a new job. The marker
    /// stands until the job finishes: "at most one such job waiting or
    /// running at a time".
    ///
    /// **Not for an HTTP `Idempotency-Key`**: a replay after the job
    /// finished makes a second job. Use [`dedup_for`](Self::dedup_for)
    /// with the replay window, or [`id`](Self::id) (see the guide's
    /// [In a web application](crate::guide::web_apps)).
    pub fn dedup(self, dedup_id: impl Into<String>) -> Self {
        self.unique(dedup_id, Unique::until_finished())
    }

    /// As [`dedup`](Self::dedup), but the marker stands for `ttl` (at least
    /// 1 ms, at most [`MAX_DELAY`]) whether or not the job has finished:
    /// [`Unique::for_period`].
    pub fn dedup_for(self, dedup_id: impl Into<String>, ttl: Duration) -> Self {
        self.unique(dedup_id, Unique::for_period(ttl))
    }

    /// Producer dedup with a chosen lifetime: while this job holds
    /// `dedup_id` as `unique` says (until it finishes, for a period, until
    /// it starts, while it runs, while its state is one of a set), another
    /// enqueue with it answers [`EnqueueStatus::Deduplicated`] with this
    /// job's id and writes nothing; after that the next one makes a new
    /// job, which takes the id over. [`Unique`]'s table says exactly what
    /// each mode holds. [`dedup`](Self::dedup) and
    /// [`dedup_for`](Self::dedup_for) are two of its modes; a later call
    /// of any of the three replaces an earlier one.
    ///
    /// ```
    /// use echomq::{EnqueueOptions, Unique};
    /// // A new export may queue while one runs, but never two waiting.
    /// let opts = EnqueueOptions::new().unique("export:user-9", Unique::until_started());
    /// ```
    pub fn unique(mut self, dedup_id: impl Into<String>, unique: Unique) -> Self {
        self.dedup = Some((dedup_id.into(), unique));
        self
    }

    /// Debounce ("replace") dedup: with [`dedup`](Self::dedup),
    /// [`dedup_for`](Self::dedup_for) or [`debounce`](Self::debounce), an
    /// enqueue that finds the dedup marker held by a job that is still
    /// *waiting* (state pending or delayed, which includes a job waiting
    /// for a retry or snoozed) updates that job instead of answering
    /// [`EnqueueStatus::Deduplicated`], and answers
    /// [`EnqueueStatus::Replaced`] with its id. In one atomic step on the
    /// server:
    ///
    /// - the job's payload becomes this enqueue's;
    /// - its due time becomes this enqueue's: with a [`delay`](Self::delay)
    ///   (counted from the server's now, so the wait restarts) or a
    ///   [`run_at`](Self::run_at) time still ahead, the job is delayed
    ///   until then, whether that is later or earlier than before;
    ///   otherwise (no delay, or a run-at time already past) it is pending
    ///   at once, and a job already pending keeps its place in line (a job
    ///   waiting out a retry backoff takes the new due time too);
    /// - the marker is set again as this enqueue asks: for its TTL from now
    ///   with `dedup_for`, until the job finishes with `dedup`/`debounce`;
    /// - everything else stays as the job has it: its id, kind, priority and
    ///   limits (`max_attempts`, `max_stalls`, `backoff`, `timeout`), its
    ///   created time, attempts, failures, stalls and errors. This
    ///   enqueue's own values for those (and its [`id`](Self::id)) are
    ///   ignored.
    ///
    /// A holder that is active, completed or failed (or whose record is
    /// gone) is left alone: the answer is `Deduplicated` and nothing is
    /// written, as without this option. So a payload enqueued while the
    /// job runs is dropped; a handler that must see every update should
    /// read the current state when it runs rather than trust the payload.
    ///
    /// Setting this without a dedup id is an [`Error::InvalidOption`] at
    /// enqueue.
    ///
    /// ```
    /// use std::time::Duration;
    /// // At most one pending refresh per user, carrying the newest data.
    /// let opts = echomq::EnqueueOptions::new().dedup("refresh:user-9").replace_waiting(true);
    /// // The same with a marker that stands 10 minutes after the last enqueue.
    /// let opts = echomq::EnqueueOptions::new()
    ///     .dedup_for("refresh:user-9", Duration::from_secs(600))
    ///     .replace_waiting(true);
    /// ```
    pub fn replace_waiting(mut self, replace: bool) -> Self {
        self.replace_waiting = replace;
        self
    }

    /// Debounce: runs one job `window` after the last of a burst of
    /// enqueues with `dedup_id`, with the last one's payload. Shorthand for
    /// `.dedup(dedup_id).delay(window).replace_waiting(true)` (see
    /// [`replace_waiting`](Self::replace_waiting) for exactly what a
    /// replace changes and keeps):
    ///
    /// - the first enqueue makes a job delayed by `window` and holds the
    ///   dedup marker until the job finishes;
    /// - each later enqueue with the same id while that job waits replaces
    ///   its payload and restarts the window (due = the server's now +
    ///   this enqueue's `window`), answering [`EnqueueStatus::Replaced`]
    ///   with the job's id;
    /// - once a worker has claimed the job, later enqueues answer
    ///   [`EnqueueStatus::Deduplicated`] and change nothing until it
    ///   finishes; after that the next enqueue makes a new job.
    ///
    /// `window` is the job's delay: at most [`MAX_DELAY`] (checked at
    /// enqueue, as [`delay`](Self::delay)), zero for no wait (the job is
    /// pending at once and takes newer payloads until it is claimed), and
    /// not together with [`run_at`](Self::run_at). Follow it with
    /// [`dedup_for`](Self::dedup_for) for a marker that stands for a TTL
    /// instead.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use std::time::Duration;
    /// use echomq::{EnqueueOptions, EnqueueStatus};
    /// let opts = EnqueueOptions::new().debounce("reindex:user-9", Duration::from_secs(5));
    /// let first = queue.enqueue_with(&1, &opts).await?;
    /// let second = queue.enqueue_with(&2, &opts).await?;
    /// // One job, run once with payload 2, 5 s after the second enqueue.
    /// assert_eq!(second.status, EnqueueStatus::Replaced);
    /// assert_eq!(second.id, first.id);
    /// # Ok(()) }
    /// ```
    pub fn debounce(self, dedup_id: impl Into<String>, window: Duration) -> Self {
        self.dedup(dedup_id).delay(window).replace_waiting(true)
    }

    /// Expires-at: a job that no worker has *started* by `at` (on the
    /// server's clock) never runs. It ends [`JobState::Expired`](crate::JobState::Expired),
    /// a finished state of its own: counted ([`Counts::expired`](crate::Counts::expired)),
    /// listed, evented ([`EventKind::Expired`](crate::EventKind::Expired))
    /// and kept as failed jobs are
    /// ([`QueueOptions::keep_failed`](crate::QueueOptions::keep_failed)).
    ///
    /// The expiry holds for every start, not only the first: a job that
    /// fails and would wait for its retry until `at` or later ends expired
    /// at once, and so does one released, snoozed or reaped past it. A job
    /// running at `at` is not stopped: it may complete, and only a start
    /// after `at` is refused. Decided where the job would start, on the
    /// server's clock: by the claim that finds it past its expiry, and for
    /// jobs nobody claims by the reaper's pass (within its interval,
    /// [`DEFAULT_REAP_INTERVAL`](crate::maintenance::reaper::DEFAULT_REAP_INTERVAL) by default).
    ///
    /// `at` is compared with the server's clock, as [`run_at`](Self::run_at)
    /// is: a client clock that is off moves it; [`discard_after`](Self::discard_after)
    /// does not depend on the client's clock at all. Checked at enqueue
    /// ([`Error::InvalidOption`]): not in the past by this machine's clock,
    /// not more than [`MAX_DELAY`] ahead, and after the job's run-at time or
    /// delay, since a job due after its expiry could never run. A
    /// debounce ([`replace_waiting`](Self::replace_waiting)) keeps the
    /// waiting job's expiry. Setting `expires_at` replaces a `discard_after`,
    /// and the other way round.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// // A reminder that is worthless after 9:00 (server time).
    /// let nine = SystemTime::now() + Duration::from_secs(3_600);
    /// let opts = echomq::EnqueueOptions::new().expires_at(nine);
    /// ```
    pub fn expires_at(mut self, at: std::time::SystemTime) -> Self {
        self.expiry = Some(Expiry::At(at));
        self
    }

    /// As [`expires_at`](Self::expires_at), `after` the enqueue: the
    /// server's now when it stores the job, plus `after` (so skew between
    /// the client's and the server's clocks does not matter). At least
    /// 1 ms, at most [`MAX_DELAY`], and longer than the job's
    /// [`delay`](Self::delay).
    ///
    /// ```
    /// use std::time::Duration;
    /// // A one-time code's SMS: pointless if not sent within 5 minutes.
    /// let opts = echomq::EnqueueOptions::new().discard_after(Duration::from_secs(300));
    /// ```
    pub fn discard_after(mut self, after: Duration) -> Self {
        self.expiry = Some(Expiry::After(after));
        self
    }

    /// The expiry as enqueue.lua takes it: "" for none, ms from the
    /// server's now, or "@MS" on the server's clock.
    pub(crate) fn expires(&self) -> Result<String> {
        let Some(expiry) = self.expiry else {
            return Ok(String::new());
        };
        let refuse = |name, reason: &str| Error::InvalidOption {
            name,
            reason: reason.into(),
        };
        let now = std::time::SystemTime::now();
        // When the job is due, by this machine's clock, to compare with the expiry.
        let due = match self.run_at {
            Some(at) => at.max(now),
            None => now + self.delay,
        };
        match expiry {
            Expiry::After(d) => {
                let ms = delay_ms("discard_after", d)?;
                if ms == 0 {
                    return Err(refuse("discard_after", "must be at least 1 ms"));
                }
                if now + d <= due {
                    return Err(refuse(
                        "discard_after",
                        "the job would expire before it is due: make it longer than the delay",
                    ));
                }
                Ok(ms.to_string())
            }
            Expiry::At(at) => {
                if at <= now {
                    return Err(refuse("expires_at", "is already past"));
                }
                if at.duration_since(now).is_ok_and(|ahead| ahead > MAX_DELAY) {
                    return Err(refuse("expires_at", "more than MAX_DELAY (365 days) ahead"));
                }
                if at <= due {
                    return Err(refuse(
                        "expires_at",
                        "the job would expire before it is due: make it later than the run-at time or delay",
                    ));
                }
                let ms = at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
                Ok(format!("@{ms}"))
            }
        }
    }

    /// When the job is due, as enqueue.lua takes it: a delay in ms, or
    /// "@MS" for a run-at time.
    pub(crate) fn when(&self) -> Result<String> {
        let Some(at) = self.run_at else {
            return Ok(delay_ms("delay", self.delay)?.to_string());
        };
        if !self.delay.is_zero() {
            return Err(Error::InvalidOption {
                name: "run_at",
                reason: "give either a delay or a run-at time, not both".into(),
            });
        }
        let ms = at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        let latest = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
            + MAX_DELAY.as_millis();
        if ms > latest {
            return Err(Error::InvalidOption {
                name: "run_at",
                reason: "more than MAX_DELAY (365 days) ahead".into(),
            });
        }
        Ok(format!("@{ms}"))
    }

    /// The job's limits: these options over the queue's.
    pub(crate) fn limits(&self, queue: &Limits) -> Limits {
        Limits {
            max_attempts: self.max_attempts.unwrap_or(queue.max_attempts),
            max_stalls: self.max_stalls.unwrap_or(queue.max_stalls),
            backoff: self.backoff.unwrap_or(queue.backoff),
            timeout: self.timeout.or(queue.timeout),
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(id) = &self.id {
            crate::validate::id("job id", id)?;
            if id.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Error::InvalidId {
                    what: "job id",
                    value: crate::error::excerpt(id),
                    reason: "must not be all digits: those are the ids echomq mints (use e.g. \"order-42\")",
                });
            }
        }
        if let Some(lane) = &self.lane {
            crate::validate::id("lane", lane)?;
        }
        if let Some(key) = &self.sequence {
            crate::validate::id("sequence key", key)?;
            if !self.delay.is_zero() || self.run_at.is_some() {
                return Err(Error::InvalidOption {
                    name: "sequence",
                    reason: "a job of a sequence takes no delay or run-at time: it runs at its turn".into(),
                });
            }
        }
        if let Some(kind) = &self.kind {
            crate::validate::kind(kind)?;
        }
        if let Some(tp) = &self.traceparent {
            crate::validate::traceparent(tp)?;
        }
        delay_ms("delay", self.delay)?;
        self.when()?;
        self.expires()?;
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
        if let Some((d, unique)) = &self.dedup {
            crate::validate::id("dedup id", d)?;
            unique.encode()?;
        } else if self.replace_waiting {
            return Err(Error::InvalidOption {
                name: "replace_waiting",
                reason: "needs a dedup id: replacing works on the job that holds it (use dedup, dedup_for or debounce)"
                    .into(),
            });
        }
        Ok(())
    }
}

/// Whole milliseconds of a delay, refusing one over [`MAX_DELAY`].
pub(crate) fn delay_ms(name: &'static str, d: Duration) -> Result<u64> {
    if d > MAX_DELAY {
        return Err(Error::InvalidOption {
            name,
            reason: format!("{d:?} is longer than MAX_DELAY (365 days)"),
        });
    }
    Ok(d.as_millis() as u64)
}

/// Whole milliseconds of `d`, refusing durations past what a server
/// timestamp can add without overflow (about 285 years).
pub(crate) fn millis(name: &'static str, d: Duration) -> Result<u64> {
    const MAX: u128 = 1 << 53;
    let ms = d.as_millis();
    if ms > MAX / 2 {
        return Err(Error::InvalidOption {
            name,
            reason: format!("{d:?} is too long"),
        });
    }
    Ok(ms as u64)
}

/// What an enqueue did: in JSON (`serde`) `"created"`, `"existing"`,
/// `"deduplicated"`, `"replaced"` or `"sent"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum EnqueueStatus {
    /// A new job was stored.
    Created,
    /// A job with the caller's id already existed; nothing was written.
    Existing,
    /// The dedup marker is held by another job (its id is returned); nothing was written.
    Deduplicated,
    /// The dedup marker is held by a waiting job (its id is returned),
    /// which now carries this enqueue's payload and due time
    /// ([`EnqueueOptions::replace_waiting`]); no job was created.
    Replaced,
    /// A batch member for another queue ([`Batch::on`](crate::batch::Batch::on))
    /// whose message had not reached its queue when the add answered: it
    /// joined its batch, and is made there with this id unless a job holds
    /// that id there by then (then it un-joins if that job is this member
    /// added before, and counts failed otherwise).
    Sent,
}

/// The answer to an enqueue: the job's id and what happened; in JSON
/// (`serde`) `{"id": "42", "status": "created"}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Enqueued {
    /// The id of the job that now stands for this enqueue.
    pub id: String,
    /// Whether it was created now (or found, or updated).
    pub status: EnqueueStatus,
}
