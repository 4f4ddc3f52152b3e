//! The producer and low-level handle: [`Queue`].

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, Value};
use serde::Serialize;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::error::{Error, Result};
use crate::job::{Counts, EnqueueOptions, EnqueueStatus, Enqueued, JobInfo, JobState, Lease, millis};
use crate::keys::{DEFAULT_PREFIX, Keys};
use crate::scripts::{Code, Reply, SCRIPTS, code};

/// The layout version this crate writes into `emq:{Q}:meta`.
pub const LAYOUT_VERSION: u32 = 1;

/// Default limit on an encoded payload: 512 KiB.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 512 * 1024;

/// Default time a server call may take before it fails with a timeout.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Default time to establish a connection.
pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);

/// Default retention of completed jobs: the newest 1,000.
pub const DEFAULT_KEEP_COMPLETED: Retention = Retention::Newest(1_000);

/// Default retention of failed jobs: the newest 10,000.
pub const DEFAULT_KEEP_FAILED: Retention = Retention::Newest(10_000);

/// Most jobs one enqueue script call carries; `enqueue_bulk` splits larger batches.
pub const ENQUEUE_CHUNK: usize = 1_000;

/// Most jobs one claim, settle or reap call handles (scripts pass a batch to
/// one variadic command, and Lua's argument stack is bounded).
pub const MAX_BATCH: usize = 1_000;

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
    /// Keep the newest `n` records; older ones are deleted by the settles
    /// once there are 64 more than `n`.
    Newest(u32),
}

impl Retention {
    pub(crate) fn arg(self) -> i64 {
        match self {
            Retention::All => -1,
            Retention::None => 0,
            Retention::Newest(0) => 0,
            Retention::Newest(n) => i64::from(n),
        }
    }
}

/// Settings of a [`Queue`] handle.
#[derive(Debug, Clone)]
pub struct QueueOptions {
    prefix: String,
    max_payload_bytes: usize,
    response_timeout: Duration,
    connection_timeout: Duration,
    keep_completed: Retention,
    keep_failed: Retention,
    allow_eviction: bool,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            prefix: DEFAULT_PREFIX.to_owned(),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connection_timeout: DEFAULT_CONNECTION_TIMEOUT,
            keep_completed: DEFAULT_KEEP_COMPLETED,
            keep_failed: DEFAULT_KEEP_FAILED,
            allow_eviction: false,
        }
    }
}

impl QueueOptions {
    /// The defaults (see each setter).
    pub fn new() -> Self {
        Self::default()
    }
    /// Key prefix (default [`DEFAULT_PREFIX`], `"emq"`). Must not contain braces.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
    /// Largest encoded payload accepted (default [`DEFAULT_MAX_PAYLOAD_BYTES`]).
    pub fn max_payload_bytes(mut self, n: usize) -> Self {
        self.max_payload_bytes = n;
        self
    }
    /// How long a server call may take (default [`DEFAULT_RESPONSE_TIMEOUT`]).
    pub fn response_timeout(mut self, d: Duration) -> Self {
        self.response_timeout = d;
        self
    }
    /// How long connecting may take (default [`DEFAULT_CONNECTION_TIMEOUT`]).
    pub fn connection_timeout(mut self, d: Duration) -> Self {
        self.connection_timeout = d;
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
    /// Connect even when the server's `maxmemory-policy` may evict keys
    /// (default false: [`Queue::connect`] refuses with
    /// [`Error::UnsafeServer`], since an evicted job record is a lost job).
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }
}

/// What a settlement did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// `complete`: the job is completed.
    Completed,
    /// `retry`: the job will run again, at once (`due_ms` `None`) or at `due_ms` (server ms).
    Retrying {
        /// When it becomes due, if delayed.
        due_ms: Option<u64>,
    },
    /// `fail`, or `retry` past `max_attempts`: the job failed for good.
    Failed,
    /// `release`: the job is pending again.
    Released,
    /// This settlement already happened with this token (the first reply
    /// was lost and the call was sent again); nothing changed now.
    AlreadySettled,
}

