//! The worker side: [`Consumer`] claims jobs, runs an async handler for each
//! with bounded concurrency, keeps leases alive with heartbeats, and settles
//! each job with its fencing token.

use std::fmt::Display;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use serde::de::DeserializeOwned;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout_at};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, info_span, warn};

use crate::error::Error;
use crate::job::{Job, Lease};
use crate::queue::{Outcome, Queue, Settle};
use crate::reaper::{DEFAULT_MAX_STALLS, DEFAULT_REAP_INTERVAL, Reaper};

/// Default handlers running at once.
pub const DEFAULT_CONCURRENCY: usize = 10;
/// Default lease length; heartbeats renew it while the handler runs.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Default handler failures before a job fails for good.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Default time running handlers get to finish at shutdown.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Default longest wait on the wake list before an idle consumer polls again.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
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

/// An async job handler. Implemented for every
/// `Fn(Job<T>) -> impl Future<Output = Result<(), E>>` with `E: Display`,
/// so a plain async closure is a handler.
pub trait Handler<T>: Send + Sync + 'static {
    /// The handler's error; its text is recorded on the job.
    type Error: Display + Send + 'static;
    /// The future one call returns.
    type Future: Future<Output = std::result::Result<(), Self::Error>> + Send + 'static;
    /// Handles one delivery of a job.
    fn call(&self, job: Job<T>) -> Self::Future;
}

impl<T, F, Fut, E> Handler<T> for F
where
    F: Fn(Job<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
    E: Display + Send + 'static,
{
    type Error = E;
    type Future = Fut;
    fn call(&self, job: Job<T>) -> Fut {
        self(job)
    }
}

/// The delay before a failed job's next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backoff {
    /// The same delay every time.
    Fixed(Duration),
    /// `base * 2^(failures - 1)`, at most `max`.
    Exponential {
        /// The first delay.
        base: Duration,
        /// The cap.
        max: Duration,
    },
}

/// Default backoff: exponential from 1 s, at most 10 minutes.
pub const DEFAULT_BACKOFF: Backoff = Backoff::Exponential {
    base: Duration::from_secs(1),
    max: Duration::from_secs(600),
};

impl Backoff {
    /// The delay after the `failures`-th failure (1 for the first).
    pub fn delay(&self, failures: u64) -> Duration {
        match *self {
            Backoff::Fixed(d) => d,
            Backoff::Exponential { base, max } => {
                let shift = failures.saturating_sub(1).min(31) as u32;
                base.checked_mul(1u32 << shift).unwrap_or(max).min(max)
            }
        }
    }
}

/// A step in a job's life inside a [`Consumer`], handed to the
/// [`observer`](Consumer::observer). Server times are in ms since the Unix
/// epoch on the server's clock, the time base of every deadline.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A job was leased to this consumer; its handler starts next (for a
    /// job leased ahead, once a handler is free, unless it is released
    /// unstarted first).
    Claimed {
        /// The job.
        id: &'a str,
        /// The fencing token (attempt number) of this delivery.
        token: u64,
        /// The lease deadline.
        deadline_ms: u64,
        /// When the claim ran.
        server_ms: u64,
    },
    /// A heartbeat renewed the lease.
    Extended {
        /// The job.
        id: &'a str,
        /// The token.
        token: u64,
        /// The new deadline.
        deadline_ms: u64,
    },
    /// The lease was lost (reaped, or renewal unconfirmed within the
    /// safety window): the handler is cancelled and its result not settled.
    LeaseLost {
        /// The job.
        id: &'a str,
        /// The token.
        token: u64,
        /// True when the server said so; false when renewal could not be
        /// confirmed in time (the lease may still hold on the server).
        confirmed: bool,
    },
    /// The handler returned (or panicked, or was cancelled); settlement follows.
    HandlerDone {
        /// The job.
        id: &'a str,
        /// The token.
        token: u64,
        /// "ok", "error", "panicked", "lease_lost" or "stopped".
        result: &'static str,
    },
    /// A settlement was sent (`op`: complete, retry, fail or release).
    SettleSent {
        /// The job.
        id: &'a str,
        /// The token.
        token: u64,
        /// The operation.
        op: &'static str,
    },
    /// The server applied a settlement, or answered that it already had.
    Settled {
        /// The job.
        id: &'a str,
        /// The token.
        token: u64,
        /// The operation.
        op: &'static str,
        /// What happened.
        outcome: Outcome,
        /// When the script ran.
        server_ms: u64,
    },
    /// A settlement was not applied: `LeaseLost`/`JobNotFound` (definite) or
    /// a transport failure whose outcome is unknown, after retries.
    SettleFailed {
        /// The job.
        id: &'a str,
        /// The token.
        token: u64,
        /// The operation.
        op: &'static str,
        /// The last error.
        error: &'a Error,
    },
}

