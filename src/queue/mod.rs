//! The producer and low-level handle: [`Queue`].
//!
//! - `options`: [`QueueOptions`] and [`Retention`].
//! - `enqueue`: enqueue, coalescing concurrent single enqueues.
//! - `settle`: claim, settle (complete, retry, fail, release, snooze),
//!   extend: the low-level calls a [`Consumer`](crate::Consumer) makes.
//! - `inspect`: a job's record, counts, the server clock.

mod aging;
mod backing;
mod checkpoint;
mod enqueue;
pub(crate) mod inspect;
mod options;
mod settle;

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::mpsc;

pub use self::aging::MAX_PRIORITY_AGING;
pub(crate) use self::backing::{Backing, Upkeep, UpkeepGuard};
pub use self::checkpoint::MAX_CHECKPOINT_BYTES;
pub use self::options::{
    DEFAULT_KEEP_COMPLETED, DEFAULT_KEEP_FAILED, DEFAULT_MAX_PAYLOAD_BYTES, MAX_PAYLOAD_LIMIT, QueueOptions, Retention,
};
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::Keys;
pub(crate) use crate::settlement::encode_result;
pub use crate::settlement::{MAX_ERROR_BYTES, MAX_RESULT_BYTES, Outcome, Settle, SettleOp, Settled};
use crate::store;

/// The layout version this crate writes into a new queue's `emq:{Q}:meta`.
/// Version 3 (echomq 0.3) keeps a payload of 65 to 256 bytes in up to four
/// record fields of at most 64 bytes (`p`, `p2`, `p3`, `p4`), so that the
/// record stays a compact listpack under the server's default
/// `hash-max-listpack-value`: about 40 % less memory per pending job.
/// Version 2 (echomq 0.2) added queue-wide fencing tokens, per-job limits
/// and the settlement history. A queue of version 2 is served as 0.2
/// writes it (payloads whole, which 0.2 processes read), so 0.2 and 0.3
/// processes can share it during a rolling upgrade; once no 0.2 process
/// is left, [`Queue::upgrade_layout`] moves it to 3. A 0.1 queue is
/// refused (drain it with 0.1 first).
pub const LAYOUT_VERSION: u32 = 3;

/// The older layout version this crate also serves (see [`LAYOUT_VERSION`]).
pub const LAYOUT_VERSION_SERVED: u32 = 2;

/// Most jobs one enqueue script call carries; `enqueue_bulk` splits larger batches.
pub const ENQUEUE_CHUNK: usize = 1_000;

/// Most jobs one claim, settle or reap call handles (scripts pass a batch to
/// one variadic command, and Lua's argument stack is bounded).
pub const MAX_BATCH: usize = 1_000;

