//! Cancelling jobs: at once while they wait, by request while they run.

use super::lifecycle::check_ids;
use crate::error::{Error, Result};
use crate::job::JobState;
use crate::queue::Queue;
use crate::store;
use crate::store::cancel::Cancelled;

/// What [`Queue::cancel`] did to one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cancel {
    /// It was pending or delayed: it is cancelled now and will not run.
    Cancelled,
    /// It is running: the request is recorded. Its consumer sees it at the
    /// next lease renewal (within one heartbeat interval) and fires the
    /// handler's [`Job::cancellation`](crate::Job::cancellation); the job
    /// ends cancelled unless the handler completes it anyway (then the work
    /// was done and it is completed). If its worker dies instead, the
    /// reaper makes it cancelled rather than running it again.
    Requested,
    /// It had already finished in this state; nothing changed.
    Finished(JobState),
}

impl Queue {
    /// Cancels job `id`: a pending or delayed job at once
    /// ([`Cancel::Cancelled`]); a running one by request
    /// ([`Cancel::Requested`]), fenced like any settlement. Cancelled jobs
    /// are in [`JobState::Cancelled`], counted in
    /// [`Counts::cancelled`](crate::Counts::cancelled), listed with
    /// [`list`](Self::list), kept and trimmed as failed ones are
    /// ([`QueueOptions::keep_failed`](crate::QueueOptions::keep_failed)),
    /// and release their dedup marker.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use echomq::admin::Cancel;
    /// match queue.cancel("report-7").await? {
    ///     Cancel::Cancelled => println!("it will not run"),
    ///     Cancel::Requested => println!("its handler is asked to stop"),
    ///     Cancel::Finished(state) => println!("too late: {state:?}"),
    ///     _ => {}
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidId`], [`Error::JobNotFound`],
    /// [`Error::NotDurable`] (as [`cancel_many`](Self::cancel_many)),
    /// server errors.
    pub async fn cancel(&self, id: &str) -> Result<Cancel> {
        crate::validate::id("job id", id)?;
        let (_, r) = self.cancel_many(&[id]).await?.pop().ok_or_else(|| Error::Protocol {
            script: "cancel",
            detail: "no answer for the job".into(),
        })?;
        r
    }

    /// [`cancel`](Self::cancel) for up to [`MAX_IDS`](super::MAX_IDS) jobs in
    /// one script call; answers per id, in order (a missing job answers
    /// [`Error::JobNotFound`] in its place).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for no ids or too many, [`Error::InvalidId`];
    /// [`Error::NotDurable`] when the queue's
    /// [`Durability`](crate::Durability) was not met (the cancels are made
    /// on the primary: cancel again); server errors.
    pub async fn cancel_many(&self, ids: &[&str]) -> Result<Vec<(String, Result<Cancel>)>> {
        check_ids(ids)?;
        let keep_failed = self.options().keep_failed.arg();
        let durability = self.options().durability;
        let (answers, confirmed) =
            store::cancel::run(&mut self.conn(), self.keys(), &keep_failed, ids, durability).await?;
        // A cancel answered for is as durable as an enqueue: one lost in a
        // failover would let the job run.
        if let Some(s) = confirmed? {
            return Err(Error::NotDurable {
                ids: ids.iter().map(|&id| id.to_owned()).collect(),
                acked: s.acked,
                wanted: s.wanted,
            });
        }
        let out = answers
            .into_iter()
            .map(|(id, answer)| {
                let answer = answer.map(|a| match a {
                    Cancelled::Now => Cancel::Cancelled,
                    Cancelled::Requested => Cancel::Requested,
                    Cancelled::Finished(state) => Cancel::Finished(state),
                });
                (id, answer)
            })
            .collect();
        Ok(out)
    }
}