type Observer = Arc<dyn Fn(&Event<'_>) + Send + Sync>;

/// Settings of a [`Consumer`].
#[derive(Clone)]
struct Settings {
    observer: Option<Observer>,
    concurrency: usize,
    /// `None`: automatic.
    prefetch: Option<usize>,
    lease: Duration,
    heartbeat: Option<Duration>,
    backoff: Backoff,
    max_attempts: u32,
    shutdown_timeout: Duration,
    poll_interval: Duration,
    reaper: bool,
    reap_interval: Duration,
    max_stalls: u32,
}

impl Settings {
    fn emit(&self, event: Event<'_>) {
        if let Some(o) = &self.observer {
            o(&event);
        }
    }
    /// The time between heartbeats: at most half the safety window, so a
    /// beat always lands inside it; `None` (a heartbeat set at or above the
    /// lease) turns heartbeats off.
    fn heartbeat(&self) -> Option<Duration> {
        match self.heartbeat {
            Some(d) if d >= self.lease => None,
            d => Some(
                d.unwrap_or(self.lease / 3)
                    .min(self.safety_window() / 2)
                    .max(Duration::from_millis(1)),
            ),
        }
    }
    /// How long after a confirmed renewal (measured from when it was sent)
    /// the lease is still surely ours: the lease minus a margin for clock
    /// drift and the renewal's own travel.
    fn safety_window(&self) -> Duration {
        let margin = (self.lease / 10).max(Duration::from_millis(20)).min(self.lease / 2);
        self.lease - margin
    }
    /// How long a prefetched job may wait for a handler before it is
    /// released: within it the lease surely holds, and the job's first
    /// heartbeat (due at once after such a wait) renews it in time.
    fn prefetch_wait(&self) -> Duration {
        let wait = self.heartbeat().unwrap_or(self.safety_window() / 2);
        if self.prefetch.is_none() {
            wait.min(AUTO_PREFETCH_WAIT)
        } else {
            wait
        }
    }
    /// The most jobs leased ahead of free handlers: the fixed number, or
    /// for automatic prefetch the concurrency, at least 4 and at most 32.
    fn extra(&self) -> usize {
        self.prefetch.unwrap_or_else(|| self.concurrency.clamp(4, 32))
    }
}

/// Runs an async handler for each job of a queue. Configure with the
/// chained setters, then [`spawn`](Self::spawn) it (or [`run`](Self::run)
/// it until a shutdown future resolves).
///
/// Outcomes: `Ok` completes the job; `Err(e)` retries it (`e` recorded,
/// after the backoff, until `max_attempts` failures); a panic retries it
/// with error `"panicked"`; a payload that does not decode into `T` fails
/// the job for good. None of them stops the consumer.
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
            settings: Settings {
                observer: None,
                concurrency: DEFAULT_CONCURRENCY,
                prefetch: None,
                lease: DEFAULT_LEASE,
                heartbeat: None,
                backoff: DEFAULT_BACKOFF,
                max_attempts: DEFAULT_MAX_ATTEMPTS,
                shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
                poll_interval: DEFAULT_POLL_INTERVAL,
                reaper: true,
                reap_interval: DEFAULT_REAP_INTERVAL,
                max_stalls: DEFAULT_MAX_STALLS,
            },
            _payload: PhantomData,
        }
    }
    /// Handlers running at once (default [`DEFAULT_CONCURRENCY`], at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.settings.concurrency = n.max(1);
        self
    }
    /// Jobs leased ahead of free handlers, fixed at `n` (at most
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
        self.settings.prefetch = Some(n.min(MAX_PREFETCH));
        self
    }
    /// Lease length (default [`DEFAULT_LEASE`], at least 10 ms). A worker
    /// silent for longer loses the job to the reaper.
    pub fn lease(mut self, d: Duration) -> Self {
        self.settings.lease = d.max(Duration::from_millis(10));
        self
    }
    /// Time between heartbeats (default: a third of the lease). It is
    /// capped at half the safety window (the lease minus a tenth), so each
    /// renewal lands while the lease surely holds. A value at or above the
    /// lease turns heartbeats off: the lease then lapses after `lease`
    /// whatever the handler does, and a late result is refused by the
    /// server's token check, never applied twice.
    pub fn heartbeat(mut self, d: Duration) -> Self {
        self.settings.heartbeat = Some(d);
        self
    }
    /// Delay before a failed job runs again (default [`DEFAULT_BACKOFF`]).
    pub fn backoff(mut self, b: Backoff) -> Self {
        self.settings.backoff = b;
        self
    }
    /// Handler failures before a job fails for good (default
    /// [`DEFAULT_MAX_ATTEMPTS`]; a job's own limit wins).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.settings.max_attempts = n.max(1);
        self
    }
    /// Time running handlers get to finish at shutdown before they are
    /// cancelled and their jobs released (default [`DEFAULT_SHUTDOWN_TIMEOUT`]).
    pub fn shutdown_timeout(mut self, d: Duration) -> Self {
        self.settings.shutdown_timeout = d;
        self
    }
    /// Longest idle wait before polling again even without a wake-up
    /// (default [`DEFAULT_POLL_INTERVAL`]).
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.settings.poll_interval = d.max(Duration::from_millis(10));
        self
    }
    /// Whether this consumer runs a [`Reaper`] beside it (default true).
    pub fn reaper(mut self, on: bool) -> Self {
        self.settings.reaper = on;
        self
    }
    /// Interval of the built-in reaper (default [`DEFAULT_REAP_INTERVAL`]).
    pub fn reap_interval(mut self, d: Duration) -> Self {
        self.settings.reap_interval = d;
        self
    }
    /// `max_stalls` of the built-in reaper (default [`DEFAULT_MAX_STALLS`]).
    pub fn max_stalls(mut self, n: u32) -> Self {
        self.settings.max_stalls = n;
        self
    }

    /// Calls `observer` at each step of each job (claim, heartbeat, lease
    /// loss, handler end, settlement): for metrics, audit logs and fault
    /// tests. It runs inline on the job's task, so keep it quick.
    pub fn observer(mut self, observer: impl Fn(&Event<'_>) + Send + Sync + 'static) -> Self {
        self.settings.observer = Some(Arc::new(observer));
        self
    }

    /// Starts the consumer on the current Tokio runtime.
    pub fn spawn(self) -> ConsumerHandle {
        let stop = CancellationToken::new();
        let s = stop.clone();
        let join = tokio::spawn(async move { self.run(s.cancelled_owned()).await });
        ConsumerHandle { stop, join }
    }

    /// Runs until `shutdown` resolves, then shuts down gracefully: stops
    /// claiming, lets running handlers finish for up to `shutdown_timeout`,
    /// then cancels the rest and releases their jobs.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) {
        let reaper = self.settings.reaper.then(|| {
            Reaper::new(self.queue.clone())
                .interval(self.settings.reap_interval)
                .max_stalls(self.settings.max_stalls)
                .spawn()
        });
        let (settle_tx, settle_rx) = mpsc::unbounded_channel();
        let ctx = Arc::new(Ctx {
            queue: self.queue,
            handler: self.handler,
            // Automatic prefetch adds its slots while it leases ahead.
            slots: Slots::new(self.settings.concurrency + self.settings.prefetch.unwrap_or(0)),
            running: Arc::new(Semaphore::new(self.settings.concurrency)),
            auto: self.settings.prefetch.is_none().then(AutoPrefetch::default),
            settings: self.settings,
            stop: CancellationToken::new(),
            hard_stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
            settle_tx,
        });
        let all_settled = CancellationToken::new();
        let settling = tokio::spawn(settler::<T, H>(ctx.clone(), settle_rx, all_settled.clone()));
        {
            let claiming = claim_loop::<T, H>(ctx.clone());
            tokio::pin!(claiming);
            tokio::select! {
                _ = &mut claiming => {}
                _ = shutdown => {
                    ctx.stop.cancel();
                    claiming.await;
                }
            }
        }
        drain(&ctx).await;
        // Every job task has ended and queued its settlement: flush them.
        all_settled.cancel();
        let _ = settling.await;
        if let Some(r) = reaper {
            r.shutdown().await;
        }
        debug!(queue = ctx.queue.name(), "consumer stopped");
    }
}

