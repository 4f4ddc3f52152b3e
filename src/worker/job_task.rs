//! One job's task: decode, wait for a free handler (a job leased ahead),
//! run the handler beside its heartbeat, settle, and keep the lease alive
//! until the settlement is answered.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout_at};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span, warn};

use super::backoff::RetryBackoff;
use super::erased::{JobParts, Outcome, Ready};
use super::event::{HandlerResult, WorkerEvent};
use super::handler::{HandlerError, Kind};
use super::heartbeat::{Beat, Heartbeat, LeaseClock};
use super::prefetch::{Slot, Turn};
use super::settler::Pending;
use super::{Ctx, RECHECK_AFTER_WAIT};
use crate::lease::Lease;
use crate::queue::{Queue, Settle};
use crate::validate::later;

/// How one attempt ended.
enum Ended {
    /// With the result to keep (JSON), if any.
    Ok(Option<String>),
    Err(HandlerError),
    Panicked,
    /// The lease was lost or could not be renewed in time: do not settle.
    LeaseLost,
    /// Shutdown grace over: release the job.
    Stopped,
    /// Past the job's timeout: a failed attempt.
    TimedOut,
    /// An operator's cancel request, and the handler did not complete the job.
    Cancelled,
}

impl Ended {
    fn result(&self) -> HandlerResult {
        match self {
            Ended::Ok(_) => HandlerResult::Ok,
            Ended::Err(e) => match e.kind() {
                Kind::Retry(_) => HandlerResult::Retry,
                Kind::Fail => HandlerResult::Fail,
                Kind::Snooze(_) => HandlerResult::Snooze,
                Kind::RateLimited(_) => HandlerResult::RateLimited,
            },
            Ended::Panicked => HandlerResult::Panicked,
            Ended::LeaseLost => HandlerResult::LeaseLost,
            Ended::Stopped => HandlerResult::Stopped,
            Ended::TimedOut => HandlerResult::TimedOut,
            Ended::Cancelled => HandlerResult::Cancelled,
        }
    }
}

/// A handler's result as the job keeps it: its JSON, or `None` for a
/// value that encodes as `null` (`()`), or one that cannot be kept (it
/// does not encode, or is over [`MAX_RESULT_BYTES`](crate::queue::MAX_RESULT_BYTES):
/// the job completes without it, and the log says why).
pub(crate) fn keepable<R: serde::Serialize>(result: &R) -> Option<String> {
    crate::queue::encode_result(result).unwrap_or_else(|e| {
        warn!(error = %e, "the handler's result cannot be kept; the job completes without it");
        None
    })
}

/// The settlement for a handler's error: a retry's delay is the error's
/// own (`retry_after`), else the consumer's backoff, else (`None`) the job's.
pub(crate) fn settlement(e: HandlerError, backoff: &RetryBackoff, lease: &Lease) -> Settle {
    match e.kind() {
        Kind::Retry(delay) => {
            let error = e.to_string();
            Settle::Retry {
                delay: delay.or_else(|| backoff.delay(lease, &error)),
                error,
            }
        }
        Kind::Fail => Settle::Fail { reason: e.to_string() },
        Kind::Snooze(delay) => Settle::Snooze { delay },
        Kind::RateLimited(retry_after) => Settle::RateLimited { retry_after },
    }
}

impl Ctx {
    /// Waits for a free handler for a job leased at `claimed_at` (a job
    /// leased ahead waits here; see [`Worker::prefetch`](super::Worker::prefetch)).
    async fn turn(&self, claimed_at: Instant) -> Turn {
        if self.stop.is_cancelled() {
            return Turn::Stopping;
        }
        if let Ok(p) = self.running.clone().try_acquire_owned() {
            return Turn::Now(p);
        }
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => Turn::Stopping,
            // `running` is never closed.
            p = self.running.clone().acquire_owned() => p.map_or(Turn::Stopping, Turn::AfterWait),
            _ = sleep_until(later(claimed_at, self.settings.prefetch_wait())) => Turn::TooLong,
        }
    }

    /// A handler that ran for `ran` has ended: frees its place for the
    /// next job.
    fn handler_ended(&self, running: OwnedSemaphorePermit, ran: Duration) {
        drop(running);
        if let Some(a) = &self.auto {
            super::prefetch::AutoPrefetch::record(&a.handler_us, ran);
            self.slots.lease_ahead(a.on(), self.settings.extra());
        }
    }

    /// Starts a job task for a fresh lease of queue `q`, holding `slot`.
    pub(super) fn start(self: &Arc<Self>, q: usize, lease: Lease, claimed_at: Instant, slot: Slot) {
        self.tasks.spawn(run_job(self.clone(), q, lease, claimed_at, slot));
    }

    /// Hands a finished job to the settler (with its slot, if it frees
    /// one). `kept`: the keeper renews the lease until the answer.
    fn settle(&self, q: usize, lease: Arc<Lease>, op: Settle, clock: LeaseClock, slot: Option<Slot>, kept: bool) {
        let pending = Pending {
            q,
            lease,
            op,
            clock,
            slot,
            kept,
        };
        if let Err(tokio::sync::mpsc::error::SendError(p)) = self.settle_tx.send(pending) {
            // The settler died (it is library code, but a bug must not
            // strand the job until its lease lapses): settle directly.
            warn!(job_id = %p.lease.id, "settler gone; settling directly");
            let queue = self.queue(p.q).clone();
            let keeper = self.keeper.clone();
            self.tasks.spawn(async move {
                if let Err(e) = queue.settle_many(&[(&p.lease, &p.op)]).await {
                    warn!(job_id = %p.lease.id, error = %e, "direct settlement failed; the reaper will return the job");
                }
                keeper.release(p.q, p.lease.token);
            });
        }
    }
}

