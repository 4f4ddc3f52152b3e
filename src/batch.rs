//! Batches: a group of jobs of one queue, added in one or several calls,
//! whose end enqueues callback jobs.
//!
//! [`Queue::open_batch`] opens a batch with its callbacks; [`Batch::add`]
//! (and its variants) enqueue members into it, from any process, until
//! [`Batch::close`]. Each member counts once, at its first end
//! (completed, failed for good, cancelled, expired or removed). A callback
//! is an ordinary job of the same queue, with the payload and kind you
//! gave it and the id `BATCH_ID:success`, `BATCH_ID:complete` or
//! `BATCH_ID:death`:
//!
//! - **on success**: the batch is closed and every member completed;
//! - **on complete**: the batch is closed and every member ended, however;
//! - **on death**: a member failed for good (the first one only).
//!
//! The script that counts the last member (or the close, when the members
//! had all ended by then, as in an empty batch) enqueues the callbacks in
//! the same atomic call, so each is enqueued exactly once, and like every
//! job runs at least once. Route callbacks to their handlers with a kind
//! ([`Callback::job`], [`Callback::kind`]). The guide's
//! [batches chapter](crate::guide::batches) has a worked example.
//!
//! ```no_run
//! # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
//! use echomq::batch::{BatchOptions, Callback};
//! use serde_json::json;
//!
//! let batch = queue
//!     .open_batch(&BatchOptions::new().id("import-7").on_success(Callback::new(&json!({"import": 7}))?.kind("import-done")))
//!     .await?;
//! batch.add(&[json!({"row": 1}), json!({"row": 2})]).await?;
//! batch.add(&[json!({"row": 3})]).await?;
//! batch.close().await?;
//! let status = batch.status().await?;
//! println!("{} of {} ended", status.ended(), status.total);
//! # Ok(()) }
//! ```
//!
//! The batch's record and its callbacks are on the queue that opened it;
//! its members may be on other queues too ([`Batch::on`]): such a member
//! is counted in by the add, made on its queue by message, and its end
//! comes back by message, so a batch may span a Cluster's masters. Every
//! process that settles its members must be of echomq 0.3 or later: an
//! older one does not count the members it settles (the sweep does, later).

use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::job::{EnqueueOptions, EnqueueStatus, Enqueued, JobKind};
use crate::queue::Queue;
use crate::store;
use crate::store::batch_open::NewCallback;
use crate::validate;

/// How long a batch's record stays after its end unless
/// [`BatchOptions::keep`] says otherwise: a day.
pub const DEFAULT_KEEP: Duration = Duration::from_secs(86_400);

/// The longest [`BatchOptions::keep`]: a year.
pub const MAX_KEEP: Duration = Duration::from_secs(86_400 * 366);

/// The suffix of the longest callback id (`BATCH_ID:complete`), which a
/// batch id leaves room for within [`MAX_ID_BYTES`](crate::keys::MAX_ID_BYTES).
const LONGEST_SUFFIX: &str = ":complete";

/// A callback job: its payload and, to route it, its kind.
#[derive(Debug, Clone)]
pub struct Callback {
    payload: serde_json::Value,
    kind: Option<String>,
}

impl Callback {
    /// A callback job with `payload` and no kind.
    ///
    /// # Errors
    /// [`Error::Encode`] when the payload does not encode as JSON.
    pub fn new<T: Serialize + ?Sized>(payload: &T) -> Result<Callback> {
        Ok(Callback {
            payload: serde_json::to_value(payload).map_err(Error::Encode)?,
            kind: None,
        })
    }

    /// A callback job that is `job`, of its kind `J::KIND`.
    ///
    /// # Errors
    /// As [`Callback::new`].
    pub fn job<J: JobKind>(job: &J) -> Result<Callback> {
        Ok(Callback::new(job)?.kind(J::KIND))
    }

    /// Gives the callback job a kind (checked when the batch opens).
    #[must_use]
    pub fn kind(mut self, kind: impl Into<String>) -> Callback {
        self.kind = Some(kind.into());
        self
    }
}

