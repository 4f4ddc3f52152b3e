//! Priorities that age: a per-queue rate at which a waiting job's
//! effective priority rises with its wait (the guide's "How a job runs",
//! Priorities), decided by the pending score a job gets when it becomes
//! ready, so nothing is rescored while it waits.

use std::time::Duration;

use super::Queue;
use crate::error::{Error, Result};
use crate::store;

/// The longest wait worth one priority level that
/// [`Queue::set_priority_aging`] takes: one hour.
pub const MAX_PRIORITY_AGING: Duration = Duration::from_secs(3_600);

impl Queue {
    /// Makes a waiting job's priority rise by one level for each `per_level`
    /// it has waited (from when it became ready: enqueued, or due), or
    /// (`None`) turns that off. With it, a job of priority `p` is taken
    /// before every job of priority `p + d` that became ready more than
    /// `d × per_level` after it, so a steady stream of high-priority jobs
    /// cannot keep it waiting for ever: it starts once the jobs that were
    /// ready before that point have run. Without it (the default), a higher
    /// priority always goes first. Within one priority, jobs keep their
    /// order (to the millisecond; one enqueue call's jobs in their order).
    ///
    /// The pending order with aging does not compare with the order
    /// without it, so the setting changes only on a queue with no pending,
    /// delayed or active job (drain it, or set it when the queue is made).
    /// Every process follows the stored setting at its next enqueue.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use std::time::Duration;
    /// // a job of priority 0 overtakes priority-10 jobs enqueued 50 s after it
    /// queue.set_priority_aging(Some(Duration::from_secs(5))).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for `per_level` outside 1 ms to
    /// [`MAX_PRIORITY_AGING`], or while the queue holds jobs (nothing
    /// changes); server errors.
    pub async fn set_priority_aging(&self, per_level: Option<Duration>) -> Result<()> {
        let ms = match per_level {
            None => 0,
            Some(d) => {
                crate::validate::duration("priority_aging", d, Duration::from_millis(1), MAX_PRIORITY_AGING)?;
                u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
            }
        };
        let r = store::aging::run(&mut self.conn(), self.keys(), Some(ms)).await?;
        if !r.applied {
            return Err(Error::InvalidOption {
                name: "priority_aging",
                reason: format!(
                    "queue {} holds {} pending, delayed or active jobs: change it on an empty queue (drain it \
                     first), since the order with aging does not compare with the order without",
                    self.name(),
                    r.jobs
                ),
            });
        }
        Ok(())
    }

    /// The queue's priority aging ([`set_priority_aging`](Self::set_priority_aging)):
    /// the wait worth one priority level, `None` when it is off.
    ///
    /// # Errors
    /// Server errors.
    pub async fn priority_aging(&self) -> Result<Option<Duration>> {
        let r = store::aging::run(&mut self.conn(), self.keys(), None).await?;
        Ok((r.ms > 0).then(|| Duration::from_millis(r.ms)))
    }
}
