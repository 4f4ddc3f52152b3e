//! The worker side: [`Consumer`] claims jobs, runs an async handler for each
//! with bounded concurrency, keeps leases alive with heartbeats, and settles
//! each job with its fencing token. A [`Worker`] does the same for many
//! queues at once; a consumer is a worker of one queue.
//!
//! - `handler`: the [`Handler`] trait and [`HandlerError`] (the outcomes).
//! - `worker`: the [`Worker`] builder and its run (the one machinery).
//! - `erased`: a queue's handler with its payload type erased.
//! - `sched`: which queue free slots go to ([`Order`]), and each queue's
//!   state (ready, idle until woken, held until an instant).
//! - `settings`: the consumer's settings and the timings derived from them.
//! - `claim`: the claim loop and the one blocking wake-up.
//! - `job_task`: one job's task; `heartbeat`: its lease renewals.
//! - `prefetch`: lease slots and leasing ahead of free handlers.
//! - `settler`: batched settlements.
//! - `backoff`: the consumer's own retry delays and the [`RetryContext`].
//! - `event`: the [`Event`]s observers see.

pub(crate) mod backoff;
mod claim;
mod erased;
mod event;
mod handler;
mod heartbeat;
pub(crate) mod job_task;
mod keeper;
mod prefetch;
mod sched;
mod settings;
mod settler;
mod worker;

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use self::backoff::RetryBackoff;
pub use self::backoff::RetryContext;
pub use self::event::{Event, HandlerResult};
pub use self::handler::{Handler, HandlerError};
use self::prefetch::{AutoPrefetch, Slots};
pub use self::sched::Order;
use self::settings::{Beat, Settings};
use self::settler::Pending;
pub use self::worker::{MAX_QUEUES, MAX_WEIGHT, Worker, WorkerHandle};
use crate::error::{Error, Result};
use crate::limits::Backoff;
use crate::queue::Queue;
use crate::settings::later;

/// Default handlers running at once.
pub const DEFAULT_CONCURRENCY: usize = 10;
/// Most handlers running at once.
pub const MAX_CONCURRENCY: usize = 100_000;
/// Default lease length; heartbeats renew it while the handler runs.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Shortest lease accepted.
pub const MIN_LEASE: Duration = Duration::from_millis(10);
/// Longest lease accepted: one day.
pub const MAX_LEASE: Duration = Duration::from_secs(86_400);
/// Shortest time between heartbeats accepted.
pub const MIN_HEARTBEAT: Duration = Duration::from_millis(5);
/// Default time running handlers get to finish at shutdown.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest shutdown grace period accepted: one day.
pub const MAX_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(86_400);
/// Default longest wait on the wake list before an idle consumer polls
/// again. Every enqueue, retry, release, reap and promotion pushes a wake
/// token, so the poll is only a safety net (a wake token lost with a server
/// restart, say) and can be long: an idle queue then costs one claim call
/// per poll.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(5);
/// Shortest poll interval accepted.
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Longest poll interval accepted: one hour.
pub const MAX_POLL_INTERVAL: Duration = Duration::from_secs(3_600);
/// Most jobs leased in one claim call.
pub const MAX_CLAIM_BATCH: usize = 64;
/// Most jobs a consumer leases ahead of free handlers ([`Consumer::prefetch`]).
pub const MAX_PREFETCH: usize = 1_000;
/// Automatic prefetch leases ahead while the average handler runs for less
/// than this many settle round trips (see [`Consumer::prefetch`]).
pub const AUTO_PREFETCH_RATIO: u64 = 4;
/// The longest a job leased ahead by automatic prefetch waits for a
/// handler before it is released (at most the heartbeat interval).
pub const AUTO_PREFETCH_WAIT: Duration = Duration::from_secs(1);

