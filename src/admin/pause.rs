//! Pausing a queue, enforced by the claim script on the server.

use crate::error::Result;
use crate::queue::Queue;
use crate::store;

impl Queue {
    /// Pauses the queue: once this returns, no consumer in any process
    /// leases a job of it until [`resume`](Self::resume) (the claim script
    /// checks the pause in the same atomic step that leases). Jobs already
    /// running finish and settle; enqueue, retries, reaping and promotion
    /// go on, so the backlog waits in pending. Returns the server's clock
    /// at the pause (ms since the Unix epoch); pausing a paused queue
    /// changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// queue.pause().await?;
    /// assert!(queue.counts().await?.paused);
    /// queue.resume().await?; // waiting consumers wake at once
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Server errors.
    pub async fn pause(&self) -> Result<u64> {
        self.set_paused(true).await
    }

    /// Resumes a paused queue and wakes its waiting consumers. Returns the
    /// server's clock then.
    ///
    /// # Errors
    /// Server errors.
    pub async fn resume(&self) -> Result<u64> {
        self.set_paused(false).await
    }

    /// Whether the queue is paused (also in [`Counts`](crate::Counts)).
    ///
    /// # Errors
    /// Server errors.
    pub async fn is_paused(&self) -> Result<bool> {
        Ok(self.counts().await?.paused)
    }

    async fn set_paused(&self, paused: bool) -> Result<u64> {
        store::pause::run(&mut self.conn(), self.keys(), paused).await
    }
}