/// Runs one leased job of queue `q`: decode, wait for a handler, run it
/// beside its heartbeat, settle.
async fn run_job(ctx: Arc<Ctx>, q: usize, lease: Lease, claimed_at: Instant, slot: Slot) {
    let queue = ctx.queue(q).clone();
    let span = info_span!(
        "job",
        queue = queue.name(),
        job_id = %lease.id,
        attempt = lease.attempt,
        token = lease.token,
        lane = lease.lane(),
        kind = lease.kind(),
        traceparent = lease.traceparent()
    );
    // Before the span is first entered: a started span's parent is fixed.
    #[cfg(feature = "otel")]
    crate::otel::set_parent(&span, lease.traceparent());
    async move {
        announce_claim(&ctx, &queue, &lease);
        let mut heart = Heartbeat::new(&ctx.settings, claimed_at);
        let ready = match ctx.queues[q].handler.decode(&lease) {
            Ok(r) => r,
            Err(e) => {
                warn!(error = %e, "payload does not decode; failing the job");
                let reason = format!("undecodable payload: {e}");
                let op = Settle::Fail { reason };
                ctx.settle(q, Arc::new(lease), op, heart.clock(), Some(slot), false);
                return;
            }
        };
        let lease = Arc::new(lease);
        let Some((running, slot)) = wait_for_handler(&ctx, q, &lease, claimed_at, &mut heart, slot).await else {
            return;
        };
        if lease.attempt == 1 && lease.created_ms > 0 {
            // Enqueue to the claim on the server's clock, then the wait
            // for a handler (a job leased ahead) on ours.
            let server = Duration::from_millis(lease.claimed_ms.saturating_sub(lease.created_ms));
            ctx.queues[q].tally.started(server + claimed_at.elapsed());
        }
        let mut attempt = Attempt::start(&ctx, &queue, &lease, ready);
        let ended = attempt.supervise(&ctx, &queue, &lease, &mut heart).await;
        let s = &ctx.settings;
        s.observers.emit(WorkerEvent::HandlerDone {
            queue: queue.name(),
            id: &lease.id,
            token: lease.token,
            result: ended.result(),
        });
        #[cfg(feature = "metrics")]
        crate::metrics::handler_done(queue.name(), ended.result().as_str(), attempt.started.elapsed());
        let op = attempt.conclude(&ctx, &queue, &lease, ended).await;
        // The handler is done: a prefetched job may start while this settles.
        ctx.handler_ended(running, attempt.started.elapsed());
        // A lost lease is not settled: the job is another attempt's now.
        let Some(op) = op else { return };
        // The keeper renews the lease until the settlement is answered: a
        // slow settle call must not let it lapse and the job run again.
        heart.settling();
        let clock = heart.clock();
        ctx.keeper.hold(q, lease.clone(), heart);
        ctx.settle(q, lease, op, clock, Some(slot), true);
    }
    .instrument(span)
    .await
}

/// Tells the observers (and the metrics) that the job was claimed.
fn announce_claim(ctx: &Ctx, queue: &Queue, lease: &Lease) {
    ctx.settings.observers.emit(WorkerEvent::Claimed {
        queue: queue.name(),
        id: &lease.id,
        token: lease.token,
        attempt: lease.attempt,
        deadline_ms: lease.deadline_ms,
        server_ms: lease.claimed_ms,
        lane: lease.lane(),
    });
    #[cfg(feature = "metrics")]
    crate::metrics::claimed(queue.name(), lease.created_ms(), lease.claimed_ms);
}

