//! The reaper: returns expired leases to pending and promotes due delayed jobs.
//!
//! A lease whose deadline (server clock) has passed belongs to a worker that
//! crashed, paused or lost the server. The reaper puts such a job back on
//! pending and counts a *stall*; past the job's own `max_stalls` the job
//! fails for good with reason `"stalled"`. Each pass is one script touching
//! at most `batch` jobs, so any number of reapers may run and each expired
//! lease is reaped exactly once.
//!
//! Consumers do not need one: the maintenance task of their
//! [`Client`](crate::Client) reaps every queue they serve. Run a `Reaper`
//! yourself for a queue that no consumer of yours serves (or whose
//! consumers turned the maintenance off), or drive
//! [`run_once`](Reaper::run_once) from your own scheduler. Each pass also
//! relays the queue's outbox (see `src/relay.rs`), as the maintenance
//! task does.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::error::Result;
use crate::queue::{MAX_BATCH, Queue};
use crate::store;
use crate::store::reap::{Expired, Fate};
use crate::validate;

/// Default time between reaper passes.
pub const DEFAULT_REAP_INTERVAL: Duration = Duration::from_millis(500);
/// Default most jobs reaped (and, separately, promoted) per pass.
pub const DEFAULT_REAP_BATCH: usize = 1_000;
/// The longest reap interval accepted.
pub const MAX_REAP_INTERVAL: Duration = Duration::from_secs(3_600);

/// What one reaper pass did (from [`Queue::reap`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReapReport {
    /// The server's clock when the pass ran.
    pub server_ms: u64,
    /// Expired leases returned to pending: `(job id, stalls now)`.
    pub requeued: Vec<(String, u64)>,
    /// Jobs failed for good as "stalled": `(job id, stalls now)`.
    pub failed: Vec<(String, u64)>,
    /// Expired leases of jobs an operator asked to cancel: cancelled
    /// rather than run again (job ids).
    pub cancelled: Vec<String>,
    /// Expired leases of jobs whose expiry ([`EnqueueOptions::expires_at`](crate::EnqueueOptions::expires_at))
    /// has passed: ended expired rather than run again (job ids).
    pub expired: Vec<String>,
    /// Waiting jobs (pending or delayed) ended expired: their expiry passed
    /// before a worker started them.
    pub expired_waiting: u64,
    /// Due delayed jobs moved to pending.
    pub promoted: u64,
    /// Leases still held after the pass.
    pub active: u64,
    /// The earliest due time of a delayed job, or expiry of a job, after
    /// the pass (server ms).
    pub next_due_ms: Option<u64>,
}

impl ReapReport {
    /// Jobs the pass ended: failed as stalled, cancelled, or expired
    /// (leased or waiting).
    pub fn ended(&self) -> u64 {
        (self.failed.len() + self.cancelled.len() + self.expired.len()) as u64 + self.expired_waiting
    }

    /// True when the pass hit its limit: another pass should follow at once.
    pub fn is_full(&self, batch: usize) -> bool {
        self.requeued.len() + self.failed.len() + self.cancelled.len() + self.expired.len() >= batch
            || self.promoted as usize >= batch
            || self.expired_waiting as usize >= batch
    }

    /// How long after this pass (of at most `batch` jobs) the queue is due
    /// again: `None`, at once, after a full batch; else as [`pace`] says.
    pub(crate) fn due_again(&self, batch: usize, busy: Duration, idle: Duration) -> Option<Duration> {
        if self.is_full(batch) {
            return None;
        }
        let until_due = self
            .next_due_ms
            .map(|due| Duration::from_millis(due.saturating_sub(self.server_ms)));
        Some(pace(self.active > 0, until_due, busy, idle))
    }
}

/// The one pacing rule of reaping, for the maintenance task and a
/// [`Reaper`]: a queue holding leases is due again after `busy`; one
/// without, when its next delayed job is due or after `idle`, whichever is
/// sooner, and never sooner than `busy`.
pub(crate) fn pace(holds_leases: bool, until_due: Option<Duration>, busy: Duration, idle: Duration) -> Duration {
    let wait = if holds_leases {
        busy
    } else {
        until_due.map_or(idle, |d| d.min(idle))
    };
    wait.max(busy)
}

