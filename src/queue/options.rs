//! [`QueueOptions`] and [`Retention`]: what a queue handle is set up with.

use std::time::Duration;

use crate::durability::Durability;
use crate::error::{Error, Result};
use crate::keys::DEFAULT_PREFIX;
use crate::limits::{Backoff, Limits};

/// Default limit on an encoded payload: 512 KiB.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 512 * 1024;
pub use crate::validate::MAX_PAYLOAD_LIMIT;
/// Default retention of completed jobs: the newest 1,000.
pub const DEFAULT_KEEP_COMPLETED: Retention = Retention::Newest(1_000);
/// Default retention of failed jobs: the newest 10,000.
pub const DEFAULT_KEEP_FAILED: Retention = Retention::Newest(10_000);

/// How many finished job records a queue keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Retention {
    /// Keep every record (grows without bound).
    All,
    /// Delete the record when the job finishes. A repeated settle of a
    /// deleted job then answers [`Error::JobNotFound`] instead of "already
    /// settled"; either way nothing changes twice.
    None,
    /// Keep the newest `n` records (`n` at least 1); older ones are
    /// deleted by the settles once there are 64 more than `n`.
    Newest(u32),
    /// Keep the records of jobs finished within this long (1 ms to
    /// [`MAX_DELAY`](crate::limits::MAX_DELAY)); older ones are deleted as
    /// later jobs finish, at most a thousand per settle call.
    Within(Duration),
    /// Both: the newest `n`, and none finished longer ago than the duration.
    NewestWithin(u32, Duration),
}

impl Retention {
    /// As the scripts take it: "N" or "N/AGE_MS" (lua/lib/sets.lua `retention`).
    pub(crate) fn arg(self) -> String {
        match self {
            Retention::All => "-1".into(),
            Retention::None => "0".into(),
            Retention::Newest(n) => n.to_string(),
            Retention::Within(d) => format!("-1/{}", d.as_millis()),
            Retention::NewestWithin(n, d) => format!("{n}/{}", d.as_millis()),
        }
    }

    fn check(self, name: &'static str) -> Result<()> {
        match self {
            Retention::Newest(0) | Retention::NewestWithin(0, _) => Err(Error::InvalidOption {
                name,
                reason: "keeping the newest 0 keeps nothing: say Retention::None".into(),
            }),
            Retention::Within(d) | Retention::NewestWithin(_, d) => {
                crate::validate::duration(name, d, Duration::from_millis(1), crate::limits::MAX_DELAY).map(drop)
            }
            _ => Ok(()),
        }
    }
}

/// Settings of a [`Queue`](crate::Queue) handle, checked when the handle
/// is made. Connection settings live in
/// [`ClientOptions`](crate::ClientOptions).
///
/// ```
/// use std::time::Duration;
/// use echomq::{Backoff, QueueOptions, Retention};
/// let opts = QueueOptions::new()
///     .keep_completed(Retention::Newest(100))
///     .max_attempts(5)
///     .backoff(Backoff::Fixed(Duration::from_secs(10)));
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct QueueOptions {
    pub(crate) prefix: String,
    pub(crate) max_payload_bytes: usize,
    pub(crate) keep_completed: Retention,
    pub(crate) keep_failed: Retention,
    pub(crate) limits: Limits,
    pub(crate) durability: Durability,
    /// Payloads longer than this are stored compressed (`None`: never).
    #[cfg(feature = "compression")]
    pub(crate) compress_above: Option<usize>,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            prefix: DEFAULT_PREFIX.to_owned(),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            keep_completed: DEFAULT_KEEP_COMPLETED,
            keep_failed: DEFAULT_KEEP_FAILED,
            limits: Limits::default(),
            durability: Durability::Primary,
            #[cfg(feature = "compression")]
            compress_above: None,
        }
    }
}

