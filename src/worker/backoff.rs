//! A consumer's own retry delays ([`Worker::backoff`](super::Worker::backoff),
//! [`Worker::backoff_with`](super::Worker::backoff_with)) and the
//! [`RetryContext`] a custom function sees.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use tracing::warn;

use crate::lease::Lease;
use crate::limits::{Backoff, MAX_DELAY};

/// A custom backoff function, as [`Worker::backoff_with`](super::Worker::backoff_with) takes it.
type BackoffFn = dyn Fn(&RetryContext<'_>) -> Duration + Send + Sync;

/// Who chooses the delay of a retry that asked for "the backoff" (an error
/// with `?` or [`HandlerError::retry`](super::HandlerError::retry), a panic,
/// a timeout).
#[derive(Clone, Default)]
pub(crate) enum RetryBackoff {
    /// The job's own backoff, applied by the server (the default).
    #[default]
    Job,
    /// This backoff, computed here (jitter included).
    Fixed(Backoff),
    /// A user's function; the job's own backoff should it panic.
    With(Arc<BackoffFn>),
}

impl RetryBackoff {
    /// The delay to send with the retry of `lease` with `error`; `None`:
    /// the job's own backoff (the server computes it).
    pub(super) fn delay(&self, lease: &Lease, error: &str) -> Option<Duration> {
        let failures = lease.failures.saturating_add(1);
        match self {
            RetryBackoff::Job => None,
            RetryBackoff::Fixed(b) => Some(b.delay_for(failures, lease.token)),
            RetryBackoff::With(f) => {
                let ctx = RetryContext {
                    id: &lease.id,
                    attempt: lease.attempt,
                    failures,
                    token: lease.token,
                    job_backoff: lease.limits.backoff,
                    error,
                };
                // User code: a panic must not take the job task down.
                match catch_unwind(AssertUnwindSafe(|| f(&ctx))) {
                    Ok(d) => Some(d.min(MAX_DELAY)),
                    Err(p) => {
                        warn!(
                            panic = %super::panic_text(p),
                            "the consumer's backoff function panicked; retrying after the job's own backoff"
                        );
                        None
                    }
                }
            }
        }
    }

    /// Refuses a consumer backoff out of range.
    pub(super) fn check(&self) -> crate::Result<()> {
        match self {
            RetryBackoff::Fixed(b) => b.check(),
            RetryBackoff::Job | RetryBackoff::With(_) => Ok(()),
        }
    }
}

/// What a custom backoff function ([`Worker::backoff_with`](super::Worker::backoff_with))
/// knows about the retry it chooses a delay for.
///
/// ```
/// use std::time::Duration;
/// use echomq::worker::RetryContext;
///
/// // Rate-limited calls wait a minute; everything else keeps the job's own backoff.
/// fn delay(ctx: &RetryContext<'_>) -> Duration {
///     if ctx.error().contains("429") {
///         Duration::from_secs(60)
///     } else {
///         ctx.job_delay()
///     }
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct RetryContext<'a> {
    id: &'a str,
    attempt: u64,
    failures: u64,
    token: u64,
    job_backoff: Backoff,
    error: &'a str,
}

impl RetryContext<'_> {
    /// The job id.
    pub fn job_id(&self) -> &str {
        self.id
    }

    /// The delivery that failed (1 on the first).
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// The job's failures counting this one (1 on the first failure):
    /// the `failures` a [`Backoff::delay`] takes.
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// The fencing token of the claim that failed.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The job's own backoff, fixed when it was enqueued.
    pub fn job_backoff(&self) -> Backoff {
        self.job_backoff
    }

    /// The delay the job's own backoff gives this retry, jitter included:
    /// what the server would choose had the consumer no backoff of its own.
    pub fn job_delay(&self) -> Duration {
        self.job_backoff.delay_for(self.failures, self.token)
    }

    /// The error text to be recorded: the handler's error, `"panicked"`
    /// or `"timeout"`.
    pub fn error(&self) -> &str {
        self.error
    }
}
