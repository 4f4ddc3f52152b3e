//! Exactly-once *effects* on at-least-once delivery (DESIGN.md §6).
//!
//! echomq delivers every job at least once. A job can run twice: a worker
//! that performs the job's effect (charges a card, sends a mail, bumps a
//! counter) and dies, stalls or loses the server before its `complete`
//! reaches the server is indistinguishable, from the server's side, from a
//! worker that died before the effect; the job is redelivered and the
//! effect runs again. That gap between the effect and the acknowledgement
//! is *the duplicate window*. No reordering closes it, and exactly-once
//! *delivery* does not exist (the acknowledgement itself can be lost). What
//! can be made exactly-once is the *effect*, and this module gives a
//! handler three tools for it. Pick by where the effect lives.
//!
//! # 1. The idempotency key: effects in a system that deduplicates
//!
//! [`Job::idempotency_key`](crate::Job::idempotency_key) (and
//! [`Queue::idempotency_key`] for the low-level API) is `{QUEUE}:ID`: the
//! same on every delivery of a job, different for every other job of the
//! queues under one key prefix. Send it wherever an external API takes one (Stripe's
//! `Idempotency-Key`, a webhook's delivery id, a unique column in your
//! database): the *external system* then recognises the redelivery and
//! applies the effect once. This is the only tool that covers effects
//! outside Valkey completely, because only the system that applies the
//! effect can make "apply" and "remember that I applied it" one step.
//!
//! Limits: the key is unique among the jobs of one server and key prefix.
//! Add your own namespace if several deployments or environments share one
//! external account (`format!("prod:{}", job.idempotency_key())`). A queue
//! whose keys were deleted (`FLUSHALL`) mints ids from 1 again, and a
//! caller-chosen id is meant to stand for one piece of work: enqueued again
//! after its job was completed and trimmed, it gets the same key. Hash the
//! key if an API limits its length (it can reach about 460 bytes). For a job
//! with several external effects use one key per effect:
//! [`EffectMarker::idempotency_key`] is `{QUEUE}:ID:EFFECT`.
//!
//! # 2. Effect markers: effects you can check but not make idempotent
//!
//! An [`EffectMarker`] is a small record in Valkey, keyed by the job and an
//! effect name (`emq:{Q}:fx:EFFECT:ID`), that says which attempt of the job
//! took on the effect and whether it finished. Claim it before the effect,
//! mark it done after; a redelivery finds it and skips the effect. The
//! marker's states, as [`EffectMarker::claim`] reports them:
//!
//! | state | meaning | what the handler does |
//! | --- | --- | --- |
//! | [`Fresh`](MarkerState::Fresh) | no attempt took the effect on; this attempt holds the marker now | perform the effect, then [`done`](EffectMarker::done) |
//! | [`Done { attempt }`](MarkerState::Done) | `attempt` finished the effect | skip it, complete the job |
//! | [`Orphaned { attempt }`](MarkerState::Orphaned) | "held by a dead attempt": `attempt` claimed the marker and ended (crashed, lost its lease, failed, was released) without marking it done; this attempt holds it now | the effect *may or may not* have happened: ask the external system (by the idempotency key), then perform it or not, then `done` |
//!
//! ```text
//!  (absent) ──claim by attempt A──► held by A ──done(A)──► done by A ──claim by B──► "done": skip
//!                                   │     ▲
//!          abandon(A): effect surely│     │claim by B after A ended without done:
//!          did not happen → (absent)┘     └ held by B, B is told "orphaned by A"
//! ```
//!
//! The server decides, fenced by the job's token: only the job's *current*
//! attempt (the job is active and its attempts count equals the caller's
//! token) may claim, so of two deliveries of one job the older one is
//! refused with [`Error::LeaseLost`] and performs nothing. A marker held by
//! any other attempt belongs to one that is over (its lease was reaped, or
//! it settled), and the current attempt takes it over. Only the holder's
//! token can mark it done (a newer holder answers [`Error::MarkerLost`]),
//! and a holder can still mark done after its lease was lost, so the truth
//! is recorded whenever it can be.
//!
//! What a marker can and cannot promise for effects outside Valkey:
//!
//! - It **can** make every redelivery after a recorded `done` skip the
//!   effect, refuse stale attempts before they start, and tell a
//!   redelivery precisely when the previous attempt died inside the
//!   effect, instead of silently running it twice or dropping it.
//! - It **cannot** make the external effect and the marker one atomic step.
//!   A crash between the effect and `done` leaves the marker "held by a
//!   dead attempt": echomq cannot know whether the effect happened, only the
//!   external system can. Resolve `Orphaned` with that system's own record
//!   or idempotency (the idempotency key above), or accept a duplicate
//!   (redo) or a possible loss (skip) knowingly.
//! - It **cannot** stop an attempt that is alive but fenced out (paused,
//!   partitioned) from finishing an effect it already started: a marker is
//!   claimed once, up front. The [`Consumer`](crate::Consumer) cancels a
//!   handler whose lease it cannot confirm before the lease ends; check
//!   [`Job::is_cancelled`](crate::Job::is_cancelled) before the effect, and
//!   pass [`Job::attempt`](crate::Job::attempt) as a fencing token to
//!   systems that accept one.
//! - A marker lives for its TTL ([`DEFAULT_MARKER_TTL`], set again on every
//!   claim); choose one longer than a job can stay unfinished.
//!
//! [`EffectMarker::once`] wraps the protocol: it claims, runs your closure
//! only when the marker is fresh or orphaned (telling it which), and marks
//! it done afterwards.
//!
//! # 3. Atomic completion: effects that live in Valkey
//!
//! For a counter, a hash field or a set member in Valkey itself,
//! [`Queue::complete_with`] applies a declared list of [`Effects`] in the
//! same script that completes the job: the effect and the acknowledgement
//! commit together or not at all. A stale token (the job was reaped and
//! redelivered), an "already completed" repeat and a refused effect apply
//! nothing. Targets are keys in the queue's hash slot, so the script stays
//! single-slot for Valkey Cluster: [`Queue::user_key`] names one
//! (`emq:{Q}:user:NAME`), or name any key carrying the `{Q}` hash tag
//! yourself; echomq's own keys are refused. Every effect is checked before
//! anything is written: a target of another type, or a counter that is not
//! an integer or would leave ±(2^53 − 1), refuses the whole completion with
//! [`Error::EffectRefused`] and leaves the job leased.
//!
//! Within the guarantees of the server: what a write acknowledged by
//! Valkey survives depends on `appendfsync` and replication, as for every
//! echomq write (see the README's "Guarantees").
//!
//! # Example
//!
//! ```no_run
//! use echomq::{Consumer, Effects, EffectMarker, Job, MarkerState, OnceError, Queue};
//! # #[derive(serde::Deserialize)] struct Order { cents: i64 }
//! # async fn charge(key: &str, cents: i64) -> Result<(), String> { Ok(()) }
//! # async fn charged(key: &str) -> Result<bool, String> { Ok(false) }
//!
//! # async fn demo(queue: Queue) -> echomq::Result<()> {
//! let q = queue.clone();
//! let consumer = Consumer::new(queue.clone(), move |job: Job<Order>| {
//!     let q = q.clone();
//!     async move {
//!         let marker = EffectMarker::for_job(&q, &job, "charge")?;
//!         let key = marker.idempotency_key();
//!         marker
//!             .once(|state| async move {
//!                 // Orphaned: an earlier attempt died inside the effect. Ask the provider.
//!                 if let MarkerState::Orphaned { .. } = state {
//!                     if charged(&key).await? {
//!                         return Ok(());
//!                     }
//!                 }
//!                 charge(&key, job.payload().cents).await
//!             })
//!             .await?;
//!         Ok::<(), OnceError<String>>(())
//!     }
//! })
//! .spawn();
//!
//! // Low-level: the effect commits with the acknowledgement.
//! let lease = queue.claim(1, std::time::Duration::from_secs(30)).await?.remove(0);
//! let effects = Effects::new()
//!     .incr_by(queue.user_key("orders-done")?, 1)
//!     .sadd(queue.user_key("customers")?, "ada");
//! queue.complete_with(&lease, &effects).await?;
//! # consumer.shutdown().await; Ok(()) }
//! ```