impl QueueOptions {
    /// The defaults (see each setter).
    pub fn new() -> Self {
        Self::default()
    }
    /// Stores the JSON payloads this handle enqueues that are longer than
    /// `bytes` as LZ4 blocks, when that makes them smaller (feature
    /// `compression`; default: never). Readers give back the JSON
    /// whatever the form (claims, [`Queue::job`](crate::Queue::job),
    /// listings), so it may be turned on or off at any time, per producer;
    /// but every process that reads the queue must be built with the
    /// feature, or a compressed payload fails to decode there. The
    /// payload limit ([`max_payload_bytes`](Self::max_payload_bytes))
    /// counts the JSON, before compression. What it saves and costs:
    /// `benches/README.md`, "Compressed payloads".
    #[cfg(feature = "compression")]
    pub fn compress_above(mut self, bytes: usize) -> Self {
        self.compress_above = Some(bytes);
        self
    }
    /// Key prefix (default [`DEFAULT_PREFIX`], `"emq"`). Must not contain braces.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
    /// Largest encoded payload accepted (default
    /// [`DEFAULT_MAX_PAYLOAD_BYTES`]; 1 to [`MAX_PAYLOAD_LIMIT`]).
    pub fn max_payload_bytes(mut self, n: usize) -> Self {
        self.max_payload_bytes = n;
        self
    }
    /// Retention of completed jobs (default [`DEFAULT_KEEP_COMPLETED`]).
    pub fn keep_completed(mut self, r: Retention) -> Self {
        self.keep_completed = r;
        self
    }
    /// Retention of failed jobs (default [`DEFAULT_KEEP_FAILED`]).
    pub fn keep_failed(mut self, r: Retention) -> Self {
        self.keep_failed = r;
        self
    }
    /// Handler failures before a job fails for good, for jobs enqueued
    /// through this handle without their own
    /// (default [`DEFAULT_MAX_ATTEMPTS`](crate::limits::DEFAULT_MAX_ATTEMPTS)).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.limits.max_attempts = n;
        self
    }
    /// Expired leases a job survives before it fails as "stalled", for jobs
    /// enqueued through this handle without their own
    /// (default [`DEFAULT_MAX_STALLS`](crate::limits::DEFAULT_MAX_STALLS)).
    pub fn max_stalls(mut self, n: u32) -> Self {
        self.limits.max_stalls = n;
        self
    }
    /// The longest one attempt's handler may run, for jobs enqueued
    /// through this handle without their own (default none; see
    /// [`EnqueueOptions::timeout`](crate::EnqueueOptions::timeout)).
    pub fn timeout(mut self, timeout: std::time::Duration) -> Self {
        self.limits.timeout = Some(timeout);
        self
    }
    /// The delay before each retry, for jobs enqueued through this handle
    /// without their own (default [`DEFAULT_BACKOFF`](crate::limits::DEFAULT_BACKOFF)).
    pub fn backoff(mut self, b: Backoff) -> Self {
        self.limits.backoff = b;
        self
    }

    /// How far enqueues and settlements through this handle must have
    /// gone before they are answered (default [`Durability::Primary`], the
    /// primary's reply; see [`crate::durability`] for what each setting
    /// promises under failover).
    ///
    /// ```
    /// use std::time::Duration;
    /// use echomq::{Durability, QueueOptions};
    /// let opts = QueueOptions::new().durability(Durability::Replicas {
    ///     count: 1,
    ///     timeout: Duration::from_millis(500),
    /// });
    /// ```
    pub fn durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.max_payload_bytes == 0 || self.max_payload_bytes > MAX_PAYLOAD_LIMIT {
            return Err(Error::InvalidOption {
                name: "max_payload_bytes",
                reason: format!("{} is not within 1..={MAX_PAYLOAD_LIMIT}", self.max_payload_bytes),
            });
        }
        self.keep_completed.check("keep_completed")?;
        self.keep_failed.check("keep_failed")?;
        self.durability.check()?;
        self.limits.check()
    }
}