/// Runs an async handler for each job of a queue. Configure with the
/// chained setters (checked when it starts), then [`spawn`](Self::spawn)
/// it (or [`run`](Self::run) it until a shutdown future resolves). It is a
/// [`Worker`] of one queue; for many queues in one process, one worker
/// over all of them shares one pool and one wake-up connection.
///
/// What the handler returns decides the job's fate (see
/// [`HandlerError`]): `Ok` completes it; an error retries it after the
/// backoff (the consumer's, see [`backoff`](Self::backoff), else the job's)
/// until its `max_attempts` failures, or as the error asks (retry after a
/// delay, fail now, snooze); a panic retries it with error `"panicked"`; a payload that does not decode into `T` fails it for
/// good. None of them stops the consumer.
///
/// ```no_run
/// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
/// use echomq::{Consumer, Job};
/// let worker = Consumer::new(queue, |job: Job<String>| async move {
///     println!("hello, {}", job.payload());
///     Ok(())
/// })
/// .concurrency(16)
/// .spawn()?;
/// // ...
/// worker.shutdown().await?;
/// # Ok(()) }
/// ```
#[must_use = "a consumer does nothing until spawned or run"]
pub struct Consumer<T, H> {
    queue: Queue,
    handler: Arc<H>,
    settings: Settings,
    _payload: PhantomData<fn() -> T>,
}