/// A running consumer.
#[derive(Debug)]
pub struct ConsumerHandle {
    stop: CancellationToken,
    join: JoinHandle<()>,
}

impl ConsumerHandle {
    /// Graceful shutdown (see [`Consumer::run`]); returns when done.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.join.await;
    }
    /// True once the consumer has stopped.
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }
}

/// What every job task shares.
struct Ctx<H> {
    queue: Queue,
    handler: Arc<H>,
    settings: Settings,
    /// One per lease held: running, prefetched, or finished until it is
    /// settled (`concurrency`, plus the prefetch while leasing ahead).
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
}

/// What automatic prefetch decides on: moving averages of handler run
/// time and of settle round trips (in µs; 0 until the first sample).
#[derive(Default)]
struct AutoPrefetch {
    handler_us: AtomicU64,
    round_trip_us: AtomicU64,
}

impl AutoPrefetch {
    /// Lease ahead while handlers are short next to a round trip.
    fn on(&self) -> bool {
        let (h, r) = (
            self.handler_us.load(Ordering::Relaxed),
            self.round_trip_us.load(Ordering::Relaxed),
        );
        h > 0 && r > 0 && h < AUTO_PREFETCH_RATIO.saturating_mul(r)
    }
    /// Adds a sample to a moving average (weight 1/8; racing updates may
    /// drop a sample, which an average can afford).
    fn record(avg: &AtomicU64, sample: Duration) {
        let x = u64::try_from(sample.as_micros()).unwrap_or(u64::MAX).max(1);
        let old = avg.load(Ordering::Relaxed);
        let new = if old == 0 { x } else { old - old / 8 + x / 8 };
        avg.store(new.max(1), Ordering::Relaxed);
    }
}

