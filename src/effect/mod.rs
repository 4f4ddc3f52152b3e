//! Exactly-once *effects* on at-least-once delivery.
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
//! [`Queue::idempotency_key`](crate::Queue::idempotency_key) for the low-level API) is `{QUEUE}:ID`: the
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
//! external account (`format!("prod:{}", job.idempotency_key())`). The key
//! names the id, not one stored job: a caller-chosen id is meant to stand
//! for one piece of work (enqueued again after its job was completed and
//! trimmed, it gets the same key), but a minted id is minted again when the
//! queue's counter goes back (its keys deleted, or acknowledged writes lost
//! to a torn append-only file or a failover), and the new job then shares a
//! key with a job that may have applied its effect.
//! [`Job::incarnation_key`](crate::Job::incarnation_key)
//! (`{QUEUE}:ID@CREATED_MS`, also on [`Lease`](crate::Lease)) differs for
//! every job ever stored, so use it where that matters. Hash the key if an
//! API limits its length (it can reach about 480 bytes). For a job with
//! several external effects use one key per effect:
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
//! attempt (the job is active under the caller's token) may claim, so of
//! two deliveries of one job the older one is refused with [`Error::LeaseLost`](crate::Error::LeaseLost) and performs nothing. A marker held by
//! any other attempt belongs to one that is over (its lease was reaped, or
//! it settled), and the current attempt takes it over. Only the holder's
//! token can mark it done (a newer holder answers [`Error::MarkerLost`](crate::Error::MarkerLost)),
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
//! [`Queue::complete_with`](crate::Queue::complete_with) applies a declared list of [`Effects`] in the
//! same script that completes the job: the effect and the acknowledgement
//! commit together or not at all. A stale token (the job was reaped and
//! redelivered), an "already completed" repeat and a refused effect apply
//! nothing. Targets are keys in the queue's hash slot, so the script stays
//! single-slot for Valkey Cluster: [`Queue::user_key`](crate::Queue::user_key) names one
//! (`emq:{Q}:user:NAME`), or name any key carrying the `{Q}` hash tag
//! yourself; echomq's own keys are refused. Every effect is checked before
//! anything is written: a target of another type, or a counter that is not
//! an integer or would leave ±(2^53 − 1), refuses the whole completion with
//! [`Error::EffectRefused`](crate::Error::EffectRefused) and leaves the job leased.
//!
//! Within the guarantees of the server: what a write acknowledged by
//! Valkey survives depends on `appendfsync` and replication, as for every
//! echomq write (see the guide's [guarantees](crate::guide::guarantees)).
//!
//! # Example
//!
//! ```no_run
//! use echomq::{Consumer, Effects, EffectMarker, Job, MarkerState, Queue};
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
//!             .await?; // a OnceError converts into a HandlerError: retried
//!         Ok(())
//!     }
//! })
//! .spawn()?;
//!
//! // Low-level: the effect commits with the acknowledgement.
//! let lease = queue.claim(1, std::time::Duration::from_secs(30)).await?.remove(0);
//! let effects = Effects::new()
//!     .incr_by(queue.user_key("orders-done")?, 1)
//!     .sadd(queue.user_key("customers")?, "ada");
//! queue.complete_with(&lease, &effects).await?;
//! # consumer.shutdown().await?; Ok(()) }
//! ```

mod atomic;
mod marker;

use std::time::Duration;

pub use self::atomic::Effects;
pub use self::marker::{EffectMarker, MarkerState, Once, OnceError};

/// Default lifetime of an effect marker: 7 days, set again on every claim.
/// It must outlast the longest time a job can stay unfinished (retries with
/// backoff, stalls, scheduled delays); otherwise a late redelivery finds
/// no marker and runs the effect again.
pub const DEFAULT_MARKER_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The longest marker lifetime accepted: 10 years.
pub const MAX_MARKER_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

pub use crate::validate::MAX_EFFECT_NAME_BYTES;

/// Most effects one [`Queue::complete_with`](crate::Queue::complete_with) call applies.
pub const MAX_EFFECTS: usize = 64;

/// Longest key an effect may target, in bytes.
pub const MAX_EFFECT_KEY_BYTES: usize = 1024;

/// Longest field, value or member an effect may write, in bytes.
pub const MAX_EFFECT_VALUE_BYTES: usize = 64 * 1024;

/// Largest counter value (and increment) atomic completion handles:
/// 2^53 − 1, where the server's scripts still count exactly.
pub const MAX_EFFECT_COUNTER: i64 = (1 << 53) - 1;