use std::fmt;
use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};
use crate::job::{Job, Lease, millis};
use crate::keys::validate_id;
use crate::queue::{Outcome, Queue, Settled};
use crate::scripts::{EffectCode, Reply, SCRIPTS, effect_code};

/// Default lifetime of an effect marker: 7 days, set again on every claim.
/// It must outlast the longest time a job can stay unfinished (retries with
/// backoff, stalls, scheduled delays); otherwise a late redelivery finds
/// no marker and runs the effect again.
pub const DEFAULT_MARKER_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Longest effect name, in bytes.
pub const MAX_EFFECT_NAME_BYTES: usize = 64;

/// Most effects one [`Queue::complete_with`] call applies.
pub const MAX_EFFECTS: usize = 64;

/// Longest key an effect may target, in bytes.
pub const MAX_EFFECT_KEY_BYTES: usize = 1024;

/// Longest field, value or member an effect may write, in bytes.
pub const MAX_EFFECT_VALUE_BYTES: usize = 64 * 1024;

/// Largest counter value (and increment) atomic completion handles:
/// 2^53 − 1, where the server's scripts still count exactly.
pub const MAX_EFFECT_COUNTER: i64 = (1 << 53) - 1;

/// How often [`EffectMarker::once`] sends a marker call again after a
/// transient failure (the calls are idempotent, so repeating is safe).
const TRANSIENT_TRIES: u32 = 4;

