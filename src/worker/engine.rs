//! [`Worker`]: one worker serving many queues, with one pool of handlers
//! and lease slots, one blocking wake-up and the client's one maintenance
//! task. A [`Consumer`](super::Consumer) is a worker of one queue.

use std::collections::HashSet;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error};

use super::erased::{ErasedHandler, Typed};
use super::handler::Handler;
use super::prefetch::{AutoPrefetch, Slots};
use super::settings::Settings;
use super::turns::{Order, Turns};
use super::{ConsumerHandle, Ctx, Served, StopOnDrop, WakeGroup, claim, drain, keeper, panic_text, settler};
use crate::error::{Error, Result};
use crate::queue::Queue;

/// Highest queue weight ([`Worker::queue_weighted`]).
pub const MAX_WEIGHT: u32 = 1_000;

/// Most queues one worker serves (its wake-up names every idle queue's
/// wake list in one blocking call).
pub const MAX_QUEUES: usize = 1_000;

// One worker serves every partition of a partitioned queue.
const _: () = assert!(crate::partition::MAX_PARTITIONS <= MAX_QUEUES);

/// A running [`Worker`] (the same handle as a consumer's).
pub type WorkerHandle = ConsumerHandle;

/// One worker serving many queues: each queue with its own handler and
/// payload type, all sharing one pool of handlers
/// ([`concurrency`](Self::concurrency)) and of lease slots
/// ([`prefetch`](Self::prefetch)), one blocking wake-up connection, and the
/// client's one maintenance task. A [`Consumer`](super::Consumer) is a
/// worker of one queue; every setting here means what it means there.
///
/// Free slots go to the queues with ready work by [`Order`]: by weight
/// (the default; each queue's share of starts tends to its weight over the
/// sum of the weights of the queues with ready work, and no queue with work
/// is starved) or in strict order (the first queue with ready work gets
/// every free slot).
///
/// A queue whose claim came back short is idle: the worker claims from it
/// again when its wake list is pushed (an enqueue, retry, release, reap or
/// promotion does), and otherwise only in the safety-net poll, which claims
/// from one idle queue (the one idle longest) per
/// [`poll_interval`](Self::poll_interval). So an idle worker costs about one
/// blocking call per poll interval, however many queues it serves. Busy
/// queues are claimed from without waiting.
///
/// Rules (checked when it starts: [`Error::InvalidOption`]): at least one
/// queue and at most [`MAX_QUEUES`]; each queue once (by prefix and name);
/// weights 1 to [`MAX_WEIGHT`]; all queues made by the same
/// [`Client`](crate::Client) (its connection, maintenance task and the
/// servers the wake-up blocks on). On a Valkey Cluster the queues may live
/// on different masters: a blocking call names keys of one slot only, so
/// the wake-up waits once per slot, each wait on a connection of its own.
///
/// ```no_run
/// # async fn demo(client: echomq::Client) -> echomq::Result<()> {
/// use echomq::{Job, Worker};
///
/// #[derive(serde::Deserialize)]
/// struct Email { to: String }
///
/// let mail = client.queue("mail").await?;
/// let thumbs = client.queue("thumbnails").await?;
/// let worker = Worker::new()
///     .queue_weighted(mail, |job: Job<Email>| async move {
///         println!("mail to {}", job.payload().to);
///         Ok(())
///     }, 3)
///     .queue(thumbs, |job: Job<u64>| async move {
///         println!("thumbnail of image {}", job.payload());
///         Ok(())
///     })
///     .concurrency(32)
///     .spawn()?;
/// // ...
/// worker.shutdown().await?;
/// # Ok(()) }
/// ```
#[must_use = "a worker does nothing until spawned or run"]
pub struct Worker {
    entries: Vec<Entry>,
    order: Order,
    pub(super) settings: Settings,
}

/// A queue as the builder keeps it.
struct Entry {
    queue: Queue,
    handler: Arc<dyn ErasedHandler>,
    weight: u32,
}

impl Default for Worker {
    fn default() -> Self {
        Worker::new()
    }
}

impl Worker {
    /// A worker of no queue yet, with the defaults (those of a
    /// [`Consumer`](super::Consumer)), in [`Order::Weighted`].
    pub fn new() -> Self {
        Worker {
            entries: Vec::new(),
            order: Order::default(),
            settings: Settings::default(),
        }
    }

    /// Serves `queue` with `handler`, weight 1. Its payloads decode into
    /// `T`; one that does not fails its job for good.
    pub fn queue<T, H>(self, queue: Queue, handler: H) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        H: Handler<T>,
    {
        self.queue_weighted(queue, handler, 1)
    }

    /// Serves `queue` with `handler` and `weight` (1 to [`MAX_WEIGHT`]):
    /// with [`Order::Weighted`], a queue of weight 2 gets twice the starts
    /// of one of weight 1 while both have ready work.
    pub fn queue_weighted<T, H>(mut self, queue: Queue, handler: H, weight: u32) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        H: Handler<T>,
    {
        self.add(queue, Typed::<T, H>::new(Arc::new(handler)), weight);
        self
    }

