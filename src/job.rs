//! Jobs as the producer, the handler and an inspector see them.

use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::limits::Limits;

mod enqueue;
mod kind;

#[cfg(feature = "otel")]
pub(crate) use self::enqueue::validate_traceparent;
pub use self::enqueue::{EnqueueOptions, EnqueueStatus, Enqueued};
pub(crate) use self::enqueue::{delay_ms, millis};
pub(crate) use self::kind::validate_kind;
pub use self::kind::{JobKind, MAX_KIND_BYTES};

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

/// The idempotency key of job `id` of `queue`: `{QUEUE}:ID`.
pub(crate) fn idempotency_key(queue: &str, id: &str) -> String {
    format!("{{{queue}}}:{id}")
}

/// The incarnation key of job `id` of `queue` stored at `created_ms`:
/// `{QUEUE}:ID@CREATED_MS`.
pub(crate) fn incarnation_key(queue: &str, id: &str, created_ms: u64) -> String {
    format!("{}@{created_ms}", idempotency_key(queue, id))
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
    /// The job's kind, if it has one.
    pub(crate) kind: Option<String>,
    /// When its record was created (server ms).
    pub(crate) created_ms: u64,
    /// The W3C traceparent it was enqueued with.
    pub(crate) traceparent: Option<String>,
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
            kind: lease.kind.clone(),
            created_ms: lease.created_ms,
            traceparent: lease.traceparent.clone(),
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
    /// The job's kind ([`JobKind::KIND`], [`EnqueueOptions::kind`]), if
    /// it has one.
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }
    /// The W3C `traceparent` of the span that enqueued the job
    /// ([`EnqueueOptions::traceparent`], or with feature `otel` the
    /// enqueuing span's own), if it has one. The job's span records it as
    /// its field `traceparent`, and with feature `otel` is already its
    /// child; a handler that wants a link instead can parse it.
    pub fn traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }
    /// This job with its payload changed by `f` (a router hands the
    /// decoded payload on this way).
    pub(crate) fn map_payload<U>(self, f: impl FnOnce(T) -> U) -> Job<U> {
        Job {
            handle: self.handle,
            id: self.id,
            queue: self.queue,
            base: self.base,
            attempt: self.attempt,
            token: self.token,
            failures: self.failures,
            limits: self.limits,
            payload: f(self.payload),
            lane: self.lane,
            kind: self.kind,
            created_ms: self.created_ms,
            traceparent: self.traceparent,
            cancel: self.cancel,
            cancel_requested: self.cancel_requested,
        }
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
    /// several deployments share the external account; see
    /// [`crate::effect`] for this and the other tools (effect markers,
    /// atomic completion).
    ///
    /// The exact rule: the key names the *id*, so every job ever stored
    /// under one id of one queue has it. That is what a caller-chosen id
    /// means (one piece of work: enqueued again after its record was
    /// deleted, it is recognised as done). But a minted id (all digits) is
    /// minted again when the queue's counter goes back: its keys deleted,
    /// or acknowledged writes lost to a torn append-only file or a failover
    /// to a replica that lagged. A new job then shares the key of a job
    /// that may have applied its effect, and the external system would
    /// skip the new job's effect. Where that matters, use
    /// [`incarnation_key`](Self::incarnation_key).
    ///
    /// ```
    /// # fn demo(job: &echomq::Job<()>) {
    /// let key = job.idempotency_key(); // e.g. "{payments}:42"
    /// # let _ = key; }
    /// ```
    pub fn idempotency_key(&self) -> String {
        idempotency_key(&self.queue, &self.id)
    }
    /// A key that is the same on every delivery of this job and differs for
    /// every other job ever stored, even under the same id:
    /// `{QUEUE}:ID@CREATED_MS`, with the server time at which the record was
    /// created. A job stored again under an id (a caller id enqueued again
    /// after its record was deleted, a minted id minted again after lost
    /// writes rolled the counter back) gets another key, since its record is
    /// created later on the server's clock. (Two records of one id created
    /// in the same millisecond would share it: an id must be deleted and
    /// stored again within that millisecond.)
    ///
    /// ```
    /// # fn demo(job: &echomq::Job<()>) {
    /// let key = job.incarnation_key(); // e.g. "{payments}:42@1796147134748"
    /// # let _ = key; }
    /// ```
    pub fn incarnation_key(&self) -> String {
        incarnation_key(&self.queue, &self.id, self.created_ms)
    }
    /// When the job was stored (server ms since the Unix epoch): the same
    /// on every delivery.
    pub fn created_ms(&self) -> u64 {
        self.created_ms
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
    /// Its kind ([`EnqueueOptions::kind`], [`JobKind::KIND`]), if it has one.
    pub kind: Option<String>,
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