/// What [`EffectMarker::claim`] found. In every state but `Done` the caller
/// now holds the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MarkerState {
    /// No attempt took the effect on before: perform it, then
    /// [`done`](EffectMarker::done). (Also what the holder hears when it
    /// claims again after a fresh claim.)
    Fresh,
    /// `attempt` finished the effect: skip it.
    Done {
        /// The attempt (fencing token) that marked it done.
        attempt: u64,
    },
    /// Held by a dead attempt: `attempt` claimed the marker and ended
    /// (crashed, lost its lease, failed or was released) without marking
    /// it done. The caller holds it now. The effect may or may not have
    /// happened: ask the external system before performing it again.
    Orphaned {
        /// The attempt that held the marker.
        attempt: u64,
    },
}

/// What [`EffectMarker::once`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Once<T> {
    /// The closure ran in this attempt (the marker was fresh or orphaned)
    /// and the marker is marked done.
    Ran(T),
    /// `attempt` had finished the effect; the closure did not run.
    Skipped {
        /// The attempt that marked it done.
        attempt: u64,
    },
}

/// Why [`EffectMarker::once`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum OnceError<E> {
    /// The marker could not be claimed, so the effect did not run: this
    /// attempt lost its lease ([`Error::LeaseLost`]), the job is gone, or
    /// the server failed. Also what `?` makes of any other echomq error.
    Claim(Error),
    /// The closure failed. The marker stays held by this attempt, so the
    /// next delivery finds it [`Orphaned`](MarkerState::Orphaned) (call
    /// [`EffectMarker::abandon`] first if the effect surely did not happen).
    Effect(E),
    /// The closure succeeded (the effect happened) but recording it done
    /// failed: a newer attempt took the marker over
    /// ([`Error::MarkerLost`]), or the server stayed unreachable. The next
    /// delivery will find the marker orphaned, or already found it so.
    Unrecorded(Error),
}

impl<E> From<Error> for OnceError<E> {
    fn from(e: Error) -> Self {
        OnceError::Claim(e)
    }
}

impl<E: fmt::Display> fmt::Display for OnceError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OnceError::Claim(e) => write!(f, "effect not run: {e}"),
            OnceError::Effect(e) => write!(f, "effect failed: {e}"),
            OnceError::Unrecorded(e) => write!(f, "effect ran but was not recorded as done: {e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for OnceError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OnceError::Claim(e) | OnceError::Unrecorded(e) => Some(e),
            OnceError::Effect(_) => None,
        }
    }
}

/// The marker of one effect of one job, as seen by one attempt of it
/// (module docs: "Effect markers"). Cheap to clone; holds a [`Queue`]
/// handle.
#[derive(Debug, Clone)]
pub struct EffectMarker {
    queue: Queue,
    job_id: String,
    /// The job hash: the claim reads its state and attempts (the fence).
    job_key: String,
    /// `PREFIX:{Q}:fx:EFFECT:ID`.
    key: String,
    effect: String,
    /// The calling attempt's fencing token.
    token: u64,
    ttl: Duration,
}

