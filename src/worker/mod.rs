//! The worker side: [`Consumer`] claims jobs, runs an async handler for each
//! with bounded concurrency, keeps leases alive with heartbeats, and settles
//! each job with its fencing token. A [`Worker`] does the same for many
//! queues at once; a consumer is a worker of one queue.
//!
//! - `handler`: the [`Handler`] trait and [`HandlerError`] (the outcomes).
//! - `job`: the [`Job`] a handler gets: its lease, payload and cancellation.
//! - `engine`: the [`Worker`] builder and its run (the one machinery).
//! - `erased`: a queue's handler with its payload type erased.
//! - `turns`: which queue free slots go to ([`Order`]), and each queue's
//!   state (ready, idle until woken, held until an instant).
//! - `settings`: the consumer's settings and the timings derived from them.
//! - `claim`: the claim loop and the one blocking wake-up.
//! - `job_task`: one job's task; `heartbeat`: its lease renewals.
//! - `prefetch`: lease slots and leasing ahead of free handlers.
//! - `settler`: batched settlements.
//! - `backoff`: the consumer's own retry delays and the [`RetryContext`].
//! - `event`: the [`WorkerEvent`]s observers see.

pub(crate) mod backoff;
mod checkpoint;
mod claim;
mod engine;
mod erased;
mod event;
mod handler;
mod heartbeat;
mod job;
pub(crate) mod job_task;
mod keeper;
mod prefetch;
mod registry;
mod setters;
mod settings;
mod settler;
mod turns;

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

pub use self::backoff::RetryContext;
pub use self::engine::{MAX_QUEUES, MAX_WEIGHT, Worker, WorkerHandle};
pub use self::event::{HandlerResult, WorkerEvent};
pub use self::handler::{Handler, HandlerError};
pub use self::job::Job;
use self::prefetch::{AutoPrefetch, Slots};
use self::settings::Settings;
use self::settler::Pending;
pub use self::turns::Order;
use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::validate::later;

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
/// Shortest interval of [`Worker::record_gauges_every`]: 100 ms.
#[cfg(feature = "metrics")]
pub const MIN_GAUGES_EVERY: Duration = Duration::from_millis(100);
/// Longest interval of [`Worker::record_gauges_every`]: one hour.
#[cfg(feature = "metrics")]
pub const MAX_GAUGES_EVERY: Duration = Duration::from_secs(3_600);
/// Most jobs leased in one claim call.
pub const MAX_CLAIM_BATCH: usize = 64;
/// Most jobs a consumer leases ahead of free handlers ([`Worker::prefetch`]).
pub const MAX_PREFETCH: usize = 1_000;
/// Automatic prefetch leases ahead while the average handler runs for less
/// than this many settle round trips (see [`Worker::prefetch`]).
pub const AUTO_PREFETCH_RATIO: u64 = 4;
/// The longest a job leased ahead by automatic prefetch waits for a
/// handler before it is released (at most the heartbeat interval).
pub const AUTO_PREFETCH_WAIT: Duration = Duration::from_secs(1);
/// A job leased ahead that waited for a handler longer than this is
/// renewed before it starts, and one cancelled meanwhile never starts
/// (with heartbeats off, any wait renews it). A shorter wait starts at
/// once: a cancel request made in it reaches the handler at its first
/// heartbeat, as for a running job.
pub const RECHECK_AFTER_WAIT: Duration = Duration::from_millis(50);

/// Runs an async handler for each job of a queue: `Consumer::new(queue,
/// handler)` is a [`Worker`] of that one queue. Configure it with the
/// worker's chained setters (checked when it starts), then
/// [`spawn`](Worker::spawn) it (or [`run`](Worker::run) it until a shutdown
/// future resolves). For many queues in one process, one worker over all of
/// them shares one pool and one wake-up connection.
///
/// What the handler returns decides the job's fate (see
/// [`HandlerError`]): `Ok` completes it; an error retries it after the
/// backoff (the worker's, see [`backoff`](Worker::backoff), else the job's)
/// until its `max_attempts` failures, or as the error asks (retry after a
/// delay, fail now, snooze); a panic retries it with error `"panicked"`; a
/// payload that does not decode into `T` fails it for good. None of them
/// stops the consumer.
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
#[derive(Debug)]
pub enum Consumer {}

impl Consumer {
    /// A worker of `queue` running `handler`, with the defaults.
    #[allow(clippy::new_ret_no_self)]
    pub fn new<T, H>(queue: Queue, handler: H) -> Worker
    where
        T: DeserializeOwned + Send + 'static,
        H: Handler<T>,
    {
        Worker::new().queue(queue, handler)
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
    /// Graceful shutdown (see [`Worker::run`], [`Worker::run`]); returns when done.
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
    /// What its jobs did since the last announcement, for the queue's
    /// history (written by `registry`).
    tally: crate::admin::history::Tally,
}

/// One blocking wait of the wake-up (see [`claim::waker`]).
struct WakeGroup {
    /// Its queues, by index.
    queues: Vec<usize>,
    /// Wakes its wait when one of its queues went idle (its list is to be
    /// listened to).
    idled: tokio::sync::Notify,
    /// The worker's own wake list for this group: a push to it ends the
    /// wait (keys::worker_wake).
    own_wake: String,
}

/// What every job task shares.
struct Ctx {
    /// The worker's queues, in the order they were added; a job, a
    /// settlement and a scheduling decision name theirs by index.
    queues: Vec<Served>,
    /// Which queues the free slots go to, and each queue's state.
    turns: std::sync::Mutex<turns::Turns>,
    /// Wakes the claim loop when a queue may have work again.
    work: tokio::sync::Notify,
    /// The wake-up's groups: queues whose wake lists one blocking call
    /// names together (all of them on one server; those of one slot on a
    /// cluster, whose blocking calls cannot cross slots).
    wakes: Vec<WakeGroup>,
    /// Each queue's group, by index in `wakes`.
    wake_of: Vec<usize>,
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
    fn turns(&self) -> std::sync::MutexGuard<'_, turns::Turns> {
        self.turns.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// A claim of `asked` jobs from `q` (alone, or with a settlement)
    /// leased `got`; `wait`: a rate limit stopped it, and lets the queue
    /// lease again after this long.
    fn claimed(&self, q: usize, asked: usize, got: usize, wait: Option<std::time::Duration>) {
        let now = Instant::now();
        if self.turns().claimed(q, asked, got, now, wait.map(|w| now + w)) {
            self.wakes[self.wake_of[q]].idled.notify_one();
        }
    }
    /// A push to `q`'s wake list was seen.
    fn woken(&self, q: usize) {
        self.turns().woken(q);
        self.work.notify_one();
    }
    /// A wake-up wait ended with no push (the safety-net poll may be due).
    fn timed_out(&self) {
        if self.turns().timed_out(Instant::now()) {
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
