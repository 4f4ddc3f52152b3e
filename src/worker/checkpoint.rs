//! A handler's checkpoints, and iterable jobs: a long job that works
//! through a cursor in steps, saving it after each, so that the next
//! attempt (after a stall, a release at shutdown, a retry) resumes where
//! the last one stopped instead of starting over.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::handler::HandlerError;
use super::job::Job;
use crate::error::Result;

impl<T> Job<T> {
    /// Stores `value` (any JSON value, at most
    /// [`MAX_CHECKPOINT_BYTES`](crate::queue::MAX_CHECKPOINT_BYTES) encoded)
    /// with the job, replacing its last checkpoint, for the next attempt's
    /// [`checkpoint_as`](Self::checkpoint_as). Fenced by this attempt's
    /// lease: a stale attempt's checkpoint is refused
    /// ([`Error::LeaseLost`](crate::Error::LeaseLost)) like its settlement,
    /// and changes nothing.
    ///
    /// ```
    /// # async fn demo(job: echomq::Job<()>) -> echomq::Result<()> {
    /// job.checkpoint(&serde_json::json!({"next_page": 7})).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::LeaseLost`](crate::Error::LeaseLost),
    /// [`Error::JobNotFound`](crate::Error::JobNotFound),
    /// [`Error::PayloadTooLarge`](crate::Error::PayloadTooLarge),
    /// [`Error::Encode`](crate::Error::Encode), server errors.
    pub async fn checkpoint<C: Serialize + ?Sized>(&self, value: &C) -> Result<()> {
        self.handle().checkpoint(self.lease(), value).await
    }

    /// The job's last checkpoint, stored by this attempt or an earlier one,
    /// decoded; `Ok(None)` when none was stored. One read of the server.
    ///
    /// # Errors
    /// [`Error::Decode`](crate::Error::Decode) when it does not decode into
    /// `C`; server errors.
    pub async fn checkpoint_as<C: DeserializeOwned>(&self) -> Result<Option<C>> {
        self.handle().checkpoint_of(self.id()).await
    }

    /// Removes the job's checkpoint (fenced as
    /// [`checkpoint`](Self::checkpoint)): the next attempt starts over.
    ///
    /// # Errors
    /// As [`checkpoint`](Self::checkpoint).
    pub async fn clear_checkpoint(&self) -> Result<()> {
        self.handle().clear_checkpoint(self.lease()).await
    }

    /// Works through a cursor in steps, resuming from the job's checkpoint:
    /// starts at the saved cursor (or at `start` when there is none), calls
    /// `step` with it, saves the cursor `step` returns as the checkpoint,
    /// and goes on until `step` answers `None` (done: `Ok(())`, and the
    /// handler returns it). Between steps it stops when the attempt is
    /// cancelled (shutdown past its grace, a lost lease, a cancel request),
    /// with an error the worker turns into what the cancellation means (a
    /// release at shutdown, nothing after a lost lease, the cancelled state
    /// on request): the next attempt resumes after the last saved step. A
    /// step's error is returned as it is (a retry resumes after the last
    /// saved step too). A step runs at least once per attempt that reaches
    /// it, so a step whose save was lost runs again: make each step
    /// idempotent, or as small as the work it may repeat.
    ///
    /// ```no_run
    /// # async fn export(job: echomq::Job<String>) -> Result<(), echomq::HandlerError> {
    /// // Pages of 100 rows; the cursor is the next page number.
    /// job.iterate(0u64, |page| async move {
    ///     let rows = fetch_page(page).await?;
    ///     write_rows(&rows).await?;
    ///     Ok(if rows.len() < 100 { None } else { Some(page + 1) })
    /// })
    /// .await
    /// # }
    /// # async fn fetch_page(_: u64) -> Result<Vec<u8>, echomq::HandlerError> { Ok(vec![]) }
    /// # async fn write_rows(_: &[u8]) -> Result<(), echomq::HandlerError> { Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A step's error; the checkpoint's read or save failing (a lost lease
    /// among them), as a retry.
    pub async fn iterate<C, F, Fut>(&self, start: C, mut step: F) -> std::result::Result<(), HandlerError>
    where
        C: Serialize + DeserializeOwned,
        F: FnMut(C) -> Fut,
        Fut: Future<Output = std::result::Result<Option<C>, HandlerError>>,
    {
        let mut cursor = self.checkpoint_as::<C>().await?.unwrap_or(start);
        loop {
            if self.is_cancelled() {
                return Err(HandlerError::retry("stopped between steps: cancelled"));
            }
            match step(cursor).await? {
                None => return Ok(()),
                Some(next) => {
                    self.checkpoint(&next).await?;
                    cursor = next;
                }
            }
        }
    }
}
