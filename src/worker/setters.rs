//! The [`Worker`]'s settings: one setter each, shared by every worker
//! (a [`Consumer`](super::Consumer) is a worker of one queue).

use super::Worker;

impl Worker {
    /// Handlers running at once (default [`DEFAULT_CONCURRENCY`](crate::worker::DEFAULT_CONCURRENCY); 1 to
    /// [`MAX_CONCURRENCY`](crate::worker::MAX_CONCURRENCY)).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.settings.concurrency = n;
        self
    }
    /// Jobs leased ahead of free handlers, fixed at `n` (0 to
    /// [`MAX_PREFETCH`](crate::worker::MAX_PREFETCH)); `0` turns leasing ahead off. The consumer then
    /// holds up to `concurrency + n` leases, so when a handler finishes the
    /// next job starts at once instead of after the round trip that settles
    /// the finished one and leases another, and one call settles and leases
    /// several jobs even at concurrency 1. That round trip is what a
    /// consumer of short jobs at low concurrency waits on.
    ///
    /// By default prefetch is automatic: up to `concurrency` jobs (at least
    /// 4, at most 32) are leased ahead, but only while the average handler
    /// runs for less than [`AUTO_PREFETCH_RATIO`](crate::worker::AUTO_PREFETCH_RATIO) settle round trips (both
    /// measured by the consumer as it goes; off until measured). Longer
    /// handlers gain next to nothing from it, so then the consumer leases
    /// only for free handlers, as with `prefetch(0)`.
    ///
    /// The cost: a job leased ahead runs down its lease while it waits, and
    /// no other consumer can take it. So a job that waits longer than one
    /// heartbeat interval (automatic: at most [`AUTO_PREFETCH_WAIT`](crate::worker::AUTO_PREFETCH_WAIT); half
    /// the safety window with heartbeats off) is released back to pending
    /// at its own place (its attempt number grows, its failures do not), and
    /// its slot stays taken until a handler frees up, so the consumer does
    /// not fill it again only to wait once more. With heartbeats off, a job
    /// that waited has its lease renewed once before it starts, so its
    /// handler still gets the whole lease. At shutdown waiting jobs (and
    /// jobs leased as it begins) are released, never started. A consumer that
    /// dies holding jobs ahead costs each of them a stall, as it does its
    /// running jobs. Handlers running never exceed `concurrency`.
    pub fn prefetch(mut self, n: usize) -> Self {
        self.settings.prefetch = Some(n);
        self
    }
    /// The name its claims record as the holder of the jobs they lease
    /// ([`JobInfo::holder`](crate::JobInfo::holder)), so an operator can
    /// tell which worker runs a job. Default `HOST:PID/N`, N counting the
    /// consumers of the process; 1 to
    /// [`MAX_HOLDER_BYTES`](crate::queue::MAX_HOLDER_BYTES) bytes, no
    /// control characters.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.settings.name = Some(name.into());
        self
    }
    /// Lease length (default [`DEFAULT_LEASE`](crate::worker::DEFAULT_LEASE); [`MIN_LEASE`](crate::worker::MIN_LEASE) to
    /// [`MAX_LEASE`](crate::worker::MAX_LEASE)). A worker silent for longer loses the job to the reaper.
    ///
    /// When an attempt's lease is lost (reaped, taken over, or its renewal
    /// not confirmed within the safety window, the lease minus its margin
    /// of a tenth), the handler's [`Job::cancellation`](crate::Job::cancellation)
    /// fires and its result is not settled. A handler that ignores it gets
    /// that margin (at most the [`shutdown_timeout`](Self::shutdown_timeout))
    /// to stop by itself; then its task is aborted at its next `.await`
    /// ([`WorkerEvent::HandlerAborted`](crate::WorkerEvent::HandlerAborted),
    /// metric `echomq_handlers_aborted_total`), so it does not run beside
    /// the job's redelivery. Code between two awaits (a blocking call)
    /// cannot be aborted: keep such work in `spawn_blocking` and check the
    /// cancellation.
    pub fn lease(mut self, d: std::time::Duration) -> Self {
        self.settings.lease = d;
        self
    }
    /// Time between heartbeats (default: a third of the lease; at least
    /// [`MIN_HEARTBEAT`](crate::worker::MIN_HEARTBEAT), shorter than the lease). Beats come at most every
    /// half safety window (the lease minus a tenth), so each renewal lands
    /// while the lease surely holds.
    pub fn heartbeat(mut self, d: std::time::Duration) -> Self {
        self.settings.beat = super::settings::Beat::Every(d);
        self
    }
    /// No heartbeats: the lease is each handler's whole time budget. A
    /// handler still running at the end of its safety window (the lease
    /// minus a tenth) is cancelled and its result not settled, since its
    /// job may be redelivered (a late result would be refused by the
    /// server's token check anyway, never applied twice).
    pub fn without_heartbeats(mut self) -> Self {
        self.settings.beat = super::settings::Beat::Off;
        self
    }
    /// Retries its handlers asks for without a delay of its own
    /// (an error with `?` or [`HandlerError::retry`](crate::worker::HandlerError::retry), a panic, a timeout)
    /// wait `backoff` instead of the job's own backoff. The consumer
    /// computes the delay, jitter included (drawn as the server draws a
    /// job's), and sends it with the retry. [`HandlerError::retry_after`](crate::worker::HandlerError::retry_after)
    /// still chooses its own delay. Default: the job's own backoff, which
    /// the server applies. Checked when the consumer starts (a delay over
    /// [`MAX_DELAY`](crate::limits::MAX_DELAY) or a bad jitter is
    /// [`Error::InvalidOption`](crate::Error::InvalidOption)). Replaces an earlier
    /// [`backoff_with`](Self::backoff_with).
    ///
    /// ```no_run
    /// # fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use std::time::Duration;
    /// use echomq::{Backoff, Consumer, Job};
    /// // This worker's downstream recovers slowly: back off from 5 s to 5 min, spread.
    /// let worker = Consumer::new(queue, |_job: Job<u32>| async { Ok(()) })
    ///     .backoff(Backoff::exponential(Duration::from_secs(5), Duration::from_secs(300)).jitter(0.5))
    ///     .spawn()?;
    /// # drop(worker); Ok(()) }
    /// ```
    pub fn backoff(mut self, backoff: crate::limits::Backoff) -> Self {
        self.settings.backoff = super::backoff::RetryBackoff::Fixed(backoff);
        self
    }
    /// As [`backoff`](Self::backoff), with the delay chosen by `f` from
    /// the [`RetryContext`](crate::worker::RetryContext) (the failure count, the attempt, the job id,
    /// the job's own backoff and the error). A delay over
    /// [`MAX_DELAY`](crate::limits::MAX_DELAY) saturates there. `f` is
    /// called on the job's task, so keep it quick; should it panic, the
    /// panic is logged and the retry waits the job's own backoff, and the
    /// consumer carries on. Replaces an earlier [`backoff`](Self::backoff).
    ///
    /// ```no_run
    /// # fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use std::time::Duration;
    /// use echomq::{Consumer, Job};
    /// let worker = Consumer::new(queue, |_job: Job<u32>| async { Ok(()) })
    ///     .backoff_with(|ctx| {
    ///         if ctx.error() == "timeout" {
    ///             Duration::from_secs(30 * ctx.failures())
    ///         } else {
    ///             ctx.job_delay()
    ///         }
    ///     })
    ///     .spawn()?;
    /// # drop(worker); Ok(()) }
    /// ```
    pub fn backoff_with(
        mut self,
        f: impl Fn(&crate::worker::RetryContext<'_>) -> std::time::Duration + Send + Sync + 'static,
    ) -> Self {
        self.settings.backoff = super::backoff::RetryBackoff::With(std::sync::Arc::new(f));
        self
    }
    /// Time running handlers get to finish at shutdown before they are
    /// cancelled and their jobs released (default
    /// [`DEFAULT_SHUTDOWN_TIMEOUT`](crate::worker::DEFAULT_SHUTDOWN_TIMEOUT); 0 to [`MAX_SHUTDOWN_TIMEOUT`](crate::worker::MAX_SHUTDOWN_TIMEOUT)).
    pub fn shutdown_timeout(mut self, d: std::time::Duration) -> Self {
        self.settings.shutdown_timeout = d;
        self
    }
    /// Longest idle wait before polling again even without a wake-up
    /// (default [`DEFAULT_POLL_INTERVAL`](crate::worker::DEFAULT_POLL_INTERVAL); [`MIN_POLL_INTERVAL`](crate::worker::MIN_POLL_INTERVAL) to
    /// [`MAX_POLL_INTERVAL`](crate::worker::MAX_POLL_INTERVAL)). A worker
    /// of several queues ends each wait with no push at all by claiming from
    /// the queue idle longest.
    pub fn poll_interval(mut self, d: std::time::Duration) -> Self {
        self.settings.poll_interval = d;
        self
    }
    /// Whether the client's maintenance task looks after this queue while
    /// the consumer runs (default true; see [`crate::maintenance`]): reaps
    /// its lapsed leases, runs its schedules and its consistency sweep, and
    /// relays the messages its settlements leave for other queues (ends of
    /// flow steps and batch members whose home is another queue). Off, a
    /// [`Reaper`](crate::Reaper) must run for the queue somewhere: it reaps
    /// and relays.
    pub fn reaper(mut self, on: bool) -> Self {
        self.settings.reaper = on;
        self
    }
    /// Refreshes the gauges of every queue of this worker every `every`
    /// ([`Queue::record_metrics`](crate::Queue::record_metrics): jobs per
    /// state, backlog, lag, paused), from
    /// [`MIN_GAUGES_EVERY`](super::MIN_GAUGES_EVERY) to
    /// [`MAX_GAUGES_EVERY`](super::MAX_GAUGES_EVERY); off by default. A few
    /// reads of the server per queue per refresh, nothing per job. Every
    /// process that sets it reports the same numbers: scrape them with
    /// `max` (or set it in one process).
    #[cfg(feature = "metrics")]
    pub fn record_gauges_every(mut self, every: std::time::Duration) -> Self {
        self.settings.gauges_every = Some(every);
        self
    }

    /// How often the queue is reaped while busy (default
    /// [`DEFAULT_REAP_INTERVAL`](crate::maintenance::reaper::DEFAULT_REAP_INTERVAL); 1 ms to
    /// [`MAX_REAP_INTERVAL`](crate::maintenance::reaper::MAX_REAP_INTERVAL)).
    pub fn reap_interval(mut self, d: std::time::Duration) -> Self {
        self.settings.reap_interval = d;
        self
    }

    /// Adds `observer`, called at each step of each job (claim, heartbeat,
    /// lease loss, handler end, settlement): for metrics, audit logs and
    /// fault tests. Several may be added; each runs inline on the job's
    /// task, so keep them quick. A panicking observer is logged and the
    /// consumer carries on.
    ///
    /// ```no_run
    /// # fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use echomq::{Consumer, WorkerEvent, Job};
    /// let worker = Consumer::new(queue, |_job: Job<u32>| async { Ok(()) })
    ///     .observer(|e| {
    ///         if let WorkerEvent::Settled { id, op, outcome, .. } = e {
    ///             tracing::info!(job_id = id, %op, ?outcome, "settled");
    ///         }
    ///     })
    ///     .spawn()?;
    /// # drop(worker); Ok(()) }
    /// ```
    pub fn observer(mut self, observer: impl Fn(&crate::worker::WorkerEvent<'_>) + Send + Sync + 'static) -> Self {
        self.settings.observers.0.push(std::sync::Arc::new(observer));
        self
    }
}
