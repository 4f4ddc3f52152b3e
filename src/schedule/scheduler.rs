//! [`Scheduler`]: scheduling passes over one queue in a background task,
//! for a process that runs no consumer of the queue (a consumer's client
//! runs them in its maintenance task already).

use tokio::task::JoinHandle;
use tokio::time::sleep_until;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::pass::{SchedulesReport, maintain};
use crate::error::Result;
use crate::queue::Queue;

/// Runs a queue's scheduling passes: each when the next tick of a schedule
/// comes (on the server's clock), and at least every
/// [`LOOK_INTERVAL`](super::LOOK_INTERVAL). Any number may run, in any
/// processes, beside the maintenance of consumers: each tick still makes
/// one job. It never runs a handler.
///
/// ```no_run
/// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
/// let scheduler = echomq::schedule::Scheduler::new(queue).spawn();
/// // ...
/// scheduler.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Scheduler {
    queue: Queue,
}

impl Scheduler {
    /// A scheduler for `queue`.
    pub fn new(queue: Queue) -> Self {
        Scheduler { queue }
    }

    /// One pass ([`Queue::run_schedules`]).
    ///
    /// # Errors
    /// Server errors.
    pub async fn run_once(&self) -> Result<SchedulesReport> {
        self.queue.run_schedules().await
    }

    /// Runs passes until `shutdown` resolves; a failed pass is logged and
    /// tried again after [`RETRY_PAUSE`](super::RETRY_PAUSE). Each pass is the one a client's
    /// maintenance task runs, paced alike.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let next = maintain(&self.queue).await;
            tokio::select! {
                _ = &mut shutdown => break,
                _ = sleep_until(next) => {}
            }
        }
        debug!(queue = self.queue.name(), "scheduler stopped");
    }

    /// Spawns [`run`](Self::run) on the current Tokio runtime.
    pub fn spawn(self) -> SchedulerHandle {
        let stop = CancellationToken::new();
        let s = stop.clone();
        let join = tokio::spawn(self.run(s.cancelled_owned()));
        SchedulerHandle { stop, join }
    }
}

/// A running [`Scheduler`] task.
#[derive(Debug)]
#[must_use = "dropping the handle leaves the scheduler running; call shutdown()"]
pub struct SchedulerHandle {
    stop: CancellationToken,
    join: JoinHandle<()>,
}

impl SchedulerHandle {
    /// Stops the scheduler after its current pass.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.join.await;
    }
}