/// The consumer's lease slots: a semaphore whose size automatic prefetch
/// grows by the prefetch while leasing ahead and shrinks back after.
struct Slots {
    sem: Arc<Semaphore>,
    /// Leasing ahead now (automatic prefetch); switched under `switching`.
    ahead: AtomicBool,
    switching: Mutex<()>,
    /// Permits still to retire after leasing ahead stopped: slots in use
    /// then are retired as they come back (an atomic, so dropping a slot,
    /// once per job, takes no lock).
    debt: AtomicUsize,
}

/// One lease slot; dropping it frees it (or retires it, see [`Slots`]).
struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    slots: Arc<Slots>,
}

impl Slots {
    fn new(n: usize) -> Arc<Slots> {
        Arc::new(Slots {
            sem: Arc::new(Semaphore::new(n)),
            ahead: AtomicBool::new(false),
            switching: Mutex::new(()),
            debt: AtomicUsize::new(0),
        })
    }
    /// Slots still to retire.
    fn owed(&self) -> usize {
        self.debt.load(Ordering::Relaxed)
    }
    fn slot(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Slot {
        Slot {
            permit: Some(permit),
            slots: self.clone(),
        }
    }
    async fn acquire(self: &Arc<Self>) -> Option<Slot> {
        Some(self.slot(self.sem.clone().acquire_owned().await.ok()?))
    }
    fn try_acquire(self: &Arc<Self>) -> Option<Slot> {
        Some(self.slot(self.sem.clone().try_acquire_owned().ok()?))
    }
    /// Starts or stops leasing `extra` slots ahead of the handlers. (A
    /// slot dropped while this runs may come back as a free permit though
    /// it is owed; a later drop then pays for it, so the total settles at
    /// the right size.)
    fn lease_ahead(&self, on: bool, extra: usize) {
        if self.ahead.load(Ordering::Relaxed) == on {
            return;
        }
        let _switching = self.switching.lock().unwrap_or_else(|e| e.into_inner());
        if self.ahead.swap(on, Ordering::Relaxed) == on {
            return;
        }
        if on {
            let owed = self.debt.swap(0, Ordering::SeqCst);
            let cancelled = owed.min(extra);
            self.debt.fetch_add(owed - cancelled, Ordering::SeqCst);
            self.sem.add_permits(extra - cancelled);
        } else {
            let retired = self.sem.forget_permits(extra);
            self.debt.fetch_add(extra - retired, Ordering::SeqCst);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            let owed = self
                .slots
                .debt
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| d.checked_sub(1));
            if owed.is_ok() {
                p.forget();
            }
        }
    }
}

/// A settlement waiting for the settler. It holds the job's slot, so the
/// claim loop leases no more jobs than `concurrency + prefetch` until it is
/// applied (a prefetched job released unstarted keeps its slot itself).
struct Pending {
    lease: Lease,
    op: Settle,
    /// Past this the lease has lapsed on the server: stop retrying.
    deadline: Instant,
    slot: Option<Slot>,
}

/// Claims while slots are free, until `stop`. (At full load the settler
/// refills most slots itself, in the call that settles their jobs.)
async fn claim_loop<T, H>(ctx: Arc<Ctx<H>>)
where
    T: DeserializeOwned + Send + 'static,
    H: Handler<T>,
{
    let s = &ctx.settings;
    let mut waiter: Option<MultiplexedConnection> = None;
    let mut errors = 0u32;
    loop {
        let first = tokio::select! {
            p = ctx.slots.acquire() => match p { Some(p) => p, None => break },
            _ = ctx.stop.cancelled() => break,
        };
        let mut permits = vec![first];
        while permits.len() < MAX_CLAIM_BATCH {
            match ctx.slots.try_acquire() {
                Some(p) => permits.push(p),
                None => break,
            }
        }
        let sent = Instant::now();
        match ctx.queue.claim(permits.len(), s.lease).await {
            Ok(leases) if leases.is_empty() => {
                errors = 0;
                drop(permits);
                wait_for_work(&ctx.queue, &mut waiter, s.poll_interval, &ctx.stop).await;
            }
            Ok(leases) => {
                errors = 0;
                for (lease, permit) in leases.into_iter().zip(permits) {
                    ctx.start::<T>(lease, sent, permit);
                }
            }
            Err(e) => {
                drop(permits);
                errors = errors.saturating_add(1);
                let pause = Duration::from_millis(50u64 << errors.min(6));
                warn!(queue = ctx.queue.name(), error = %e, ?pause, "claim failed; retrying");
                tokio::select! { _ = sleep(pause) => {}, _ = ctx.stop.cancelled() => break }
            }
        }
    }
}