/// One settlement of a batch sent with [`Queue::settle_many`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settle {
    /// As [`Queue::complete`].
    Complete,
    /// As [`Queue::retry`].
    Retry {
        /// Delay before the next attempt.
        delay: Duration,
        /// The error text to record.
        error: String,
    },
    /// As [`Queue::fail`].
    Fail {
        /// The reason to record.
        reason: String,
    },
    /// As [`Queue::release`].
    Release,
}

impl Settle {
    /// The operation's name: complete, retry, fail or release.
    pub fn name(&self) -> &'static str {
        match self {
            Settle::Complete => "complete",
            Settle::Retry { .. } => "retry",
            Settle::Fail { .. } => "fail",
            Settle::Release => "release",
        }
    }
}

/// The answer to a settlement: what happened and the server's clock then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// What happened.
    pub outcome: Outcome,
    /// The server's clock when the script ran (ms since the Unix epoch).
    pub server_ms: u64,
}

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
    /// Due delayed jobs moved to pending.
    pub promoted: u64,
}

/// Enqueue calls one queue keeps in flight while coalescing: few enough
/// that concurrent enqueues pile up into batches, enough to hide a round trip.
const ENQUEUE_CALLS_IN_FLIGHT: usize = 4;

/// Payload bytes past which the coalescer sends what it has, so one call
/// stays well inside the response timeout.
const ENQUEUE_BATCH_BYTES: usize = 1 << 20;

/// One `enqueue_with` waiting for the coalescer.
struct EnqueueRequest {
    payload: Vec<u8>,
    opts: EnqueueOptions,
    reply: oneshot::Sender<Result<Enqueued>>,
}

/// Sends single enqueues: a lone one at once, and those that arrive while
/// earlier calls are in flight together in one script call, so many
/// concurrent producers (web handlers) cost the server a fraction of a call
/// each. Each caller still gets its own answer only after the server has
/// stored its job. Ends when every `Queue` handle is dropped.
async fn coalesce_enqueues(conn: ConnectionManager, keys: Keys, mut requests: mpsc::UnboundedReceiver<EnqueueRequest>) {
    let calls = Arc::new(Semaphore::new(ENQUEUE_CALLS_IN_FLIGHT));
    while let Some(first) = requests.recv().await {
        let Ok(call) = calls.clone().acquire_owned().await else {
            return;
        };
        let mut bytes = first.payload.len();
        let mut batch = vec![first];
        while batch.len() < ENQUEUE_CHUNK && bytes < ENQUEUE_BATCH_BYTES {
            match requests.try_recv() {
                Ok(r) => {
                    bytes += r.payload.len();
                    batch.push(r);
                }
                Err(_) => break,
            }
        }
        let (mut conn, keys) = (conn.clone(), keys.clone());
        tokio::spawn(async move {
            let jobs: Vec<(&[u8], &EnqueueOptions)> = batch.iter().map(|r| (r.payload.as_slice(), &r.opts)).collect();
            let result = enqueue_call(&mut conn, &keys, &jobs).await;
            drop(jobs);
            match result {
                Ok(out) if out.len() == batch.len() => {
                    for (request, answer) in batch.into_iter().zip(out) {
                        let _ = request.reply.send(Ok(answer));
                    }
                }
                Ok(out) => {
                    let detail = format!("{} answers for {} jobs", out.len(), batch.len());
                    for request in batch {
                        let _ = request.reply.send(Err(Error::Protocol {
                            script: "enqueue",
                            detail: detail.clone(),
                        }));
                    }
                }
                Err(e) => {
                    for request in batch {
                        let _ = request.reply.send(Err(e.duplicate()));
                    }
                }
            }
            drop(call);
        });
    }
}

/// The coalescer is gone: only when the runtime that started it shut down.
fn gone() -> Error {
    Error::Protocol {
        script: "enqueue",
        detail: "the enqueue task has stopped (its Tokio runtime shut down)".into(),
    }
}