impl EffectMarker {
    /// The marker of effect `effect` of job `job_id`, for the attempt whose
    /// fencing token is `attempt` ([`Job::attempt`], [`Lease::token`]).
    ///
    /// `effect` names the effect within the job ("charge", "welcome-mail"):
    /// 1 to 64 ASCII letters, digits, `-`, `_` or `.`.
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad job id or effect name,
    /// [`Error::InvalidOption`] for attempt 0 (claims mint tokens from 1).
    pub fn new(queue: &Queue, job_id: &str, attempt: u64, effect: &str) -> Result<EffectMarker> {
        validate_id("job id", job_id)?;
        validate_effect_name(effect)?;
        if attempt == 0 {
            return Err(Error::InvalidOption {
                name: "attempt",
                reason: "must be at least 1 (the fencing token of a claim)".into(),
            });
        }
        let keys = queue.keys();
        Ok(EffectMarker {
            queue: queue.clone(),
            job_id: job_id.to_owned(),
            job_key: keys.job(job_id),
            key: format!("{}fx:{effect}:{job_id}", keys.base),
            effect: effect.to_owned(),
            token: attempt,
            ttl: DEFAULT_MARKER_TTL,
        })
    }

    /// The marker of effect `effect` for this delivery of a consumer's job.
    /// `queue` must be the job's queue (a clone of the consumer's).
    ///
    /// # Errors
    /// As [`new`](Self::new), and [`Error::InvalidOption`] when `queue` is
    /// not the job's queue.
    pub fn for_job<T>(queue: &Queue, job: &Job<T>, effect: &str) -> Result<EffectMarker> {
        if job.queue() != queue.name() {
            return Err(Error::InvalidOption {
                name: "queue",
                reason: format!(
                    "job {} belongs to queue {:?}, not {:?}",
                    job.id(),
                    job.queue(),
                    queue.name()
                ),
            });
        }
        Self::new(queue, job.id(), job.attempt(), effect)
    }