/// How to open a batch: its id, how long its record stays after its end,
/// and its callbacks.
#[derive(Debug, Clone)]
pub struct BatchOptions {
    id: Option<String>,
    keep: Duration,
    success: Option<Callback>,
    complete: Option<Callback>,
    death: Option<Callback>,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            id: None,
            keep: DEFAULT_KEEP,
            success: None,
            complete: None,
            death: None,
        }
    }
}

impl BatchOptions {
    /// No id (the queue mints one), kept a day after its end, no callbacks.
    pub fn new() -> BatchOptions {
        BatchOptions::default()
    }

    /// The batch's id, instead of a minted one: a valid job id at most
    /// [`MAX_ID_BYTES`](crate::keys::MAX_ID_BYTES) − 9 bytes long (its
    /// callbacks' ids add `:complete` at most).
    #[must_use]
    pub fn id(mut self, id: impl Into<String>) -> BatchOptions {
        self.id = Some(id.into());
        self
    }

    /// How long the batch's record (its counts, for [`Batch::status`])
    /// stays after its end: [`DEFAULT_KEEP`] unless set, at most
    /// [`MAX_KEEP`]; zero keeps it until the queue is obliterated.
    #[must_use]
    pub fn keep(mut self, keep: Duration) -> BatchOptions {
        self.keep = keep;
        self
    }

    /// The job enqueued when the batch is closed and every member completed.
    #[must_use]
    pub fn on_success(mut self, callback: Callback) -> BatchOptions {
        self.success = Some(callback);
        self
    }

    /// The job enqueued when the batch is closed and every member ended
    /// (completed or not).
    #[must_use]
    pub fn on_complete(mut self, callback: Callback) -> BatchOptions {
        self.complete = Some(callback);
        self
    }

    /// The job enqueued when the first member fails for good (its retry
    /// budget spent, a fatal error, or a reap past its stall budget), even
    /// before the batch is closed.
    #[must_use]
    pub fn on_death(mut self, callback: Callback) -> BatchOptions {
        self.death = Some(callback);
        self
    }
}

/// A batch's counts, read at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchStatus {
    /// The batch.
    pub id: String,
    /// Members added so far.
    pub total: u64,
    /// Members that completed.
    pub completed: u64,
    /// Members that failed for good.
    pub failed: u64,
    /// Members that ended otherwise: cancelled, expired or removed.
    pub other: u64,
    /// When it opened, server ms.
    pub created_at: u64,
    /// When it was closed, server ms; `None` while open.
    pub closed_at: Option<u64>,
    /// When it ended (closed, and every member ended), server ms.
    pub ended_at: Option<u64>,
    /// When its success callback was enqueued, if it was.
    pub success_at: Option<u64>,
    /// When its complete callback was enqueued, if it was.
    pub complete_at: Option<u64>,
    /// When its death callback was enqueued, if it was.
    pub death_at: Option<u64>,
}

impl BatchStatus {
    /// Members that ended, however.
    pub fn ended(&self) -> u64 {
        self.completed + self.failed + self.other
    }

    /// Members not ended yet.
    pub fn pending(&self) -> u64 {
        self.total.saturating_sub(self.ended())
    }
}

/// A batch of a queue: add members, close it, read its counts. Cheap to
/// clone; [`Queue::batch`] makes one for a batch another process opened,
/// [`Batch::on`] one whose adds put members on another queue.
#[derive(Debug, Clone)]
pub struct Batch {
    queue: Queue,
    id: String,
    /// Where `add` puts members when it is not `queue`.
    members: Option<Queue>,
}

/// Checks a batch id: a valid id that leaves room for its callbacks' ids.
fn check_id(id: &str) -> Result<()> {
    validate::id("batch id", id)?;
    if id.len() + LONGEST_SUFFIX.len() > validate::MAX_ID_BYTES {
        return Err(Error::InvalidId {
            what: "batch id",
            value: id.chars().take(64).collect(),
            reason: "must be at most 247 bytes (its callbacks' ids add ':complete')",
        });
    }
    Ok(())
}

