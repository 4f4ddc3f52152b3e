//! [`Relay`]: moves committed outbox rows into echomq, in batches, from any
//! number of processes at once.
//!
//! One batch is one Postgres transaction:
//!
//! 1. `SELECT … FOR UPDATE SKIP LOCKED` takes up to
//!    [`batch_size`](RelayOptions::batch_size) waiting rows, oldest first,
//!    that no other relay holds;
//! 2. each queue's rows are enqueued with one `enqueue_bulk_with`, every
//!    job under its row's job id (and, without a dedup id of the row's own,
//!    a redelivery guard marker);
//! 3. the rows echomq acknowledged (as durably as the queue handle asks)
//!    are deleted, and the transaction commits.
//!
//! A relay that dies anywhere in between leaves its rows in the table (its
//! transaction rolls back when Postgres sees the session end); the next
//! batch enqueues them again under the same ids, which echomq answers as
//! existing: one job per row.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::{EnqueueOptions, EnqueueStatus, Queue};
use sqlx::postgres::PgListener;
use sqlx::{PgPool, Row};
use tokio::sync::{Notify, watch};

use crate::error::{Error, Result};
use crate::options::{MAX_DELAY, Stored};

/// The Postgres channel the outbox's insert trigger notifies at commit.
pub const NOTIFY_CHANNEL: &str = "echomq_outbox";
/// Rows one batch takes by default.
pub const DEFAULT_BATCH_SIZE: usize = 500;
/// The most rows one batch may take.
pub const MAX_BATCH_SIZE: usize = 10_000;
/// How often an idle relay looks for rows when no notification came.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How long the redelivery guard's dedup marker stands by default.
pub const DEFAULT_REDELIVERY_GUARD: Duration = Duration::from_secs(3600);
/// How long one batch may take, end to end, by default.
pub const DEFAULT_BATCH_TIMEOUT: Duration = Duration::from_secs(30);
/// The wait after a batch that failed (or kept rows back) by default.
pub const DEFAULT_ERROR_BACKOFF: Duration = Duration::from_millis(500);
/// How often the `metrics` feature's backlog gauges are refreshed.
#[cfg(feature = "metrics")]
pub const BACKLOG_METRICS_INTERVAL: Duration = Duration::from_secs(5);

/// How a [`Relay`] works. Build with [`RelayOptions::new`] and chain setters;
/// values are checked by [`Relay::new`].
///
/// ```
/// use std::time::Duration;
/// let opts = echomq_outbox::RelayOptions::new()
///     .batch_size(1000)
///     .poll_interval(Duration::from_millis(250));
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct RelayOptions {
    batch_size: usize,
    poll_interval: Duration,
    listen: bool,
    redelivery_guard: Option<Duration>,
    batch_timeout: Duration,
    error_backoff: Duration,
    #[cfg(feature = "fault-injection")]
    faults: crate::faults::FaultHooks,
}

impl Default for RelayOptions {
    fn default() -> Self {
        RelayOptions {
            batch_size: DEFAULT_BATCH_SIZE,
            poll_interval: DEFAULT_POLL_INTERVAL,
            listen: true,
            redelivery_guard: Some(DEFAULT_REDELIVERY_GUARD),
            batch_timeout: DEFAULT_BATCH_TIMEOUT,
            error_backoff: DEFAULT_ERROR_BACKOFF,
            #[cfg(feature = "fault-injection")]
            faults: Default::default(),
        }
    }
}

impl RelayOptions {
    /// The defaults (each setter names its constant).
    pub fn new() -> Self {
        Self::default()
    }