/// One reap pass over `queue`, logged job by job: the pass both the
/// maintenance task and a [`Reaper`] run.
pub(crate) async fn reap_pass(queue: &Queue, batch: usize) -> Result<ReapReport> {
    let report = queue.reap(batch).await?;
    log_report(queue, &report);
    Ok(report)
}

impl Queue {
    /// One reaper pass: returns up to `limit` expired leases to pending
    /// (counting a stall each; past the job's `max_stalls` the job fails as
    /// "stalled") and promotes up to `limit` due delayed jobs.
    ///
    /// # Errors
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for `limit`
    /// outside 1..=[`MAX_BATCH`]; server errors.
    pub async fn reap(&self, limit: usize) -> Result<ReapReport> {
        validate::count("reap batch size", limit, 1, MAX_BATCH)?;
        #[cfg(echomq_faults)]
        if crate::faults::active("two-step-reaper") {
            return self.reap_in_two_steps(limit).await;
        }
        let keep_failed = self.options().keep_failed.arg();
        let reaped = store::reap::run(&mut self.conn(), self.keys(), limit, &keep_failed).await?;
        let mut report = ReapReport {
            server_ms: reaped.server_ms,
            promoted: reaped.promoted,
            active: reaped.active,
            next_due_ms: reaped.next_due_ms,
            expired_waiting: reaped.expired_waiting,
            ..ReapReport::default()
        };
        for Expired { id, stalls, fate } in reaped.expired {
            match fate {
                Fate::Failed => report.failed.push((id, stalls)),
                Fate::Cancelled => report.cancelled.push(id),
                Fate::Expired => report.expired.push(id),
                Fate::Requeued => report.requeued.push((id, stalls)),
            }
        }
        Ok(report)
    }

    /// Negative control: reads the expired leases in one round trip and
    /// moves them in others, so racing reapers and acks interleave.
    #[cfg(echomq_faults)]
    async fn reap_in_two_steps(&self, limit: usize) -> Result<ReapReport> {
        use crate::error::Error;
        let k = self.keys();
        let now = self.server_time_ms().await?;
        let mut conn = self.conn();
        let ids: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(&k.active)
            .arg("-inf")
            .arg(format!("({now}"))
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut conn)
            .await
            .map_err(Error::from_redis)?;
        let mut report = ReapReport {
            server_ms: now,
            ..ReapReport::default()
        };
        for id in ids {
            let jk = k.job(&id);
            let (stalls, score): (u64, f64) = redis::pipe()
                .hincr(&jk, "s", 1)
                .hget(&jk, "sc")
                .query_async(&mut conn)
                .await
                .map_err(Error::from_redis)?;
            let () = redis::pipe()
                .zrem(&k.active, &id)
                .ignore()
                .zadd(&k.pending, &id, score)
                .ignore()
                .hset(&jk, "st", "pending")
                .ignore()
                .lpush(&k.wake, "1")
                .ignore()
                .query_async(&mut conn)
                .await
                .map_err(Error::from_redis)?;
            report.requeued.push((id, stalls));
        }
        report.active = 1;
        Ok(report)
    }
}

/// A reaper for one queue. Call [`run_once`](Self::run_once) yourself, or
/// [`spawn`](Self::spawn) it as a background task.
///
/// ```no_run
/// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
/// use std::time::Duration;
/// let reaper = echomq::Reaper::new(queue).interval(Duration::from_secs(1)).spawn()?;
/// // ...
/// reaper.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Reaper {
    queue: Queue,
    interval: Duration,
    batch: usize,
}