/// Waits for a wake token (pushed by enqueue, retry, release, reap and
/// promotion) on a dedicated blocking connection, at most `poll`.
async fn wait_for_work(
    queue: &Queue,
    waiter: &mut Option<MultiplexedConnection>,
    poll: Duration,
    stop: &CancellationToken,
) {
    if waiter.is_none() {
        match queue.blocking_connection().await {
            Ok(c) => *waiter = Some(c),
            Err(e) => {
                debug!(queue = queue.name(), error = %e, "no blocking connection; polling");
                tokio::select! { _ = sleep(poll) => {}, _ = stop.cancelled() => {} }
                return;
            }
        }
    }
    let Some(conn) = waiter.as_mut() else { return };
    let mut cmd = redis::cmd("BLPOP");
    cmd.arg(&queue.keys().wake).arg(poll.as_secs_f64());
    // No response timeout on this connection (BLPOP blocks by design), so
    // bound the wait here: a connection that died silently is replaced.
    let blpop = tokio::time::timeout(
        poll + Duration::from_secs(1),
        cmd.query_async::<Option<(String, String)>>(conn),
    );
    tokio::select! {
        r = blpop => if let Err(e) = r.map_err(|_| Error::Timeout(poll)).and_then(|r| r.map_err(Error::from)) {
            debug!(queue = queue.name(), error = %e, "wake-up wait failed; reconnecting");
            *waiter = None;
            tokio::select! { _ = sleep(poll.min(Duration::from_millis(200))) => {}, _ = stop.cancelled() => {} }
        },
        // The reply of an abandoned BLPOP would arrive later on this
        // connection: drop it rather than reuse it.
        _ = stop.cancelled() => *waiter = None,
    }
}

/// After the claim loop stops: waits for running jobs up to the grace
/// period, then cancels the rest (they release their jobs).
async fn drain<H>(ctx: &Ctx<H>) {
    ctx.tasks.close();
    let deadline = Instant::now() + ctx.settings.shutdown_timeout;
    if timeout_at(deadline, ctx.tasks.wait()).await.is_err() {
        warn!(
            queue = ctx.queue.name(),
            running = ctx.tasks.len(),
            "shutdown grace period over; cancelling handlers"
        );
        ctx.hard_stop.cancel();
        ctx.tasks.wait().await;
    }
}

/// How one attempt ended.
enum Ended<E> {
    Ok,
    Err(E),
    Panicked,
    /// The lease was lost or could not be renewed in time: do not settle.
    LeaseLost,
    /// Shutdown grace over: release the job.
    Stopped,
}

