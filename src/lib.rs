//! An embeddable async job queue on Valkey (and Redis ≥ 7): leased,
//! fenced, at-least-once. The [`guide`] is the manual.
//!
//! ```toml
//! [dependencies]
//! echomq = "0.3"
//! ```
//!
//! ```no_run
//! use echomq::{Client, Consumer, HandlerError, Job};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Welcome { address: String }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // One client per process; one handle per queue.
//! let client = Client::connect("redis://127.0.0.1:6379/").await?;
//! let queue = client.queue("emails").await?;
//!
//! // In a web handler: once this returns, the job is stored and runs at least once.
//! queue.enqueue(&Welcome { address: "ada@example.com".into() }).await?;
//!
//! // In a worker (same or another process): a handler per job, with heartbeats.
//! let worker = Consumer::new(queue, |job: Job<Welcome>| async move {
//!     println!("sending to {}", job.payload().address);
//!     Ok::<_, HandlerError>(()) // an error retries the job after its backoff
//! })
//! .concurrency(16)
//! .spawn()?;
//! // On shutdown: stop claiming, let running handlers finish, release the rest.
//! worker.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! - **At least once**: a job leaves the queue only when its handler's success is acknowledged;
//!   a lease that lapses (its deadline on the server's clock) returns the job to pending.
//! - **Fenced**: each claim mints a token never repeated for the queue; a stale worker's
//!   settlement is [`Error::LeaseLost`] and changes nothing.
//! - **Exactly-once effects, not delivery**: a crash between effect and acknowledgement runs
//!   the job again; [`effect`] makes the effect happen once.
//!
//! # Layers
//!
//! Each module sits in one layer and uses only its own layer and those
//! below (`tests/layers` fails the build on an import that runs up, or on
//! any cycle between modules):
//!
//! ```text
//!  client                         Client: the link and the maintenance task, wired at the top
//!  testing  server                test support: inline drains, private servers
//!  worker  kinds  handlers  effect  Consumer/Worker, Job<T>, handler adapters, exactly-once tools
//!  maintenance                    services: reaper, sweep, looks, clock watch, scheduling passes
//!  admin  lanes  throttle  events  schedule  partition  health  metrics    features over Queue
//!  queue                          Queue: enqueue, claim/settle, inspect (a link + an Upkeep trait)
//!  store                          one file per script: the only code that knows KEYS, ARGV, codes
//!  conn  durability  acl          the Link: one server | Sentinel | Cluster, TLS, WAIT
//!  otel                           trace context carried with a job (a sink, no I/O)
//!  limits  job  lease  settlement plain data: a job's limits, the job as data, the lease, settlements
//!  error  validate  keys          foundations: the one error, the one place for validation, key naming
//! ```
//!
//! A job's data flows down and back up this stack: `Queue::enqueue` →
//! `store::enqueue` → `lua/enqueue.lua`; a worker's claim and settle go
//! through `store::claim` and `store::settle`; the maintenance task reaps,
//! sweeps and schedules through the store too. `ARCHITECTURE.md` in the
//! repository walks through it and says how to add a script or a feature.
//!
//! # Modules
//!
//! - [`client`]: the [`Client`]: connections and maintenance shared by the
//!   queues of a process.
//! - [`queue`]: the [`Queue`] handle: enqueue, inspect, and the low-level
//!   claim/settle calls for people who write their own loop.
//! - [`worker`]: [`Consumer`] and [`Worker`]: claim, run a handler per job
//!   with heartbeats, settle with the fencing token; [`HandlerError`] says
//!   what happens to a job whose handler fails; the handler's [`Job`].
//! - [`kinds`]: several kinds of job on one queue: [`JobKind`] and the
//!   [`Kinds`] router that runs each job with its kind's handler.
//! - [`handlers`]: handlers beyond closures: [`with_state`] (application
//!   state without globals) and, with feature `tower`, tower services.
//! - [`job`]: jobs as data: enqueue options, a job's record, counts.
//! - [`lease`]: the [`Lease`], the handle of a claimed job.
//! - [`limits`]: a job's limits (attempts, stalls, backoff), fixed at enqueue.
//! - [`admin`]: operating a queue: pause and resume, list, retry, remove,
//!   cancel, promote, drain, obliterate; finding the queues on a server.
//! - [`lanes`]: a queue shared fairly between tenants, with caps and weights per lane.
//! - [`throttle`]: the global cap and the rate limits of a queue and its lanes.
//! - [`effect`]: exactly-once effects on at-least-once delivery: idempotency
//!   keys, effect markers and atomic completion.
//! - [`maintenance`]: the [`Reaper`], the consistency sweep, and the
//!   maintenance task that also runs the scheduling passes.
//! - `schedule` (feature `cron`, on by default; [the guide](crate::guide::schedules)): leaderless cron
//!   schedules stored in the server, one job per tick.
//! - [`partition`]: one logical queue spread over several, for a cluster.
//! - [`events`]: lifecycle events, one capped stream per queue written by
//!   the transitions themselves, read from any process with an [`EventReader`].
//! - `metrics` (feature `metrics`): counters, histograms and gauges through
//!   the `metrics` facade.
//! - `otel` (feature `otel`): a job runs in the OpenTelemetry trace of the
//!   request that enqueued it.
//! - [`health`]: the server self-check.
//! - [`durability`]: waiting for replicas or the disk after a write.
//! - [`acl`]: the least-privilege ACL of an echomq user.
//! - [`keys`]: key naming (the `{queue}` hash tag).
//! - [`error`]: the one [`Error`] type.
//! - [`testing`]: run a queue's jobs inline in a test, and see what was enqueued.
//! - `server` (feature `local-server`): a private `valkey-server` for tests.
//!
//! # The guide
//!
//! The [`guide`] holds the manual, one chapter per concept: the
//! [guarantees](guide::guarantees) and their limits, [how a job
//! runs](guide::how_a_job_runs), each feature, and operating queues and
//! servers. Benchmark reports, fault-suite results, the command line and
//! the dashboard have READMEs of their own in the repository
//! (`benches/`, `fault/`, `crates/`), and `ARCHITECTURE.md` says where
//! each module lives.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