    /// The marker of effect `effect` for the attempt holding `lease`
    /// (low-level API). `queue` must be the queue the lease came from.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn for_lease(queue: &Queue, lease: &Lease, effect: &str) -> Result<EffectMarker> {
        Self::new(queue, lease.id(), lease.token(), effect)
    }

    /// How long the marker stands after each claim or `done` (default
    /// [`DEFAULT_MARKER_TTL`]; at least 1 ms). Use the same value for
    /// every attempt of a job.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl.max(Duration::from_millis(1));
        self
    }

    /// The marker's key, `PREFIX:{Q}:fx:EFFECT:ID` (for inspection).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The job id.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// The effect name.
    pub fn effect(&self) -> &str {
        &self.effect
    }

    /// The attempt (fencing token) this handle speaks for.
    pub fn attempt(&self) -> u64 {
        self.token
    }

    /// An idempotency key for this effect of this job, the same on every
    /// delivery: `{QUEUE}:ID:EFFECT`. Use it when a job has several
    /// external effects, each needing its own key.
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}", self.queue.idempotency_key(&self.job_id), self.effect)
    }

    fn ttl_ms(&self) -> Result<u64> {
        millis("marker ttl", self.ttl)
    }

    /// Claims the marker before the effect. Asking again with the same
    /// attempt answers what the first call answered, so a call whose reply
    /// was lost can be sent again.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when this attempt is not the job's current one
    /// (its lease was reaped, or it settled): do not perform the effect.
    /// [`Error::JobNotFound`]; [`Error::Protocol`] when the marker key holds
    /// a value echomq did not write; server errors.
    pub async fn claim(&self) -> Result<MarkerState> {
        let v: Value = SCRIPTS
            .marker_claim
            .key(&self.job_key)
            .key(&self.key)
            .arg(self.token)
            .arg(self.ttl_ms()?)
            .invoke_async(&mut self.queue.conn())
            .await?;
        let mut r = Reply::new("marker_claim", v)?;
        let (status, _now, attempt) = (r.int()?, r.uint()?, r.uint()?);
        match effect_code("marker_claim", status)? {
            EffectCode::Ok => Ok(MarkerState::Fresh),
            EffectCode::Done => Ok(MarkerState::Done { attempt }),
            EffectCode::Orphaned => Ok(MarkerState::Orphaned { attempt }),
            other => Err(self.refusal("marker_claim", other, attempt)),
        }
    }

    /// Records that this attempt's effect finished: every later claim
    /// answers [`MarkerState::Done`]. Works after this attempt's lease was
    /// lost too, unless a newer attempt has taken the marker over; a marker
    /// whose TTL ran out is written as done (the effect happened either
    /// way). Marking done again answers `Ok`.
    ///
    /// # Errors
    /// [`Error::MarkerLost`] when a newer attempt took the marker over or
    /// another attempt finished it (nothing changed: the newer holder was
    /// told the effect may have happened); server errors (safe to retry).
    pub async fn done(&self) -> Result<()> {
        let v: Value = SCRIPTS
            .marker_done
            .key(&self.key)
            .arg(self.token)
            .arg(self.ttl_ms()?)
            .invoke_async(&mut self.queue.conn())
            .await?;
        self.answer("marker_done", v)
    }

    /// Gives the marker back because the effect surely did not happen (the
    /// API refused the request before acting, say). The next delivery then
    /// finds it [`Fresh`](MarkerState::Fresh) instead of orphaned. Do not
    /// abandon an effect that may have happened.
    ///
    /// # Errors
    /// [`Error::MarkerLost`] when another attempt holds the marker or an
    /// attempt finished the effect (a done marker is never given back);
    /// server errors (safe to retry).
    pub async fn abandon(&self) -> Result<()> {
        let v: Value = SCRIPTS
            .marker_abandon
            .key(&self.key)
            .arg(self.token)
            .invoke_async(&mut self.queue.conn())
            .await?;
        self.answer("marker_abandon", v)
    }

    fn answer(&self, script: &'static str, v: Value) -> Result<()> {
        let mut r = Reply::new(script, v)?;
        let (status, _now, attempt) = (r.int()?, r.uint()?, r.uint()?);
        match effect_code(script, status)? {
            EffectCode::Ok => Ok(()),
            other => Err(self.refusal(script, other, attempt)),
        }
    }

    fn refusal(&self, script: &'static str, code: EffectCode, holder: u64) -> Error {
        match code {
            EffectCode::LeaseLost => Error::LeaseLost {
                id: self.job_id.clone(),
                token: self.token,
            },
            EffectCode::NotFound => Error::JobNotFound(self.job_id.clone()),
            EffectCode::HeldByOther | EffectCode::DoneByOther => Error::MarkerLost {
                id: self.job_id.clone(),
                effect: self.effect.clone(),
                token: self.token,
                holder,
                done: code == EffectCode::DoneByOther,
            },
            EffectCode::Foreign => Error::Protocol {
                script,
                detail: format!("marker {} holds a value echomq did not write", self.key),
            },
            other => Error::Protocol {
                script,
                detail: format!("unexpected status {other:?}"),
            },
        }
    }

    /// Runs `effect` at most once per job, as far as markers can promise
    /// (module docs): claims the marker; if an earlier attempt finished the
    /// effect, returns [`Once::Skipped`] without running it; otherwise runs
    /// `effect` with the claim's state ([`Fresh`](MarkerState::Fresh), or
    /// [`Orphaned`](MarkerState::Orphaned): check the external system
    /// first) and marks the marker done when it returns `Ok`. Marker calls
    /// that fail transiently are sent again a few times (they are
    /// idempotent).
    ///
    /// # Errors
    /// [`OnceError::Claim`]: the effect did not run (stale attempt, server
    /// error). [`OnceError::Effect`]: the closure failed; the marker stays
    /// held, so the next delivery finds it orphaned. [`OnceError::Unrecorded`]:
    /// the effect ran but could not be recorded done.
    pub async fn once<F, Fut, T, E>(&self, effect: F) -> Result<Once<T>, OnceError<E>>
    where
        F: FnOnce(MarkerState) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        let state = transient_retry(|| self.claim()).await.map_err(OnceError::Claim)?;
        if let MarkerState::Done { attempt } = state {
            return Ok(Once::Skipped { attempt });
        }
        let value = effect(state).await.map_err(OnceError::Effect)?;
        transient_retry(|| self.done()).await.map_err(OnceError::Unrecorded)?;
        Ok(Once::Ran(value))
    }
}

