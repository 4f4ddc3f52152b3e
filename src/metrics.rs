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
//! And by [`Queue::record_metrics`], which a worker calls on the interval
//! given to [`Worker::record_gauges_every`](crate::Worker::record_gauges_every),
//! or the application as often as it wants the gauges fresh (they are a
//! few reads of the server):
//!
//! | name | type | what |
//! | --- | --- | --- |
//! | `echomq_jobs` | gauge | jobs per state (label `state`), as [`Queue::counts`] |
//! | `echomq_queue_backlog` | gauge | jobs ready to run and waiting for a worker (pending): what an autoscaler scales on, with the lag |
//! | `echomq_queue_paused` | gauge | 1 while the queue is paused |
//! | `echomq_queue_lag_seconds` | gauge | how long the job next in line has waited since its creation ([`Queue::lag`]; 0 with none pending) |
//!
//! Each has a unit and a help text ([`describe`]), which a Prometheus
//! exporter prints as `# HELP` lines.

use std::time::Duration;

use metrics::{counter, gauge, histogram};

use crate::error::Result;
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
        Outcome::Expired => "expired",
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
        describe();
        let counts = self.counts().await?;
        let lag = self.lag().await?;
        let q = self.name().to_owned();
        for (state, n) in [
            ("pending", counts.pending),
            ("delayed", counts.delayed),
            ("active", counts.active),
            ("completed", counts.completed),
            ("failed", counts.failed),
            ("cancelled", counts.cancelled),
            ("expired", counts.expired),
        ] {
            #[allow(clippy::cast_precision_loss)]
            gauge!("echomq_jobs", "queue" => q.clone(), "state" => state).set(n as f64);
        }
        #[allow(clippy::cast_precision_loss)]
        gauge!("echomq_queue_backlog", "queue" => q.clone()).set(counts.pending as f64);
        gauge!("echomq_queue_paused", "queue" => q.clone()).set(if counts.paused { 1.0 } else { 0.0 });
        gauge!("echomq_queue_lag_seconds", "queue" => q).set(lag.as_secs_f64());
        Ok(counts)
    }
}

/// Gives every echomq metric its unit and help text (Prometheus's `# HELP`
/// and `# TYPE` lines), in the recorder installed now. Workers call it as
/// they start and [`Queue::record_metrics`] at each call, so an
/// application that installs its recorder first has nothing to do; one
/// that installs it later calls this once after.
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!("echomq_jobs_claimed_total", Unit::Count, "Jobs leased to this process");
    describe_histogram!(
        "echomq_job_wait_seconds",
        Unit::Seconds,
        "From a job's creation to its claim, on the server's clock"
    );
    describe_counter!(
        "echomq_handler_results_total",
        Unit::Count,
        "Handler attempts by how they ended (label result)"
    );
    describe_histogram!("echomq_job_run_seconds", Unit::Seconds, "How long handlers ran");
    describe_counter!(
        "echomq_jobs_settled_total",
        Unit::Count,
        "Settlements the server applied (label outcome)"
    );
    describe_counter!(
        "echomq_settle_failures_total",
        Unit::Count,
        "Settlements not applied (lease lost, or the outcome unknown)"
    );
    describe_counter!(
        "echomq_handlers_aborted_total",
        Unit::Count,
        "Handlers aborted after ignoring the cancellation of an attempt whose lease was lost"
    );
    describe_gauge!("echomq_jobs", Unit::Count, "Jobs per state (label state)");
    describe_gauge!(
        "echomq_queue_backlog",
        Unit::Count,
        "Jobs ready to run and waiting for a worker (pending)"
    );
    describe_gauge!("echomq_queue_paused", "1 while the queue is paused");
    describe_gauge!(
        "echomq_queue_lag_seconds",
        Unit::Seconds,
        "How long the job next in line has waited since its creation"
    );
}

/// Refreshes the gauges of `queues` every `every` until `stop` is
/// cancelled (a worker's `record_gauges_every`). A failed refresh is
/// logged and the next one comes as planned.
pub(crate) async fn refresh(queues: Vec<Queue>, every: Duration, stop: tokio_util::sync::CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        for q in &queues {
            if let Err(e) = q.record_metrics().await {
                tracing::warn!(queue = %q.name(), error = %e, "refreshing the queue's gauges failed");
            }
        }
    }
}
