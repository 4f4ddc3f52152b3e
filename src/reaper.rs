//! The reaper: returns expired leases to pending and promotes due delayed jobs.
//!
//! A lease whose deadline (server clock) has passed belongs to a worker that
//! crashed, paused or lost the server. The reaper puts such a job back on
//! pending and counts a *stall*; past `max_stalls` the job fails for good
//! with reason `"stalled"`. Each pass is one script touching at most
//! `batch` jobs, so any number of reapers may run (each consumer starts one
//! by default) and each expired lease is reaped exactly once.
//!
//! A redelivered job starts no earlier than the old lease's deadline and,
//! with a free consumer, about `interval` after it.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::error::Result;
use crate::queue::{Queue, ReapReport};

/// Default time between reaper passes.
pub const DEFAULT_REAP_INTERVAL: Duration = Duration::from_millis(500);
/// Default most jobs reaped (and, separately, promoted) per pass.
pub const DEFAULT_REAP_BATCH: usize = 1_000;
/// Default expired leases a job survives before it fails as "stalled".
pub const DEFAULT_MAX_STALLS: u32 = 3;
/// Default time between consistency sweeps ([`Queue::sweep`]) of a running reaper.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(600);

/// A reaper for one queue. Call [`run_once`](Self::run_once) yourself, or
/// [`spawn`](Self::spawn) it as a background task.
#[derive(Debug, Clone)]
pub struct Reaper {
    queue: Queue,
    interval: Duration,
    batch: usize,
    max_stalls: u32,
    sweep_interval: Option<Duration>,
}

impl Reaper {
    /// A reaper with the defaults.
    pub fn new(queue: Queue) -> Self {
        Reaper {
            queue,
            interval: DEFAULT_REAP_INTERVAL,
            batch: DEFAULT_REAP_BATCH,
            max_stalls: DEFAULT_MAX_STALLS,
            sweep_interval: Some(DEFAULT_SWEEP_INTERVAL),
        }
    }
    /// Time between passes (default [`DEFAULT_REAP_INTERVAL`]).
    pub fn interval(mut self, d: Duration) -> Self {
        self.interval = d.max(Duration::from_millis(1));
        self
    }
    /// Most jobs per pass (default [`DEFAULT_REAP_BATCH`], at most
    /// [`MAX_BATCH`](crate::queue::MAX_BATCH)).
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.clamp(1, crate::queue::MAX_BATCH);
        self
    }
    /// Stalls tolerated before a job fails as "stalled" (default
    /// [`DEFAULT_MAX_STALLS`]; a job's own `max_stalls` wins).
    pub fn max_stalls(mut self, n: u32) -> Self {
        self.max_stalls = n;
        self
    }

    /// Time between consistency sweeps while running (default
    /// [`DEFAULT_SWEEP_INTERVAL`]; `None` turns them off). The first runs
    /// one interval after start.
    pub fn sweep_interval(mut self, every: Option<Duration>) -> Self {
        self.sweep_interval = every;
        self
    }

    /// One pass: one script call.
    ///
    /// # Errors
    /// Server errors.
    pub async fn run_once(&self) -> Result<ReapReport> {
        let report = self.queue.reap(self.batch, self.max_stalls).await?;
        for (id, stalls) in &report.requeued {
            warn!(queue = self.queue.name(), job_id = %id, stalls, "lease expired; job returned to pending");
        }
        for (id, stalls) in &report.failed {
            warn!(queue = self.queue.name(), job_id = %id, stalls, "job stalled too often; failed");
        }
        Ok(report)
    }

    /// Runs passes until `shutdown` resolves. A full batch is followed by
    /// another pass at once; an error is logged and retried after `interval`.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut next_sweep = self.sweep_interval.map(|d| tokio::time::Instant::now() + d);
        loop {
            if let (Some(due), Some(every)) = (next_sweep, self.sweep_interval)
                && tokio::time::Instant::now() >= due
            {
                if let Err(e) = self.queue.sweep(self.batch).await {
                    warn!(queue = self.queue.name(), error = %e, "consistency sweep failed; will retry");
                }
                next_sweep = Some(tokio::time::Instant::now() + every);
            }
            let pause = match self.run_once().await {
                Ok(r) if r.requeued.len() + r.failed.len() >= self.batch || r.promoted as usize >= self.batch => {
                    Duration::ZERO
                }
                Ok(_) => self.interval,
                Err(e) => {
                    warn!(queue = self.queue.name(), error = %e, "reaper pass failed; retrying");
                    self.interval
                }
            };
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(pause) => {}
            }
        }
        debug!(queue = self.queue.name(), "reaper stopped");
    }

    /// Spawns [`run`](Self::run) on the current Tokio runtime.
    pub fn spawn(self) -> ReaperHandle {
        let stop = CancellationToken::new();
        let s = stop.clone();
        let join = tokio::spawn(async move { self.run(s.cancelled_owned()).await });
        ReaperHandle { stop, join }
    }
}

/// A running reaper task.
#[derive(Debug)]
pub struct ReaperHandle {
    stop: CancellationToken,
    join: JoinHandle<()>,
}

impl ReaperHandle {
    /// Stops the reaper after its current pass.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.join.await;
    }
}
