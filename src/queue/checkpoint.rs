//! Checkpoints: a small value an attempt stores with its job, fenced by
//! its lease, that the next attempt reads to resume where it stopped (the
//! guide's "How a job runs", Checkpoints).

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Queue;
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::store;

/// Largest checkpoint an attempt may store, encoded: 64 KiB.
pub const MAX_CHECKPOINT_BYTES: usize = 64 * 1024;

impl Queue {
    /// Stores `value` (any JSON value, at most [`MAX_CHECKPOINT_BYTES`]
    /// encoded) as the checkpoint of the job `lease` holds, replacing the
    /// last one, for the next attempt to read with
    /// [`checkpoint_of`](Self::checkpoint_of) after a stall, a release or a
    /// retry. Fenced like a settlement: an attempt that lost its lease
    /// stores nothing and gets [`Error::LeaseLost`]. A handler calls
    /// [`Job::checkpoint`](crate::Job::checkpoint) instead.
    ///
    /// # Errors
    /// [`Error::LeaseLost`], [`Error::JobNotFound`], [`Error::WrongQueue`],
    /// [`Error::PayloadTooLarge`], [`Error::Encode`], server errors.
    pub async fn checkpoint<C: Serialize + ?Sized>(&self, lease: &Lease, value: &C) -> Result<()> {
        lease.check_queue(self.base())?;
        let bytes = serde_json::to_vec(value).map_err(Error::Encode)?;
        if bytes.len() > MAX_CHECKPOINT_BYTES {
            return Err(Error::PayloadTooLarge {
                size: bytes.len(),
                limit: MAX_CHECKPOINT_BYTES,
            });
        }
        self.write_checkpoint(lease, &bytes).await
    }

    /// Removes the checkpoint of the job `lease` holds (fenced as
    /// [`checkpoint`](Self::checkpoint)), so the next attempt starts over.
    ///
    /// # Errors
    /// [`Error::LeaseLost`], [`Error::JobNotFound`], [`Error::WrongQueue`],
    /// server errors.
    pub async fn clear_checkpoint(&self, lease: &Lease) -> Result<()> {
        lease.check_queue(self.base())?;
        self.write_checkpoint(lease, b"").await
    }

    /// The fenced write of `lease`'s checkpoint (empty: none).
    async fn write_checkpoint(&self, lease: &Lease, bytes: &[u8]) -> Result<()> {
        let field = store::progress::Field::Checkpoint;
        store::progress::run(&mut self.conn(), self.keys(), lease.id(), lease.token(), field, bytes).await
    }

    /// The checkpoint job `id`'s attempts stored last, decoded; `Ok(None)`
    /// when there is none (or the job is gone).
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad id; [`Error::Decode`] when it does
    /// not decode into `C`; server errors.
    pub async fn checkpoint_of<C: DeserializeOwned>(&self, id: &str) -> Result<Option<C>> {
        crate::validate::id("job id", id)?;
        let raw: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(self.keys().job(id))
            .arg("ck")
            .query_async(&mut self.conn())
            .await
            .map_err(Error::from_redis)?;
        raw.map(|b| {
            serde_json::from_slice(&b).map_err(|source| Error::Decode {
                id: id.to_owned(),
                source,
            })
        })
        .transpose()
    }
}
