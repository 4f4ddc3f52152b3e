#![doc = include_str!("../README.md")]
//!
//! # Modules
//!
//! - [`queue`]: the [`Queue`] handle: enqueue, inspect, and the low-level
//!   claim/settle calls for people who write their own loop.
//! - [`consumer`]: the [`Consumer`]: claims, runs a handler per job with
//!   heartbeats, settles with the fencing token.
//! - [`effect`]: exactly-once effects on at-least-once delivery: idempotency
//!   keys, effect markers and atomic completion.
//! - [`reaper`]: the [`Reaper`]: returns expired leases and promotes due jobs.
//! - [`job`]: what a job looks like to producers, handlers and inspectors.
//! - [`keys`]: key naming (the `{queue}` hash tag).
//! - [`health`]: the start-up self-check and the consistency sweep.
//! - [`error`]: the one [`Error`] type.
//! - `server` (feature `local-server`): a private `valkey-server` for tests.
#![forbid(unsafe_code)]

pub mod consumer;
pub mod effect;
pub mod error;
pub mod health;
pub mod job;
pub mod keys;
pub mod queue;
pub mod reaper;
mod scripts;
#[cfg(feature = "local-server")]
pub mod server;

pub use consumer::{Backoff, Consumer, ConsumerHandle, Event, Handler};
pub use effect::{EffectMarker, Effects, MarkerState, Once, OnceError};
pub use error::{Error, Result};
pub use health::{ServerReport, SweepReport};
pub use job::{Counts, EnqueueOptions, EnqueueStatus, Enqueued, Job, JobInfo, JobState, Lease};
pub use queue::{Outcome, Queue, QueueOptions, ReapReport, Retention, Settle, Settled};
pub use reaper::{Reaper, ReaperHandle};