    /// Serves every partition of `queue` with `handler`, each with weight
    /// 1, so that the worker claims from them in turn while they have
    /// work (see [`partition`](crate::partition)).
    pub fn partitioned<T, H>(mut self, queue: &crate::partition::PartitionedQueue, handler: H) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        H: Handler<T>,
    {
        let handler: Arc<dyn ErasedHandler> = Typed::<T, H>::new(Arc::new(handler));
        for part in queue.partitions() {
            self.add(part.clone(), handler.clone(), 1);
        }
        self
    }

    fn add(&mut self, queue: Queue, handler: Arc<dyn ErasedHandler>, weight: u32) {
        self.entries.push(Entry { queue, handler, weight });
    }

    /// How free slots are shared between the queues (default
    /// [`Order::Weighted`]).
    pub fn order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    /// Checks the settings and the queues.
    fn check(&self) -> Result<()> {
        self.settings.check()?;
        let invalid = |reason: String| Error::InvalidOption { name: "queue", reason };
        if self.entries.is_empty() {
            return Err(invalid("a worker needs at least one queue".into()));
        }
        if self.entries.len() > MAX_QUEUES {
            return Err(invalid(format!(
                "{} queues; a worker serves at most {MAX_QUEUES}",
                self.entries.len()
            )));
        }
        let link = self.entries[0].queue.link();
        let mut seen = HashSet::new();
        for e in &self.entries {
            let name = e.queue.name();
            if !seen.insert(e.queue.base().clone()) {
                return Err(invalid(format!("queue {name} is added twice")));
            }
            if !(1..=MAX_WEIGHT).contains(&e.weight) {
                return Err(Error::InvalidOption {
                    name: "weight",
                    reason: format!("{} (queue {name}) is not within 1..={MAX_WEIGHT}", e.weight),
                });
            }
            if !e.queue.link().same_as(link) {
                return Err(invalid(format!(
                    "queue {name} was made by another Client; a worker's queues share one client"
                )));
            }
        }
        Ok(())
    }

    /// Starts the worker on the current Tokio runtime.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a setting out of range or a queue
    /// breaking the rules above (nothing started).
    pub fn spawn(self) -> Result<WorkerHandle> {
        self.check()?;
        let stop = CancellationToken::new();
        let s = stop.clone();
        let join = tokio::spawn(async move { self.run(s.cancelled_owned()).await });
        Ok(ConsumerHandle { stop, join })
    }

    /// Runs until `shutdown` resolves, then shuts down gracefully, for
    /// every queue (as [`Worker::run`](super::Worker::run)).
    ///
    /// # Errors
    /// As [`spawn`](Self::spawn) (before anything runs); [`Error::Internal`]
    /// when one of the worker's own tasks died.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        self.check()?;
        let Worker {
            entries,
            order,
            settings,
        } = self;
        let maintained: Vec<_> = if settings.reaper {
            entries
                .iter()
                .map(|e| e.queue.upkeep().register(&e.queue, settings.reap_interval))
                .collect()
        } else {
            Vec::new()
        };
        let (settle_tx, settle_rx) = mpsc::unbounded_channel();
        #[cfg(feature = "metrics")]
        let gauges_every = settings.gauges_every;
        let ctx = Ctx::new(entries, order, settings, settle_tx)?;
        let all_settled = CancellationToken::new();
        // Should this future be dropped before it finishes (a `select!` or a
        // timeout around `run`), the worker's tasks stop too: no new
        // claims, handlers cancelled and their jobs released.
        let keeper_done = CancellationToken::new();
        let _stop_on_drop = StopOnDrop(vec![
            ctx.stop.clone(),
            ctx.hard_stop.clone(),
            all_settled.clone(),
            keeper_done.clone(),
        ]);
        #[cfg(feature = "metrics")]
        let gauges = {
            crate::metrics::describe();
            gauges_every.map(|every| {
                let queues = ctx.queues.iter().map(|s| s.queue.clone()).collect();
                tokio::spawn(crate::metrics::refresh(queues, every, keeper_done.clone()))
            })
        };
        let announcing = tokio::spawn(super::registry::announce(ctx.clone(), keeper_done.clone()));
        let keeping = tokio::spawn(keeper::Keeper::run(
            ctx.keeper.clone(),
            ctx.queues.iter().map(|s| s.queue.clone()).collect(),
            keeper_done.clone(),
        ));
        let waking: Vec<_> = (0..ctx.wakes.len())
            .map(|g| tokio::spawn(claim::waker(ctx.clone(), g)))
            .collect();
        let mut settling = Some(tokio::spawn(settler::settler(
            ctx.clone(),
            settle_rx,
            all_settled.clone(),
        )));
        let mut failure = claim_until(&ctx, shutdown, &mut settling).await;
        // Claiming has stopped (and so has the wake-up, on `stop`).
        for w in waking {
            let _ = w.await;
        }
        drain(&ctx).await;
        // Every job task has ended and queued its settlement: flush them.
        all_settled.cancel();
        if let Some(h) = settling
            && let Err(e) = h.await
        {
            failure.get_or_insert(Error::Internal {
                task: "settler",
                detail: e.to_string(),
            });
        }
        keeper_done.cancel();
        let _ = keeping.await;
        let _ = announcing.await;
        #[cfg(feature = "metrics")]
        if let Some(g) = gauges {
            let _ = g.await;
        }
        drop(maintained);
        debug!(queues = ctx.names(), "worker stopped");
        failure.map_or(Ok(()), Err)
    }
}