impl<T, H> Consumer<T, H>
where
    T: DeserializeOwned + Send + 'static,
    H: Handler<T>,
{
    /// A consumer of `queue` running `handler`, with the defaults.
    pub fn new(queue: Queue, handler: H) -> Self {
        Consumer {
            queue,
            handler: Arc::new(handler),
            settings: Settings::default(),
            _payload: PhantomData,
        }
    }
    /// Handlers running at once (default [`DEFAULT_CONCURRENCY`]; 1 to
    /// [`MAX_CONCURRENCY`]).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.settings.concurrency = n;
        self
    }
    /// Jobs leased ahead of free handlers, fixed at `n` (0 to
    /// [`MAX_PREFETCH`]); `0` turns leasing ahead off. The consumer then
    /// holds up to `concurrency + n` leases, so when a handler finishes the
    /// next job starts at once instead of after the round trip that settles
    /// the finished one and leases another, and one call settles and leases
    /// several jobs even at concurrency 1. That round trip is what a
    /// consumer of short jobs at low concurrency waits on.
    ///
    /// By default prefetch is automatic: up to `concurrency` jobs (at least
    /// 4, at most 32) are leased ahead, but only while the average handler
    /// runs for less than [`AUTO_PREFETCH_RATIO`] settle round trips (both
    /// measured by the consumer as it goes; off until measured). Longer
    /// handlers gain next to nothing from it, so then the consumer leases
    /// only for free handlers, as with `prefetch(0)`.
    ///
    /// The cost: a job leased ahead runs down its lease while it waits, and
    /// no other consumer can take it. So a job that waits longer than one
    /// heartbeat interval (automatic: at most [`AUTO_PREFETCH_WAIT`]; half
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
    /// Lease length (default [`DEFAULT_LEASE`]; [`MIN_LEASE`] to
    /// [`MAX_LEASE`]). A worker silent for longer loses the job to the reaper.
    pub fn lease(mut self, d: Duration) -> Self {
        self.settings.lease = d;
        self
    }
    /// Time between heartbeats (default: a third of the lease; at least
    /// [`MIN_HEARTBEAT`], shorter than the lease). Beats come at most every
    /// half safety window (the lease minus a tenth), so each renewal lands
    /// while the lease surely holds.
    pub fn heartbeat(mut self, d: Duration) -> Self {
        self.settings.beat = Beat::Every(d);
        self
    }
    /// No heartbeats: the lease is each handler's whole time budget. A
    /// handler still running at the end of its safety window (the lease
    /// minus a tenth) is cancelled and its result not settled, since its
    /// job may be redelivered (a late result would be refused by the
    /// server's token check anyway, never applied twice).
    pub fn without_heartbeats(mut self) -> Self {
        self.settings.beat = Beat::Off;
        self
    }
    /// Retries this consumer's handler asks for without a delay of its own
    /// (an error with `?` or [`HandlerError::retry`], a panic, a timeout)
    /// wait `backoff` instead of the job's own backoff. The consumer
    /// computes the delay, jitter included (drawn as the server draws a
    /// job's), and sends it with the retry. [`HandlerError::retry_after`]
    /// still chooses its own delay. Default: the job's own backoff, which
    /// the server applies. Checked when the consumer starts (a delay over
    /// [`MAX_DELAY`](crate::limits::MAX_DELAY) or a bad jitter is
    /// [`Error::InvalidOption`]). Replaces an earlier
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
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.settings.backoff = RetryBackoff::Fixed(backoff);
        self
    }
    /// As [`backoff`](Self::backoff), with the delay chosen by `f` from
    /// the [`RetryContext`] (the failure count, the attempt, the job id,
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
    pub fn backoff_with(mut self, f: impl Fn(&RetryContext<'_>) -> Duration + Send + Sync + 'static) -> Self {
        self.settings.backoff = RetryBackoff::With(Arc::new(f));
        self
    }
    /// Time running handlers get to finish at shutdown before they are
    /// cancelled and their jobs released (default
    /// [`DEFAULT_SHUTDOWN_TIMEOUT`]; 0 to [`MAX_SHUTDOWN_TIMEOUT`]).
    pub fn shutdown_timeout(mut self, d: Duration) -> Self {
        self.settings.shutdown_timeout = d;
        self
    }
    /// Longest idle wait before polling again even without a wake-up
    /// (default [`DEFAULT_POLL_INTERVAL`]; [`MIN_POLL_INTERVAL`] to
    /// [`MAX_POLL_INTERVAL`]).
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.settings.poll_interval = d;
        self
    }
    /// Whether the client's maintenance task reaps this queue while the
    /// consumer runs (default true; see [`crate::maintenance`]).
    pub fn reaper(mut self, on: bool) -> Self {
        self.settings.reaper = on;
        self
    }
    /// How often the queue is reaped while busy (default
    /// [`DEFAULT_REAP_INTERVAL`](crate::maintenance::reaper::DEFAULT_REAP_INTERVAL); 1 ms to
    /// [`MAX_REAP_INTERVAL`](crate::maintenance::reaper::MAX_REAP_INTERVAL)).
    pub fn reap_interval(mut self, d: Duration) -> Self {
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
    /// use echomq::{Consumer, Event, Job};
    /// let worker = Consumer::new(queue, |_job: Job<u32>| async { Ok(()) })
    ///     .observer(|e| {
    ///         if let Event::Settled { id, op, outcome, .. } = e {
    ///             tracing::info!(job_id = id, %op, ?outcome, "settled");
    ///         }
    ///     })
    ///     .spawn()?;
    /// # drop(worker); Ok(()) }
    /// ```
    pub fn observer(mut self, observer: impl Fn(&Event<'_>) + Send + Sync + 'static) -> Self {
        self.settings.observers.0.push(Arc::new(observer));
        self
    }

    /// Starts the consumer on the current Tokio runtime.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a setting out of range (nothing started).
    pub fn spawn(self) -> Result<ConsumerHandle> {
        self.into_worker().spawn()
    }

    /// Runs until `shutdown` resolves, then shuts down gracefully: stops
    /// claiming, lets running handlers finish for up to `shutdown_timeout`,
    /// then cancels the rest and releases their jobs.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a setting out of range (before
    /// anything runs); [`Error::Internal`] when one of the consumer's own
    /// tasks died: it then stopped claiming, and its job tasks settled or
    /// released their jobs directly (a batch the dead settler held is left
    /// to the reaper: a stall each).
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        self.into_worker().run(shutdown).await
    }

    /// The same machinery, over one queue: a consumer is a one-queue [`Worker`].
    fn into_worker(self) -> Worker {
        let mut w = Worker::new();
        w.add(self.queue, erased::Typed::<T, H>::new(self.handler), 1);
        w.settings = self.settings;
        w
    }
}

/// Cancels its tokens when dropped.
struct StopOnDrop(Vec<CancellationToken>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.cancel();
        }
    }
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// A running consumer or [`Worker`].
#[derive(Debug)]
#[must_use = "dropping the handle leaves the consumer running; call shutdown()"]
pub struct ConsumerHandle {
    stop: CancellationToken,
    join: JoinHandle<Result<()>>,
}