/// Sends `call` again after transient failures, a few times with a short
/// backoff. Only for idempotent calls.
async fn transient_retry<F, Fut, T>(mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut pause = Duration::from_millis(50);
    let mut tries = 1;
    loop {
        match call().await {
            Err(e) if e.is_transient() && tries < TRANSIENT_TRIES => {
                tokio::time::sleep(pause).await;
                pause *= 2;
                tries += 1;
            }
            other => return other,
        }
    }
}

/// Checks an effect name: 1 to 64 ASCII letters, digits, `-`, `_`, `.`
/// (no `:`, so marker keys and idempotency keys stay unambiguous).
fn validate_effect_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "must not be empty"
    } else if name.len() > MAX_EFFECT_NAME_BYTES {
        "must be at most 64 bytes"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        "may hold only ASCII letters, digits, '-', '_' and '.'"
    } else {
        return Ok(());
    };
    Err(Error::InvalidId {
        what: "effect name",
        value: name.to_owned(),
        reason,
    })
}

/// One declared effect of atomic completion.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    IncrBy {
        key: String,
        by: i64,
    },
    HIncrBy {
        key: String,
        field: Vec<u8>,
        by: i64,
    },
    HSet {
        key: String,
        field: Vec<u8>,
        value: Vec<u8>,
    },
    SAdd {
        key: String,
        member: Vec<u8>,
    },
}

impl Op {
    fn key(&self) -> &str {
        match self {
            Op::IncrBy { key, .. } | Op::HIncrBy { key, .. } | Op::HSet { key, .. } | Op::SAdd { key, .. } => key,
        }
    }

    /// The script's name for the operation and its two arguments.
    fn args(&self) -> (&'static str, Vec<u8>, Vec<u8>) {
        match self {
            Op::IncrBy { by, .. } => ("incrby", by.to_string().into_bytes(), Vec::new()),
            Op::HIncrBy { field, by, .. } => ("hincrby", field.clone(), by.to_string().into_bytes()),
            Op::HSet { field, value, .. } => ("hset", field.clone(), value.clone()),
            Op::SAdd { member, .. } => ("sadd", member.clone(), Vec::new()),
        }
    }

    /// The effect as a command, for error messages.
    fn describe(&self) -> String {
        let text = |b: &[u8]| {
            let s = String::from_utf8_lossy(b);
            if s.chars().count() > 40 {
                format!("{:?}…", s.chars().take(40).collect::<String>())
            } else {
                format!("{s:?}")
            }
        };
        match self {
            Op::IncrBy { key, by } => format!("INCRBY {key} {by}"),
            Op::HIncrBy { key, field, by } => format!("HINCRBY {key} {} {by}", text(field)),
            Op::HSet { key, field, value } => format!("HSET {key} {} {}", text(field), text(value)),
            Op::SAdd { key, member } => format!("SADD {key} {}", text(member)),
        }
    }

    fn counter(&self) -> Option<i64> {
        match self {
            Op::IncrBy { by, .. } | Op::HIncrBy { by, .. } => Some(*by),
            _ => None,
        }
    }

    fn blobs(&self) -> Vec<&[u8]> {
        match self {
            Op::IncrBy { .. } => vec![],
            Op::HIncrBy { field, .. } => vec![field],
            Op::HSet { field, value, .. } => vec![field, value],
            Op::SAdd { member, .. } => vec![member],
        }
    }
}

/// Effects in Valkey applied by [`Queue::complete_with`] in the same script
/// that completes the job: all of them with the acknowledgement, or none.
/// Build with the chained methods; applied in order.
///
/// Each target key must carry the queue's `{QUEUE}` hash tag (so the
/// script stays in one slot on Valkey Cluster) and must not be one of
/// echomq's own keys: name it with [`Queue::user_key`]
/// (`emq:{Q}:user:NAME`) or give a full name like `app:{emails}:sent`.
///
/// ```
/// # fn demo(queue: &echomq::Queue) -> echomq::Result<()> {
/// let effects = echomq::Effects::new()
///     .incr_by(queue.user_key("sent")?, 1)
///     .hincr_by(queue.user_key("sent-by-domain")?, "example.com", 1)
///     .hset(queue.user_key("last-sent")?, "user-17", "2024-05-01")
///     .sadd(queue.user_key("welcomed")?, "user-17");
/// assert_eq!(effects.len(), 4);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    ops: Vec<Op>,
}