/// Waits for a free handler for a job claimed at `claimed_at`: its
/// handler's permit and its slot, or `None` when the job was handed back
/// instead (shutdown, a wait too long, a renewal that failed, a cancel
/// request made while it waited).
async fn wait_for_handler(
    ctx: &Ctx,
    q: usize,
    lease: &Arc<Lease>,
    claimed_at: Instant,
    heart: &mut Heartbeat,
    slot: Slot,
) -> Option<(OwnedSemaphorePermit, Slot)> {
    let s = &ctx.settings;
    let hand_back = |op: Settle, clock: LeaseClock, slot: Option<Slot>| {
        ctx.settle(q, lease.clone(), op, clock, slot, false);
    };
    match ctx.turn(claimed_at).await {
        Turn::Now(p) => Some((p, slot)),
        // A short wait with heartbeats on: start at once. A renewal per
        // job here was a second script call for every job leased ahead
        // (halving a fast consumer's throughput); a cancel request made
        // in so short a wait reaches the handler at its first
        // heartbeat, as it does a running job's.
        Turn::AfterWait(p) if s.heartbeat().is_some() && claimed_at.elapsed() < RECHECK_AFTER_WAIT => Some((p, slot)),
        Turn::AfterWait(p) => {
            // The job waited: renew its lease before it starts (with
            // heartbeats off the lease is the handler's whole time
            // budget, so the wait must not eat into it), and learn of a
            // cancel request made while it waited, so a job cancelled
            // before it started never runs.
            let sent = Instant::now();
            let queue = ctx.queue(q);
            match timeout_at(later(claimed_at, s.safety_window()), queue.renew(lease, s.lease)).await {
                Ok(Ok((deadline_ms, cancel))) => {
                    heart.renewed(sent);
                    s.observers.emit(WorkerEvent::Extended {
                        queue: queue.name(),
                        id: &lease.id,
                        token: lease.token,
                        deadline_ms,
                    });
                    if cancel {
                        debug!("cancel requested before the job started");
                        drop(p);
                        hand_back(Settle::Cancel { reason: String::new() }, heart.clock(), Some(slot));
                        return None;
                    }
                    Some((p, slot))
                }
                r => {
                    let error = match r {
                        Ok(Err(e)) => e.to_string(),
                        _ => "not confirmed within the safety window".to_owned(),
                    };
                    debug!(%error, "could not renew a job leased ahead; releasing it unstarted");
                    drop(p);
                    hand_back(Settle::Release, heart.clock(), Some(slot));
                    None
                }
            }
        }
        Turn::Stopping => {
            debug!("shutdown: releasing a job leased ahead, unstarted");
            hand_back(Settle::Release, heart.clock(), Some(slot));
            None
        }
        Turn::TooLong => {
            // The handlers are slow: hand the job back for another
            // consumer, and keep its slot until a handler frees up, so
            // this consumer does not fill that slot again only to wait
            // once more.
            debug!("no handler free in time: releasing a job leased ahead, unstarted");
            hand_back(Settle::Release, heart.clock(), None);
            tokio::select! {
                _ = ctx.stop.cancelled() => {}
                _ = ctx.running.clone().acquire_owned() => {}
            }
            drop(slot);
            None
        }
    }
}

/// One running attempt: the handler's task and how it is told to stop.
struct Attempt {
    handler: JoinHandle<Outcome>,
    /// Set once the handler's task has been joined (its handle must not
    /// be polled again).
    joined: bool,
    /// Fired to ask the handler to stop (lease lost, cancel request,
    /// shutdown past its grace).
    cancel: CancellationToken,
    /// Set when a renewal finds an operator's cancel request.
    requested: Arc<AtomicBool>,
    /// How long a handler asked to cancel gets to stop by itself.
    cancel_by: Option<Instant>,
    started: Instant,
}

impl Attempt {
    /// Starts the handler on its own task. `call` itself runs inside that
    /// task, so a handler that panics before returning its future is a
    /// panicked attempt too.
    fn start(ctx: &Ctx, queue: &Queue, lease: &Arc<Lease>, ready: Ready) -> Attempt {
        let cancel = ctx.hard_stop.child_token();
        let requested = Arc::new(AtomicBool::new(false));
        let parts = JobParts {
            queue: queue.clone(),
            lease: lease.clone(),
            cancel: cancel.clone(),
            requested: requested.clone(),
        };
        Attempt {
            handler: tokio::spawn(async move { ready(parts).await }.in_current_span()),
            joined: false,
            cancel,
            requested,
            cancel_by: None,
            started: Instant::now(),
        }
    }