/// Runs one leased job: decode, handle with heartbeats, settle.
async fn run_job<T, H>(ctx: Arc<Ctx<H>>, mut lease: Lease, mut claimed_at: Instant, permit: Slot)
where
    T: DeserializeOwned + Send + 'static,
    H: Handler<T>,
{
    let span = info_span!("job", queue = ctx.queue.name(), job_id = %lease.id, attempt = lease.token);
    async move {
        let s = &ctx.settings;
        let q = &ctx.queue;
        s.emit(Event::Claimed {
            id: &lease.id,
            token: lease.token,
            deadline_ms: lease.deadline_ms,
            server_ms: lease.claimed_ms,
        });
        let payload: T = match lease.decode() {
            Ok(p) => p,
            Err(e) => {
                warn!(error = %e, "payload does not decode; failing the job");
                let reason = format!("undecodable payload: {e}");
                ctx.settle(lease, Settle::Fail { reason }, claimed_at + s.lease, Some(permit));
                return;
            }
        };
        let running = match ctx.turn(claimed_at).await {
            Turn::Now(p) => p,
            Turn::AfterWait(p) if s.heartbeat().is_some() => p,
            Turn::AfterWait(p) => {
                // Heartbeats off: the lease is the handler's whole time
                // budget, so renew it once rather than let the wait eat into it.
                let sent = Instant::now();
                match timeout_at(claimed_at + s.safety_window(), q.extend(&mut lease, s.lease)).await {
                    Ok(Ok(deadline_ms)) => {
                        claimed_at = sent;
                        s.emit(Event::Extended {
                            id: &lease.id,
                            token: lease.token,
                            deadline_ms,
                        });
                        p
                    }
                    r => {
                        let error = match r {
                            Ok(Err(e)) => e.to_string(),
                            _ => "not confirmed within the safety window".to_owned(),
                        };
                        debug!(%error, "could not renew a job leased ahead; releasing it unstarted");
                        drop(p);
                        ctx.settle(lease, Settle::Release, claimed_at + s.lease, Some(permit));
                        return;
                    }
                }
            }
            Turn::Stopping => {
                debug!("shutdown: releasing a job leased ahead, unstarted");
                ctx.settle(lease, Settle::Release, claimed_at + s.lease, Some(permit));
                return;
            }
            Turn::TooLong => {
                // The handlers are slow: hand the job back for another
                // consumer, and keep its slot until a handler frees up, so
                // this consumer does not fill that slot again only to wait
                // once more.
                debug!("no handler free in time: releasing a job leased ahead, unstarted");
                ctx.settle(lease, Settle::Release, claimed_at + s.lease, None);
                tokio::select! {
                    _ = ctx.stop.cancelled() => {}
                    _ = ctx.running.clone().acquire_owned() => {}
                }
                drop(permit);
                return;
            }
        };
        let cancel = ctx.hard_stop.child_token();
        let job = Job {
            id: lease.id.clone(),
            queue: q.name().to_owned(),
            attempt: lease.token,
            failures: lease.failures,
            payload,
            cancel: cancel.clone(),
        };
        let handler_started = Instant::now();
        let mut handler = tokio::spawn(ctx.handler.call(job).in_current_span());
        // The lease is surely ours until `confirmed + lease` (measured from
        // when the claim or last renewal was *sent*).
        let mut confirmed = claimed_at;
        // Heartbeats off: a beat that never comes.
        let far = Duration::from_secs(86_400 * 365);
        let beat = s.heartbeat();
        let mut next_beat = claimed_at + beat.unwrap_or(far);
        // Set once the handler's task has been joined (its handle must not
        // be polled again).
        let mut joined = false;
        let ended = loop {
            tokio::select! {
                r = &mut handler => {
                    joined = true;
                    break match r {
                        Ok(Ok(())) => Ended::Ok,
                        // It stopped because shutdown cancelled it: hand the job back.
                        Ok(Err(_)) if ctx.hard_stop.is_cancelled() => Ended::Stopped,
                        Ok(Err(e)) => Ended::Err(e),
                        Err(e) if e.is_panic() => Ended::Panicked,
                        Err(_) => Ended::Stopped,
                    };
                }
                _ = sleep_until(next_beat) => {
                    let sent = Instant::now();
                    let safe_until = confirmed + s.safety_window();
                    // Past the window (e.g. this process was paused) the attempt has
                    // given up: renewing now would only delay the redelivery.
                    let renewal = async {
                        if sent >= safe_until {
                            return Err(Error::Timeout(s.safety_window()));
                        }
                        q.extend(&mut lease, s.lease).await
                    };
                    match timeout_at(safe_until, renewal).await {
                        Ok(Ok(deadline_ms)) => {
                            confirmed = sent;
                            next_beat = sent + beat.unwrap_or(far);
                            s.emit(Event::Extended { id: &lease.id, token: lease.token, deadline_ms });
                        }
                        Ok(Err(e @ (Error::LeaseLost { .. } | Error::JobNotFound(_)))) => {
                            warn!(error = %e, "lease lost; cancelling the handler, its result will not be settled");
                            s.emit(Event::LeaseLost { id: &lease.id, token: lease.token, confirmed: true });
                            break Ended::LeaseLost;
                        }
                        Ok(Err(e)) if Instant::now() < safe_until => {
                            debug!(error = %e, "heartbeat failed; retrying");
                            next_beat = Instant::now() + (beat.unwrap_or(far) / 4).max(Duration::from_millis(5));
                        }
                        _ => {
                            warn!("lease renewal not confirmed within the safety window; cancelling the handler, its result will not be settled");
                            s.emit(Event::LeaseLost { id: &lease.id, token: lease.token, confirmed: false });
                            break Ended::LeaseLost;
                        }
                    }
                }
                _ = ctx.hard_stop.cancelled() => break Ended::Stopped,
            }
        };
        let settle_by = confirmed + s.lease;
        let result = match ended {
            Ended::Ok => "ok",
            Ended::Err(_) => "error",
            Ended::Panicked => "panicked",
            Ended::LeaseLost => "lease_lost",
            Ended::Stopped => "stopped",
        };
        s.emit(Event::HandlerDone { id: &lease.id, token: lease.token, result });
        let op = match ended {
            Ended::Ok => Settle::Complete,
            Ended::Err(e) => {
                let error = e.to_string();
                debug!(error = %error, "handler failed");
                Settle::Retry { delay: s.backoff.delay(lease.failures + 1), error }
            }
            Ended::Panicked => {
                warn!("handler panicked");
                Settle::Retry { delay: s.backoff.delay(lease.failures + 1), error: "panicked".to_owned() }
            }
            Ended::LeaseLost => {
                cancel.cancel();
                tokio::select! {
                    _ = &mut handler => {}
                    _ = ctx.hard_stop.cancelled() => {
                        handler.abort();
                        let _ = (&mut handler).await;
                    }
                }
                ctx.handler_ended(running, handler_started.elapsed());
                return;
            }
            Ended::Stopped => {
                cancel.cancel();
                if !joined {
                    handler.abort();
                    // Counted as running until it has really stopped.
                    let _ = (&mut handler).await;
                }
                Settle::Release
            }
        };
        // The handler is done: a prefetched job may start while this settles.
        ctx.handler_ended(running, handler_started.elapsed());
        ctx.settle(lease, op, settle_by, Some(permit));
    }
    .instrument(span)
    .await
}

