//! The low-level worker calls: claim a lease, settle it (complete, retry,
//! fail, release, snooze), renew it. A [`Consumer`](crate::Consumer) makes
//! these calls; people who write their own loop make them too.

use std::time::Duration;

use super::{MAX_BATCH, Queue};
use crate::durability::{Confirmed, Durability};
use crate::error::{Error, Result};
use crate::job::millis;
use crate::lease::Lease;
use crate::settlement::{Settle, Settled, encode_result};
use crate::store;
use crate::store::claim::Claim;

/// The lease length in whole milliseconds, at least 1.
fn lease_ms(lease: Duration) -> Result<u64> {
    let ms = millis("lease", lease)?;
    if ms == 0 {
        return Err(Error::InvalidOption {
            name: "lease",
            reason: "must be at least 1 ms".into(),
        });
    }
    Ok(ms)
}

impl Queue {
    /// Leases up to `max` ready jobs for `lease` (deadline = server time +
    /// lease). Promotes due delayed jobs first. Returns an empty vector
    /// when nothing is ready. While lanes are in use, lanes take turns and
    /// a lane at its cap gives none ([`crate::guide::lanes`]). The queue's
    /// global cap and the rate limits of the queue and its lanes lease
    /// fewer jobs, or none ([`claim_or_wait`](Self::claim_or_wait) says
    /// how long until a rate limit lets it lease again).
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use std::time::Duration;
    /// for lease in queue.claim(10, Duration::from_secs(30)).await? {
    ///     // ... do the work ...
    ///     queue.complete(&lease).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for `max` outside 1..=[`MAX_BATCH`] or a
    /// lease under 1 ms; server errors.
    pub async fn claim(&self, max: usize, lease: Duration) -> Result<Vec<Lease>> {
        Ok(self.claim_or_wait(max, lease).await?.0)
    }

    /// [`claim`](Self::claim), and how long to wait before claiming again
    /// when a rate limit (the queue's, or a lane's that left the claim
    /// short) or a handler's [`rate_limited`](crate::HandlerError::rate_limited)
    /// stopped it: the time until its window reopens, on the server's
    /// clock; or, when the queue's rate limit left room for fewer jobs
    /// than asked, the time until the window's next slot frees. `None`
    /// when no limit stopped it (nothing was ready, or the
    /// global cap was reached: a freed slot pushes a wake-up, see the
    /// guide's [throttles](crate::guide::throttles)). A loop that finds no
    /// job sleeps this long rather than polling.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use std::time::Duration;
    /// let (leases, wait) = queue.claim_or_wait(10, Duration::from_secs(30)).await?;
    /// if leases.is_empty() {
    ///     tokio::time::sleep(wait.unwrap_or(Duration::from_secs(1))).await;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`claim`](Self::claim).
    pub async fn claim_or_wait(&self, max: usize, lease: Duration) -> Result<(Vec<Lease>, Option<Duration>)> {
        crate::validate::count("claim batch size", max, 1, MAX_BATCH)?;
        let claim = Claim {
            lease_ms: lease_ms(lease)?,
            max,
            holder: self.holder(),
        };
        let keep_failed = self.options().keep_failed.arg();
        let claimed = store::claim::run(&mut self.conn(), self.keys(), self.base(), &keep_failed, &claim).await?;
        Ok((claimed.leases, claimed.wait))
    }

    /// Settles many leased jobs in one script call, each fenced by its own
    /// token; the answer holds one result per item, in order. This is how
    /// a [`Consumer`](crate::Consumer) settles: whatever finished while the
    /// previous call was in flight goes in the next one.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use std::time::Duration;
    /// use echomq::Settle;
    /// let leases = queue.claim(2, Duration::from_secs(30)).await?;
    /// let later = Settle::Retry { delay: Some(Duration::from_secs(60)), error: "busy".into() };
    /// let items: Vec<_> = leases.iter().zip([&Settle::Complete, &later]).collect();
    /// for (item, result) in items.iter().zip(queue.settle_many(&items).await?) {
    ///     println!("{}: {:?}", item.0.id(), result.map(|s| s.outcome));
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// The outer error is a server or transport failure for the whole
    /// batch (safe to resend: applied items answer
    /// [`Outcome::AlreadySettled`](crate::Outcome::AlreadySettled)). Inner errors are per item, and an
    /// item that cannot be sent does not hold back the others:
    /// [`Error::LeaseLost`], [`Error::JobNotFound`], [`Error::WrongQueue`],
    /// [`Error::InvalidOption`] (a delay over
    /// [`MAX_DELAY`](crate::limits::MAX_DELAY)).
    pub async fn settle_many(&self, items: &[(&Lease, &Settle)]) -> Result<Vec<Result<Settled>>> {
        Ok(self.settle_and_claim(items, 0, Duration::ZERO).await?.0)
    }

