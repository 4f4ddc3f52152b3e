//! The low-level worker calls: claim a lease, settle it (complete, retry,
//! fail, release, snooze), renew it. A [`Consumer`](crate::Consumer) makes
//! these calls; people who write their own loop make them too.

use std::time::Duration;

use super::{MAX_BATCH, Queue};
use crate::error::{Error, Result, truncate};
use crate::job::{delay_ms, millis};
use crate::lease::Lease;
use crate::limits::Limits;
use crate::settlement::{MAX_ERROR_BYTES, MAX_RESULT_BYTES, Outcome, Settle, Settled, encode_result};
use crate::store::{Code, Reply};

/// The script's op letter, delay and text for this item, or why it
/// cannot be sent.
fn encode(op: &Settle) -> Result<(&'static str, String, String)> {
    Ok(match op {
        Settle::Complete => ("c", "0".into(), String::new()),
        Settle::Return { result } => {
            if result.len() > MAX_RESULT_BYTES {
                return Err(Error::PayloadTooLarge {
                    size: result.len(),
                    limit: MAX_RESULT_BYTES,
                });
            }
            if serde_json::from_str::<serde::de::IgnoredAny>(result).is_err() {
                return Err(Error::InvalidOption {
                    name: "result",
                    reason: "is not JSON text".into(),
                });
            }
            ("c", "0".into(), result.clone())
        }
        Settle::Retry { delay, error } => (
            "r",
            match delay {
                Some(d) => delay_ms("retry delay", *d)?.to_string(),
                None => String::new(),
            },
            truncate(error, MAX_ERROR_BYTES),
        ),
        Settle::Fail { reason } => ("f", "0".into(), truncate(reason, MAX_ERROR_BYTES)),
        Settle::Release => ("l", "0".into(), String::new()),
        Settle::Snooze { delay } => ("s", delay_ms("snooze delay", *delay)?.to_string(), String::new()),
        Settle::Cancel { reason } => ("x", "0".into(), truncate(reason, MAX_ERROR_BYTES)),
        Settle::RateLimited { retry_after } => (
            "h",
            delay_ms("rate limited retry_after", *retry_after)?.to_string(),
            String::new(),
        ),
    })
}

/// Reads claim's `deadline, wait, id, token, attempt, failures, limits, payload, lane, kind, created, traceparent, ...`
/// tail: the leases, and how long until a rate limit that stopped the claim
/// lets it lease again (`None`: nothing to wait for).
fn read_leases(q: &Queue, r: &mut Reply, claimed_ms: u64) -> Result<(Vec<Lease>, Option<Duration>)> {
    let deadline_ms = r.uint()?;
    let wait = Some(Duration::from_millis(r.uint()?)).filter(|w| !w.is_zero());
    let mut leases = Vec::with_capacity(r.remaining() / 10);
    while r.remaining() > 0 {
        leases.push(Lease {
            queue: q.base().clone(),
            id: r.string()?,
            token: r.uint()?,
            attempt: r.uint()?,
            failures: r.uint()?,
            limits: Limits::decode(&r.bytes()?),
            payload: r.bytes()?,
            lane: Some(r.string()?).filter(|l| !l.is_empty()),
            kind: Some(r.string()?).filter(|k| !k.is_empty()),
            created_ms: r.uint()?,
            traceparent: Some(r.string()?).filter(|t| !t.is_empty()),
            deadline_ms,
            claimed_ms,
            cancel_requested: false,
        });
    }
    Ok((leases, wait))
}