impl ConsumerHandle {
    /// Graceful shutdown (see [`Consumer::run`], [`Worker::run`]); returns when done.
    ///
    /// # Errors
    /// [`Error::Internal`] when one of the consumer's own tasks died.
    pub async fn shutdown(self) -> Result<()> {
        self.stop.cancel();
        match self.join.await {
            Ok(r) => r,
            Err(e) => Err(Error::Internal {
                task: "consumer",
                detail: e.to_string(),
            }),
        }
    }
    /// True once the consumer has stopped.
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }
}

/// One queue a worker serves.
struct Served {
    /// The queue, with the worker's name as the holder of its claims.
    queue: Queue,
    /// Its handler, payload type erased.
    handler: Arc<dyn erased::ErasedHandler>,
}

/// What every job task shares.
struct Ctx {
    /// The worker's queues, in the order they were added; a job, a
    /// settlement and a scheduling decision name theirs by index.
    queues: Vec<Served>,
    /// Which queues the free slots go to, and each queue's state.
    sched: std::sync::Mutex<sched::Sched>,
    /// Wakes the claim loop when a queue may have work again.
    work: tokio::sync::Notify,
    /// Wakes the wake-up when a queue went idle (its list is to be listened to).
    idled: tokio::sync::Notify,
    /// The worker's own wake list: a push to it ends the wake-up's wait
    /// (keys::worker_wake).
    own_wake: String,
    settings: Settings,
    /// One per lease held, whatever its queue: running, prefetched, or
    /// finished until it is settled (`concurrency`, plus the prefetch while
    /// leasing ahead).
    slots: Arc<Slots>,
    /// One permit per running handler (`concurrency`); a fair semaphore, so
    /// prefetched jobs start in the order they were leased.
    running: Arc<Semaphore>,
    /// Automatic prefetch's measurements (`None`: a fixed prefetch).
    auto: Option<AutoPrefetch>,
    /// Fired by shutdown: lease no more jobs.
    stop: CancellationToken,
    /// Every job task, so shutdown can wait for them.
    tasks: TaskTracker,
    /// Fired when the shutdown grace period ends: handlers are cancelled
    /// and their jobs released.
    hard_stop: CancellationToken,
    /// Finished jobs go to the settler, which sends them in batches.
    settle_tx: mpsc::UnboundedSender<Pending>,
    /// Renews finished jobs' leases until their settlements are answered.
    keeper: Arc<keeper::Keeper>,
}

impl Ctx {
    fn sched(&self) -> std::sync::MutexGuard<'_, sched::Sched> {
        self.sched.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// A claim of `asked` jobs from `q` (alone, or with a settlement)
    /// leased `got`; `wait`: a rate limit stopped it, and lets the queue
    /// lease again after this long.
    fn claimed(&self, q: usize, asked: usize, got: usize, wait: Option<std::time::Duration>) {
        let now = Instant::now();
        if self.sched().claimed(q, asked, got, now, wait.map(|w| now + w)) {
            self.idled.notify_one();
        }
    }
    /// A push to `q`'s wake list was seen.
    fn woken(&self, q: usize) {
        self.sched().woken(q);
        self.work.notify_one();
    }
    /// A wake-up wait ended with no push (the safety-net poll may be due).
    fn timed_out(&self) {
        if self.sched().timed_out(Instant::now()) {
            self.work.notify_one();
        }
    }
    /// The queue of index `q`.
    fn queue(&self, q: usize) -> &Queue {
        &self.queues[q].queue
    }
    /// The queue names, for logs.
    fn names(&self) -> String {
        let names: Vec<&str> = self.queues.iter().map(|s| s.queue.name()).collect();
        names.join(",")
    }
}

/// After the claim loop stops: waits for running jobs up to the grace
/// period, then cancels the rest (they release their jobs).
async fn drain(ctx: &Ctx) {
    ctx.tasks.close();
    let deadline = later(Instant::now(), ctx.settings.shutdown_timeout);
    if timeout_at(deadline, ctx.tasks.wait()).await.is_err() {
        warn!(
            queues = ctx.names(),
            running = ctx.tasks.len(),
            "shutdown grace period over; cancelling handlers"
        );
        ctx.hard_stop.cancel();
        ctx.tasks.wait().await;
    }
}