    /// Rows per batch, 1 to [`MAX_BATCH_SIZE`] (default
    /// [`DEFAULT_BATCH_SIZE`]). Larger batches move more rows a second and
    /// hold their row locks longer.
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n;
        self
    }

    /// How long an idle relay waits for a notification before it looks
    /// anyway, 10 ms to 1 h (default [`DEFAULT_POLL_INTERVAL`]): the safety
    /// net for a notification lost while the listening connection was down,
    /// and the latency bound with [`listen(false)`](Self::listen).
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = d;
        self
    }

    /// Whether the relay `LISTEN`s on [`NOTIFY_CHANNEL`] (default true),
    /// which wakes it at each commit of outbox rows; without it, only the
    /// poll interval does. Off for a connection pooler in transaction
    /// mode, which cannot hold a listening session.
    pub fn listen(mut self, on: bool) -> Self {
        self.listen = on;
        self
    }

    /// How long the redelivery guard stands (default
    /// [`DEFAULT_REDELIVERY_GUARD`]; `None` for none; at most echomq's
    /// maximum delay). A row without a dedup id of its own is enqueued with
    /// a dedup marker `echomq-outbox:<job id>` standing this long, so a row
    /// enqueued again after its job finished *and* retention deleted the
    /// job's record still makes no second job. Without it (or after it),
    /// the bound is the job's record: a row relayed again once its record
    /// is gone makes a second job. One small key per job for this long.
    pub fn redelivery_guard(mut self, ttl: Option<Duration>) -> Self {
        self.redelivery_guard = ttl;
        self
    }

    /// How long one batch may take, 1 s to 1 h (default
    /// [`DEFAULT_BATCH_TIMEOUT`]). Past it the relay gives the batch up
    /// and Postgres ends a session idle in its transaction this long
    /// (`idle_in_transaction_session_timeout`), so a relay cut off from
    /// Postgres never holds rows from the others for longer.
    pub fn batch_timeout(mut self, d: Duration) -> Self {
        self.batch_timeout = d;
        self
    }

    /// The wait after a batch that failed or kept rows back (Valkey or
    /// Postgres unreachable), 1 ms to 1 min (default [`DEFAULT_ERROR_BACKOFF`]).
    pub fn error_backoff(mut self, d: Duration) -> Self {
        self.error_backoff = d;
        self
    }

    /// Test-only hooks (feature `fault-injection`).
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn faults(mut self, hooks: crate::faults::FaultHooks) -> Self {
        self.faults = hooks;
        self
    }

    fn check(&self) -> Result<()> {
        let bad = |name, reason: String| Err(Error::InvalidOption { name, reason });
        if !(1..=MAX_BATCH_SIZE).contains(&self.batch_size) {
            return bad(
                "batch_size",
                format!("{} is not within 1..={MAX_BATCH_SIZE}", self.batch_size),
            );
        }
        let within = |name, d: Duration, min: Duration, max: Duration| {
            if d < min || d > max {
                bad(name, format!("{d:?} is not within {min:?}..={max:?}"))
            } else {
                Ok(())
            }
        };
        within(
            "poll_interval",
            self.poll_interval,
            Duration::from_millis(10),
            Duration::from_secs(3600),
        )?;
        within(
            "batch_timeout",
            self.batch_timeout,
            Duration::from_secs(1),
            Duration::from_secs(3600),
        )?;
        within(
            "error_backoff",
            self.error_backoff,
            Duration::from_millis(1),
            Duration::from_secs(60),
        )?;
        if let Some(g) = self.redelivery_guard {
            within("redelivery_guard", g, Duration::from_millis(1), MAX_DELAY)?;
        }
        Ok(())
    }
}

/// What one batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BatchReport {
    /// Rows the batch took.
    pub rows: usize,
    /// Rows that made a new job (and were deleted).
    pub created: usize,
    /// Rows whose job already stood (an earlier relay enqueued it and died
    /// before its delete, or the row's dedup id is held), deleted too.
    pub existing: usize,
    /// Rows left for a later batch: echomq or its durability was not reachable.
    pub kept: usize,
    /// Rows set aside as failed: echomq refused their options
    /// ([`Outbox::failed`](crate::Outbox::failed) lists them).
    pub failed: usize,
}

/// Moves committed outbox rows into echomq; run it in the application's
/// worker process ([`spawn`](Self::spawn)) or on its own (the
/// `echomq-outbox-relay` binary, feature `cli`). Any number of relays may
/// run against one database at once.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, client: echomq::Client) -> echomq_outbox::Result<()> {
/// use echomq_outbox::{Relay, RelayOptions};
/// let relay = Relay::new(pool, client, RelayOptions::new())?.spawn();
/// // ... the application runs ...
/// relay.shutdown().await; // finishes the batch in flight
/// # Ok(()) }
/// ```
pub struct Relay {
    pool: PgPool,
    client: echomq::Client,
    opts: RelayOptions,
    /// Queue handles by name: the caller's ([`with_queue`](Self::with_queue),
    /// e.g. with a durability setting), else made on first use.
    queues: Mutex<HashMap<String, Queue>>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

/// A row the batch holds.
struct Taken {
    id: i64,
    queue: String,
    job_id: String,
    payload: serde_json::Value,
    options: std::result::Result<Stored, String>,
    delay: Duration,
    /// Since the insert, on Postgres's clock (for an expiry).
    age: Duration,
}

/// What the batch does with its rows, filled queue by queue.
#[derive(Default)]
struct Outcome {
    done: Vec<i64>,
    failed: Vec<(i64, String)>,
    report: BatchReport,
    /// The last transient error, returned when it kept every row back.
    transient: Option<Error>,
}

impl Outcome {
    fn keep(&mut self, n: usize, e: Error) {
        self.report.kept += n;
        self.transient = Some(e);
    }