/// Maps a settling script's code: `Ok` for a move made or already made,
/// the typed error for a missing job or a lost lease.
pub(crate) fn owned(script: &'static str, lease: &Lease, code: Code) -> Result<Code> {
    match code {
        Code::NotFound => Err(Error::JobNotFound(lease.id.clone())),
        Code::LeaseLost => Err(Error::LeaseLost {
            id: lease.id.clone(),
            token: lease.token,
        }),
        c @ (Code::Ok | Code::Already | Code::Failed | Code::Cancelled) => Ok(c),
        other => Err(Error::Protocol {
            script,
            detail: format!("unexpected status {other:?}"),
        }),
    }
}

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
    /// a lane at its cap gives none (the README's "Lanes"). The queue's
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
    /// clock. `None` when no limit stopped it (nothing was ready, or the
    /// global cap was reached: a freed slot pushes a wake-up, see the
    /// README's "Global concurrency and rate limits"). A loop that finds no
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
        crate::settings::count("claim batch size", max, 1, MAX_BATCH)?;
        let lease_ms = lease_ms(lease)?;
        let k = self.keys();
        let mut call = crate::store::claim::SPEC.call();
        call.key(&k.pending)
            .key(&k.active)
            .key(&k.delayed)
            .key(&k.wake)
            .key(&k.token)
            .key(&k.meta);
        call.arg(&k.base).arg(lease_ms).arg(max).arg(self.holder());
        #[cfg(echomq_faults)]
        call.arg(crate::faults::client_now_ms());
        let mut r = call.run(&mut self.conn()).await?;
        let claimed_ms = r.uint()?;
        read_leases(self, &mut r, claimed_ms)
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
        crate::settings::count("settle batch size", items.len(), 0, MAX_BATCH)?;
        crate::settings::count("claim batch size", claim, 0, MAX_BATCH)?;
        let lease_ms = if claim > 0 { lease_ms(lease)? } else { 0 };
        // Items that cannot be sent answer for themselves; the rest go.
        let encoded: Vec<Result<(&'static str, String, String)>> = items
            .iter()
            .map(|(l, op)| {
                l.check_queue(self.base())?;
                encode(op)
            })
            .collect();
        let sent = encoded.iter().filter(|e| e.is_ok()).count();
        let k = self.keys();
        let mut call = crate::store::settle::SPEC.call();
        call.key(&k.active)
            .key(&k.pending)
            .key(&k.delayed)
            .key(&k.completed)
            .key(&k.failed)
            .key(&k.wake)
            .key(&k.token)
            .key(&k.meta)
            .key(&k.cancelled);
        let opts = self.options();
        call.arg(&k.base)
            .arg(opts.keep_completed.arg())
            .arg(opts.keep_failed.arg())
            .arg(sent);
        for ((l, _), e) in items.iter().zip(&encoded) {
            if let Ok((code, delay, text)) = e {
                call.arg(*code).arg(&l.id).arg(l.token).arg(delay).arg(text);
            }
        }
        if claim > 0 {
            call.arg(lease_ms).arg(claim).arg(self.holder());
            #[cfg(echomq_faults)]
            call.arg(crate::faults::client_now_ms());
        }
        let mut r = call.run(&mut self.conn()).await?;
        if sent > 0 {
            self.confirm_settled(sent).await;
        }
        let now = r.uint()?;
        let mut out = Vec::with_capacity(items.len());
        for ((l, op), e) in items.iter().zip(encoded) {
            if let Err(e) = e {
                out.push(Err(e));
                continue;
            }
            let (code, due) = (r.code()?, r.uint()?);
            let due_ms = (due > 0).then_some(due);
            let outcome = match owned("settle", l, code) {
                Err(e) => {
                    out.push(Err(e));
                    continue;
                }
                Ok(Code::Already) => Outcome::AlreadySettled,
                Ok(Code::Failed) => Outcome::Failed,
                Ok(Code::Cancelled) => Outcome::Cancelled,
                Ok(_) => match op {
                    Settle::Complete | Settle::Return { .. } => Outcome::Completed,
                    Settle::Retry { .. } => Outcome::Retrying { due_ms },
                    Settle::Fail { .. } => Outcome::Failed,
                    Settle::Release => Outcome::Released,
                    Settle::Snooze { .. } | Settle::RateLimited { .. } => Outcome::Snoozed { due_ms },
                    Settle::Cancel { .. } => Outcome::Cancelled,
                },
            };
            out.push(Ok(Settled {
                outcome,
                server_ms: now,
            }));
        }
        let (leases, wait) = if claim > 0 {
            read_leases(self, &mut r, now)?
        } else {
            (Vec::new(), None)
        };
        Ok((out, leases, wait))
    }

    /// Waits until settlements just sent are as durable as the queue asks.
    /// A shortfall is logged, not returned: the settlements are applied
    /// and cannot be taken back, and a settlement lost in a failover only
    /// makes its job run again.
    pub(crate) async fn confirm_settled(&self, n: usize) {
        let d = self.options().durability;
        if !d.waits() {
            return;
        }
        match d.confirm(&mut self.conn()).await {
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
        let k = self.keys();
        let mut call = crate::store::extend::SPEC.call();
        call.key(k.job(&lease.id))
            .key(&k.active)
            .arg(&lease.id)
            .arg(lease.token)
            .arg(ms);
        #[cfg(echomq_faults)]
        call.arg(crate::faults::client_now_ms());
        let mut r = call.run(&mut self.conn()).await?;
        let (code, _now) = (r.code()?, r.uint()?);
        owned("extend", lease, code)?;
        Ok((r.uint()?, r.uint()? == 1))
    }
}