impl Effects {
    /// No effects (`complete_with` then behaves as `complete`).
    pub fn new() -> Self {
        Self::default()
    }

    /// `INCRBY key by`: adds `by` to the integer at `key` (a missing key
    /// counts as 0). The value and `by` must stay within ±(2^53 − 1)
    /// ([`MAX_EFFECT_COUNTER`]).
    pub fn incr_by(mut self, key: impl Into<String>, by: i64) -> Self {
        self.ops.push(Op::IncrBy { key: key.into(), by });
        self
    }

    /// `HINCRBY key field by`: adds `by` to the integer in a hash field
    /// (limits as [`incr_by`](Self::incr_by)).
    pub fn hincr_by(mut self, key: impl Into<String>, field: impl Into<Vec<u8>>, by: i64) -> Self {
        self.ops.push(Op::HIncrBy {
            key: key.into(),
            field: field.into(),
            by,
        });
        self
    }

    /// `HSET key field value`.
    pub fn hset(mut self, key: impl Into<String>, field: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        self.ops.push(Op::HSet {
            key: key.into(),
            field: field.into(),
            value: value.into(),
        });
        self
    }

    /// `SADD key member`.
    pub fn sadd(mut self, key: impl Into<String>, member: impl Into<Vec<u8>>) -> Self {
        self.ops.push(Op::SAdd {
            key: key.into(),
            member: member.into(),
        });
        self
    }

    /// How many effects are declared.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when none are.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Checks every effect against `queue` before anything is sent.
    fn check(&self, queue: &Queue) -> Result<()> {
        if self.ops.len() > MAX_EFFECTS {
            return Err(Error::EffectRefused {
                index: MAX_EFFECTS + 1,
                effect: self.ops[MAX_EFFECTS].describe(),
                reason: format!("at most {MAX_EFFECTS} effects per completion"),
            });
        }
        let own = &queue.keys().base;
        let user = format!("{own}user:");
        for (i, op) in self.ops.iter().enumerate() {
            let key = op.key();
            let reason = if key.len() > MAX_EFFECT_KEY_BYTES {
                format!("the key is longer than {MAX_EFFECT_KEY_BYTES} bytes")
            } else if hash_tag(key) != Some(queue.name()) {
                format!(
                    "the key must carry the queue's hash tag {{{}}} (it would hash to another slot); \
                     use Queue::user_key",
                    queue.name()
                )
            } else if key.starts_with(own.as_str()) && !key.starts_with(&user) {
                format!("{own}* holds echomq's own keys; only {user}* may be written")
            } else if op.counter().is_some_and(|by| by.abs() > MAX_EFFECT_COUNTER) {
                "the increment exceeds 2^53 - 1".to_owned()
            } else if op.blobs().iter().any(|b| b.len() > MAX_EFFECT_VALUE_BYTES) {
                format!("a field, value or member is longer than {MAX_EFFECT_VALUE_BYTES} bytes")
            } else {
                continue;
            };
            return Err(Error::EffectRefused {
                index: i + 1,
                effect: op.describe(),
                reason,
            });
        }
        Ok(())
    }
}

/// The hash tag of `key` as Valkey Cluster computes it: the text between
/// the first `{` and the next `}`, if non-empty; `None` when the whole key
/// is hashed.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

impl Queue {
    /// The full name of a key for your own data in this queue's hash slot:
    /// `PREFIX:{QUEUE}:user:NAME`. Use it for atomic-completion
    /// [`Effects`], and to read the data back with any client.
    ///
    /// # Errors
    /// [`Error::InvalidId`] for an empty name, one longer than 256 bytes or
    /// one with control characters.
    pub fn user_key(&self, name: &str) -> Result<String> {
        validate_id("user key name", name)?;
        Ok(format!("{}user:{name}", self.keys().base))
    }

