//! A transactional outbox for [echomq]: a web handler writes its
//! job into the application's own Postgres transaction, and a relay moves
//! each committed row into echomq once.
//!
//! Enqueueing straight to Valkey from a handler that also writes Postgres
//! has two bad orders: enqueue before the commit and a rolled-back
//! request leaves a job for a row that does not exist; enqueue after it
//! and a crash in between loses the job. With the outbox the job is a row
//! of the same transaction, so it exists exactly when the transaction
//! commits.
//!
//! - [`Outbox::enqueue`] inserts a row into `echomq_outbox` through the
//!   caller's transaction, with [`JobOptions`] (the same as
//!   [`echomq::EnqueueOptions`]: id, dedup, delay or run-at time,
//!   priority, lane, kind, limits).
//! - [`Relay`] takes committed rows in batches (`FOR UPDATE SKIP LOCKED`,
//!   so any number of relays share the work), enqueues each under its
//!   row's job id, and deletes the rows echomq acknowledged. A relay that
//!   dies between the enqueue and the delete leaves the rows; the next
//!   batch enqueues the same ids again, which echomq answers as existing.
//!   `LISTEN/NOTIFY` wakes it at each commit; polling is the safety net.
//! - [`Outbox::migrate`] applies the crate's migrations; [`Outbox::backlog`]
//!   counts the rows waiting and the age of the oldest.
//!
//! The guide's chapter (`docs/outbox.md`) and the crate's README describe
//! the table, the guarantees and their bounds, and the measured figures.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use echomq_outbox::{JobOptions, Outbox, Relay, RelayOptions};
//!
//! let pool = sqlx::PgPool::connect("postgres://app@localhost/app").await?;
//! let outbox = Outbox::new();
//! outbox.migrate(&pool).await?;
//!
//! // In the request: the user row and its job commit together.
//! let mut tx = pool.begin().await?;
//! sqlx::query("INSERT INTO users (email) VALUES ($1)").bind("ada@example.com").execute(&mut *tx).await?;
//! let entry = outbox
//!     .enqueue(&mut tx, "emails", &serde_json::json!({"to": "ada@example.com"}), &JobOptions::new().kind("welcome"))
//!     .await?;
//! tx.commit().await?;
//!
//! // In the worker process (or the `echomq-outbox-relay` binary):
//! let client = echomq::Client::connect("redis://127.0.0.1:6379/").await?;
//! let relay = Relay::new(pool, client, RelayOptions::new())?.spawn();
//! # relay.shutdown().await;
//! # let _ = entry; Ok(()) }
//! ```
//!
//! Features: `local-postgres` ([`testing::LocalPostgres`], a private
//! Postgres for tests), `cli` (the relay binary), `metrics` (backlog
//! gauges and a relayed-rows counter through the `metrics` facade).

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub mod faults;
mod options;
mod outbox;
mod relay;
#[cfg(feature = "local-postgres")]
pub mod testing;

pub use error::{Error, Result};
pub use options::{JobOptions, MAX_DELAY, MAX_ID_BYTES, MAX_KIND_BYTES, MAX_QUEUE_NAME_BYTES};
pub use outbox::{Backlog, FailedRow, MAX_BULK_ROWS, Outbox, OutboxEntry};
#[cfg(feature = "metrics")]
pub use relay::BACKLOG_METRICS_INTERVAL;
pub use relay::{
    BatchReport, DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TIMEOUT, DEFAULT_ERROR_BACKOFF, DEFAULT_POLL_INTERVAL,
    DEFAULT_REDELIVERY_GUARD, MAX_BATCH_SIZE, NOTIFY_CHANNEL, Relay, RelayHandle, RelayOptions,
};

// The README's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