impl Queue {
    /// Opens a batch on this queue with `opts`' id and callbacks; members
    /// join it through [`Batch::add`] until [`Batch::close`].
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad batch id or callback kind,
    /// [`Error::InvalidOption`] for a keep time past [`MAX_KEEP`],
    /// [`Error::PayloadTooLarge`] for a callback payload past the queue's
    /// limit, [`Error::BatchExists`] when the id is taken (nothing written),
    /// [`Error::NotDurable`] when opened on the primary but confirmed by
    /// fewer replicas than the queue's [`Durability`](crate::Durability)
    /// asks (opening again with the id it names answers `NotDurable` again
    /// until a replica holds the first open, then `BatchExists`), or a
    /// server error.
    pub async fn open_batch(&self, opts: &BatchOptions) -> Result<Batch> {
        if let Some(id) = &opts.id {
            check_id(id)?;
        }
        let keep = validate::duration("BatchOptions::keep", opts.keep, Duration::ZERO, MAX_KEEP)?;
        let mut encoded: [Option<(Vec<u8>, Option<&str>)>; 3] = [None, None, None];
        for (slot, cb) in encoded.iter_mut().zip([&opts.success, &opts.complete, &opts.death]) {
            if let Some(cb) = cb {
                if let Some(kind) = &cb.kind {
                    validate::kind(kind)?;
                }
                *slot = Some((self.encode(&cb.payload)?, cb.kind.as_deref()));
            }
        }
        let callbacks = encoded
            .each_ref()
            .map(|e| e.as_ref().map(|(payload, kind)| NewCallback { payload, kind: *kind }));
        let keep_ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX);
        let durability = self.options().durability;
        let id = store::batch_open::run(
            &mut self.conn(),
            self.keys(),
            opts.id.as_deref(),
            keep_ms,
            callbacks,
            durability,
        )
        .await?;
        Ok(Batch {
            queue: self.clone(),
            id,
            members: None,
        })
    }

    /// A handle on batch `id` of this queue (opened here or by another
    /// process); no server call until it is used.
    ///
    /// # Errors
    /// [`Error::InvalidId`] for an id no batch can have.
    pub fn batch(&self, id: &str) -> Result<Batch> {
        check_id(id)?;
        Ok(Batch {
            queue: self.clone(),
            id: id.to_owned(),
            members: None,
        })
    }
}

impl Batch {
    /// The batch's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The queue it belongs to: its record, its callbacks.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// The same batch, with its adds putting members on `queue`: a handle
    /// of the same [`Client`](crate::Client) under the same prefix (another
    /// hash slot, on a Cluster perhaps another master; the batch's own
    /// queue gives a plain handle). Such an add counts its jobs into the
    /// batch at once, in one atomic call on the batch's queue, and leaves a
    /// message per job that makes it on `queue`; the relay carries them (the
    /// add itself at once). When a member ends, its end comes back the same
    /// way, within [`RELAY_HOT_INTERVAL`](crate::maintenance::RELAY_HOT_INTERVAL)
    /// when a worker of this build settles it. Each message is delivered at
    /// least once and applied once, so the batch counts each member once
    /// and its callbacks are enqueued once, as on one queue.
    ///
    /// Such a member takes an id, a delay or run-at time, a priority, a
    /// lane, a kind, limits and a traceparent; a dedup id, an expiry or a
    /// sequence key are refused (they need the member's queue at the
    /// add). Without an id it is `BATCH_ID:N@QUEUE`: N a number from the
    /// mint counter of the batch's queue, QUEUE that queue's name, so no
    /// other batch, of this queue or another, mints it. If, when its
    /// message arrives, the id is held on `queue` by the same member added
    /// before (an add retried with the same ids after a transient error),
    /// the second one un-joins (the batch's `total` drops by one); if
    /// another job holds it, the member cannot run and counts as failed
    /// (firing the death callback). So a retried add counts each member
    /// once while the first one's record is on `queue` (retention may
    /// delete it after its end); an add whose members have minted ids is
    /// not safe to retry. The add answers, per member, what it reads on
    /// `queue` after relaying: [`EnqueueStatus::Created`] (made there),
    /// [`EnqueueStatus::Existing`] (another job, or this member added
    /// before, holds the id), or [`EnqueueStatus::Sent`] (its message is
    /// still on its way).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a queue of another prefix or client.
    pub fn on(&self, queue: &Queue) -> Result<Batch> {
        if let Some(reason) = self.queue.peer_problem(queue) {
            return Err(Error::InvalidOption {
                name: "Batch::on",
                reason,
            });
        }
        Ok(Batch {
            queue: self.queue.clone(),
            id: self.id.clone(),
            members: (queue.name() != self.queue.name()).then(|| queue.clone()),
        })
    }

