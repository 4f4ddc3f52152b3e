//! The guide: what echomq promises, how a job runs, and each feature with
//! its guarantees and limits, one chapter per concept.
//!
//! Read [`guarantees`] and [`how_a_job_runs`] first; the rest can be read
//! in any order, when the feature is needed.
//!
//! **The core**
//!
//! - [`guarantees`]: at-least-once, fencing, the server's clock, counters,
//!   a job's limits, durability, indeterminate enqueues, debounce.
//! - [`how_a_job_runs`]: leases and heartbeats, handler outcomes, backoff,
//!   batched settlement, prefetch, waiting, maintenance, shutdown,
//!   reconnects, observing.
//! - [`settings_and_errors`]: how builders check their values, the one
//!   error type, and errors as HTTP answers.
//! - [`web_apps`]: in a web application: an HTTP `Idempotency-Key`, errors
//!   as responses, a job as JSON, the shutdown order.
//! - [`effects`]: exactly-once effects on at-least-once delivery
//!   (idempotency keys, effect markers, atomic completion).
//! - [`outbox`]: enqueue in the application's Postgres transaction (the
//!   `echomq-outbox` crate): committed jobs relayed once, rolled-back ones
//!   never.
//!
//! **Features**
//!
//! - [`operating_a_queue`]: pause and resume, retry, promote, remove,
//!   drain, obliterate, list, cancel, finding queues.
//! - [`job_lifetimes`]: how long a job may wait before it is pointless
//!   (expires-at), and how long it keeps others like it out (unique
//!   lifetimes).
//! - [`schedules`]: leaderless cron schedules, one job per tick, missed
//!   ticks, daylight saving.
//! - [`batches`]: a group of jobs, on one queue or several, whose end
//!   enqueues callback jobs, each exactly once.
//! - [`flows`]: a graph of jobs in which a job runs after those it waits
//!   on, and reads their results.
//! - [`sequences`]: strict FIFO per key, across retries.
//! - [`lanes`]: tenants sharing a queue fairly, with caps and weights.
//! - [`kinds`]: several kinds of job on one queue, application state,
//!   tower services as handlers.
//! - [`throttles`]: a global concurrency cap and rate limits per queue and
//!   per lane.
//! - [`events`]: the lifecycle event stream of a queue.
//! - [`metrics`]: counters, histograms and gauges through the `metrics`
//!   facade.
//! - [`tracing`]: a job's span, and the OpenTelemetry trace of the request
//!   that enqueued it.
//! - [`testing`]: running a queue's jobs inline in a test.
//! - [`many_queues`]: one client for many queues, and one worker serving
//!   many queues.
//!
//! **Operating**
//!
//! - [`operating_the_server`]: the start-up self-check, the consistency
//!   sweep, the script libraries of older builds, retention, memory per
//!   job.
//! - [`production_connections`]: TLS, a least-privilege ACL user,
//!   Sentinel, durability with `WAIT` and `WAITAOF`.
//! - [`cluster`]: Valkey Cluster, resharding, failover, partitioned queues.
//!
//! **Elsewhere in the repository**
//!
//! - `README.md`: what echomq is, the two commands, the example.
//! - `ARCHITECTURE.md`: where each module lives, how a job's data flows,
//!   how to add a script.
//! - `benches/README.md`: the performance reports, and how to reproduce
//!   each figure.
//! - `fault/README.md`: the fault suite and the property tests, and what
//!   they have shown.
//! - `crates/echomq-cli/README.md`: the `echomq` command line.
//! - `crates/echomq-dashboard/README.md`: the web dashboard.
//! - `crates/echomq-outbox/README.md`: the transactional outbox crate.

#[doc = include_str!("../docs/guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("../docs/how-a-job-runs.md")]
pub mod how_a_job_runs {}

#[doc = include_str!("../docs/settings-and-errors.md")]
pub mod settings_and_errors {}

#[doc = include_str!("../docs/web-apps.md")]
pub mod web_apps {}

#[doc = include_str!("../docs/operating-a-queue.md")]
pub mod operating_a_queue {}

#[doc = include_str!("../docs/job-lifetimes.md")]
pub mod job_lifetimes {}

#[doc = include_str!("../docs/schedules.md")]
pub mod schedules {}

#[doc = include_str!("../docs/batches.md")]
pub mod batches {}

#[doc = include_str!("../docs/flows.md")]
pub mod flows {}

#[doc = include_str!("../docs/sequences.md")]
pub mod sequences {}

#[doc = include_str!("../docs/lanes.md")]
pub mod lanes {}

#[doc = include_str!("../docs/kinds.md")]
pub mod kinds {}

#[doc = include_str!("../docs/throttles.md")]
pub mod throttles {}

#[doc = include_str!("../docs/events.md")]
pub mod events {}

#[doc = include_str!("../docs/metrics.md")]
pub mod metrics {}

#[doc = include_str!("../docs/tracing.md")]
pub mod tracing {}

#[doc = include_str!("../docs/testing.md")]
pub mod testing {}

#[doc = include_str!("../docs/many-queues.md")]
pub mod many_queues {}

#[doc = include_str!("../docs/effects.md")]
pub mod effects {}

#[doc = include_str!("../docs/outbox.md")]
pub mod outbox {}

#[doc = include_str!("../docs/operating-the-server.md")]
pub mod operating_the_server {}

#[doc = include_str!("../docs/production-connections.md")]
pub mod production_connections {}

#[doc = include_str!("../docs/cluster.md")]
pub mod cluster {}
