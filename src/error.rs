//! The one error type of the crate.

use std::time::Duration;

/// `Result` with echomq's [`Error`].
pub type Result<T = (), E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in echomq, each with a message a user can act on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The queue name cannot be used in a key.
    #[error("invalid queue name {name:?}: {reason}")]
    InvalidQueueName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A job id, dedup id or key prefix cannot be used.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidId {
        /// Which kind of id ("job id", "dedup id", "key prefix").
        what: &'static str,
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An option is out of range.
    #[error("invalid option {name}: {reason}")]
    InvalidOption {
        /// The option.
        name: &'static str,
        /// The allowed range.
        reason: String,
    },
    /// The encoded payload is larger than the queue's limit.
    #[error("payload of {size} bytes exceeds the limit of {limit} bytes")]
    PayloadTooLarge {
        /// Encoded size.
        size: usize,
        /// The configured limit (`QueueOptions::max_payload_bytes`).
        limit: usize,
    },
    /// The payload could not be encoded as JSON.
    #[error("could not encode payload: {0}")]
    Encode(#[source] serde_json::Error),
    /// A stored payload does not decode into the requested type.
    #[error("payload of job {id} does not decode: {source}")]
    Decode {
        /// The job.
        id: String,
        /// The decoder's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// The caller no longer owns the job: its lease expired and was reaped,
    /// or a newer claim holds it. Nothing was changed.
    #[error("lease lost on job {id} (token {token}): it was reaped or is owned by a newer claim")]
    LeaseLost {
        /// The job.
        id: String,
        /// The stale fencing token.
        token: u64,
    },
    /// No job with this id exists (never enqueued, or removed by retention).
    #[error("job {0} not found")]
    JobNotFound(String),
    /// The queue was written by a newer, incompatible version of echomq.
    #[error("queue {queue} has layout version {found}; this echomq understands up to {supported}")]
    LayoutMismatch {
        /// The queue.
        queue: String,
        /// The version stored in the queue's meta hash.
        found: String,
        /// The version this crate writes.
        supported: u32,
    },
    /// The server is configured so that jobs could be lost (see `Queue::self_check`).
    #[error("unsafe server configuration: {0}")]
    UnsafeServer(String),
    /// A call did not finish within its timeout.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The server or the connection failed.
    #[error("server error: {0}")]
    Redis(#[from] redis::RedisError),
    /// An effect given to atomic completion ([`Queue::complete_with`](crate::Queue::complete_with))
    /// cannot be applied: its key lies outside the queue's hash slot or
    /// inside echomq's own keys, or its target holds another type or a
    /// counter out of range. Nothing was applied; the job is still leased.
    #[error("effect {index} ({effect}) refused: {reason}; nothing was applied")]
    EffectRefused {
        /// Which effect (1 for the first).
        index: usize,
        /// The effect, as a command.
        effect: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An effect marker ([`EffectMarker`](crate::EffectMarker)) belongs to
    /// another attempt of the job: a newer attempt took it over, or an
    /// attempt finished the effect. Nothing was changed.
    #[error(
        "effect marker {effect:?} of job {id} is {} by attempt {holder}, not by attempt {token}",
        held_or_done(*.done)
    )]
    MarkerLost {
        /// The job.
        id: String,
        /// The effect name.
        effect: String,
        /// The caller's attempt (fencing token).
        token: u64,
        /// The attempt the marker belongs to.
        holder: u64,
        /// True when `holder` finished the effect; false while it holds it.
        done: bool,
    },
    /// A script answered something this version does not understand.
    #[error("unexpected reply from {script}: {detail}")]
    Protocol {
        /// The script or command.
        script: &'static str,
        /// What was wrong.
        detail: String,
    },
}

fn held_or_done(done: bool) -> &'static str {
    if done { "done" } else { "held" }
}

impl Error {
    /// A copy of this error for each of several callers that shared one
    /// failed server call (the coalesced enqueue). Transport and server
    /// errors keep their kind; the rest keep their message.
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Redis(e) => Error::Redis(e.clone()),
            Error::Timeout(d) => Error::Timeout(*d),
            Error::Protocol { script, detail } => Error::Protocol {
                script,
                detail: detail.clone(),
            },
            other => Error::Protocol {
                script: "enqueue",
                detail: other.to_string(),
            },
        }
    }

    /// True for failures of the transport (connection refused or dropped,
    /// timeouts, a server still loading): the same call may succeed later.
    /// Settlements and enqueues with a caller-chosen id are safe to retry.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Timeout(_) => true,
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || matches!(e.code(), Some("LOADING" | "BUSY" | "TRYAGAIN" | "MASTERDOWN"))
            }
            _ => false,
        }
    }
}