impl Reaper {
    /// A reaper with the defaults.
    pub fn new(queue: Queue) -> Self {
        Reaper {
            queue,
            interval: DEFAULT_REAP_INTERVAL,
            batch: DEFAULT_REAP_BATCH,
        }
    }
    /// Time between passes (default [`DEFAULT_REAP_INTERVAL`]; 1 ms to
    /// [`MAX_REAP_INTERVAL`]).
    pub fn interval(mut self, d: Duration) -> Self {
        self.interval = d;
        self
    }
    /// Most jobs per pass (default [`DEFAULT_REAP_BATCH`]; 1 to [`MAX_BATCH`]).
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n;
        self
    }

    fn check(&self) -> Result<()> {
        validate::duration(
            "reap interval",
            self.interval,
            Duration::from_millis(1),
            MAX_REAP_INTERVAL,
        )?;
        validate::count("reap batch", self.batch, 1, MAX_BATCH)?;
        Ok(())
    }

    /// One pass: the reap script's call, then the relay of the messages
    /// the queue's scripts left for other queues (a flow step's or batch
    /// member's end for its home queue, written by a reap or by a
    /// settlement of a consumer without the client's maintenance): one
    /// read of the outbox when it holds none. A relay that fails is logged
    /// and tried again at the next pass; the messages stay meanwhile.
    ///
    /// # Errors
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a bad
    /// setting; server errors of the reap.
    pub async fn run_once(&self) -> Result<ReapReport> {
        self.check()?;
        let report = reap_pass(&self.queue, self.batch).await?;
        crate::relay::relay_or_log(&self.queue).await;
        Ok(report)
    }

    /// Runs passes until `shutdown` resolves. A full batch is followed by
    /// another pass at once; an error is logged and retried after `interval`.
    /// Before each pass it reads the server's clock: after a forward step of
    /// that clock it holds off (see
    /// [`MAX_STEP_HOLD`](crate::maintenance::MAX_STEP_HOLD)) so that live
    /// workers renew their leases against the new clock before any is reaped.
    ///
    /// # Errors
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a bad
    /// setting, before any pass.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        self.check()?;
        tokio::pin!(shutdown);
        let mut clock = super::clock::ClockWatch::default();
        loop {
            if let Err(e) = clock.look(&self.queue).await {
                debug!(queue = self.queue.name(), error = %e, "TIME failed");
            }
            let held = clock.held_for(tokio::time::Instant::now());
            let pause = match held {
                // The server's clock stepped ahead: let live workers renew first.
                Some(hold) => hold,
                None => self.pass_pause().await,
            };
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(pause) => {}
            }
        }
        Ok(())
    }

    /// One pass; returns the pause before the next: none after a full
    /// batch, else `interval` (a standalone reaper has no consumer of its
    /// own to tell it of new leases, so it never slows to an idle pace).
    async fn pass_pause(&self) -> Duration {
        match self.run_once().await {
            Ok(r) => r
                .due_again(self.batch, self.interval, self.interval)
                .unwrap_or_default(),
            Err(e) => {
                warn!(queue = self.queue.name(), error = %e, "reaper pass failed; retrying");
                self.interval
            }
        }
    }

    /// Spawns [`run`](Self::run) on the current Tokio runtime.
    ///
    /// # Errors
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a bad setting.
    pub fn spawn(self) -> Result<ReaperHandle> {
        self.check()?;
        let stop = CancellationToken::new();
        let s = stop.clone();
        let join = tokio::spawn(async move {
            let _ = self.run(s.cancelled_owned()).await;
        });
        Ok(ReaperHandle { stop, join })
    }
}

/// Logs what a pass did, per job.
fn log_report(queue: &Queue, report: &ReapReport) {
    for (id, stalls) in &report.requeued {
        warn!(queue = queue.name(), job_id = %id, stalls, "lease expired; job returned to pending");
    }
    for (id, stalls) in &report.failed {
        warn!(queue = queue.name(), job_id = %id, stalls, "job stalled too often; failed");
    }
    for id in &report.cancelled {
        info!(queue = queue.name(), job_id = %id, "lease expired on a job asked to cancel; cancelled");
    }
    for id in &report.expired {
        info!(queue = queue.name(), job_id = %id, "lease expired past the job's expiry; expired");
    }
    if report.expired_waiting > 0 {
        info!(
            queue = queue.name(),
            jobs = report.expired_waiting,
            "waiting jobs expired unstarted"
        );
    }
}

/// A running reaper task.
#[derive(Debug)]
#[must_use = "dropping the handle leaves the reaper running; call shutdown()"]
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