    /// Runs the handler beside its heartbeats, its timeout, a cancel
    /// request and shutdown, until one of them ends the attempt.
    async fn supervise(&mut self, ctx: &Ctx, queue: &Queue, lease: &Lease, heart: &mut Heartbeat) -> Ended {
        let s = &ctx.settings;
        // The job's timeout, if it has one (a beat that never comes otherwise).
        let timeout = lease.limits.timeout;
        let times_out = later(self.started, timeout.unwrap_or_default());
        loop {
            tokio::select! {
                r = &mut self.handler => {
                    self.joined = true;
                    return match r {
                        // Completed, even after a cancel request: the work was done.
                        Ok(Ok(result)) => Ended::Ok(result),
                        Ok(Err(_)) | Err(_) if self.cancel_by.is_some() => Ended::Cancelled,
                        // It stopped because shutdown cancelled it: hand the job back.
                        Ok(Err(_)) if ctx.hard_stop.is_cancelled() => Ended::Stopped,
                        Ok(Err(e)) => Ended::Err(e),
                        Err(e) if e.is_panic() => Ended::Panicked,
                        Err(_) => Ended::Stopped,
                    };
                }
                _ = sleep_until(heart.next()) => {
                    match heart.beat(queue, lease, Some(&s.observers)).await {
                        Beat::Lost => return Ended::LeaseLost,
                        Beat::Alive { cancel: true } if self.cancel_by.is_none() => {
                            debug!("cancel requested; cancelling the handler");
                            self.requested.store(true, Ordering::Relaxed);
                            self.cancel_by = Some(later(Instant::now(), s.shutdown_timeout));
                            s.observers.emit(WorkerEvent::CancelRequested {
                                queue: queue.name(),
                                id: &lease.id,
                                token: lease.token,
                            });
                            self.cancel.cancel();
                        }
                        Beat::Alive { .. } => {}
                    }
                }
                _ = sleep_until(self.cancel_by.unwrap_or(times_out)), if self.cancel_by.is_some() => return Ended::Cancelled,
                _ = sleep_until(times_out), if timeout.is_some() => {
                    return if self.cancel_by.is_some() { Ended::Cancelled } else { Ended::TimedOut };
                }
                _ = ctx.hard_stop.cancelled() => {
                    return if self.cancel_by.is_some() { Ended::Cancelled } else { Ended::Stopped };
                }
            }
        }
    }

    /// Stops what is left of the handler and says how to settle the job:
    /// `None` after a lost lease (the job is not this attempt's to settle).
    async fn conclude(&mut self, ctx: &Ctx, queue: &Queue, lease: &Lease, ended: Ended) -> Option<Settle> {
        let backoff = &ctx.settings.backoff;
        Some(match ended {
            Ended::Ok(None) => Settle::Complete,
            Ended::Ok(Some(result)) => Settle::Return { result },
            Ended::Err(e) => {
                debug!(error = %e, "handler failed");
                settlement(e, backoff, lease)
            }
            Ended::Panicked => {
                warn!("handler panicked");
                Settle::Retry {
                    delay: backoff.delay(lease, "panicked"),
                    error: "panicked".to_owned(),
                }
            }
            Ended::LeaseLost => {
                // Another attempt may run the job soon: the handler gets the
                // lease's margin to stop by itself, then it is aborted.
                self.cancel.cancel();
                let s = &ctx.settings;
                let grace = s.lease_margin().min(s.shutdown_timeout);
                tokio::select! {
                    _ = &mut self.handler => {}
                    _ = ctx.hard_stop.cancelled() => self.abort().await,
                    _ = tokio::time::sleep(grace) => {
                        warn!(?grace, "the handler ignored its cancellation after its lease was lost; aborting it");
                        s.observers.emit(WorkerEvent::HandlerAborted {
                            queue: queue.name(),
                            id: &lease.id,
                            token: lease.token,
                        });
                        #[cfg(feature = "metrics")]
                        crate::metrics::handler_aborted(queue.name());
                        self.abort().await;
                    }
                }
                return None;
            }
            Ended::Cancelled => {
                if !self.joined {
                    self.abort().await;
                }
                Settle::Cancel { reason: String::new() }
            }
            Ended::Stopped => {
                self.cancel.cancel();
                if !self.joined {
                    // Counted as running until it has really stopped.
                    self.abort().await;
                }
                Settle::Release
            }
            Ended::TimedOut => {
                debug!("handler timed out");
                self.cancel.cancel();
                self.abort().await;
                Settle::Retry {
                    delay: backoff.delay(lease, "timeout"),
                    error: "timeout".to_owned(),
                }
            }
        })
    }

    /// Aborts the handler's task and waits until it has stopped.
    async fn abort(&mut self) {
        self.handler.abort();
        let _ = (&mut self.handler).await;
    }
}
