//! Jobs as the producer, the handler and an inspector see them.

use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::keys::validate_id;
use crate::limits::{Backoff, Limits, MAX_DELAY};

/// Where a job is in the leased state machine: enqueued jobs are pending
/// (or delayed until due); a claim makes one active until its lease
/// deadline; completing it makes it completed; a retry makes it pending or
/// delayed again, or failed once its failures reach `max_attempts`; an
/// expired lease returns it to pending, or fails it past `max_stalls`; a
/// cancel ([`Queue::cancel`](crate::Queue::cancel)) makes a waiting job
/// cancelled at once, and an active one once its attempt ends without
/// completing it. A job is in exactly one state at every instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobState {
    /// Ready to be claimed.
    Pending,
    /// Waiting for its due time (a scheduled job or a retry backoff).
    Delayed,
    /// Leased to a worker until its deadline.
    Active,
    /// Done.
    Completed,
    /// Failed for good (attempts used up, failed by the handler, or stalled too often).
    Failed,
    /// Cancelled by an operator ([`Queue::cancel`](crate::Queue::cancel)); it does not run again.
    Cancelled,
}

impl JobState {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => JobState::Pending,
            "delayed" => JobState::Delayed,
            "active" => JobState::Active,
            "completed" => JobState::Completed,
            "failed" => JobState::Failed,
            "cancelled" => JobState::Cancelled,
            _ => return None,
        })
    }

    /// The name stored on the server.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Delayed => "delayed",
            JobState::Active => "active",
            JobState::Completed => "completed",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// True for the finished states: `Completed`, `Failed` and `Cancelled`.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Completed | JobState::Failed | JobState::Cancelled)
    }

    /// Every state, in the order a job goes through them.
    pub const ALL: [JobState; 6] = [
        JobState::Pending,
        JobState::Delayed,
        JobState::Active,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
    ];
}

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
    /// The dedup id, and how long its marker stands (`None`: until the job finishes).
    pub(crate) dedup: Option<(String, Option<Duration>)>,
    /// Debounce: a waiting holder of the dedup marker takes this enqueue's
    /// payload and due time instead of the enqueue answering `Deduplicated`.
    pub(crate) replace_waiting: bool,
    /// The job's lane (tenant, customer, group): claims take lanes in turn.
    pub(crate) lane: Option<String>,
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
    /// with other lanes' (the README's "Lanes"). Claims take the lanes that
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
    /// stands until the job finishes.
    pub fn dedup(mut self, dedup_id: impl Into<String>) -> Self {
        self.dedup = Some((dedup_id.into(), None));
        self
    }

    /// As [`dedup`](Self::dedup), but the marker stands for `ttl` (at least
    /// 1 ms, at most [`MAX_DELAY`]) whether or not the job has finished.
    pub fn dedup_for(mut self, dedup_id: impl Into<String>, ttl: Duration) -> Self {
        self.dedup = Some((dedup_id.into(), Some(ttl)));
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
    /// - everything else stays as the job has it: its id, priority and
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
            validate_id("job id", id)?;
            if id.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Error::InvalidId {
                    what: "job id",
                    value: crate::error::excerpt(id),
                    reason: "must not be all digits: those are the ids echomq mints (use e.g. \"order-42\")",
                });
            }
        }
        if let Some(lane) = &self.lane {
            validate_id("lane", lane)?;
        }
        delay_ms("delay", self.delay)?;
        self.when()?;
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
        if let Some((d, ttl)) = &self.dedup {
            validate_id("dedup id", d)?;
            if let Some(ttl) = ttl
                && delay_ms("dedup ttl", *ttl)? == 0
            {
                return Err(Error::InvalidOption {
                    name: "dedup ttl",
                    reason: "must be at least 1 ms (use dedup() for a marker that stands until the job finishes)"
                        .into(),
                });
            }
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

/// What an enqueue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

/// The answer to an enqueue: the job's id and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Enqueued {
    /// The id of the job that now stands for this enqueue.
    pub id: String,
    /// Whether it was created now (or found, or updated).
    pub status: EnqueueStatus,
}

/// The idempotency key of job `id` of `queue`: `{QUEUE}:ID`.
pub(crate) fn idempotency_key(queue: &str, id: &str) -> String {
    format!("{{{queue}}}:{id}")
}