/// A cheap `Clone` handle on one queue. Handles made by one
/// [`Client`](crate::Client) share its connection.
///
/// ```no_run
/// # async fn demo() -> echomq::Result<()> {
/// let queue = echomq::Queue::connect("redis://127.0.0.1:6379", "mail").await?;
/// let id = queue.enqueue(&serde_json::json!({"to": "ada@example.com"})).await?;
/// # let _ = id; Ok(()) }
/// ```
///
/// Most code needs the first two groups; the methods below are listed by
/// what they are for:
///
/// - **Producing**: [`enqueue`](Self::enqueue),
///   [`enqueue_with`](Self::enqueue_with) (with
///   [`EnqueueOptions`](crate::EnqueueOptions): id, delay, priority, dedup
///   and unique lifetimes, an expiry, lane, kind), [`enqueue_bulk`](Self::enqueue_bulk),
///   [`enqueue_bulk_with`](Self::enqueue_bulk_with), and for typed job
///   kinds [`enqueue_job`](Self::enqueue_job) and
///   [`enqueue_jobs`](Self::enqueue_jobs). Jobs are run by a
///   [`Consumer`](crate::Consumer) / [`Worker`](crate::Worker).
/// - **Reading a job or the queue**: [`job`](Self::job),
///   [`wait`](Self::wait) (until a job finishes), [`counts`](Self::counts),
///   [`lag`](Self::lag), [`list`](Self::list) (a state's jobs, a page at a
///   time), [`search`](Self::search) (by kind, lane, error text),
///   [`dedup_holder`](Self::dedup_holder), [`history`](Self::history)
///   (completed, failed and waits over time), [`workers`](Self::workers),
///   [`events`](Self::events) (the lifecycle stream),
///   [`server_time_ms`](Self::server_time_ms).
/// - **Operating**: [`retry_failed`](Self::retry_failed),
///   [`retry_all_failed`](Self::retry_all_failed), [`promote`](Self::promote),
///   [`remove`](Self::remove), [`clean`](Self::clean), [`cancel`](Self::cancel),
///   [`pause`](Self::pause), [`resume`](Self::resume),
///   [`drain`](Self::drain), [`obliterate`](Self::obliterate) (the guide's
///   [Operating a queue](crate::guide::operating_a_queue)).
/// - **Throttles and lanes**: [`set_max_active`](Self::set_max_active),
///   [`set_rate_limit`](Self::set_rate_limit),
///   [`throttles`](Self::throttles), [`set_lane_cap`](Self::set_lane_cap),
///   [`set_lane_weight`](Self::set_lane_weight), [`lanes`](Self::lanes) and
///   the rest of their families ([Throttles](crate::guide::throttles),
///   [Lanes](crate::guide::lanes)).
/// - **Settings kept in the server**: [`set_events`](Self::set_events),
///   [`set_priority_aging`](Self::set_priority_aging),
///   [`layout`](Self::layout), [`upgrade_layout`](Self::upgrade_layout).
/// - **Maintenance** (a worker's client does it for you):
///   [`reap`](Self::reap), [`sweep`](Self::sweep),
///   [`relay`](Self::relay) (messages of flows that span queues), and with the
///   `metrics` feature `record_metrics` (the gauges).
/// - **Working by hand**, for a loop of your own instead of a consumer:
///   [`claim`](Self::claim), then one settlement per
///   [`Lease`](crate::Lease): [`complete`](Self::complete),
///   [`retry`](Self::retry), [`fail`](Self::fail),
///   [`release`](Self::release), [`snooze`](Self::snooze), or several at
///   once with [`settle_many`](Self::settle_many) and
///   [`settle_and_claim`](Self::settle_and_claim); [`extend`](Self::extend)
///   renews a lease.
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
    /// The name its claims record as the holder of the jobs they lease.
    holder: Arc<str>,
}

pub use crate::validate::MAX_HOLDER_BYTES;

/// This process's default holder name: `HOST:PID`.
pub(crate) fn process_name() -> &'static str {
    static NAME: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .or_else(|| std::env::var("COMPUTERNAME").ok())
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_owned());
        let name = format!("{host}:{}", std::process::id());
        // A hostname is short and printable; be safe anyway.
        name.chars().filter(|c| !c.is_control()).take(120).collect()
    });
    &NAME
}

struct Inner {
    name: String,
    keys: Keys,
    /// `keys.base` shared with every lease this handle claims.
    base: Arc<str>,
    opts: QueueOptions,
    /// The link and upkeep shared with every queue of the client.
    backing: Backing,
    /// The link's connection, bound to the queue's slot (on a cluster,
    /// keyless commands such as `TIME` and `WAIT` go to the queue's node).
    conn: Conn,
    /// Single enqueues go to the coalescer, which sends those that arrive
    /// together in one script call.
    enqueues: mpsc::UnboundedSender<enqueue::Request>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

impl Queue {
    pub(crate) async fn open(backing: Backing, name: &str, opts: QueueOptions) -> Result<Queue> {
        let keys = Keys::new(&opts.prefix, name)?;
        opts.check()?;
        let (enqueues, requests) = mpsc::unbounded_channel();
        let conn = backing.link.conn().homed(&keys.base);
        tokio::spawn(enqueue::coalesce(conn.clone(), keys.clone(), opts.durability, requests));
        let q = Queue {
            holder: Arc::from(process_name()),
            inner: Arc::new(Inner {
                name: name.to_owned(),
                base: Arc::from(keys.base.as_str()),
                keys,
                opts,
                backing,
                conn,
                enqueues,
            }),
        };
        q.check_layout().await?;
        q.inner.opts.durability.probe(&mut q.conn()).await?;
        Ok(q)
    }

    /// Stamps a new queue with our layout version; refuses any other. As
    /// the first script a queue runs, it also tells a user who may not run
    /// scripts ([`Error::NoPermission`]).
    async fn check_layout(&self) -> Result<u32> {
        let found = store::layout::run(&mut self.conn(), self.keys(), LAYOUT_VERSION, None).await?;
        self.served_layout(&found)
    }