pub mod acl;
pub mod admin;
pub mod batch;
pub mod client;
mod compression;
mod conn;
pub mod durability;
pub mod effect;
pub mod error;
pub mod events;
#[cfg(echomq_faults)]
mod faults;
pub mod flow;
pub mod guide;
pub mod handlers;
pub mod health;
pub mod job;
pub mod keys;
pub mod kinds;
pub mod lanes;
pub mod lease;
pub mod limits;
pub mod maintenance;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(feature = "otel")]
pub mod otel;
pub mod partition;
pub mod queue;
mod relay;
#[cfg(feature = "cron")]
pub mod schedule;
#[cfg(feature = "local-server")]
pub mod server;

mod settlement;
mod store;
pub mod testing;
pub mod throttle;
mod validate;
pub mod worker;

pub use batch::{Batch, BatchOptions, BatchStatus, Callback};
pub use client::{Client, ClientOptions};
pub use durability::Durability;
pub use effect::{EffectMarker, Effects, MarkerState, Once, OnceError};
pub use error::{Error, Result};
pub use events::{EventCursor, EventKind, EventReader, EventSettings, QueueEvent};
pub use flow::{Flow, FlowSpec, FlowStatus, Step};
pub use handlers::with_state;
pub use health::{ScriptLibraries, ServerReport};
pub use job::{Counts, EnqueueOptions, EnqueueStatus, Enqueued, JobError, JobInfo, JobKind, JobState, Unique};
pub use kinds::{KindRouter, Kinds, RawPayload};
pub use lease::Lease;
pub use limits::{Backoff, Limits};
pub use maintenance::{ReapReport, Reaper, ReaperHandle, SweepCursor, SweepReport};
pub use partition::PartitionedQueue;
pub use queue::{Outcome, Queue, QueueOptions, Retention, Settle, SettleOp, Settled};
/// The redis crate, whose types the API exposes (`redis::Client` for
/// [`Client::from_redis`], `redis::RedisError` inside [`Error::Redis`]).
pub use redis;
#[cfg(feature = "cron")]
pub use schedule::{Missed, Schedule, ScheduleInfo, ScheduleStatus, Scheduler};
/// The cancellation token a handler's job carries ([`Job::cancellation`]).
pub use tokio_util::sync::CancellationToken;
pub use worker::{
    Consumer, ConsumerHandle, Handler, HandlerError, HandlerResult, Job, Order, RetryContext, Worker, WorkerEvent,
    WorkerHandle,
};

/// The README's code blocks, compiled as doctests: the README is the
/// repository's front page, not the crate docs, so this hidden item
/// carries it (`scripts/check-readme-example` also runs its example).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