    fn answered(&mut self, id: i64, status: EnqueueStatus) {
        self.done.push(id);
        match status {
            EnqueueStatus::Created => self.report.created += 1,
            _ => self.report.existing += 1,
        }
    }
}

const TAKE: &str = "SELECT id, queue, job_id, payload, options, \
       coalesce(greatest(0, ceil(extract(epoch FROM run_at - clock_timestamp()) * 1000)), 0)::bigint, \
       greatest(0, floor(extract(epoch FROM clock_timestamp() - created_at) * 1000))::bigint \
     FROM echomq_outbox WHERE failed_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED";

impl Relay {
    /// A relay reading `pool`'s outbox and enqueueing through `client`.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for an option out of range.
    pub fn new(pool: PgPool, client: echomq::Client, opts: RelayOptions) -> Result<Relay> {
        opts.check()?;
        Ok(Relay {
            pool,
            client,
            opts,
            queues: Mutex::new(HashMap::new()),
        })
    }

    /// Enqueues rows of `queue.name()` through this handle, with its
    /// [`QueueOptions`](echomq::QueueOptions): a queue whose handle asks
    /// for a [`Durability`](echomq::Durability) has its rows deleted only
    /// once the jobs are that durable. Other queues get a default handle.
    pub fn with_queue(self, queue: Queue) -> Self {
        if let Ok(mut m) = self.queues.lock() {
            m.insert(queue.name().to_owned(), queue);
        }
        self
    }

    async fn queue(&self, name: &str) -> Result<Queue> {
        if let Some(q) = self.queues.lock().ok().and_then(|m| m.get(name).cloned()) {
            return Ok(q);
        }
        let q = self.client.queue(name).await?;
        if let Ok(mut m) = self.queues.lock() {
            m.entry(name.to_owned()).or_insert_with(|| q.clone());
        }
        Ok(q)
    }

