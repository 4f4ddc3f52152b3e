//! Handlers and their outcomes: a [`Handler`] is any async closure from a
//! [`Job`] to `Result<R, HandlerError>`; `Ok(value)` completes the job and
//! keeps `value` with it, and the [`HandlerError`] says what should happen
//! to the job otherwise.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use super::job::Job;
use crate::limits::MAX_DELAY;

/// The error type of handlers: any error converts into it with `?` (as
/// with `anyhow`), and its constructors choose what happens to the job.
///
/// | returned | the job |
/// | --- | --- |
/// | `Ok(value)` | completes, keeping `value` (nothing for `()`) |
/// | `Err(e.into())`, `?` | is retried after the backoff (the consumer's, else the job's), failing for good at `max_attempts` |
/// | [`HandlerError::retry_after`] | is retried after the given delay, whatever the backoff |
/// | [`HandlerError::fail`] | fails for good now (not retryable) |
/// | [`HandlerError::snooze`] | runs again after the delay, no failure counted |
/// | [`HandlerError::rate_limited`] | as `snooze`, and its lane (or the queue) starts no job until the delay has passed |
///
/// ```
/// use std::time::Duration;
/// use echomq::{HandlerError, Job};
///
/// async fn handle(job: Job<String>) -> Result<(), HandlerError> {
///     let n: u32 = job.payload().parse()?; // a ParseIntError: retried
///     if n == 0 {
///         return Err(HandlerError::fail("zero is not a valid order number"));
///     }
///     if n > 1_000 {
///         return Err(HandlerError::snooze(Duration::from_secs(60)));
///     }
///     Ok(())
/// }
/// ```
pub struct HandlerError {
    kind: Kind,
    error: Box<dyn StdError + Send + Sync>,
}

/// What a [`HandlerError`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Retry(Option<Duration>),
    Fail,
    Snooze(Duration),
    RateLimited(Duration),
}

impl HandlerError {
    /// Retry after the backoff (what `?` gives): the consumer's, if it has
    /// one ([`Worker::backoff`](crate::Worker::backoff),
    /// [`backoff_with`](crate::Worker::backoff_with)), else the job's own.
    pub fn retry(error: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        HandlerError {
            kind: Kind::Retry(None),
            error: error.into(),
        }
    }

    /// Retry after `delay` instead of any backoff, the consumer's or the
    /// job's (a failure is counted). Like a backoff, the delay saturates at
    /// [`MAX_DELAY`](crate::limits::MAX_DELAY).
    pub fn retry_after(error: impl Into<Box<dyn StdError + Send + Sync>>, delay: Duration) -> Self {
        HandlerError {
            kind: Kind::Retry(Some(delay.min(MAX_DELAY))),
            error: error.into(),
        }
    }

    /// Fail the job for good now, whatever attempts remain (a
    /// non-retryable error: a payload the handler can never process, say).
    pub fn fail(error: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        HandlerError {
            kind: Kind::Fail,
            error: error.into(),
        }
    }

    /// Run the job again after `delay` without counting a failure (the
    /// resource it needs is busy, a rate limit, a time window). Its next
    /// delivery's attempt number is one higher. The delay saturates at
    /// [`MAX_DELAY`](crate::limits::MAX_DELAY).
    pub fn snooze(delay: Duration) -> Self {
        let delay = delay.min(MAX_DELAY);
        HandlerError {
            kind: Kind::Snooze(delay),
            error: format!("snoozed for {delay:?}").into(),
        }
    }

    /// The remote service this job calls said "too many requests, retry
    /// after `retry_after`": the job runs again after that delay without
    /// counting a failure (as [`snooze`](Self::snooze)), and the queue
    /// holds further starts until the delay has passed, across every
    /// consumer in every process, on the server's clock: the starts of the
    /// job's lane when it has one, else of the whole queue
    /// ([`Queue::rate_limited`](crate::Queue::rate_limited)). The delay
    /// saturates at [`MAX_DELAY`](crate::limits::MAX_DELAY).
    ///
    /// ```
    /// use std::time::Duration;
    /// use echomq::{HandlerError, Job};
    ///
    /// async fn call_api(job: Job<String>) -> Result<(), HandlerError> {
    ///     let status = 429; // what the remote API answered
    ///     if status == 429 {
    ///         return Err(HandlerError::rate_limited(Duration::from_secs(5)));
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub fn rate_limited(retry_after: Duration) -> Self {
        let delay = retry_after.min(MAX_DELAY);
        HandlerError {
            kind: Kind::RateLimited(delay),
            error: format!("rate limited for {delay:?}").into(),
        }
    }