/// One enqueue script call for a batch of encoded jobs.
async fn enqueue_call(
    conn: &mut ConnectionManager,
    k: &Keys,
    jobs: &[(&[u8], &EnqueueOptions)],
) -> Result<Vec<Enqueued>> {
    let mut inv = SCRIPTS.enqueue.prepare_invoke();
    inv.key(&k.seq).key(&k.pending).key(&k.delayed).key(&k.wake);
    inv.arg(&k.base).arg(jobs.len());
    for (bytes, o) in jobs {
        let (dedup, ttl) = match &o.dedup {
            Some((d, ttl)) => (d.as_str(), millis("dedup ttl", *ttl)?),
            None => ("", 0),
        };
        inv.arg(o.id.as_deref().unwrap_or(""))
            .arg(*bytes)
            .arg(o.priority)
            .arg(millis("delay", o.delay)?)
            .arg(o.max_attempts)
            .arg(o.max_stalls)
            .arg(dedup)
            .arg(ttl);
    }
    let v: Value = inv.invoke_async(conn).await?;
    let mut r = Reply::new("enqueue", v)?;
    let _now = r.uint()?;
    let mut out = Vec::with_capacity(jobs.len());
    while r.remaining() > 0 {
        let status = match r.int()? {
            1 => EnqueueStatus::Created,
            2 => EnqueueStatus::Existing,
            3 => EnqueueStatus::Deduplicated,
            n => {
                return Err(Error::Protocol {
                    script: "enqueue",
                    detail: format!("unknown status {n}"),
                });
            }
        };
        out.push(Enqueued {
            id: r.string()?,
            status,
        });
    }
    Ok(out)
}

/// Reads claim.lua's `deadline, id, token, failures, payload, ...` tail.
fn read_leases(r: &mut Reply, claimed_ms: u64) -> Result<Vec<Lease>> {
    let deadline_ms = r.uint()?;
    let mut leases = Vec::with_capacity(r.remaining() / 4);
    while r.remaining() > 0 {
        leases.push(Lease {
            id: r.string()?,
            token: r.uint()?,
            failures: r.uint()?,
            payload: r.bytes()?,
            deadline_ms,
            claimed_ms,
        });
    }
    Ok(leases)
}

/// A job hash as field/value pairs.
type HashFields = Vec<(String, Vec<u8>)>;

/// A cheap `Clone` handle on one queue over an auto-reconnecting connection.
///
/// All handles made by cloning share one multiplexed connection.
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    keys: Keys,
    opts: QueueOptions,
    /// Opens the dedicated connections consumers block on (BLPOP must not
    /// share the multiplexed connection, and needs its timeout off).
    client: Client,
    /// The shared connection. A cluster connection can replace it later:
    /// every call goes through `conn()`, and every script is single-slot.
    conn: ConnectionManager,
    /// Single enqueues go to `coalesce_enqueues`, which sends those that
    /// arrive together in one script call.
    enqueues: mpsc::UnboundedSender<EnqueueRequest>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

impl Queue {
    /// Connects to `url` (`redis://host:port/db`) with default options, and
    /// runs the start-up self-check ([`Queue::self_check`]), which logs what
    /// the server's persistence settings let echomq promise.
    ///
    /// # Errors
    /// [`Error::InvalidQueueName`], a connection error ([`Error::Redis`]) if
    /// the server cannot be reached, [`Error::LayoutMismatch`], or
    /// [`Error::UnsafeServer`] for a server that may evict keys.
    pub async fn connect(url: &str, name: &str) -> Result<Queue> {
        Self::connect_with(url, name, QueueOptions::default()).await
    }