    /// [`settle_many`](Self::settle_many), then leases up to `claim` jobs
    /// for `lease` in the same script call (as [`claim`](Self::claim), but
    /// without promoting due delayed jobs first: on this hot path that is
    /// left to the reaper and to plain claims): a consumer refills the
    /// slots its finished jobs free without another round trip.
    ///
    /// # Errors
    /// As [`settle_many`](Self::settle_many) and [`claim`](Self::claim).
    pub async fn settle_and_claim(
        &self,
        items: &[(&Lease, &Settle)],
        claim: usize,
        lease: Duration,
    ) -> Result<(Vec<Result<Settled>>, Vec<Lease>)> {
        let (settled, leases, _) = self.settle_and_claim_or_wait(items, claim, lease).await?;
        Ok((settled, leases))
    }

    /// As [`settle_and_claim`](Self::settle_and_claim), also saying how
    /// long until a rate limit that stopped the claim lets it lease again
    /// (as [`claim_or_wait`](Self::claim_or_wait)).
    pub(crate) async fn settle_and_claim_or_wait(
        &self,
        items: &[(&Lease, &Settle)],
        claim: usize,
        lease: Duration,
    ) -> Result<(Vec<Result<Settled>>, Vec<Lease>, Option<Duration>)> {
        crate::validate::count("settle batch size", items.len(), 0, MAX_BATCH)?;
        crate::validate::count("claim batch size", claim, 0, MAX_BATCH)?;
        let lease_ms = if claim > 0 { lease_ms(lease)? } else { 0 };
        // Items that cannot be sent answer for themselves; the rest go.
        let items: Vec<Result<store::settle::Item>> = items
            .iter()
            .map(|(l, op)| {
                l.check_queue(self.base())?;
                store::settle::Item::new(l, op)
            })
            .collect();
        let sent = items.iter().filter(|e| e.is_ok()).count();
        let opts = self.options();
        let batch = store::settle::Batch {
            keep_completed: &opts.keep_completed.arg(),
            keep_failed: &opts.keep_failed.arg(),
            items,
            claim: (claim > 0).then(|| Claim {
                lease_ms,
                max: claim,
                holder: self.holder(),
            }),
            durability: if sent > 0 { opts.durability } else { Durability::Primary },
        };
        let answer = store::settle::run(&mut self.conn(), self.keys(), self.base(), batch).await?;
        if sent > 0 {
            self.report_settled(sent, answer.confirmed);
        }
        if answer.outbox {
            // a flow step's end for its home queue: the maintenance task
            // relays it within RELAY_HOT_INTERVAL, not at its next look
            self.upkeep().heat(self.base());
        }
        Ok((answer.settled, answer.claimed.leases, answer.claimed.wait))
    }

    /// Says when settlements just sent fell short of the queue's
    /// durability. Logged, not returned: the settlements are applied and
    /// cannot be taken back, and a settlement lost in a failover only makes
    /// its job run again.
    pub(crate) fn report_settled(&self, n: usize, confirmed: Confirmed) {
        match confirmed {
            Ok(None) => {}
            Ok(Some(s)) => tracing::warn!(
                queue = self.name(),
                settlements = n,
                acked = s.acked,
                wanted = s.wanted,
                "settlements not confirmed as durable in time (applied on the primary)"
            ),
            Err(e) => {
                tracing::warn!(queue = self.name(), settlements = n, error = %e, "could not confirm settlements' durability")
            }
        }
    }

    /// One settlement through the batch script.
    async fn settle_one(&self, lease: &Lease, op: Settle) -> Result<Settled> {
        let mut out = self.settle_many(&[(lease, &op)]).await?;
        out.pop().unwrap_or_else(|| {
            Err(Error::Protocol {
                script: "settle",
                detail: "no answer for the item".into(),
            })
        })
    }

    /// Settles a leased job as completed.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the lease expired and was reaped or a newer
    /// claim owns the job (nothing changes); [`Error::JobNotFound`];
    /// [`Error::WrongQueue`] for a lease of another queue; server errors
    /// (safe to retry: a repeat answers [`Outcome::AlreadySettled`](crate::Outcome::AlreadySettled), even
    /// after a later attempt has settled the job).
    pub async fn complete(&self, lease: &Lease) -> Result<Settled> {
        self.settle_one(lease, Settle::Complete).await
    }

