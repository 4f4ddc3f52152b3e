//! Jobs as plain data: what a producer sends ([`EnqueueOptions`]), what
//! the server answers ([`Enqueued`]) and what an inspector reads
//! ([`JobInfo`], [`JobState`], [`Counts`]). No I/O: the handler's view of a
//! job, [`Job`](crate::Job), lives with the worker.

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::limits::Limits;

mod enqueue;
mod json;
mod kind;
mod unique;

pub use self::enqueue::{EnqueueOptions, EnqueueStatus, Enqueued};
pub(crate) use self::enqueue::{delay_ms, millis};
pub use self::kind::{JobKind, MAX_KIND_BYTES};
pub use self::unique::Unique;

/// Where a job is in the leased state machine: enqueued jobs are pending
/// (or delayed until due); a claim makes one active until its lease
/// deadline; completing it makes it completed; a retry makes it pending or
/// delayed again, or failed once its failures reach `max_attempts`; an
/// expired lease returns it to pending, or fails it past `max_stalls`; a
/// cancel ([`Queue::cancel`](crate::Queue::cancel)) makes a waiting job
/// cancelled at once, and an active one once its attempt ends without
/// completing it; a job not started by its expiry
/// ([`EnqueueOptions::expires_at`]) ends expired. A job is in exactly one
/// state at every instant.
///
/// In JSON (`serde`) a state is its stored name: `"pending"`, `"delayed"`,
/// `"active"`, `"completed"`, `"failed"`, `"cancelled"`, `"expired"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
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
    /// Not started before its expiry ([`EnqueueOptions::expires_at`](crate::EnqueueOptions::expires_at),
    /// [`discard_after`](crate::EnqueueOptions::discard_after)), so it never runs (again).
    /// Kept as failed jobs are.
    Expired,
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
            "expired" => JobState::Expired,
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
            JobState::Expired => "expired",
        }
    }

    /// True for the finished states: `Completed`, `Failed`, `Cancelled` and `Expired`.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Completed | JobState::Failed | JobState::Cancelled | JobState::Expired
        )
    }

    /// Every state, in the order a job goes through them.
    pub const ALL: [JobState; 7] = [
        JobState::Pending,
        JobState::Delayed,
        JobState::Active,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Expired,
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

/// Largest progress value a handler may record ([`Job::progress`](crate::Job::progress)), encoded: 64 KiB.
pub const MAX_PROGRESS_BYTES: usize = 64 * 1024;

/// A job's stored record, from [`Queue::job`](crate::Queue::job).
///
/// It serializes (`serde`) to the JSON shape the CLI's `show --json`
/// prints and a web handler can answer as it is: every field below by its
/// name, the state by its stored name, times in server milliseconds
/// (`null` when unset), the payload as the JSON it holds, the limits with
/// durations in milliseconds:
///
/// ```json
/// {"id": "42", "state": "failed", "attempts": 3, "token": 170000000000017,
///  "failures": 3, "stalls": 0, "payload": {"to": "ada@example.com"},
///  "last_error": "smtp timeout", "created_ms": 1764800000000,
///  "finished_ms": 1764800000900, "deadline_ms": null,
///  "limits": {"max_attempts": 3, "max_stalls": 1, "timeout_ms": null,
///             "backoff": {"kind": "exponential", "base_ms": 1000, "max_ms": 3600000, "jitter": 0.0}},
///  "progress": null, "checkpoint": null, "first_started_ms": 1764800000010,
///  "errors": [{"at_ms": 1764800000900, "message": "smtp timeout"}],
///  "result": null, "holder": "worker-1", "cancel_requested_ms": null,
///  "lane": null, "kind": "email"}
/// ```
///
/// (A fixed backoff is `{"kind": "fixed", "delay_ms": N, "jitter": F}`.)
/// There is no `Deserialize`: a record is read from the server, not
/// built from JSON.
#[derive(Debug, Clone, serde::Serialize)]
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
    /// The raw JSON payload (serialized as the JSON it holds, or as a
    /// string if it is not JSON).
    #[serde(serialize_with = "json::payload_json")]
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
    /// The progress its handler last reported ([`Job::progress`](crate::Job::progress)).
    pub progress: Option<serde_json::Value>,
    /// The checkpoint its attempts stored last ([`Job::checkpoint`](crate::Job::checkpoint)),
    /// which the next attempt resumes from.
    pub checkpoint: Option<serde_json::Value>,
    /// When its first claim leased it (server ms).
    pub first_started_ms: Option<u64>,
    /// Its last [`ERRORS_KEPT`] errors (handler errors and fail reasons),
    /// newest first.
    pub errors: Vec<JobError>,
    /// The value its handler returned when it completed, if any (see
    /// [`Handler`](crate::Handler)); [`result_as`](Self::result_as) decodes it.
    pub result: Option<serde_json::Value>,
    /// The consumer that holds it while active, or last held it: its
    /// [`Worker::name`](crate::Worker::name) (or the claiming handle's
    /// [`Queue::holder`](crate::Queue::holder)).
    pub holder: Option<String>,
    /// When an operator asked to cancel it while it ran (server ms).
    pub cancel_requested_ms: Option<u64>,
    /// Its lane ([`EnqueueOptions::lane`]), if it has one.
    pub lane: Option<String>,
    /// Its kind ([`EnqueueOptions::kind`], [`JobKind::KIND`]), if it has one.
    pub kind: Option<String>,
    /// Its expiry (server ms), if it has one: not started by then, it ends
    /// [`JobState::Expired`] ([`EnqueueOptions::expires_at`]).
    pub expires_at_ms: Option<u64>,
}

/// How many of a job's errors its record keeps ([`JobInfo::errors`]).
pub const ERRORS_KEPT: usize = 5;

/// One error in a job's record: `{"at_ms": .., "message": ..}` in JSON
/// (the record stores it as `at`, `e`; both read).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct JobError {
    /// When it was recorded (server ms).
    #[serde(rename(serialize = "at_ms", deserialize = "at"), alias = "at_ms")]
    pub at_ms: u64,
    /// The error text (at most 4 KiB).
    #[serde(rename(serialize = "message", deserialize = "e"), alias = "message")]
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
        if crate::compression::is_compressed(&self.payload) {
            return Err(Error::Decode {
                id: self.id.clone(),
                source: crate::compression::undecodable(&self.payload),
            });
        }
        serde_json::from_slice(&self.payload).map_err(|source| Error::Decode {
            id: self.id.clone(),
            source,
        })
    }
}

/// How many jobs are in each state, read atomically. `pending` counts
/// every pending job, with a lane or without. In JSON (`serde`), an
/// object of these fields by name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// Expired unstarted and still retained (kept as failed jobs are).
    #[serde(default)]
    pub expired: u64,
    /// Whether the queue is paused ([`Queue::pause`](crate::Queue::pause)).
    pub paused: bool,
}

impl Counts {
    /// The count of jobs in `state`.
    pub fn of(&self, state: JobState) -> u64 {
        match state {
            JobState::Pending => self.pending,
            JobState::Delayed => self.delayed,
            JobState::Active => self.active,
            JobState::Completed => self.completed,
            JobState::Failed => self.failed,
            JobState::Cancelled => self.cancelled,
            JobState::Expired => self.expired,
        }
    }
}