/// When a job's handler may start.
enum Turn {
    /// A handler was free at once.
    Now(OwnedSemaphorePermit),
    /// A handler freed up while the job (leased ahead) waited.
    AfterWait(OwnedSemaphorePermit),
    /// Shutdown began: the job goes back unstarted.
    Stopping,
    /// No handler freed up within the prefetch wait.
    TooLong,
}

impl<H> Ctx<H> {
    /// Waits for a free handler for a job leased at `claimed_at` (a job
    /// leased ahead waits here; see [`Consumer::prefetch`]).
    async fn turn(&self, claimed_at: Instant) -> Turn {
        if self.stop.is_cancelled() {
            return Turn::Stopping;
        }
        if let Ok(p) = self.running.clone().try_acquire_owned() {
            return Turn::Now(p);
        }
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => Turn::Stopping,
            // `running` is never closed.
            p = self.running.clone().acquire_owned() => p.map_or(Turn::Stopping, Turn::AfterWait),
            _ = sleep_until(claimed_at + self.settings.prefetch_wait()) => Turn::TooLong,
        }
    }

    /// A handler that ran for `ran` has ended: frees its place for the
    /// next job.
    fn handler_ended(&self, running: OwnedSemaphorePermit, ran: Duration) {
        drop(running);
        if let Some(a) = &self.auto {
            AutoPrefetch::record(&a.handler_us, ran);
            self.slots.lease_ahead(a.on(), self.settings.extra());
        }
    }

    /// Starts a job task for a fresh lease, holding `slot`.
    fn start<T>(self: &Arc<Self>, lease: Lease, claimed_at: Instant, slot: Slot)
    where
        T: DeserializeOwned + Send + 'static,
        H: Handler<T>,
    {
        self.tasks.spawn(run_job::<T, H>(self.clone(), lease, claimed_at, slot));
    }

    /// Hands a finished job to the settler (with its slot, if it frees one).
    fn settle(&self, lease: Lease, op: Settle, deadline: Instant, slot: Option<Slot>) {
        let pending = Pending {
            lease,
            op,
            deadline,
            slot,
        };
        if let Err(mpsc::error::SendError(p)) = self.settle_tx.send(pending) {
            // Only after the settler has stopped, which waits for every job.
            warn!(job_id = %p.lease.id, "settler gone; the reaper will return the job when its lease lapses");
        }
    }
}

/// Sends settlements in batches: whatever finished while the previous call
/// was in flight goes in the next ([`Queue::settle_and_claim`]), and the
/// same call leases new jobs for the slots the settled ones free, so a busy
/// consumer makes a fraction of a call per job and a consumer at
/// concurrency 1 one call per job. An idle one adds no delay. Runs until
/// `done` fires and the channel is empty.
async fn settler<T, H>(ctx: Arc<Ctx<H>>, mut rx: mpsc::UnboundedReceiver<Pending>, done: CancellationToken)
where
    T: DeserializeOwned + Send + 'static,
    H: Handler<T>,
{
    let mut batch: Vec<Pending> = Vec::new();
    loop {
        if batch.is_empty() {
            tokio::select! {
                biased;
                p = rx.recv() => match p { Some(p) => batch.push(p), None => return },
                _ = done.cancelled() => match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(_) => return,
                },
            }
        }
        while batch.len() < MAX_SETTLE_BATCH {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        let sent = Instant::now();
        let leases = settle_batch(&ctx, &mut batch).await;
        let (leases, mut slots) = leases;
        for lease in leases {
            match slots.pop() {
                // Leased just as shutdown began: hand it straight back here,
                // not through a job task, which shutdown may already have
                // stopped waiting for.
                Some(slot) if ctx.stop.is_cancelled() => batch.push(Pending {
                    deadline: sent + ctx.settings.lease,
                    lease,
                    op: Settle::Release,
                    slot: Some(slot),
                }),
                Some(slot) => ctx.start::<T>(lease, sent, slot),
                None => break,
            }
        }
    }
}

/// Most settlements sent in one call.
const MAX_SETTLE_BATCH: usize = 256;

