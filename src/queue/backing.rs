//! What a [`Queue`] stands on: the [`Link`] to the server and the process's
//! [`Upkeep`] (reaping, sweeping, scheduling), both shared by every queue a
//! [`Client`](crate::Client) opens. The upkeep is a trait so that this
//! layer never reaches up to the maintenance services that implement it.

use std::sync::Arc;
use std::time::Duration;

use super::{Queue, QueueOptions};
use crate::conn::Link;
use crate::error::Result;

/// The background upkeep of a process's queues, as a queue and the workers
/// over it use it ([`crate::maintenance`] implements it).
pub(crate) trait Upkeep: Send + Sync + 'static {
    /// Reaps `queue` every `interval` while it is busy, until the guard is
    /// dropped; starts the upkeep task if none runs.
    fn register(&self, queue: &Queue, interval: Duration) -> UpkeepGuard;
    /// Starts the upkeep task on the current runtime unless one runs.
    fn ensure_running(&self);
    /// A worker of this process leased from the queue with key base `base`:
    /// reap it at its busy interval from now on.
    fn nudge(&self, base: &str);
    /// The relay had messages from the queue with key base `base`, or
    /// delivered messages to it: look at its outbox often for a while.
    fn heat(&self, base: &str);
    /// A schedule of the queue with key base `base` changed in this
    /// process: look at its schedules now.
    #[cfg(feature = "cron")]
    fn nudge_schedules(&self, base: &str);
}

/// Keeps a queue under upkeep while it lives ([`Upkeep::register`]).
pub(crate) type UpkeepGuard = Box<dyn Send + Sync>;

/// The link and upkeep a queue is opened on: a cheap `Clone`.
#[derive(Clone)]
pub(crate) struct Backing {
    pub(crate) link: Link,
    pub(crate) upkeep: Arc<dyn Upkeep>,
}

impl Backing {
    /// Opens queue `name` with `opts` on this backing.
    pub(crate) async fn open(&self, name: &str, opts: QueueOptions) -> Result<Queue> {
        Queue::open(self.clone(), name, opts).await
    }
}