    /// Settles a leased job as completed and keeps `result` with it
    /// (shown as [`JobInfo::result`](crate::JobInfo::result); a value that
    /// encodes as JSON `null` keeps nothing). A
    /// [`Consumer`](crate::Consumer) does this with what its handler
    /// returns.
    ///
    /// # Errors
    /// As [`complete`](Self::complete), and [`Error::Encode`] or
    /// [`Error::PayloadTooLarge`] (over [`MAX_RESULT_BYTES`](super::MAX_RESULT_BYTES)) for a result
    /// that cannot be kept (nothing is settled then).
    pub async fn complete_with_result<R: serde::Serialize + ?Sized>(
        &self,
        lease: &Lease,
        result: &R,
    ) -> Result<Settled> {
        let op = match encode_result(result)? {
            Some(result) => Settle::Return { result },
            None => Settle::Complete,
        };
        self.settle_one(lease, op).await
    }

    /// Settles a leased job whose attempt failed: counts a failure and
    /// schedules the job again after `delay` (`None`: after the job's
    /// backoff), or fails it for good once its failures reach its
    /// `max_attempts`. `error` is stored, cut to [`MAX_ERROR_BYTES`](super::MAX_ERROR_BYTES).
    ///
    /// # Errors
    /// As [`complete`](Self::complete), and [`Error::InvalidOption`] for a
    /// delay over [`MAX_DELAY`](crate::limits::MAX_DELAY).
    pub async fn retry(&self, lease: &Lease, delay: Option<Duration>, error: &str) -> Result<Settled> {
        self.settle_one(
            lease,
            Settle::Retry {
                delay,
                error: error.to_owned(),
            },
        )
        .await
    }

    /// Settles a leased job as failed for good, with `reason` (cut to
    /// [`MAX_ERROR_BYTES`](super::MAX_ERROR_BYTES)).
    ///
    /// # Errors
    /// As [`complete`](Self::complete).
    pub async fn fail(&self, lease: &Lease, reason: &str) -> Result<Settled> {
        self.settle_one(
            lease,
            Settle::Fail {
                reason: reason.to_owned(),
            },
        )
        .await
    }

    /// Hands a leased job back unfinished: it is pending again at once and
    /// counts as neither a failure nor a stall.
    ///
    /// # Errors
    /// As [`complete`](Self::complete).
    pub async fn release(&self, lease: &Lease) -> Result<Settled> {
        self.settle_one(lease, Settle::Release).await
    }

    /// Puts a leased job back to run again after `delay`, counting neither
    /// a failure nor a stall (its next delivery's attempt number is one
    /// higher).
    ///
    /// # Errors
    /// As [`retry`](Self::retry).
    pub async fn snooze(&self, lease: &Lease, delay: Duration) -> Result<Settled> {
        self.settle_one(lease, Settle::Snooze { delay }).await
    }

    /// Puts a leased job back to run again after `retry_after` without
    /// counting a failure (as [`snooze`](Self::snooze)), and stops the
    /// claims of its lane, or of the whole queue for a job without a lane,
    /// until `retry_after` has passed on the server's clock: across every
    /// consumer in every process, as a remote API that answered "429, retry
    /// after X" would want. A later stop never shortens an earlier one.
    /// The outcome reads [`Outcome::Snoozed`](crate::Outcome::Snoozed).
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use std::time::Duration;
    /// for lease in queue.claim(1, Duration::from_secs(30)).await? {
    ///     // the remote API said "slow down for 2 s"
    ///     queue.rate_limited(&lease, Duration::from_secs(2)).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`retry`](Self::retry).
    pub async fn rate_limited(&self, lease: &Lease, retry_after: Duration) -> Result<Settled> {
        self.settle_one(lease, Settle::RateLimited { retry_after }).await
    }

    /// Renews a lease: the new deadline is server time + `duration`.
    /// Updates `lease.deadline_ms` (and
    /// [`Lease::cancel_requested`], when an operator has asked to cancel
    /// the job) and returns the new deadline.
    ///
    /// # Errors
    /// [`Error::LeaseLost`], [`Error::JobNotFound`], [`Error::WrongQueue`],
    /// [`Error::InvalidOption`] for a lease under 1 ms, server errors.
    pub async fn extend(&self, lease: &mut Lease, duration: Duration) -> Result<u64> {
        let (deadline_ms, cancel) = self.renew(lease, duration).await?;
        lease.deadline_ms = deadline_ms;
        lease.cancel_requested |= cancel;
        Ok(deadline_ms)
    }

    /// [`extend`](Self::extend) without updating the lease: the new
    /// deadline, and whether an operator asked to cancel the job.
    pub(crate) async fn renew(&self, lease: &Lease, duration: Duration) -> Result<(u64, bool)> {
        lease.check_queue(self.base())?;
        let ms = lease_ms(duration)?;
        let renewed = store::extend::run(&mut self.conn(), self.keys(), lease, ms).await?;
        Ok((renewed.deadline_ms, renewed.cancel_requested))
    }
}