    /// Enqueues jobs with default options as members of the batch, as
    /// [`Queue::enqueue_bulk`] does; answers their ids.
    ///
    /// # Errors
    /// [`Error::BatchNotFound`] or [`Error::BatchClosed`] (nothing written
    /// by that call), [`Error::InvalidOption`] for an option a member on
    /// another queue cannot take ([`Batch::on`]), [`Error::InvalidId`] for
    /// a minted member id there that would pass 256 bytes, or as
    /// [`Queue::enqueue_bulk`] (for members on another queue, the calls of
    /// more than [`ENQUEUE_CHUNK`](crate::queue::ENQUEUE_CHUNK) jobs that
    /// succeeded before a failure stay joined, and are relayed).
    pub async fn add<T: Serialize>(&self, payloads: &[T]) -> Result<Vec<String>> {
        let opts = EnqueueOptions::default();
        let done = self.join(payloads.iter().map(|p| (p, &opts)), None).await?;
        Ok(done.into_iter().map(|e| e.id).collect())
    }

    /// Enqueues jobs, each with its options, as members of the batch, as
    /// [`Queue::enqueue_bulk_with`] does. A job that does not become a new
    /// job (an existing id, a held dedup id, a debounce) does not join.
    ///
    /// # Errors
    /// As [`Batch::add`].
    pub async fn add_with<T: Serialize>(&self, jobs: &[(T, EnqueueOptions)]) -> Result<Vec<Enqueued>> {
        self.join(jobs.iter().map(|(p, o)| (p, o)), None).await
    }

    /// Enqueues typed jobs of one kind as members of the batch.
    ///
    /// # Errors
    /// As [`Batch::add`].
    pub async fn add_jobs<J: JobKind>(&self, jobs: &[J]) -> Result<Vec<String>> {
        let opts = EnqueueOptions::default();
        let done = self.join(jobs.iter().map(|j| (j, &opts)), Some(J::KIND)).await?;
        Ok(done.into_iter().map(|e| e.id).collect())
    }

