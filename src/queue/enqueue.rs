//! Enqueueing: one job, many, and the coalescer that sends concurrent
//! single enqueues together.

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::{ENQUEUE_CHUNK, Queue};
use crate::conn::Conn;
use crate::durability::{Durability, Shortfall};
use crate::error::{Error, Result};
use crate::job::{EnqueueOptions, Enqueued, JobKind};
use crate::keys::Keys;
use crate::store;
use crate::store::enqueue::NewJob;

/// Enqueue calls one queue keeps in flight while coalescing: few enough
/// that concurrent enqueues pile up into batches, enough to hide a round trip.
const CALLS_IN_FLIGHT: usize = 4;

/// Payload bytes past which the coalescer sends what it has, so one call
/// stays well inside the response timeout.
const BATCH_BYTES: usize = 1 << 20;

/// One `enqueue_with` waiting for the coalescer.
pub(super) struct Request {
    job: NewJob,
    reply: oneshot::Sender<Result<Enqueued>>,
}

/// Sends single enqueues: a lone one at once, and those that arrive while
/// earlier calls are in flight together in one script call, so many
/// concurrent producers (web handlers) cost the server a fraction of a call
/// each. Each caller still gets its own answer only after the server has
/// stored its job. Ends when every `Queue` handle is dropped.
pub(super) async fn coalesce(
    conn: Conn,
    keys: Keys,
    durability: Durability,
    mut requests: mpsc::UnboundedReceiver<Request>,
) {
    let calls = Arc::new(Semaphore::new(CALLS_IN_FLIGHT));
    while let Some(first) = requests.recv().await {
        let Ok(call) = calls.clone().acquire_owned().await else {
            return;
        };
        let mut bytes = first.job.payload.len();
        let mut batch = vec![first];
        while batch.len() < ENQUEUE_CHUNK && bytes < BATCH_BYTES {
            match requests.try_recv() {
                Ok(r) => {
                    bytes += r.job.payload.len();
                    batch.push(r);
                }
                Err(_) => break,
            }
        }
        let (mut conn, keys) = (conn.clone(), keys.clone());
        tokio::spawn(async move {
            let jobs: Vec<&NewJob> = batch.iter().map(|r| &r.job).collect();
            let result = store::enqueue::run(&mut conn, &keys, &jobs, None, durability).await;
            drop(jobs);
            // Stored, and as durable as the queue asks? (Each caller hears
            // about its own job.)
            match result {
                Ok((out, Ok(shortfall))) if out.len() == batch.len() => {
                    for (request, answer) in batch.into_iter().zip(out) {
                        let _ = request.reply.send(match shortfall {
                            None => Ok(answer),
                            Some(s) => Err(not_durable(std::slice::from_ref(&answer), s)),
                        });
                    }
                }
                Ok((out, Ok(_))) => {
                    let detail = format!("{} answers for {} jobs", out.len(), batch.len());
                    for request in batch {
                        let _ = request.reply.send(Err(Error::Protocol {
                            script: "enqueue",
                            detail: detail.clone(),
                        }));
                    }
                }
                Err(e) | Ok((_, Err(e))) => {
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

/// [`Error::NotDurable`] for `stored` jobs whose confirmation fell short.
fn not_durable(stored: &[Enqueued], Shortfall { acked, wanted }: Shortfall) -> Error {
    Error::NotDurable {
        ids: stored.iter().map(|e| e.id.clone()).collect(),
        acked,
        wanted,
    }
}

/// The traceparent jobs of this enqueue call inherit when their options
/// give none: with feature `otel`, the current span's OpenTelemetry context
/// (see [`crate::otel`]); otherwise none. Looked up once per call, in the
/// caller's span (an `async fn` body runs where the caller polls it).
fn ambient_traceparent() -> Option<String> {
    #[cfg(feature = "otel")]
    return crate::otel::current_traceparent();
    #[cfg(not(feature = "otel"))]
    None
}

impl Queue {
    /// The one path every enqueue takes: checks and encodes each job
    /// against this queue's options, every job before anything is sent.
    /// `kind` (a [`JobKind`]'s) overrides the options' kind; a job whose
    /// options name no traceparent carries the caller's (looked up once).
    pub(crate) fn prepare<'a, T: Serialize + ?Sized + 'a>(
        &self,
        jobs: impl IntoIterator<Item = (&'a T, &'a EnqueueOptions)>,
        kind: Option<&'static str>,
    ) -> Result<Vec<NewJob>> {
        if let Some(k) = kind {
            crate::validate::kind(k)?;
        }
        let mut ambient: Option<Option<String>> = None;
        let jobs = jobs.into_iter();
        let mut out = Vec::with_capacity(jobs.size_hint().0);
        for (payload, opts) in jobs {
            opts.validate()?;
            let traceparent = match &opts.traceparent {
                Some(t) => Some(t.clone()),
                None => ambient.get_or_insert_with(ambient_traceparent).clone(),
            };
            out.push(NewJob {
                payload: self.encode(payload)?,
                id: opts.id.clone(),
                priority: opts.priority,
                when: opts.when()?,
                limits: opts.limits(&self.options().limits),
                dedup: opts.dedup.clone(),
                replace: opts.replace_waiting,
                lane: opts.lane.clone(),
                kind: kind.map(str::to_owned).or_else(|| opts.kind.clone()),
                traceparent,
                expires: opts.expires()?,
                sequence: opts.sequence.clone(),
            });
        }
        Ok(out)
    }

    /// Sends one prepared job through the coalescer (see [`coalesce`]).
    async fn send_one(&self, mut jobs: Vec<NewJob>) -> Result<Enqueued> {
        let Some(job) = jobs.pop() else {
            return Err(gone());
        };
        let (reply, answer) = oneshot::channel();
        if self.inner.enqueues.send(Request { job, reply }).is_err() {
            return Err(gone());
        }
        answer.await.unwrap_or_else(|_| Err(gone()))
    }

    /// Prepares and sends many jobs, a chunk per script call (the bulk
    /// enqueues, and a partitioned queue's per partition).
    pub(crate) async fn enqueue_all<'a, T: Serialize + ?Sized + 'a>(
        &self,
        jobs: impl IntoIterator<Item = (&'a T, &'a EnqueueOptions)>,
        kind: Option<&'static str>,
    ) -> Result<Vec<Enqueued>> {
        let encoded = self.prepare(jobs, kind)?;
        self.send_bulk(&encoded, None).await
    }

    /// Enqueues a job and returns its id once the server has stored it (as
    /// durably as the server's persistence settings make any write: see the
    /// guide's [guarantees](crate::guide::guarantees)).
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// let id = queue.enqueue(&serde_json::json!({"to": "ada@example.com"})).await?;
    /// # let _ = id; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::PayloadTooLarge`], [`Error::Encode`], or a server error. On a
    /// transient error ([`Error::is_transient`]) the job may or may not have
    /// been stored; retry with a caller-chosen id ([`EnqueueOptions::id`]) to
    /// make the retry safe.
    pub async fn enqueue<T: Serialize + ?Sized>(&self, payload: &T) -> Result<String> {
        Ok(self.enqueue_with(payload, &EnqueueOptions::default()).await?.id)
    }

    /// Enqueues a job with options (id, delay, priority, limits, dedup,
    /// debounce).
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use echomq::{EnqueueOptions, EnqueueStatus};
    /// let opts = EnqueueOptions::new().id("order-42").max_attempts(5);
    /// let first = queue.enqueue_with(&"ship it", &opts).await?;
    /// let again = queue.enqueue_with(&"ship it", &opts).await?;
    /// assert_eq!(again.status, EnqueueStatus::Existing);
    /// # let _ = first; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`enqueue`](Self::enqueue), plus [`Error::InvalidId`] and
    /// [`Error::InvalidOption`] for bad options.
    pub async fn enqueue_with<T: Serialize + ?Sized>(&self, payload: &T, opts: &EnqueueOptions) -> Result<Enqueued> {
        self.send_one(self.prepare([(payload, opts)], None)?).await
    }

    /// Enqueues many jobs with default options, a thousand per script call.
    /// Returns their ids in order.
    ///
    /// # Errors
    /// As [`enqueue`](Self::enqueue). Every payload is checked before
    /// anything is sent; if a later chunk fails, earlier chunks are stored.
    pub async fn enqueue_bulk<T: Serialize>(&self, payloads: &[T]) -> Result<Vec<String>> {
        let opts = EnqueueOptions::default();
        let done = self.enqueue_all(payloads.iter().map(|p| (p, &opts)), None).await?;
        Ok(done.into_iter().map(|e| e.id).collect())
    }

    /// Enqueues many jobs, each with its own options (id, delay, priority,
    /// limits, dedup, debounce), a thousand per script call: each call is
    /// atomic (all of its jobs are stored, or none), and the answers come
    /// in order, one per job. Jobs are taken in order, so a later job with
    /// the dedup id of an earlier one in the same call is deduplicated
    /// against it, or replaces its payload with
    /// [`replace_waiting`](EnqueueOptions::replace_waiting).
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use echomq::EnqueueOptions;
    /// let jobs = [
    ///     ("a", EnqueueOptions::new().id("invoice-1")),
    ///     ("b", EnqueueOptions::new().id("invoice-2").priority(5)),
    /// ];
    /// let answers = queue.enqueue_bulk_with(&jobs).await?;
    /// # let _ = answers; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`enqueue_with`](Self::enqueue_with). Every job is checked
    /// before anything is sent; if a later chunk fails, earlier chunks are
    /// stored.
    pub async fn enqueue_bulk_with<T: Serialize>(&self, jobs: &[(T, EnqueueOptions)]) -> Result<Vec<Enqueued>> {
        self.enqueue_all(jobs.iter().map(|(p, o)| (p, o)), None).await
    }

    /// Enqueues a typed job, recording its kind ([`JobKind::KIND`]) so a
    /// router ([`Kinds`](crate::kinds::Kinds)) runs its kind's handler.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct SendEmail { to: String }
    /// impl echomq::JobKind for SendEmail {
    ///     const KIND: &'static str = "send_email";
    /// }
    ///
    /// let id = queue.enqueue_job(&SendEmail { to: "ada@example.com".into() }).await?;
    /// assert_eq!(queue.job(&id).await?.kind.as_deref(), Some("send_email"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`enqueue`](Self::enqueue), plus [`Error::InvalidId`] for a
    /// `KIND` that is not a valid kind.
    pub async fn enqueue_job<J: JobKind>(&self, job: &J) -> Result<String> {
        Ok(self.enqueue_job_with(job, &EnqueueOptions::default()).await?.id)
    }

    /// Enqueues a typed job with options; its kind is `J::KIND`, whatever
    /// kind `opts` names.
    ///
    /// # Errors
    /// As [`enqueue_with`](Self::enqueue_with).
    pub async fn enqueue_job_with<J: JobKind>(&self, job: &J, opts: &EnqueueOptions) -> Result<Enqueued> {
        self.send_one(self.prepare([(job, opts)], Some(J::KIND))?).await
    }

    /// Enqueues many typed jobs of one kind, as
    /// [`enqueue_bulk`](Self::enqueue_bulk) does, recording their kind.
    ///
    /// # Errors
    /// As [`enqueue_bulk`](Self::enqueue_bulk).
    pub async fn enqueue_jobs<J: JobKind>(&self, jobs: &[J]) -> Result<Vec<String>> {
        let opts = EnqueueOptions::default();
        let done = self.enqueue_all(jobs.iter().map(|j| (j, &opts)), Some(J::KIND)).await?;
        Ok(done.into_iter().map(|e| e.id).collect())
    }

    /// Enqueues many typed jobs of one kind, each with its own options, as
    /// [`enqueue_bulk_with`](Self::enqueue_bulk_with) does; each job's kind
    /// is `J::KIND`. (Jobs of several kinds in one atomic call: give each
    /// its [`EnqueueOptions::kind`] and use `enqueue_bulk_with` with
    /// payloads as `serde_json::Value`.)
    ///
    /// # Errors
    /// As [`enqueue_bulk_with`](Self::enqueue_bulk_with).
    pub async fn enqueue_jobs_with<J: JobKind>(&self, jobs: &[(J, EnqueueOptions)]) -> Result<Vec<Enqueued>> {
        self.enqueue_all(jobs.iter().map(|(j, o)| (j, o)), Some(J::KIND)).await
    }

    /// Sends encoded jobs a chunk per script call, as members of open
    /// batch `batch` if given (`src/batch.rs`).
    pub(crate) async fn send_bulk(&self, encoded: &[NewJob], batch: Option<&str>) -> Result<Vec<Enqueued>> {
        let mut out = Vec::with_capacity(encoded.len());
        let mut shortfall = None;
        for chunk in encoded.chunks(ENQUEUE_CHUNK) {
            let jobs: Vec<&NewJob> = chunk.iter().collect();
            // Each chunk's confirmation rides with it: an earlier chunk's
            // writes may have gone over a connection since replaced.
            let (stored, confirmed) =
                store::enqueue::run(&mut self.conn(), self.keys(), &jobs, batch, self.options().durability).await?;
            out.extend(stored);
            if let Some(s) = confirmed? {
                shortfall.get_or_insert(s);
            }
        }
        // Every chunk is stored; a shortfall of one names them all.
        match shortfall {
            None => Ok(out),
            Some(s) => Err(not_durable(&out, s)),
        }
    }
}
