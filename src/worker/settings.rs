//! A consumer's settings, checked when it starts, and the timings derived
//! from them.

use std::time::Duration;

use super::backoff::RetryBackoff;
use super::event::Observers;
use super::{
    AUTO_PREFETCH_WAIT, MAX_CONCURRENCY, MAX_LEASE, MAX_POLL_INTERVAL, MAX_PREFETCH, MAX_SHUTDOWN_TIMEOUT,
    MIN_HEARTBEAT, MIN_LEASE, MIN_POLL_INTERVAL,
};
use crate::error::{Error, Result};
use crate::maintenance::reaper::MAX_REAP_INTERVAL;
use crate::validate::{count, duration};

/// When heartbeats renew a running job's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Beat {
    /// A third of the lease.
    Auto,
    /// Every this long (less than the lease).
    Every(Duration),
    /// Never: the lease is the handler's whole time budget.
    Off,
}

#[derive(Clone)]
pub(super) struct Settings {
    pub observers: Observers,
    /// The holder name its claims record; `None`: `HOST:PID/N`.
    pub name: Option<String>,
    pub concurrency: usize,
    /// `None`: automatic.
    pub prefetch: Option<usize>,
    pub lease: Duration,
    pub beat: Beat,
    pub shutdown_timeout: Duration,
    pub poll_interval: Duration,
    pub reaper: bool,
    pub reap_interval: Duration,
    /// The delay of retries that ask for "the backoff" (`Job`: the job's own).
    pub backoff: RetryBackoff,
    /// How often the worker refreshes its queues' gauges; `None`: never.
    #[cfg(feature = "metrics")]
    pub gauges_every: Option<Duration>,
}

/// The defaults a new [`Consumer`](super::Consumer) starts from.
impl Default for Settings {
    fn default() -> Self {
        Settings {
            observers: Observers::default(),
            name: None,
            concurrency: super::DEFAULT_CONCURRENCY,
            prefetch: None,
            lease: super::DEFAULT_LEASE,
            beat: Beat::Auto,
            shutdown_timeout: super::DEFAULT_SHUTDOWN_TIMEOUT,
            poll_interval: super::DEFAULT_POLL_INTERVAL,
            reaper: true,
            reap_interval: crate::maintenance::reaper::DEFAULT_REAP_INTERVAL,
            backoff: super::backoff::RetryBackoff::Job,
            #[cfg(feature = "metrics")]
            gauges_every: None,
        }
    }
}

impl Settings {
    pub(super) fn check(&self) -> Result<()> {
        if let Some(name) = &self.name {
            crate::validate::holder("consumer name", name)?;
        }
        count("concurrency", self.concurrency, 1, MAX_CONCURRENCY)?;
        if let Some(n) = self.prefetch {
            count("prefetch", n, 0, MAX_PREFETCH)?;
        }
        duration("lease", self.lease, MIN_LEASE, MAX_LEASE)?;
        if let Beat::Every(d) = self.beat {
            if d >= self.lease {
                return Err(Error::InvalidOption {
                    name: "heartbeat",
                    reason: format!(
                        "{d:?} is not shorter than the lease ({:?}); use without_heartbeats() to turn them off",
                        self.lease
                    ),
                });
            }
            duration("heartbeat", d, MIN_HEARTBEAT, MAX_LEASE)?;
        }
        duration(
            "shutdown_timeout",
            self.shutdown_timeout,
            Duration::ZERO,
            MAX_SHUTDOWN_TIMEOUT,
        )?;
        duration(
            "poll_interval",
            self.poll_interval,
            MIN_POLL_INTERVAL,
            MAX_POLL_INTERVAL,
        )?;
        duration(
            "reap_interval",
            self.reap_interval,
            Duration::from_millis(1),
            MAX_REAP_INTERVAL,
        )?;
        self.backoff.check()?;
        #[cfg(feature = "metrics")]
        if let Some(d) = self.gauges_every {
            duration(
                "record_gauges_every",
                d,
                super::MIN_GAUGES_EVERY,
                super::MAX_GAUGES_EVERY,
            )?;
        }
        Ok(())
    }

    /// The time between heartbeats: at most half the safety window, so a
    /// beat always lands inside it; `None` when heartbeats are off.
    pub(super) fn heartbeat(&self) -> Option<Duration> {
        let d = match self.beat {
            Beat::Off => return None,
            Beat::Auto => self.lease / 3,
            Beat::Every(d) => d,
        };
        Some(d.min(self.safety_window() / 2).max(Duration::from_millis(1)))
    }

    /// How long after a confirmed renewal (measured from when it was sent)
    /// the lease is still surely ours: the lease minus a margin for clock
    /// drift and the renewal's own travel.
    pub(super) fn safety_window(&self) -> Duration {
        self.lease - self.lease_margin()
    }

    /// The lease's margin: a tenth of it (at least 20 ms, at most half).
    /// A handler told that its lease is lost gets this long (at most the
    /// shutdown timeout) to stop by itself before its task is aborted, so a
    /// lease lost at the end of the safety window is given up by its
    /// deadline, before any redelivery can start.
    pub(super) fn lease_margin(&self) -> Duration {
        (self.lease / 10).max(Duration::from_millis(20)).min(self.lease / 2)
    }

    /// How long a prefetched job may wait for a handler before it is
    /// released: within it the lease surely holds, and a job that waited
    /// longer than RECHECK_AFTER_WAIT is renewed before it starts (a
    /// shorter wait leaves the first heartbeat, due a heartbeat interval
    /// after the claim, to renew it in time).
    pub(super) fn prefetch_wait(&self) -> Duration {
        let wait = self.heartbeat().unwrap_or(self.safety_window() / 2);
        if self.prefetch.is_none() {
            wait.min(AUTO_PREFETCH_WAIT)
        } else {
            wait
        }
    }

    /// The most jobs leased ahead of free handlers: the fixed number, or
    /// for automatic prefetch the concurrency, at least 4 and at most 32.
    pub(super) fn extra(&self) -> usize {
        self.prefetch.unwrap_or_else(|| self.concurrency.clamp(4, 32))
    }
}
