//! Settlements as plain data: what a holder asks of its lease ([`Settle`],
//! [`SettleOp`]), what came of it ([`Outcome`], [`Settled`]) and the
//! bounds on what a settlement keeps. No I/O: the store sends them
//! (`store/settle.rs`), [`Queue`](crate::Queue) takes and answers them.

use std::time::Duration;

use crate::error::{Error, Result};

/// Longest error text or failure reason stored with a job, in bytes;
/// longer ones are cut (at a character boundary) and say how long they were.
pub const MAX_ERROR_BYTES: usize = 4_096;

/// Largest result kept with a completed job, encoded as JSON: 1 MiB.
pub const MAX_RESULT_BYTES: usize = 1 << 20;

/// What a settlement did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// `complete`: the job is completed.
    Completed,
    /// `retry`: the job will run again, at once (`due_ms` `None`) or at `due_ms` (server ms).
    Retrying {
        /// When it becomes due, if delayed.
        due_ms: Option<u64>,
    },
    /// `fail`, or `retry` at the job's `max_attempts`: the job failed for good.
    Failed,
    /// `release`: the job is pending again.
    Released,
    /// `snooze`: the job runs again at `due_ms` (or at once when `None`),
    /// its failures unchanged.
    Snoozed {
        /// When it becomes due, if delayed.
        due_ms: Option<u64>,
    },
    /// The job ended cancelled: [`Settle::Cancel`], or any settlement but
    /// a complete of a job an operator asked to cancel
    /// ([`Queue::cancel`](crate::Queue::cancel)).
    Cancelled,
    /// The job ended expired: a retry, release or snooze would have made it
    /// wait until its expiry ([`EnqueueOptions::expires_at`](crate::EnqueueOptions::expires_at))
    /// or later, so it can no longer start in time.
    Expired,
    /// This settlement already happened with this token (the first reply
    /// was lost and the call was sent again); nothing changed now.
    AlreadySettled,
}

/// The kind of a settlement, for events and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SettleOp {
    /// [`Queue::complete`](crate::Queue::complete).
    Complete,
    /// [`Queue::retry`](crate::Queue::retry).
    Retry,
    /// [`Queue::fail`](crate::Queue::fail).
    Fail,
    /// [`Queue::release`](crate::Queue::release).
    Release,
    /// [`Queue::snooze`](crate::Queue::snooze).
    Snooze,
    /// [`Settle::Cancel`].
    Cancel,
    /// [`Queue::rate_limited`](crate::Queue::rate_limited).
    RateLimited,
}

impl SettleOp {
    /// The operation's name: complete, retry, fail, release, snooze,
    /// cancel or rate_limited.
    pub fn as_str(self) -> &'static str {
        match self {
            SettleOp::Complete => "complete",
            SettleOp::Retry => "retry",
            SettleOp::Fail => "fail",
            SettleOp::Release => "release",
            SettleOp::Snooze => "snooze",
            SettleOp::Cancel => "cancel",
            SettleOp::RateLimited => "rate_limited",
        }
    }
}

impl std::fmt::Display for SettleOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One settlement of a batch sent with [`Queue::settle_many`](crate::Queue::settle_many).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settle {
    /// As [`Queue::complete`](crate::Queue::complete).
    Complete,
    /// As [`Queue::complete_with_result`](crate::Queue::complete_with_result):
    /// completes the job and keeps `result` (JSON text, at most
    /// [`MAX_RESULT_BYTES`]) with it.
    Return {
        /// The result, as JSON text.
        result: String,
    },
    /// As [`Queue::retry`](crate::Queue::retry).
    Retry {
        /// Delay before the next attempt; `None`: the job's backoff.
        delay: Option<Duration>,
        /// The error text to record.
        error: String,
    },
    /// As [`Queue::fail`](crate::Queue::fail).
    Fail {
        /// The reason to record.
        reason: String,
    },
    /// As [`Queue::release`](crate::Queue::release).
    Release,
    /// As [`Queue::snooze`](crate::Queue::snooze).
    Snooze {
        /// How long until the job is due again.
        delay: Duration,
    },
    /// Ends the job cancelled (its attempt gave up on an operator's cancel
    /// request, say): it does not run again.
    Cancel {
        /// The reason to record ("cancelled" when empty).
        reason: String,
    },
    /// As [`Queue::rate_limited`](crate::Queue::rate_limited).
    RateLimited {
        /// How long until the job is due again, and until its lane (or
        /// the queue) gives jobs again.
        retry_after: Duration,
    },
}

impl Settle {
    /// The kind of settlement.
    pub fn op(&self) -> SettleOp {
        match self {
            Settle::Complete | Settle::Return { .. } => SettleOp::Complete,
            Settle::Retry { .. } => SettleOp::Retry,
            Settle::Fail { .. } => SettleOp::Fail,
            Settle::Release => SettleOp::Release,
            Settle::Snooze { .. } => SettleOp::Snooze,
            Settle::Cancel { .. } => SettleOp::Cancel,
            Settle::RateLimited { .. } => SettleOp::RateLimited,
        }
    }
}

/// The answer to a settlement: what happened and the server's clock then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settled {
    /// What happened.
    pub outcome: Outcome,
    /// The server's clock when the script ran (ms since the Unix epoch).
    pub server_ms: u64,
}

/// A handler's result as JSON text to keep with its job: `None` for a
/// value that encodes as `null` (such as `()`).
pub(crate) fn encode_result<R: serde::Serialize + ?Sized>(result: &R) -> Result<Option<String>> {
    let text = serde_json::to_string(result).map_err(Error::Encode)?;
    if text == "null" {
        return Ok(None);
    }
    if text.len() > MAX_RESULT_BYTES {
        return Err(Error::PayloadTooLarge {
            size: text.len(),
            limit: MAX_RESULT_BYTES,
        });
    }
    Ok(Some(text))
}