    fn served_layout(&self, found: &str) -> Result<u32> {
        match found.parse::<u32>() {
            Ok(v @ (LAYOUT_VERSION | LAYOUT_VERSION_SERVED)) => Ok(v),
            _ => Err(Error::LayoutMismatch {
                queue: self.inner.name.clone(),
                found: crate::error::excerpt(found),
                supported: LAYOUT_VERSION,
            }),
        }
    }

    /// The queue's layout version: [`LAYOUT_VERSION`] for a queue this
    /// crate made or upgraded, [`LAYOUT_VERSION_SERVED`] for one echomq
    /// 0.2 made.
    ///
    /// # Errors
    /// [`Error::LayoutMismatch`] when the queue holds another version;
    /// server errors.
    pub async fn layout(&self) -> Result<u32> {
        self.check_layout().await
    }

    /// Moves a queue of layout [`LAYOUT_VERSION_SERVED`] (made by echomq
    /// 0.2) to [`LAYOUT_VERSION`], and answers the version it holds then
    /// (a queue already there is left as it is). Jobs enqueued from then
    /// on keep a payload of 65 to 256 bytes in parts, which every echomq
    /// 0.3 process reads at once (each call reads the version) and echomq
    /// 0.2 cannot: call it once no 0.2 process serves the queue any more.
    /// Jobs already stored keep their whole payloads, which 0.3 reads too;
    /// an echomq 0.2 process opening the queue afterwards is refused with
    /// [`Error::LayoutMismatch`].
    ///
    /// # Errors
    /// [`Error::LayoutMismatch`] when the queue holds another version;
    /// server errors.
    pub async fn upgrade_layout(&self) -> Result<u32> {
        let found = store::layout::run(
            &mut self.conn(),
            self.keys(),
            LAYOUT_VERSION,
            Some(LAYOUT_VERSION_SERVED),
        )
        .await?;
        self.served_layout(&found)
    }

    /// The queue name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The name this handle's claims record as the holder of the jobs
    /// they lease ([`JobInfo::holder`](crate::JobInfo::holder)): `HOST:PID`
    /// unless set with [`with_holder`](Self::with_holder).
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The same queue, with claims that record `name` as the holder (a
    /// [`Consumer`](crate::Consumer) does this with its own name).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for an empty name, one over
    /// [`MAX_HOLDER_BYTES`], or one with control characters.
    pub fn with_holder(&self, name: &str) -> Result<Queue> {
        crate::validate::holder("holder", name)?;
        Ok(Queue {
            inner: self.inner.clone(),
            holder: Arc::from(name),
        })
    }

    /// Why `other` cannot hold jobs of a group (a flow's steps, a batch's
    /// members) of this queue, or `None` when it can: it must be a handle
    /// of the same client under the same prefix, since messages between
    /// the two name queues by name and are relayed over this client.
    pub(crate) fn peer_problem(&self, other: &Queue) -> Option<String> {
        if other.options().prefix != self.options().prefix {
            return Some(format!(
                "queue {:?} is under prefix {:?}, queue {:?} under {:?}",
                other.name(),
                other.options().prefix,
                self.name(),
                self.options().prefix
            ));
        }
        if !other.link().same(self.link()) {
            return Some(format!(
                "queue {:?} is a handle of another client than queue {:?}'s",
                other.name(),
                self.name()
            ));
        }
        None
    }

    /// The link to the server this handle shares with its client's queues.
    pub(crate) fn link(&self) -> &crate::conn::Link {
        &self.inner.backing.link
    }

    /// The process's upkeep of its queues.
    pub(crate) fn upkeep(&self) -> &dyn Upkeep {
        &*self.inner.backing.upkeep
    }

    pub(crate) fn conn(&self) -> Conn {
        self.inner.conn.clone()
    }

    pub(crate) fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    pub(crate) fn options(&self) -> &QueueOptions {
        &self.inner.opts
    }

    /// The key base shared with the leases of this queue.
    pub(crate) fn base(&self) -> &Arc<str> {
        &self.inner.base
    }

    pub(crate) fn encode<T: Serialize + ?Sized>(&self, payload: &T) -> Result<Vec<u8>> {
        let bytes = serde_json::to_vec(payload).map_err(Error::Encode)?;
        let limit = self.inner.opts.max_payload_bytes;
        if bytes.len() > limit {
            return Err(Error::PayloadTooLarge {
                size: bytes.len(),
                limit,
            });
        }
        #[cfg(feature = "compression")]
        let bytes = crate::compression::compress(bytes, self.inner.opts.compress_above);
        Ok(bytes)
    }
}
