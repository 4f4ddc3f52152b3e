//! [`WorkerEvent`]s: the steps of a job's life inside a consumer, handed to its
//! observers. Observers are user code: a panicking one is caught and
//! logged, and the consumer carries on.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use tracing::warn;

use crate::error::Error;
use crate::queue::{Outcome, SettleOp};

/// How a handler's attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HandlerResult {
    /// It returned `Ok`: the job completes.
    Ok,
    /// It returned an error asking for a retry (the default).
    Retry,
    /// It returned an error that fails the job for good.
    Fail,
    /// It asked to run later without spending an attempt.
    Snooze,
    /// It said the remote service rate limited it: the job runs later
    /// without spending an attempt, and its lane (or the queue) holds
    /// starts meanwhile ([`HandlerError::rate_limited`](crate::HandlerError::rate_limited)).
    RateLimited,
    /// It panicked: the job is retried with error "panicked".
    Panicked,
    /// The lease was lost: the handler was cancelled, nothing is settled.
    LeaseLost,
    /// Shutdown's grace period ended: the handler was cancelled and the job released.
    Stopped,
    /// It ran past the job's timeout: it was cancelled, and the job is
    /// retried with error `"timeout"`.
    TimedOut,
    /// An operator cancelled the job while it ran, and the handler ended
    /// without completing it (or did not stop within the shutdown grace
    /// and was cancelled): the job ends cancelled.
    Cancelled,
}

impl HandlerResult {
    /// The name used in logs: ok, retry, fail, snooze, rate_limited, panicked,
    /// lease_lost, stopped, timed_out or cancelled.
    pub fn as_str(self) -> &'static str {
        match self {
            HandlerResult::Ok => "ok",
            HandlerResult::Retry => "retry",
            HandlerResult::Fail => "fail",
            HandlerResult::Snooze => "snooze",
            HandlerResult::RateLimited => "rate_limited",
            HandlerResult::Panicked => "panicked",
            HandlerResult::LeaseLost => "lease_lost",
            HandlerResult::Stopped => "stopped",
            HandlerResult::TimedOut => "timed_out",
            HandlerResult::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for HandlerResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A step in a job's life inside a [`Consumer`](super::Consumer) or
/// [`Worker`](super::Worker), handed to its
/// [`observer`](super::Worker::observer)s. Server times are in ms since
/// the Unix epoch on the server's clock, the time base of every deadline.
/// Every variant names the job's queue; variants may gain fields, so
/// match them with `..`.
#[derive(Debug)]
#[non_exhaustive]
pub enum WorkerEvent<'a> {
    /// A job was leased to this consumer; its handler starts next (for a
    /// job leased ahead, once a handler is free, unless it is released
    /// unstarted first).
    #[non_exhaustive]
    Claimed {
        /// The job's queue (a [`Worker`](super::Worker) serves several).
        queue: &'a str,
        /// The job.
        id: &'a str,
        /// The fencing token of this delivery.
        token: u64,
        /// This delivery's number (1 on the first).
        attempt: u64,
        /// The lease deadline.
        deadline_ms: u64,
        /// When the claim ran.
        server_ms: u64,
        /// The job's lane, if it has one (its slot is held until the job settles).
        lane: Option<&'a str>,
    },
    /// A heartbeat renewed the lease.
    #[non_exhaustive]
    Extended {
        /// The job's queue (a [`Worker`](super::Worker) serves several).
        queue: &'a str,
        /// The job.
        id: &'a str,
        /// The token.
        token: u64,
        /// The new deadline.
        deadline_ms: u64,
    },
    /// A renewal found that an operator asked to cancel the job
    /// ([`Queue::cancel`](crate::Queue::cancel)): the handler's
    /// [`Job::cancellation`](crate::Job::cancellation) fires now.
    #[non_exhaustive]
    CancelRequested {
        /// The job's queue (a [`Worker`](super::Worker) serves several).
        queue: &'a str,
        /// The job.
        id: &'a str,
        /// The token.
        token: u64,
    },
    /// The lease was lost (reaped, or renewal unconfirmed within the
    /// safety window): the handler is cancelled and its result not settled.
    #[non_exhaustive]
    LeaseLost {
        /// The job's queue (a [`Worker`](super::Worker) serves several).
        queue: &'a str,
        /// The job.
        id: &'a str,
        /// The token.
        token: u64,
        /// True when the server said so; false when renewal could not be
        /// confirmed in time (the lease may still hold on the server).
        confirmed: bool,
    },
    /// The handler of an attempt whose lease was lost ignored its
    /// cancellation past the lease's margin (see
    /// [`Worker::lease`](super::Worker::lease)): its task was aborted at
    /// its next await point, so it does not run beside the job's
    /// redelivery.
    #[non_exhaustive]
    HandlerAborted {
        /// The job's queue (a [`Worker`](super::Worker) serves several).
        queue: &'a str,
        /// The job.
        id: &'a str,
        /// The token of the attempt aborted.
        token: u64,
    },
    /// The handler returned (or panicked, or was cancelled); settlement follows.
    #[non_exhaustive]
    HandlerDone {
        /// The job's queue (a [`Worker`](super::Worker) serves several).
        queue: &'a str,
        /// The job.
        id: &'a str,
        /// The token.
        token: u64,
        /// How it ended.
        result: HandlerResult,
    },
    /// A settlement was sent.
    #[non_exhaustive]
    SettleSent {
        /// The job's queue (a [`Worker`](super::Worker) serves several).
        queue: &'a str,
        /// The job.
        id: &'a str,
        /// The token.
        token: u64,
        /// The operation.
        op: SettleOp,
    },
    /// The server applied a settlement, or answered that it already had.
    #[non_exhaustive]
    Settled {
        /// The job's queue (a [`Worker`](super::Worker) serves several).
        queue: &'a str,
        /// The job.
        id: &'a str,
        /// The token.
        token: u64,
        /// The operation.
        op: SettleOp,
        /// What happened.
        outcome: Outcome,
        /// When the script ran.
        server_ms: u64,
    },
    /// A settlement was not applied: `LeaseLost`/`JobNotFound` (definite),
    /// a bad item (an invalid delay), or a transport failure whose outcome
    /// is unknown, after retries.
    #[non_exhaustive]
    SettleFailed {
        /// The job's queue (a [`Worker`](super::Worker) serves several).
        queue: &'a str,
        /// The job.
        id: &'a str,
        /// The token.
        token: u64,
        /// The operation.
        op: SettleOp,
        /// The last error.
        error: &'a Error,
    },
}

/// An observer as the consumer keeps it.
pub(super) type Observer = Arc<dyn Fn(&WorkerEvent<'_>) + Send + Sync>;

/// The consumer's observers, each called in turn with a panic guard.
#[derive(Clone, Default)]
pub(super) struct Observers(pub(super) Vec<Observer>);

impl Observers {
    pub(super) fn emit(&self, event: WorkerEvent<'_>) {
        for o in &self.0 {
            if catch_unwind(AssertUnwindSafe(|| o(&event))).is_err() {
                warn!(?event, "an observer panicked; the consumer carries on");
            }
        }
    }
}