/// A job handed to a [`Consumer`](crate::Consumer)'s handler.
#[derive(Debug)]
pub struct Job<T> {
    /// The queue's handle, for the calls a handler makes (progress).
    pub(crate) handle: crate::queue::Queue,
    pub(crate) id: String,
    pub(crate) queue: String,
    /// The queue's key base, which tells queues of different prefixes apart.
    pub(crate) base: std::sync::Arc<str>,
    pub(crate) attempt: u64,
    pub(crate) token: u64,
    pub(crate) failures: u64,
    pub(crate) limits: Limits,
    pub(crate) payload: T,
    /// The job's lane, if it has one.
    pub(crate) lane: Option<String>,
    pub(crate) cancel: CancellationToken,
    /// Set when an operator asked to cancel the job (seen at a lease renewal).
    pub(crate) cancel_requested: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl<T> Job<T> {
    /// The handler's view of `lease` (claimed through `queue`), with its
    /// decoded payload, the attempt's cancellation token and the flag a
    /// renewal sets on a cancel request.
    pub(crate) fn of_lease(
        queue: &crate::queue::Queue,
        lease: &crate::lease::Lease,
        payload: T,
        cancel: CancellationToken,
        cancel_requested: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Job<T> {
        Job {
            handle: queue.clone(),
            id: lease.id.clone(),
            queue: queue.name().to_owned(),
            base: queue.base().clone(),
            attempt: lease.attempt,
            token: lease.token,
            failures: lease.failures,
            limits: lease.limits,
            payload,
            lane: lease.lane.clone(),
            cancel,
            cancel_requested,
        }
    }

    /// The job id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The queue name.
    pub fn queue(&self) -> &str {
        &self.queue
    }
    /// The handle of the job's queue, for follow-up work from the handler
    /// (enqueue the next step, read a record).
    pub fn handle(&self) -> &crate::queue::Queue {
        &self.handle
    }
    /// This delivery's number: 1 on the first, one more on each later
    /// delivery (after a failure, a crash, a release or a snooze).
    pub fn attempt(&self) -> u64 {
        self.attempt
    }
    /// This delivery's fencing token, minted by its claim: unique within
    /// the queue, so it tells this attempt from every other attempt of any
    /// job of the queue (effect markers are fenced by it).
    pub fn token(&self) -> u64 {
        self.token
    }
    /// Handler failures before this attempt.
    pub fn failures(&self) -> u64 {
        self.failures
    }
    /// The job's limits, fixed when it was enqueued.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
    /// The job's lane ([`EnqueueOptions::lane`]), if it has one.
    pub fn lane(&self) -> Option<&str> {
        self.lane.as_deref()
    }
    /// True when a failure of this attempt fails the job for good (its
    /// failures would reach `max_attempts`).
    pub fn is_last_attempt(&self) -> bool {
        self.failures + 1 >= u64::from(self.limits.max_attempts)
    }
    /// The decoded payload.
    pub fn payload(&self) -> &T {
        &self.payload
    }
    /// Takes the payload out.
    pub fn into_payload(self) -> T {
        self.payload
    }
    /// A key that is the same on every delivery of this job and differs
    /// between the jobs of all queues under one key prefix: `{QUEUE}:ID`
    /// (queue names cannot hold braces, so no two queue/id pairs give the
    /// same key).
    ///
    /// Pass it to external APIs that take an idempotency key (payments,
    /// webhooks, a unique column) so that the *external system* recognises
    /// a redelivery and applies the effect once: delivery is at-least-once,
    /// and this is how the effect becomes exactly-once. Namespace it if
    /// several deployments share the external account, and mind that ids
    /// restart if the queue's keys are deleted; see [`crate::effect`] for
    /// this and the other tools (effect markers, atomic completion).
    ///
    /// ```
    /// # fn demo(job: &echomq::Job<()>) {
    /// let key = job.idempotency_key(); // e.g. "{payments}:42"
    /// # let _ = key; }
    /// ```
    pub fn idempotency_key(&self) -> String {
        idempotency_key(&self.queue, &self.id)
    }
    /// Cancelled when this attempt must stop: its lease was lost or could
    /// not be renewed in time, the consumer is shutting down past its
    /// grace period, or an operator cancelled the job
    /// ([`Queue::cancel`](crate::Queue::cancel);
    /// [`cancel_requested`](Self::cancel_requested) tells this case). After
    /// a cancel request, whatever the handler returns but `Ok` ends the job
    /// cancelled; `Ok` completes it (the work was done).
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }
    /// True once an operator has asked to cancel this job and the consumer
    /// has seen the request (at a lease renewal, so within one heartbeat
    /// interval).
    pub fn cancel_requested(&self) -> bool {
        self.cancel_requested.load(std::sync::atomic::Ordering::Relaxed)
    }
    /// True once [`cancellation`](Self::cancellation) has fired.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
    /// Records this attempt's progress (any JSON value, at most
    /// [`MAX_PROGRESS_BYTES`] encoded), shown by
    /// [`Queue::job`](crate::Queue::job) as [`JobInfo::progress`] until the
    /// next report, also after the job finishes. Fenced like a
    /// settlement: an attempt that lost its lease records nothing.
    ///
    /// ```
    /// # async fn demo(job: echomq::Job<()>) -> echomq::Result<()> {
    /// job.progress(&serde_json::json!({"done": 40, "of": 100})).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::LeaseLost`], [`Error::JobNotFound`],
    /// [`Error::PayloadTooLarge`], [`Error::Encode`], server errors.
    pub async fn progress<P: serde::Serialize + ?Sized>(&self, value: &P) -> Result<()> {
        let bytes = serde_json::to_vec(value).map_err(Error::Encode)?;
        if bytes.len() > MAX_PROGRESS_BYTES {
            return Err(Error::PayloadTooLarge {
                size: bytes.len(),
                limit: MAX_PROGRESS_BYTES,
            });
        }
        let q = &self.handle;
        let mut call = crate::scripts::SCRIPTS.progress.call();
        call.key(q.keys().job(&self.id)).arg(self.token).arg(bytes);
        let mut r = call.run(&mut q.conn()).await?;
        match r.code()? {
            crate::scripts::Code::Ok => Ok(()),
            crate::scripts::Code::NotFound => Err(Error::JobNotFound(self.id.clone())),
            crate::scripts::Code::LeaseLost => Err(Error::LeaseLost {
                id: self.id.clone(),
                token: self.token,
            }),
            other => Err(Error::Protocol {
                script: "progress",
                detail: format!("unexpected status {other:?}"),
            }),
        }
    }
}

/// Largest progress value a handler may record, encoded: 64 KiB.
pub const MAX_PROGRESS_BYTES: usize = 64 * 1024;

/// A job's stored record, from [`Queue::job`](crate::Queue::job).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobInfo {
    /// The job id.
    pub id: String,
    /// Its state.
    pub state: JobState,
    /// Claims so far.
    pub attempts: u64,
    /// The fencing token of the last claim (0 before the first).
    pub token: u64,
    /// Handler failures so far.
    pub failures: u64,
    /// Expired leases so far.
    pub stalls: u64,
    /// The raw JSON payload.
    pub payload: Vec<u8>,
    /// The last error recorded (handler error text, "panicked", "stalled", …).
    pub last_error: Option<String>,
    /// When it was enqueued (server ms).
    pub created_ms: u64,
    /// When it finished (server ms), for terminal states.
    pub finished_ms: Option<u64>,
    /// Lease deadline when active, due time when delayed (server ms).
    pub deadline_ms: Option<u64>,
    /// The job's limits, fixed at enqueue.
    pub limits: Limits,
    /// The progress its handler last reported ([`Job::progress`]).
    pub progress: Option<serde_json::Value>,
    /// When its first claim leased it (server ms).
    pub first_started_ms: Option<u64>,
    /// Its last [`ERRORS_KEPT`] errors (handler errors and fail reasons),
    /// newest first.
    pub errors: Vec<JobError>,
    /// The value its handler returned when it completed, if any (see
    /// [`Handler`](crate::Handler)); [`result_as`](Self::result_as) decodes it.
    pub result: Option<serde_json::Value>,
    /// The consumer that holds it while active, or last held it: its
    /// [`Consumer::name`](crate::Consumer::name) (or the claiming handle's
    /// [`Queue::holder`](crate::Queue::holder)).
    pub holder: Option<String>,
    /// When an operator asked to cancel it while it ran (server ms).
    pub cancel_requested_ms: Option<u64>,
    /// Its lane ([`EnqueueOptions::lane`]), if it has one.
    pub lane: Option<String>,
}