    /// The idempotency key of job `job_id` of this queue, the same as
    /// [`Job::idempotency_key`] hands the consumer's handler: `{QUEUE}:ID`.
    pub fn idempotency_key(&self, job_id: &str) -> String {
        crate::job::idempotency_key(self.name(), job_id)
    }

    /// Completes a leased job and applies `effects` in the same script:
    /// the effects and the acknowledgement commit together or not at all
    /// (atomic completion; module docs). A stale lease applies nothing
    /// ([`Error::LeaseLost`]); a repeat after success answers
    /// [`Outcome::AlreadySettled`] and applies nothing again. With no
    /// effects it is [`complete`](Self::complete).
    ///
    /// # Errors
    /// [`Error::EffectRefused`] when an effect targets a key outside the
    /// queue's hash slot or inside echomq's own keys, exceeds a limit, or
    /// meets a value of the wrong type or a counter out of range: nothing
    /// changed and the job is still leased. Otherwise as
    /// [`complete`](Self::complete).
    pub async fn complete_with(&self, lease: &Lease, effects: &Effects) -> Result<Settled> {
        effects.check(self)?;
        let k = self.keys();
        let mut targets: Vec<&str> = Vec::new();
        let mut inv = SCRIPTS.complete.prepare_invoke();
        inv.key(k.job(&lease.id)).key(&k.active).key(&k.completed);
        inv.arg(&k.base)
            .arg(&lease.id)
            .arg(lease.token)
            .arg(self.keep_completed_arg())
            .arg(effects.ops.len());
        for op in &effects.ops {
            let index = match targets.iter().position(|t| *t == op.key()) {
                Some(i) => i,
                None => {
                    targets.push(op.key());
                    targets.len() - 1
                }
            };
            let (name, a, b) = op.args();
            // KEYS[1..3] are the job's; effect targets follow.
            inv.arg(name).arg(index + 4).arg(a).arg(b);
        }
        for t in &targets {
            inv.key(*t);
        }
        let v: Value = inv.invoke_async(&mut self.conn()).await?;
        let mut r = Reply::new("complete", v)?;
        let (status, server_ms) = (r.int()?, r.uint()?);
        if effect_code("complete", status).ok() == Some(EffectCode::Refused) {
            let index = r.uint()? as usize;
            let reason = r.string()?;
            let effect = effects
                .ops
                .get(index.wrapping_sub(1))
                .map(Op::describe)
                .unwrap_or_default();
            return Err(Error::EffectRefused { index, effect, reason });
        }
        self.settled("complete", lease, status, server_ms, Outcome::Completed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Hash tags are read the way Valkey Cluster reads them.
    #[test]
    fn hash_tags_follow_the_cluster_rule() {
        assert_eq!(hash_tag("emq:{mail}:user:x"), Some("mail"));
        assert_eq!(hash_tag("app:{mail}:{other}"), Some("mail"));
        assert_eq!(hash_tag("{}mail"), None);
        assert_eq!(hash_tag("no-tag"), None);
        assert_eq!(hash_tag("open{only"), None);
        assert_eq!(hash_tag("a{b:c}d"), Some("b:c"));
    }

    // Effect names stay inside a safe alphabet without ':', so keys cannot collide.
    #[test]
    fn effect_names_are_checked() {
        for good in ["charge", "welcome-mail", "v1.refund_2"] {
            assert!(validate_effect_name(good).is_ok(), "{good}");
        }
        for bad in ["", "a:b", "sp ace", "ünï", &"x".repeat(65), "{tag}"] {
            assert!(
                matches!(
                    validate_effect_name(bad),
                    Err(Error::InvalidId {
                        what: "effect name",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
    }

    // Effects describe themselves as the command they run, values quoted and cut short.
    #[test]
    fn effects_describe_themselves() {
        let e = Effects::new()
            .incr_by("k", -3)
            .hset("h", "f", "x".repeat(100))
            .sadd("s", b"m".to_vec());
        assert_eq!(e.ops[0].describe(), "INCRBY k -3");
        assert!(e.ops[1].describe().starts_with("HSET h \"f\" \"xxxx"));
        assert!(e.ops[1].describe().ends_with('…'));
        assert_eq!(e.ops[2].describe(), "SADD s \"m\"");
        assert_eq!(e.ops[0].args(), ("incrby", b"-3".to_vec(), Vec::new()));
    }
}
