//! Metrics through the [`metrics`] facade (feature `metrics`): whatever
//! recorder the application installs (a Prometheus exporter, say) gets
//! them; without one they cost a few atomic loads.
//!
//! Recorded by every [`Consumer`](crate::Consumer) and
//! [`Worker`](crate::Worker), each with the label `queue`:
//!
//! | name | type | what |
//! | --- | --- | --- |
//! | `echomq_jobs_claimed_total` | counter | jobs leased to this process |
//! | `echomq_job_wait_seconds` | histogram | from the job's creation (`Lease::created_ms`) to its claim, on the server's clock (a retried job's wait counts from its creation too) |
//! | `echomq_handler_results_total` | counter | handler attempts by how they ended (label `result`: `ok`, `retry`, `fail`, `panicked`, ... as [`HandlerResult::as_str`](crate::HandlerResult::as_str)) |
//! | `echomq_job_run_seconds` | histogram | how long handlers ran |
//! | `echomq_jobs_settled_total` | counter | settlements the server applied (label `outcome`: `completed`, `retried`, `failed`, `released`, `snoozed`, `cancelled`, `already`) |
//! | `echomq_settle_failures_total` | counter | settlements not applied (lease lost, or the outcome unknown) |
//! | `echomq_handlers_aborted_total` | counter | handlers aborted after ignoring the cancellation of an attempt whose lease was lost |
//!
//! And by [`Queue::record_metrics`], which the application calls as often
//! as it wants the gauges fresh (they are a few reads of the server):
//!
//! | name | type | what |
//! | --- | --- | --- |
//! | `echomq_jobs` | gauge | jobs per state (label `state`), as [`Queue::counts`] |
//! | `echomq_queue_paused` | gauge | 1 while the queue is paused |
//! | `echomq_queue_lag_seconds` | gauge | how long the job next in line has waited since its creation (0 with none pending; with lanes, the first pending job in id order stands for it) |

use std::time::Duration;

use metrics::{counter, gauge, histogram};

use crate::error::{Error, Result};
use crate::job::Counts;
use crate::queue::{Outcome, Queue};

/// A job was claimed at `claimed_ms` (server ms); it was created at
/// `created_ms` (0: unknown).
pub(crate) fn claimed(queue: &str, created_ms: u64, claimed_ms: u64) {
    counter!("echomq_jobs_claimed_total", "queue" => queue.to_owned()).increment(1);
    if created_ms > 0 {
        let wait = Duration::from_millis(claimed_ms.saturating_sub(created_ms));
        histogram!("echomq_job_wait_seconds", "queue" => queue.to_owned()).record(wait.as_secs_f64());
    }
}

/// A handler's attempt ended with `result`
/// ([`HandlerResult::as_str`](crate::HandlerResult::as_str)) after `ran`.
pub(crate) fn handler_done(queue: &str, result: &'static str, ran: Duration) {
    counter!("echomq_handler_results_total", "queue" => queue.to_owned(), "result" => result).increment(1);
    histogram!("echomq_job_run_seconds", "queue" => queue.to_owned()).record(ran.as_secs_f64());
}

/// The server applied a settlement.
pub(crate) fn settled(queue: &str, outcome: Outcome) {
    let name = match outcome {
        Outcome::Completed => "completed",
        Outcome::Retrying { .. } => "retried",
        Outcome::Failed => "failed",
        Outcome::Released => "released",
        Outcome::Snoozed { .. } => "snoozed",
        Outcome::Cancelled => "cancelled",
        Outcome::AlreadySettled => "already",
    };
    counter!("echomq_jobs_settled_total", "queue" => queue.to_owned(), "outcome" => name).increment(1);
}

/// A handler that ignored its cancellation after a lost lease was aborted.
pub(crate) fn handler_aborted(queue: &str) {
    counter!("echomq_handlers_aborted_total", "queue" => queue.to_owned()).increment(1);
}

/// A settlement was not applied.
pub(crate) fn settle_failed(queue: &str) {
    counter!("echomq_settle_failures_total", "queue" => queue.to_owned()).increment(1);
}

impl Queue {
    /// Sets the queue's gauges (see [`metrics`](crate::metrics)): jobs per
    /// state, paused, and the lag of the job next in line. Returns the
    /// counts it read. Call it on a timer in one process (every process
    /// would report the same numbers).
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// let mut tick = tokio::time::interval(std::time::Duration::from_secs(15));
    /// loop {
    ///     tick.tick().await;
    ///     queue.record_metrics().await?;
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    /// Server errors.
    pub async fn record_metrics(&self) -> Result<Counts> {
        let counts = self.counts().await?;
        let k = self.keys();
        let next: Vec<String> = redis::cmd("ZRANGE")
            .arg(&k.pending)
            .arg(0)
            .arg(0)
            .query_async(&mut self.conn())
            .await
            .map_err(Error::from_redis)?;
        let mut lag = Duration::ZERO;
        if let Some(id) = next.first() {
            let (ct, now): (Option<u64>, (u64, u64)) = redis::pipe()
                .cmd("HGET")
                .arg(k.job(id))
                .arg("ct")
                .cmd("TIME")
                .query_async(&mut self.conn())
                .await
                .map_err(Error::from_redis)?;
            let now_ms = now.0 * 1000 + now.1 / 1000;
            if let Some(ct) = ct {
                lag = Duration::from_millis(now_ms.saturating_sub(ct));
            }
        }
        let q = self.name().to_owned();
        for (state, n) in [
            ("pending", counts.pending),
            ("delayed", counts.delayed),
            ("active", counts.active),
            ("completed", counts.completed),
            ("failed", counts.failed),
            ("cancelled", counts.cancelled),
        ] {
            #[allow(clippy::cast_precision_loss)]
            gauge!("echomq_jobs", "queue" => q.clone(), "state" => state).set(n as f64);
        }
        gauge!("echomq_queue_paused", "queue" => q.clone()).set(if counts.paused { 1.0 } else { 0.0 });
        gauge!("echomq_queue_lag_seconds", "queue" => q).set(lag.as_secs_f64());
        Ok(counts)
    }
}