    /// Connects to `url` with `opts`.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn connect_with(url: &str, name: &str, opts: QueueOptions) -> Result<Queue> {
        Keys::new(&opts.prefix, name)?;
        Self::from_client(Client::open(url)?, name, opts).await
    }

    /// Builds a queue on an existing `redis::Client` (for TLS, auth or any
    /// connection settings the URL form does not cover).
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn from_client(client: Client, name: &str, opts: QueueOptions) -> Result<Queue> {
        let keys = Keys::new(&opts.prefix, name)?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(opts.response_timeout))
            .set_connection_timeout(Some(opts.connection_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_with_config(client.clone(), config).await?;
        Self::from_parts(client, conn, name, opts, keys).await
    }

    /// Builds a queue on an existing connection. `client` must point at the
    /// same server; consumers use it to open their blocking connection.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn from_connection(
        client: Client,
        conn: ConnectionManager,
        name: &str,
        opts: QueueOptions,
    ) -> Result<Queue> {
        let keys = Keys::new(&opts.prefix, name)?;
        Self::from_parts(client, conn, name, opts, keys).await
    }

    async fn from_parts(
        client: Client,
        conn: ConnectionManager,
        name: &str,
        opts: QueueOptions,
        keys: Keys,
    ) -> Result<Queue> {
        let (enqueues, requests) = mpsc::unbounded_channel();
        tokio::spawn(coalesce_enqueues(conn.clone(), keys.clone(), requests));
        let q = Queue {
            inner: Arc::new(Inner {
                name: name.to_owned(),
                keys,
                opts,
                client,
                conn,
                enqueues,
            }),
        };
        q.check_layout().await?;
        q.startup_check(q.inner.opts.allow_eviction).await?;
        Ok(q)
    }

    /// Stamps a new queue with our layout version; refuses a newer one.
    async fn check_layout(&self) -> Result<()> {
        let meta = &self.inner.keys.meta;
        let (found,): (Option<String>,) = redis::pipe()
            .hset_nx(meta, "v", LAYOUT_VERSION)
            .ignore()
            .hget(meta, "v")
            .query_async(&mut self.conn())
            .await?;
        let found = found.unwrap_or_default();
        match found.parse::<u32>() {
            Ok(v) if v <= LAYOUT_VERSION => Ok(()),
            _ => Err(Error::LayoutMismatch {
                queue: self.inner.name.clone(),
                found,
                supported: LAYOUT_VERSION,
            }),
        }
    }

    /// The queue name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub(crate) fn conn(&self) -> ConnectionManager {
        self.inner.conn.clone()
    }

    pub(crate) fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// Retention of completed jobs as the scripts take it (for
    /// `Queue::complete_with` in `effect.rs`).
    pub(crate) fn keep_completed_arg(&self) -> i64 {
        self.inner.opts.keep_completed.arg()
    }

    /// A dedicated connection with no response timeout, for blocking reads.
    pub(crate) async fn blocking_connection(&self) -> Result<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(self.inner.opts.connection_timeout));
        Ok(self
            .inner
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?)
    }

    fn encode<T: Serialize + ?Sized>(&self, payload: &T) -> Result<Vec<u8>> {
        let bytes = serde_json::to_vec(payload).map_err(Error::Encode)?;
        let limit = self.inner.opts.max_payload_bytes;
        if bytes.len() > limit {
            return Err(Error::PayloadTooLarge {
                size: bytes.len(),
                limit,
            });
        }
        Ok(bytes)
    }

    /// Enqueues a job and returns its id once the server has stored it (as
    /// durably as the server's persistence settings make any write: see the
    /// README's "Guarantees").
    ///
    /// # Errors
    /// [`Error::PayloadTooLarge`], [`Error::Encode`], or a server error. On a
    /// transient error ([`Error::is_transient`]) the job may or may not have
    /// been stored; retry with a caller-chosen id ([`EnqueueOptions::id`]) to
    /// make the retry safe.
    pub async fn enqueue<T: Serialize + ?Sized>(&self, payload: &T) -> Result<String> {
        Ok(self.enqueue_with(payload, &EnqueueOptions::default()).await?.id)
    }

    /// Enqueues a job with options (id, delay, priority, limits, dedup).
    ///
    /// # Errors
    /// As [`enqueue`](Self::enqueue), plus [`Error::InvalidId`] and
    /// [`Error::InvalidOption`] for bad options.
    pub async fn enqueue_with<T: Serialize + ?Sized>(&self, payload: &T, opts: &EnqueueOptions) -> Result<Enqueued> {
        opts.validate()?;
        let payload = self.encode(payload)?;
        let (reply, answer) = oneshot::channel();
        let request = EnqueueRequest {
            payload,
            opts: opts.clone(),
            reply,
        };
        if self.inner.enqueues.send(request).is_err() {
            return Err(gone());
        }
        answer.await.unwrap_or_else(|_| Err(gone()))
    }

    /// Enqueues many jobs with default options, a thousand per script call.
    /// Returns their ids in order.
    ///
    /// # Errors
    /// As [`enqueue`](Self::enqueue). Every payload is checked before
    /// anything is sent; if a later chunk fails, earlier chunks are stored.
    pub async fn enqueue_bulk<T: Serialize>(&self, payloads: &[T]) -> Result<Vec<String>> {
        let opts = EnqueueOptions::default();
        let encoded = payloads.iter().map(|p| self.encode(p)).collect::<Result<Vec<_>>>()?;
        let mut ids = Vec::with_capacity(payloads.len());
        for chunk in encoded.chunks(ENQUEUE_CHUNK) {
            let jobs: Vec<(&[u8], &EnqueueOptions)> = chunk.iter().map(|b| (b.as_slice(), &opts)).collect();
            ids.extend(self.enqueue_raw(&jobs).await?.into_iter().map(|e| e.id));
        }
        Ok(ids)
    }

    async fn enqueue_raw(&self, jobs: &[(&[u8], &EnqueueOptions)]) -> Result<Vec<Enqueued>> {
        enqueue_call(&mut self.conn(), self.keys(), jobs).await
    }

    /// Leases up to `max` ready jobs for `lease` (deadline = server time +
    /// lease). Promotes due delayed jobs first. Returns an empty vector
    /// when nothing is ready.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for `max == 0` or a zero lease; server errors.
    pub async fn claim(&self, max: usize, lease: Duration) -> Result<Vec<Lease>> {
        if max == 0 || max > MAX_BATCH {
            return Err(Error::InvalidOption {
                name: "claim batch size",
                reason: format!("must be between 1 and {MAX_BATCH}"),
            });
        }
        let lease_ms = millis("lease", lease)?;
        if lease_ms == 0 {
            return Err(Error::InvalidOption {
                name: "lease",
                reason: "must be at least 1 ms".into(),
            });
        }
        let k = self.keys();
        let mut inv = SCRIPTS.claim.prepare_invoke();
        inv.key(&k.pending).key(&k.active).key(&k.delayed).key(&k.wake);
        inv.arg(&k.base).arg(lease_ms).arg(max);
        #[cfg(echomq_faults)]
        inv.arg(crate::scripts::faults::client_now_ms());
        let v: Value = inv.invoke_async(&mut self.conn()).await?;
        let mut r = Reply::new("claim", v)?;
        let claimed_ms = r.uint()?;
        read_leases(&mut r, claimed_ms)
    }

    /// Maps a settling script's status: `Ok` for a move made or already
    /// made, the typed error for a missing job or a lost lease.
    fn owned(script: &'static str, lease: &Lease, status: i64) -> Result<Code> {
        match code(script, status)? {
            Code::NotFound => Err(Error::JobNotFound(lease.id.clone())),
            Code::LeaseLost => Err(Error::LeaseLost {
                id: lease.id.clone(),
                token: lease.token,
            }),
            c => Ok(c),
        }
    }

    pub(crate) fn settled(
        &self,
        script: &'static str,
        lease: &Lease,
        status: i64,
        server_ms: u64,
        outcome: Outcome,
    ) -> Result<Settled> {
        let outcome = match Self::owned(script, lease, status)? {
            Code::AlreadySettled => Outcome::AlreadySettled,
            _ => outcome,
        };
        Ok(Settled { outcome, server_ms })
    }

    /// Settles many leased jobs in one script call, each fenced by its own
    /// token exactly as the one-job calls are; the answer holds one result
    /// per item, in order. This is how a [`Consumer`](crate::Consumer)
    /// settles: whatever finished while the previous call was in flight
    /// goes in the next one. `max_attempts` applies to retries as in
    /// [`retry`](Self::retry).
    ///
    /// # Errors
    /// The outer error is a server or transport failure for the whole
    /// batch (safe to resend: applied items answer
    /// [`Outcome::AlreadySettled`]); inner errors are per item
    /// ([`Error::LeaseLost`], [`Error::JobNotFound`]).
    pub async fn settle_many(&self, items: &[(&Lease, &Settle)], max_attempts: u32) -> Result<Vec<Result<Settled>>> {
        Ok(self.settle_and_claim(items, max_attempts, 0, Duration::ZERO).await?.0)
    }

    /// [`settle_many`](Self::settle_many), then leases up to `claim` jobs
    /// for `lease` in the same script call (as [`claim`](Self::claim), but
    /// without promoting due delayed jobs first: on this hot path that is
    /// left to the reaper and to plain claims): a consumer refills the
    /// slots its finished jobs free without another round trip.
    ///
    /// # Errors
    /// As [`settle_many`](Self::settle_many) and [`claim`](Self::claim).
    pub async fn settle_and_claim(
        &self,
        items: &[(&Lease, &Settle)],
        max_attempts: u32,
        claim: usize,
        lease: Duration,
    ) -> Result<(Vec<Result<Settled>>, Vec<Lease>)> {
        if items.len() > MAX_BATCH || claim > MAX_BATCH {
            return Err(Error::InvalidOption {
                name: "settle batch size",
                reason: format!("at most {MAX_BATCH} items and {MAX_BATCH} claims"),
            });
        }
        let k = self.keys();
        let mut inv = SCRIPTS.settle.prepare_invoke();
        inv.key(&k.active)
            .key(&k.pending)
            .key(&k.delayed)
            .key(&k.completed)
            .key(&k.failed)
            .key(&k.wake);
        inv.arg(&k.base)
            .arg(self.inner.opts.keep_completed.arg())
            .arg(self.inner.opts.keep_failed.arg())
            .arg(max_attempts.max(1))
            .arg(items.len());
        for (lease, op) in items {
            let (code, delay, text) = match op {
                Settle::Complete => ("c", 0, ""),
                Settle::Retry { delay, error } => ("r", millis("retry delay", *delay)?, error.as_str()),
                Settle::Fail { reason } => ("f", 0, reason.as_str()),
                Settle::Release => ("l", 0, ""),
            };
            inv.arg(code).arg(&lease.id).arg(lease.token).arg(delay).arg(text);
        }
        if claim > 0 {
            inv.arg(millis("lease", lease)?.max(1)).arg(claim);
            #[cfg(echomq_faults)]
            inv.arg(crate::scripts::faults::client_now_ms());
        }
        let v: Value = inv.invoke_async(&mut self.conn()).await?;
        let mut r = Reply::new("settle", v)?;
        let now = r.uint()?;
        let mut out = Vec::with_capacity(items.len());
        for (lease, op) in items {
            let (status, due) = (r.int()?, r.uint()?);
            let outcome = match op {
                Settle::Complete => Outcome::Completed,
                Settle::Retry { .. } if status == 3 => Outcome::Failed,
                Settle::Retry { .. } => Outcome::Retrying {
                    due_ms: (due > 0).then_some(due),
                },
                Settle::Fail { .. } => Outcome::Failed,
                Settle::Release => Outcome::Released,
            };
            out.push(self.settled("settle", lease, status, now, outcome));
        }
        let leases = if claim > 0 {
            read_leases(&mut r, now)?
        } else {
            Vec::new()
        };
        Ok((out, leases))
    }

    /// Settles a leased job as completed.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the lease expired and was reaped or a newer
    /// claim owns the job (nothing changes); [`Error::JobNotFound`];
    /// server errors (safe to retry: a repeat answers
    /// [`Outcome::AlreadySettled`]).
    pub async fn complete(&self, lease: &Lease) -> Result<Settled> {
        let k = self.keys();
        let v: Value = SCRIPTS
            .complete
            .key(k.job(&lease.id))
            .key(&k.active)
            .key(&k.completed)
            .arg(&k.base)
            .arg(&lease.id)
            .arg(lease.token)
            .arg(self.inner.opts.keep_completed.arg())
            .invoke_async(&mut self.conn())
            .await?;
        let mut r = Reply::new("complete", v)?;
        let (status, now) = (r.int()?, r.uint()?);
        self.settled("complete", lease, status, now, Outcome::Completed)
    }

    /// Settles a leased job whose attempt failed: counts a failure and
    /// schedules the job again after `delay`, or fails it for good once its
    /// failures reach `max_attempts` (the job's own limit wins over this one).
    ///
    /// # Errors
    /// As [`complete`](Self::complete).
    pub async fn retry(&self, lease: &Lease, delay: Duration, error: &str, max_attempts: u32) -> Result<Settled> {
        let k = self.keys();
        let v: Value = SCRIPTS
            .retry
            .key(k.job(&lease.id))
            .key(&k.active)
            .key(&k.pending)
            .key(&k.delayed)
            .key(&k.failed)
            .key(&k.wake)
            .arg(&k.base)
            .arg(&lease.id)
            .arg(lease.token)
            .arg(millis("retry delay", delay)?)
            .arg(error)
            .arg(max_attempts.max(1))
            .arg(self.inner.opts.keep_failed.arg())
            .invoke_async(&mut self.conn())
            .await?;
        let mut r = Reply::new("retry", v)?;
        let (status, now) = (r.int()?, r.uint()?);
        let due = if r.remaining() > 0 { r.uint()? } else { 0 };
        let outcome = if status == 3 {
            Outcome::Failed
        } else {
            Outcome::Retrying {
                due_ms: (due > 0).then_some(due),
            }
        };
        self.settled("retry", lease, status, now, outcome)
    }

    /// Settles a leased job as failed for good, with `reason`.
    ///
    /// # Errors
    /// As [`complete`](Self::complete).
    pub async fn fail(&self, lease: &Lease, reason: &str) -> Result<Settled> {
        let k = self.keys();
        let v: Value = SCRIPTS
            .fail
            .key(k.job(&lease.id))
            .key(&k.active)
            .key(&k.failed)
            .arg(&k.base)
            .arg(&lease.id)
            .arg(lease.token)
            .arg(reason)
            .arg(self.inner.opts.keep_failed.arg())
            .invoke_async(&mut self.conn())
            .await?;
        let mut r = Reply::new("fail", v)?;
        let (status, now) = (r.int()?, r.uint()?);
        self.settled("fail", lease, status, now, Outcome::Failed)
    }

    /// Hands a leased job back unfinished: it is pending again at once and
    /// counts as neither a failure nor a stall.
    ///
    /// # Errors
    /// As [`complete`](Self::complete).
    pub async fn release(&self, lease: &Lease) -> Result<Settled> {
        let k = self.keys();
        let v: Value = SCRIPTS
            .release
            .key(k.job(&lease.id))
            .key(&k.active)
            .key(&k.pending)
            .key(&k.wake)
            .arg(&lease.id)
            .arg(lease.token)
            .invoke_async(&mut self.conn())
            .await?;
        let mut r = Reply::new("release", v)?;
        let (status, now) = (r.int()?, r.uint()?);
        self.settled("release", lease, status, now, Outcome::Released)
    }

    /// Renews a lease: the new deadline is server time + `lease`. Updates
    /// `lease.deadline_ms` and returns the new deadline.
    ///
    /// # Errors
    /// [`Error::LeaseLost`], [`Error::JobNotFound`], server errors.
    pub async fn extend(&self, lease: &mut Lease, duration: Duration) -> Result<u64> {
        let ms = millis("lease", duration)?;
        let k = self.keys();
        let mut inv = SCRIPTS.extend.prepare_invoke();
        inv.key(k.job(&lease.id))
            .key(&k.active)
            .arg(&lease.id)
            .arg(lease.token)
            .arg(ms);
        #[cfg(echomq_faults)]
        inv.arg(crate::scripts::faults::client_now_ms());
        let v: Value = inv.invoke_async(&mut self.conn()).await?;
        let mut r = Reply::new("extend", v)?;
        let (status, _now) = (r.int()?, r.uint()?);
        Self::owned("extend", lease, status)?;
        lease.deadline_ms = r.uint()?;
        Ok(lease.deadline_ms)
    }

    /// One reaper pass: returns up to `limit` expired leases to pending
    /// (counting a stall each; past `max_stalls` the job fails as
    /// "stalled") and promotes up to `limit` due delayed jobs.
    ///
    /// # Errors
    /// Server errors.
    pub async fn reap(&self, limit: usize, max_stalls: u32) -> Result<ReapReport> {
        #[cfg(echomq_faults)]
        if crate::scripts::faults::active("two-step-reaper") {
            return self.reap_in_two_steps(limit).await;
        }
        let k = self.keys();
        let v: Value = SCRIPTS
            .reap
            .key(&k.active)
            .key(&k.pending)
            .key(&k.delayed)
            .key(&k.failed)
            .key(&k.wake)
            .arg(&k.base)
            .arg(limit.clamp(1, MAX_BATCH))
            .arg(max_stalls)
            .arg(self.inner.opts.keep_failed.arg())
            .invoke_async(&mut self.conn())
            .await?;
        let mut r = Reply::new("reap", v)?;
        let mut report = ReapReport {
            server_ms: r.uint()?,
            promoted: r.uint()?,
            ..ReapReport::default()
        };
        while r.remaining() > 0 {
            let id = r.string()?;
            let outcome = r.int()?;
            let stalls = r.uint()?;
            if outcome == 3 {
                report.failed.push((id, stalls));
            } else {
                report.requeued.push((id, stalls));
            }
        }
        Ok(report)
    }

    /// Negative control: reads the expired leases in one round trip and
    /// moves them in others, so racing reapers and acks interleave.
    #[cfg(echomq_faults)]
    async fn reap_in_two_steps(&self, limit: usize) -> Result<ReapReport> {
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
            .await?;
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
                .await?;
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
                .await?;
            report.requeued.push((id, stalls));
        }
        Ok(report)
    }

    /// Reads a job's record.
    ///
    /// # Errors
    /// [`Error::InvalidId`], [`Error::JobNotFound`], server errors.
    pub async fn job(&self, id: &str) -> Result<JobInfo> {
        crate::keys::validate_id("job id", id)?;
        let k = self.keys();
        let (fields, active, delayed): (HashFields, Option<f64>, Option<f64>) = redis::pipe()
            .atomic()
            .hgetall(k.job(id))
            .zscore(&k.active, id)
            .zscore(&k.delayed, id)
            .query_async(&mut self.conn())
            .await?;
        if fields.is_empty() {
            return Err(Error::JobNotFound(id.to_owned()));
        }
        let mut info = JobInfo {
            id: id.to_owned(),
            state: JobState::Pending,
            attempts: 0,
            failures: 0,
            stalls: 0,
            payload: Vec::new(),
            last_error: None,
            created_ms: 0,
            finished_ms: None,
            deadline_ms: active.or(delayed).map(|s| s as u64),
        };
        let num = |v: &[u8]| {
            std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(0)
        };
        for (f, v) in fields {
            match f.as_str() {
                "p" => info.payload = v,
                "st" => {
                    let s = String::from_utf8_lossy(&v);
                    info.state = JobState::parse(&s).ok_or_else(|| Error::Protocol {
                        script: "job",
                        detail: format!("unknown state {s:?}"),
                    })?;
                }
                "a" => info.attempts = num(&v),
                "f" => info.failures = num(&v),
                "s" => info.stalls = num(&v),
                "err" => info.last_error = Some(String::from_utf8_lossy(&v).into_owned()),
                "ct" => info.created_ms = num(&v),
                "ft" => info.finished_ms = Some(num(&v)),
                _ => {}
            }
        }
        Ok(info)
    }

    /// Counts jobs per state, read in one atomic step.
    ///
    /// # Errors
    /// Server errors.
    pub async fn counts(&self) -> Result<Counts> {
        let k = self.keys();
        let (pending, delayed, active, completed, failed) = redis::pipe()
            .atomic()
            .zcard(&k.pending)
            .zcard(&k.delayed)
            .zcard(&k.active)
            .zcard(&k.completed)
            .zcard(&k.failed)
            .query_async(&mut self.conn())
            .await?;
        Ok(Counts {
            pending,
            delayed,
            active,
            completed,
            failed,
        })
    }

    /// The server's clock (ms since the Unix epoch), the time base of every
    /// deadline.
    ///
    /// # Errors
    /// Server errors.
    pub async fn server_time_ms(&self) -> Result<u64> {
        let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut self.conn()).await?;
        Ok(s * 1000 + us / 1000)
    }
}