/// How many of a job's errors its record keeps ([`JobInfo::errors`]).
pub const ERRORS_KEPT: usize = 5;

/// One error in a job's record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[non_exhaustive]
pub struct JobError {
    /// When it was recorded (server ms).
    #[serde(rename = "at")]
    pub at_ms: u64,
    /// The error text (at most 4 KiB).
    #[serde(rename = "e")]
    pub message: String,
}

impl JobInfo {
    /// Decodes the result its handler returned; `Ok(None)` when it has none.
    ///
    /// # Errors
    /// [`Error::Decode`] when it does not decode into `R`.
    pub fn result_as<R: DeserializeOwned>(&self) -> Result<Option<R>> {
        self.result
            .as_ref()
            .map(|v| {
                R::deserialize(v).map_err(|source| Error::Decode {
                    id: self.id.clone(),
                    source,
                })
            })
            .transpose()
    }

    /// Decodes the payload.
    ///
    /// # Errors
    /// [`Error::Decode`] when it does not decode into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.payload).map_err(|source| Error::Decode {
            id: self.id.clone(),
            source,
        })
    }
}

/// How many jobs are in each state, read atomically. `pending` counts
/// every pending job, with a lane or without.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Ready to be claimed.
    pub pending: u64,
    /// Waiting for a due time.
    pub delayed: u64,
    /// Leased.
    pub active: u64,
    /// Completed and still retained.
    pub completed: u64,
    /// Failed and still retained.
    pub failed: u64,
    /// Cancelled and still retained (kept as failed jobs are).
    pub cancelled: u64,
    /// Whether the queue is paused ([`Queue::pause`](crate::Queue::pause)).
    pub paused: bool,
}