/// Sends one batch (claiming as many jobs as it settles, unless stopping),
/// retrying transient failures for the items whose lease has not lapsed
/// (repeats are safe: an applied settlement answers "already settled").
/// Empties `batch`; returns the new leases and the settled items' slots
/// for them (dropping a slot frees it for the claim loop).
async fn settle_batch<H>(ctx: &Ctx<H>, batch: &mut Vec<Pending>) -> (Vec<Lease>, Vec<Slot>) {
    let s = &ctx.settings;
    let mut pause = Duration::from_millis(10);
    let mut first_try = true;
    loop {
        for p in batch.iter() {
            s.emit(Event::SettleSent {
                id: &p.lease.id,
                token: p.lease.token,
                op: p.op.name(),
            });
        }
        // Slots owed since leasing ahead stopped are retired here rather
        // than reused for the next leases.
        let mut owed = ctx.slots.owed();
        for p in batch.iter_mut().filter(|p| p.slot.is_some()) {
            if owed == 0 {
                break;
            }
            drop(p.slot.take());
            owed -= 1;
        }
        let items: Vec<(&Lease, &Settle)> = batch.iter().map(|p| (&p.lease, &p.op)).collect();
        // A resend after a failure of unknown outcome claims nothing: jobs
        // the lost call may have leased would be stranded twice over.
        let claim = if ctx.stop.is_cancelled() || !first_try {
            0
        } else {
            batch.iter().filter(|p| p.slot.is_some()).count()
        };
        first_try = false;
        let sent = Instant::now();
        match ctx.queue.settle_and_claim(&items, s.max_attempts, claim, s.lease).await {
            Ok((results, leases)) => {
                if let Some(a) = &ctx.auto {
                    AutoPrefetch::record(&a.round_trip_us, sent.elapsed());
                    ctx.slots.lease_ahead(a.on(), s.extra());
                }
                let mut slots = Vec::with_capacity(batch.len());
                for (p, r) in batch.drain(..).zip(results) {
                    let (id, token, op) = (p.lease.id.as_str(), p.lease.token, p.op.name());
                    let _span = info_span!("job", queue = ctx.queue.name(), job_id = %id, attempt = token).entered();
                    match r {
                        Ok(done) => {
                            debug!(outcome = ?done.outcome, "{op}");
                            s.emit(Event::Settled {
                                id,
                                token,
                                op,
                                outcome: done.outcome,
                                server_ms: done.server_ms,
                            });
                        }
                        Err(error) => {
                            warn!(%error, "{op} not applied");
                            s.emit(Event::SettleFailed {
                                id,
                                token,
                                op,
                                error: &error,
                            });
                        }
                    }
                    slots.extend(p.slot);
                }
                return (leases, slots);
            }
            Err(error) => {
                let now = Instant::now();
                let retry = error.is_transient();
                batch.retain(|p| {
                    let keep = retry && now + pause < p.deadline;
                    if !keep {
                        let (id, token, op) = (p.lease.id.as_str(), p.lease.token, p.op.name());
                        let _span =
                            info_span!("job", queue = ctx.queue.name(), job_id = %id, attempt = token).entered();
                        warn!(%error, "{op} not applied; the reaper will return the job when its lease lapses");
                        s.emit(Event::SettleFailed {
                            id,
                            token,
                            op,
                            error: &error,
                        });
                    }
                    keep
                });
                if batch.is_empty() {
                    return (Vec::new(), Vec::new());
                }
                debug!(%error, items = batch.len(), "settlement failed; retrying");
                sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Switching leasing ahead off retires the extra slots: the free ones at
    // once, the ones in use as they come back; switching on again cancels
    // what is still owed before adding any.
    #[test]
    fn slots_grow_and_retire() {
        let slots = Slots::new(1);
        slots.lease_ahead(true, 4);
        assert_eq!(slots.sem.available_permits(), 5);
        let held: Vec<Slot> = (0..3).map(|_| slots.try_acquire().unwrap()).collect();
        slots.lease_ahead(false, 4);
        assert_eq!((slots.sem.available_permits(), slots.owed()), (0, 2));
        drop(held);
        assert_eq!((slots.sem.available_permits(), slots.owed()), (1, 0));
        let held = slots.try_acquire().unwrap();
        assert!(slots.try_acquire().is_none(), "one slot while not leasing ahead");
        slots.lease_ahead(false, 4);
        slots.lease_ahead(true, 4);
        slots.lease_ahead(true, 4);
        assert_eq!(slots.sem.available_permits(), 4);
        slots.lease_ahead(false, 4);
        assert_eq!((slots.sem.available_permits(), slots.owed()), (0, 0));
        let held2 = {
            slots.lease_ahead(true, 4);
            (0..4).map(|_| slots.try_acquire().unwrap()).collect::<Vec<_>>()
        };
        slots.lease_ahead(false, 4);
        assert_eq!(slots.owed(), 4);
        slots.lease_ahead(true, 4);
        assert_eq!(
            (slots.sem.available_permits(), slots.owed()),
            (0, 0),
            "debt cancelled, nothing added"
        );
        drop((held, held2));
        assert_eq!(slots.sem.available_permits(), 5);
    }
}