    /// Runs one batch: takes up to a batch of waiting rows, enqueues them,
    /// deletes the acknowledged ones.
    ///
    /// # Errors
    /// [`Error::Database`] when Postgres fails (the batch's rows stay),
    /// [`Error::Timeout`] past the batch timeout, [`Error::Queue`] when a
    /// transient echomq failure kept every row back.
    pub async fn run_once(&self) -> Result<BatchReport> {
        let limit = self.opts.batch_timeout;
        match tokio::time::timeout(limit, self.batch()).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout(limit)),
        }
    }

    async fn batch(&self) -> Result<BatchReport> {
        let mut tx = self.pool.begin().await?;
        // A relay cut off mid-batch holds its rows' locks; Postgres ends
        // its session after this, so the other relays take them over.
        let ms = self.opts.batch_timeout.as_millis();
        sqlx::query(&format!("SET LOCAL idle_in_transaction_session_timeout = {ms}"))
            .execute(&mut *tx)
            .await?;
        let rows = sqlx::query(TAKE)
            .bind(self.opts.batch_size as i64)
            .fetch_all(&mut *tx)
            .await?;
        if rows.is_empty() {
            tx.commit().await?;
            return Ok(BatchReport::default());
        }
        let taken = rows.iter().map(decode).collect::<Result<Vec<_>>>()?;
        #[cfg(feature = "fault-injection")]
        self.opts.faults.reached(crate::faults::FaultPoint::Locked).await;
        #[cfg(feature = "fault-injection")]
        if self.opts.faults.delete_before_enqueue {
            return self.delete_first(tx, &taken).await;
        }

        let mut out = Outcome {
            report: BatchReport {
                rows: taken.len(),
                ..BatchReport::default()
            },
            ..Outcome::default()
        };
        let mut by_queue: Vec<(&str, Vec<&Taken>)> = Vec::new();
        for t in &taken {
            match by_queue.iter_mut().find(|(q, _)| *q == t.queue) {
                Some((_, v)) => v.push(t),
                None => by_queue.push((&t.queue, vec![t])),
            }
        }
        for (queue, rows) in by_queue {
            self.enqueue_queue(queue, &rows, &mut out).await;
        }
        #[cfg(feature = "fault-injection")]
        self.opts.faults.reached(crate::faults::FaultPoint::AfterEnqueue).await;

        if !out.done.is_empty() {
            sqlx::query("DELETE FROM echomq_outbox WHERE id = ANY($1)")
                .bind(&out.done)
                .execute(&mut *tx)
                .await?;
        }
        if !out.failed.is_empty() {
            let (ids, errors): (Vec<i64>, Vec<String>) = out.failed.iter().cloned().unzip();
            sqlx::query(
                "UPDATE echomq_outbox SET failed_at = clock_timestamp(), last_error = f.error, attempts = attempts + 1 \
                 FROM unnest($1::bigint[], $2::text[]) AS f(id, error) WHERE echomq_outbox.id = f.id",
            )
            .bind(ids)
            .bind(errors)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        let report = out.report;
        if report.failed > 0 {
            tracing::error!(
                rows = report.failed,
                "outbox rows set aside as failed: echomq refused them"
            );
        }
        #[cfg(feature = "metrics")]
        metrics::counter!("echomq_outbox_relayed_total").increment((report.created + report.existing) as u64);
        match out.transient {
            Some(e) if report.kept == report.rows => Err(e),
            Some(e) => {
                tracing::warn!(kept = report.kept, error = %e, "outbox rows kept for a later batch");
                Ok(report)
            }
            None => Ok(report),
        }
    }

    /// Enqueues one queue's rows of the batch: all at once, and one by one
    /// when echomq refuses the lot, so one bad row sets aside only itself.
    async fn enqueue_queue(&self, name: &str, rows: &[&Taken], out: &mut Outcome) {
        let queue = match self.queue(name).await {
            Ok(q) => q,
            Err(e) if e.is_transient() => return out.keep(rows.len(), e),
            Err(e) => {
                let msg = e.to_string();
                out.report.failed += rows.len();
                out.failed.extend(rows.iter().map(|t| (t.id, msg.clone())));
                return;
            }
        };
        let mut jobs: Vec<(&serde_json::Value, EnqueueOptions)> = Vec::with_capacity(rows.len());
        let mut ids = Vec::with_capacity(rows.len());
        for t in rows {
            match self.options(t) {
                Ok(o) => {
                    jobs.push((&t.payload, o));
                    ids.push(t.id);
                }
                Err(msg) => {
                    out.report.failed += 1;
                    out.failed.push((t.id, msg));
                }
            }
        }
        if jobs.is_empty() {
            return;
        }
        match queue.enqueue_bulk_with(&jobs).await {
            Ok(answers) => {
                for (a, id) in answers.iter().zip(ids) {
                    out.answered(id, a.status);
                }
            }
            Err(e) if e.is_transient() => out.keep(ids.len(), e.into()),
            Err(e) => {
                tracing::warn!(queue = name, error = %e, "echomq refused a batch; enqueueing its rows one by one");
                for ((payload, o), id) in jobs.iter().zip(ids) {
                    match queue.enqueue_with(payload, o).await {
                        Ok(a) => out.answered(id, a.status),
                        Err(e) if e.is_transient() => out.keep(1, e.into()),
                        Err(e) => {
                            out.report.failed += 1;
                            out.failed.push((id, e.to_string()));
                        }
                    }
                }
            }
        }
    }

    fn options(&self, t: &Taken) -> std::result::Result<EnqueueOptions, String> {
        let stored = t.options.as_ref().map_err(Clone::clone)?;
        stored
            .enqueue_options(&t.job_id, t.delay, t.age, self.opts.redelivery_guard)
            .map_err(|e| e.to_string())
    }

    /// The negative control: the rows deleted and committed before they are
    /// enqueued, so a relay killed in between loses them.
    #[cfg(feature = "fault-injection")]
    async fn delete_first(
        &self,
        mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
        taken: &[Taken],
    ) -> Result<BatchReport> {
        let ids: Vec<i64> = taken.iter().map(|t| t.id).collect();
        sqlx::query("DELETE FROM echomq_outbox WHERE id = ANY($1)")
            .bind(&ids)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.opts.faults.reached(crate::faults::FaultPoint::AfterDelete).await;
        let mut report = BatchReport {
            rows: taken.len(),
            ..BatchReport::default()
        };
        for t in taken {
            let o = self.options(t).map_err(|reason| Error::InvalidOption {
                name: "options",
                reason,
            })?;
            let q = self.queue(&t.queue).await?;
            q.enqueue_with(&t.payload, &o).await?;
            report.created += 1;
        }
        Ok(report)
    }

    /// Runs batches until `shutdown` resolves: back to back while full
    /// batches come, else waiting for a notification (see
    /// [`RelayOptions::listen`]) or the poll interval. A failed batch is
    /// logged and retried after the error backoff; the batch in flight when
    /// `shutdown` resolves is finished first.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        let wake = Arc::new(Notify::new());
        let (stop_tx, stop_rx) = watch::channel(false);
        let listener = self.opts.listen.then(|| {
            tokio::spawn(listen(
                self.pool.clone(),
                wake.clone(),
                stop_rx,
                self.opts.error_backoff,
            ))
        });
        tokio::pin!(shutdown);
        #[cfg(feature = "metrics")]
        let mut gauges_at: Option<tokio::time::Instant> = None;
        loop {
            #[cfg(feature = "metrics")]
            if gauges_at.is_none_or(|t| t.elapsed() >= BACKLOG_METRICS_INTERVAL) {
                gauges_at = Some(tokio::time::Instant::now());
                self.record_backlog().await;
            }
            // (how long to wait, whether a notification ends the wait)
            let (wait, idle) = match self.run_once().await {
                Ok(r) if r.kept > 0 => (self.opts.error_backoff, false),
                Ok(r) if r.rows == self.opts.batch_size => (Duration::ZERO, false),
                Ok(_) => (self.opts.poll_interval, true),
                Err(e) => {
                    tracing::warn!(error = %e, "outbox relay batch failed; retrying");
                    (self.opts.error_backoff, false)
                }
            };
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                () = wake.notified(), if idle => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
        let _ = stop_tx.send(true);
        if let Some(task) = listener {
            let _ = task.await;
        }
    }

    #[cfg(feature = "metrics")]
    async fn record_backlog(&self) {
        match crate::Outbox::new().backlog(&self.pool).await {
            Ok(b) => {
                metrics::gauge!("echomq_outbox_backlog_rows").set(b.rows as f64);
                metrics::gauge!("echomq_outbox_oldest_age_seconds").set(b.oldest_age.as_secs_f64());
                metrics::gauge!("echomq_outbox_failed_rows").set(b.failed as f64);
            }
            Err(e) => tracing::debug!(error = %e, "could not read the outbox backlog"),
        }
    }

    /// Runs the relay in a task of its own until
    /// [`RelayHandle::shutdown`].
    pub fn spawn(self) -> RelayHandle {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            self.run(async move {
                let _ = rx.await;
            })
            .await;
        });
        RelayHandle { stop: Some(tx), task }
    }
}