    /// The same error, failing the job for good instead.
    pub fn non_retryable(mut self) -> Self {
        self.kind = Kind::Fail;
        self
    }

    /// True unless it fails the job for good.
    pub fn is_retryable(&self) -> bool {
        self.kind != Kind::Fail
    }

    /// The underlying error.
    pub fn error(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.error
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }
}

/// Any error (and `String`, `&str`, `Box<dyn Error + Send + Sync>`)
/// converts with `?`, asking for a retry.
impl<E> From<E> for HandlerError
where
    E: Into<Box<dyn StdError + Send + Sync>>,
{
    fn from(error: E) -> Self {
        HandlerError::retry(error)
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("kind", &self.kind)
            .field("error", &self.error)
            .finish()
    }
}

/// An async job handler. Implemented for every
/// `Fn(Job<T>) -> impl Future<Output = Result<R, HandlerError>>` with a
/// serializable `R`, so a plain async closure (or `async fn`) is a handler.
///
/// The value a handler returns is kept with the completed job as JSON
/// ([`JobInfo::result`](crate::JobInfo::result), at most
/// [`MAX_RESULT_BYTES`](crate::queue::MAX_RESULT_BYTES)); `()` (or any
/// value that encodes as `null`) keeps nothing. A result that cannot be
/// kept does not undo the work: the job completes without it and a warning
/// is logged.
///
/// ```
/// use echomq::{HandlerError, Job};
///
/// #[derive(serde::Serialize)]
/// struct Thumbnail { bytes: usize }
///
/// async fn resize(job: Job<String>) -> Result<Thumbnail, HandlerError> {
///     Ok(Thumbnail { bytes: job.payload().len() })
/// }
/// ```
pub trait Handler<T>: Send + Sync + 'static {
    /// What a completed call returns, kept with the job.
    type Output: serde::Serialize + Send + 'static;
    /// The future one call returns.
    type Future: Future<Output = Result<Self::Output, HandlerError>> + Send + 'static;
    /// Handles one delivery of a job.
    fn call(&self, job: Job<T>) -> Self::Future;
}

impl<T, F, Fut, R> Handler<T> for F
where
    F: Fn(Job<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, HandlerError>> + Send + 'static,
    R: serde::Serialize + Send + 'static,
{
    type Output = R;
    type Future = Fut;
    fn call(&self, job: Job<T>) -> Fut {
        self(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Errors of every common shape convert with `?` and keep their text; constructors set the outcome.
    #[test]
    fn errors_convert_and_choose_outcomes() {
        fn parse(s: &str) -> Result<u32, HandlerError> {
            Ok(s.parse::<u32>()?)
        }
        fn boxed() -> Result<(), HandlerError> {
            let b: Box<dyn StdError + Send + Sync> = "boxed".into();
            Err(b)?
        }
        fn text() -> Result<(), HandlerError> {
            Err(String::from("text"))?
        }
        let e = parse("x").unwrap_err();
        assert_eq!(
            (e.kind(), e.to_string().contains("invalid digit")),
            (Kind::Retry(None), true)
        );
        assert_eq!(boxed().unwrap_err().to_string(), "boxed");
        assert_eq!(text().unwrap_err().to_string(), "text");
        assert_eq!(HandlerError::fail("no").kind(), Kind::Fail);
        assert!(!HandlerError::retry("x").non_retryable().is_retryable());
        let d = Duration::from_secs(3);
        assert_eq!(HandlerError::retry_after("x", d).kind(), Kind::Retry(Some(d)));
        assert_eq!(HandlerError::snooze(d).kind(), Kind::Snooze(d));
        assert_eq!(HandlerError::rate_limited(d).kind(), Kind::RateLimited(d));
        assert!(HandlerError::rate_limited(d).is_retryable());
    }
}