impl Ctx {
    /// What the worker's tasks share: its queues (each claiming under the
    /// worker's name), their wake-up groups, the slots and permits.
    fn new(
        entries: Vec<Entry>,
        order: Order,
        settings: Settings,
        settle_tx: mpsc::UnboundedSender<settler::Pending>,
    ) -> Result<Arc<Ctx>> {
        let name = settings.name.clone().unwrap_or_else(|| {
            static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            format!("{}/{n}", crate::queue::process_name())
        });
        let weights: Vec<u32> = entries.iter().map(|e| e.weight).collect();
        let mut queues = Vec::with_capacity(entries.len());
        for e in entries {
            queues.push(Served {
                queue: e.queue.with_holder(&name)?,
                handler: e.handler,
                tally: crate::admin::history::Tally::default(),
            });
        }
        let (wakes, wake_of) = wake_groups(&queues);
        Ok(Arc::new(Ctx {
            turns: std::sync::Mutex::new(Turns::new(order, &weights, settings.poll_interval, Instant::now())),
            work: tokio::sync::Notify::new(),
            wakes,
            wake_of,
            queues,
            // Automatic prefetch adds its slots while it leases ahead.
            slots: Slots::new(settings.concurrency + settings.prefetch.unwrap_or(0)),
            running: Arc::new(Semaphore::new(settings.concurrency)),
            auto: settings.prefetch.is_none().then(AutoPrefetch::default),
            settings,
            stop: CancellationToken::new(),
            hard_stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
            settle_tx,
            keeper: Arc::default(),
        }))
    }
}

/// Claims until `shutdown` resolves (or the settler dies: library code,
/// but a bug there must not leave the worker claiming jobs it can never
/// settle), then stops claiming. Returns the settler's failure, if it died
/// (and then takes its handle).
async fn claim_until(
    ctx: &Arc<Ctx>,
    shutdown: impl Future<Output = ()> + Send,
    settling: &mut Option<tokio::task::JoinHandle<()>>,
) -> Option<Error> {
    let claiming = claim::claim_loop(ctx.clone());
    tokio::pin!(claiming);
    tokio::pin!(shutdown);
    let settler_ended = async {
        match settling.as_mut() {
            Some(h) => h.await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = &mut claiming => None,
        _ = &mut shutdown => {
            ctx.stop.cancel();
            claiming.await;
            None
        }
        r = settler_ended => {
            let detail = match r {
                Err(e) if e.is_panic() => format!("panicked: {}", panic_text(e.into_panic())),
                Err(e) => e.to_string(),
                Ok(()) => "stopped early".into(),
            };
            error!(queues = ctx.names(), %detail, "the settler died; stopping the consumer");
            *settling = None;
            ctx.stop.cancel();
            claiming.await;
            Some(Error::Internal { task: "settler", detail })
        }
    }
}

/// Splits the queues into the wake-up's groups: one on one server; one per
/// slot on a cluster (a blocking call names keys of one slot only).
fn wake_groups(queues: &[Served]) -> (Vec<WakeGroup>, Vec<usize>) {
    let id = uuid::Uuid::new_v4().to_string();
    let mut slots: Vec<Option<String>> = Vec::new();
    let mut wakes: Vec<WakeGroup> = Vec::new();
    let mut wake_of = Vec::with_capacity(queues.len());
    for (q, s) in queues.iter().enumerate() {
        let slot = s.queue.conn().slot_group(&s.queue.keys().wake);
        let g = match slots.iter().position(|x| *x == slot) {
            Some(g) => g,
            None => {
                let tag = slot.is_some().then(|| s.queue.name());
                wakes.push(WakeGroup {
                    queues: Vec::new(),
                    idled: tokio::sync::Notify::new(),
                    own_wake: crate::keys::worker_wake(&s.queue.options().prefix, &id, tag),
                });
                slots.push(slot);
                wakes.len() - 1
            }
        };
        wakes[g].queues.push(q);
        wake_of.push(g);
    }
    (wakes, wake_of)
}