/// A relay running in a task ([`Relay::spawn`]).
#[derive(Debug)]
pub struct RelayHandle {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl RelayHandle {
    /// Stops the relay after the batch in flight, and waits for it.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Err(e) = (&mut self.task).await {
            tracing::error!(error = %e, "the outbox relay task ended abnormally");
        }
    }
}

fn decode(row: &sqlx::postgres::PgRow) -> Result<Taken> {
    let options: sqlx::types::Json<serde_json::Value> = row.try_get(4)?;
    let delay_ms: i64 = row.try_get(5)?;
    let age_ms: i64 = row.try_get(6)?;
    let sqlx::types::Json(payload) = row.try_get(3)?;
    Ok(Taken {
        id: row.try_get(0)?,
        queue: row.try_get(1)?,
        job_id: row.try_get(2)?,
        payload,
        options: serde_json::from_value(options.0).map_err(|e| format!("unreadable options column: {e}")),
        delay: Duration::from_millis(delay_ms.max(0) as u64),
        age: Duration::from_millis(age_ms.max(0) as u64),
    })
}

/// Holds a `LISTEN` on [`NOTIFY_CHANNEL`] and wakes the relay at each
/// notification, and after each reconnect (rows may have committed while it
/// was not listening).
async fn listen(pool: PgPool, wake: Arc<Notify>, mut stop: watch::Receiver<bool>, backoff: Duration) {
    loop {
        let listening = async {
            let mut l = PgListener::connect_with(&pool).await?;
            l.listen(NOTIFY_CHANNEL).await?;
            Ok::<_, sqlx::Error>(l)
        };
        let mut l = tokio::select! {
            _ = stop.changed() => return,
            r = listening => match r {
                Ok(l) => l,
                Err(e) => {
                    tracing::debug!(error = %e, "outbox relay cannot listen yet; polling meanwhile");
                    tokio::select! {
                        _ = stop.changed() => return,
                        () = tokio::time::sleep(backoff) => continue,
                    }
                }
            },
        };
        wake.notify_one();
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                r = l.try_recv() => match r {
                    Ok(Some(_)) => wake.notify_one(),
                    // The connection dropped; the next call reconnects and listens again.
                    Ok(None) => wake.notify_one(),
                    Err(e) => {
                        tracing::debug!(error = %e, "outbox relay lost its listening connection");
                        break;
                    }
                },
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(backoff) => {}
        }
    }
}