    async fn join<'a, T: Serialize + 'a>(
        &self,
        jobs: impl IntoIterator<Item = (&'a T, &'a EnqueueOptions)>,
        kind: Option<&'static str>,
    ) -> Result<Vec<Enqueued>> {
        let Some(there) = &self.members else {
            let encoded = self.queue.prepare(jobs, kind)?;
            return self.queue.send_bulk(&encoded, Some(&self.id)).await;
        };
        let encoded = there.prepare(jobs, kind)?;
        for job in &encoded {
            let refused = if job.dedup.is_some() {
                Some("a dedup id")
            } else if !job.expires.is_empty() {
                Some("an expiry")
            } else if job.sequence.is_some() {
                Some("a sequence key")
            } else {
                None
            };
            if let Some(what) = refused {
                return Err(Error::InvalidOption {
                    name: "Batch::on",
                    reason: format!("a member on another queue than its batch's cannot take {what}"),
                });
            }
        }
        // a minted id is BATCH_ID:NUMBER@QUEUE (NUMBER at most 20 digits)
        if encoded.iter().any(|j| j.id.is_none())
            && self.id.len() + self.queue.name().len() + 22 > validate::MAX_ID_BYTES
        {
            return Err(Error::InvalidId {
                what: "batch id",
                value: self.id.chars().take(64).collect(),
                reason: "with the batch's queue name, too long for the ids minted for members on another queue \
                         (BATCH_ID:NUMBER@QUEUE, at most 256 bytes): give those members ids",
            });
        }
        let durability = self.queue.options().durability;
        let mut joined = Vec::with_capacity(encoded.len());
        let mut failed = None;
        for chunk in encoded.chunks(crate::queue::ENQUEUE_CHUNK) {
            let call = store::batch_join::run(
                &mut self.queue.conn(),
                self.queue.keys(),
                &self.id,
                there.name(),
                chunk,
                durability,
            )
            .await;
            let (j, confirmed) = match call {
                Ok(done) => done,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            joined.extend(j.members.into_iter().map(|(id, n)| (id, j.ct, n)));
            // (a later chunk's writes go on: each chunk is confirmed alone)
            match confirmed {
                Ok(None) => {}
                Ok(Some(s)) => {
                    failed.get_or_insert(Error::NotDurable {
                        ids: Vec::new(),
                        acked: s.acked,
                        wanted: s.wanted,
                    });
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if !encoded.is_empty() {
            // The members made on their queue now (or, when that fails, by
            // a later relay of this queue), whatever happens to the rest
            // (a call whose reply was lost may have joined some too).
            crate::relay::relay_or_log(&self.queue).await;
        }
        match failed {
            Some(Error::NotDurable { acked, wanted, .. }) => Err(Error::NotDurable {
                ids: joined.into_iter().map(|(id, _, _)| id).collect(),
                acked,
                wanted,
            }),
            Some(e) => Err(e),
            None => Ok(self.made_there(there, joined).await),
        }
    }

    /// What became of members `joined` (id, the batch's `ct`, number) sent
    /// to `there`, read from their records there: made as these members
    /// ([`EnqueueStatus::Created`]), refused because another job or an
    /// earlier add of the member holds the id ([`EnqueueStatus::Existing`]),
    /// or not known yet ([`EnqueueStatus::Sent`]: its message is still on
    /// its way, or it ended and retention deleted it).
    async fn made_there(&self, there: &Queue, joined: Vec<(String, u64, u64)>) -> Vec<Enqueued> {
        let mut pipe = redis::pipe();
        for (id, _, _) in &joined {
            pipe.cmd("HMGET").arg(there.keys().job(id)).arg("st").arg("bh");
        }
        let read: Option<Vec<(Option<String>, Option<String>)>> = pipe.query_async(&mut there.conn()).await.ok();
        let home = self.queue.name();
        joined
            .into_iter()
            .enumerate()
            .map(|(i, (id, ct, n))| {
                let status = match read.as_ref().and_then(|r| r.get(i)) {
                    Some((_, Some(bh))) if *bh == format!("{home}\x1f{ct}\x1f{n}") => EnqueueStatus::Created,
                    Some((Some(_), _)) => EnqueueStatus::Existing,
                    _ => EnqueueStatus::Sent,
                };
                Enqueued { id, status }
            })
            .collect()
    }

    /// Closes the batch: no job joins it afterwards. If every member has
    /// ended already (or it has none) its callbacks are enqueued now;
    /// otherwise by the end of its last member.
    ///
    /// # Errors
    /// [`Error::BatchClosed`] when it was closed already (nothing changed),
    /// [`Error::BatchNotFound`], [`Error::NotDurable`] when closed on the
    /// primary but confirmed by fewer replicas than the queue's
    /// [`Durability`](crate::Durability) asks (closing again answers
    /// `NotDurable` again until a replica holds the close, then
    /// `BatchClosed`), or a server error.
    pub async fn close(&self) -> Result<()> {
        let durability = self.queue.options().durability;
        store::batch_close::run(&mut self.queue.conn(), self.queue.keys(), &self.id, durability).await
    }

    /// The batch's counts now.
    ///
    /// # Errors
    /// [`Error::BatchNotFound`] when no such batch exists (never opened, or
    /// its record expired after its end), or a server error.
    pub async fn status(&self) -> Result<BatchStatus> {
        let f: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.queue.keys().batch(&self.id))
            .arg(&["n", "c", "f", "x", "ct", "cl", "fin", "sf", "cf", "df"])
            .query_async(&mut self.queue.conn())
            .await
            .map_err(Error::from_redis)?;
        let num = |i: usize| f.get(i).and_then(|v| v.as_deref()).and_then(|v| v.parse::<u64>().ok());
        let Some(total) = num(0) else {
            return Err(Error::BatchNotFound(self.id.clone()));
        };
        Ok(BatchStatus {
            id: self.id.clone(),
            total,
            completed: num(1).unwrap_or(0),
            failed: num(2).unwrap_or(0),
            other: num(3).unwrap_or(0),
            created_at: num(4).unwrap_or(0),
            closed_at: num(5),
            ended_at: num(6),
            success_at: num(7),
            complete_at: num(8),
            death_at: num(9),
        })
    }
}
