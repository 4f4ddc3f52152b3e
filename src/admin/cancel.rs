//! Cancelling jobs: at once while they wait, by request while they run.

use super::lifecycle::check_ids;
use crate::error::{Error, Result};
use crate::job::JobState;
use crate::keys::validate_id;
use crate::queue::Queue;
use crate::store::Code;

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
    /// [`Error::InvalidId`], [`Error::JobNotFound`], server errors.
    pub async fn cancel(&self, id: &str) -> Result<Cancel> {
        validate_id("job id", id)?;
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
    /// server errors.
    pub async fn cancel_many(&self, ids: &[&str]) -> Result<Vec<(String, Result<Cancel>)>> {
        check_ids(ids)?;
        let k = self.keys();
        let mut call = crate::store::cancel::SPEC.call();
        call.key(&k.pending).key(&k.delayed).key(&k.cancelled);
        call.arg(&k.base).arg(self.options().keep_failed.arg());
        for id in ids {
            call.arg(*id);
        }
        let mut r = call.run(&mut self.conn()).await?;
        let _now = r.uint()?;
        let mut out = Vec::with_capacity(ids.len());
        while r.remaining() > 0 {
            let (id, code, state) = (r.string()?, r.code()?, r.string()?);
            let answer = match code {
                Code::Cancelled => Ok(Cancel::Cancelled),
                Code::Requested => Ok(Cancel::Requested),
                Code::Finished => Ok(Cancel::Finished(JobState::parse(&state).ok_or_else(|| {
                    Error::Protocol {
                        script: "cancel",
                        detail: format!("unknown state {state:?}"),
                    }
                })?)),
                Code::NotFound => Err(Error::JobNotFound(id.clone())),
                other => {
                    return Err(Error::Protocol {
                        script: "cancel",
                        detail: format!("unexpected status {other:?}"),
                    });
                }
            };
            out.push((id, answer));
        }
        Ok(out)
    }
}
