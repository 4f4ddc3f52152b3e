//! The settler: sends finished jobs' settlements in batches, and leases
//! the next jobs for the slots they free in the same call.

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info_span, warn};

use super::Ctx;
use super::event::Event;
use super::handler::Handler;
use super::heartbeat::LeaseClock;
use super::prefetch::{AutoPrefetch, Slot};
use crate::error::Error;
use crate::lease::Lease;
use crate::queue::{Settle, Settled};

/// Most settlements sent in one call.
const MAX_SETTLE_BATCH: usize = 256;

/// A settlement waiting for the settler. It holds the job's slot, so the
/// claim loop leases no more jobs than `concurrency + prefetch` until it is
/// applied (a prefetched job released unstarted keeps its slot itself).
pub(super) struct Pending {
    pub lease: Arc<Lease>,
    pub op: Settle,
    /// Past this the lease has lapsed on the server: stop retrying. The
    /// job's task keeps renewing the lease (and moving this) until the
    /// settlement is answered.
    pub clock: LeaseClock,
    pub slot: Option<Slot>,
    /// The keeper renews its lease until the settlement is answered.
    pub kept: bool,
}

/// Sends settlements in batches: whatever finished while the previous call
/// was in flight goes in the next ([`Queue::settle_and_claim`]), and the
/// same call leases new jobs for the slots the settled ones free, so a busy
/// consumer makes a fraction of a call per job and a consumer at
/// concurrency 1 one call per job. An idle one adds no delay. Runs until
/// `done` fires and the channel is empty.
///
/// [`Queue::settle_and_claim`]: crate::Queue::settle_and_claim
pub(super) async fn settler<T, H>(ctx: Arc<Ctx<H>>, mut rx: mpsc::UnboundedReceiver<Pending>, done: CancellationToken)
where
    T: DeserializeOwned + Send + 'static,
    H: Handler<T>,
{
    let mut batch: Vec<Pending> = Vec::new();
    loop {
        if batch.is_empty() {
            tokio::select! {
                biased;
                p = rx.recv() => match p { Some(p) => batch.push(p), None => return },
                _ = done.cancelled() => match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(_) => return,
                },
            }
        }
        while batch.len() < MAX_SETTLE_BATCH {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        let sent = Instant::now();
        let (leases, mut slots) = settle_batch(&ctx, &mut batch).await;
        for lease in leases {
            match slots.pop() {
                // Leased just as shutdown began: hand it straight back here,
                // not through a job task, which shutdown may already have
                // stopped waiting for.
                Some(slot) if ctx.stop.is_cancelled() => batch.push(Pending {
                    clock: LeaseClock::new(crate::settings::later(sent, ctx.settings.lease)),
                    lease: Arc::new(lease),
                    op: Settle::Release,
                    slot: Some(slot),
                    kept: false,
                }),
                Some(slot) => ctx.start::<T>(lease, sent, slot),
                None => break,
            }
        }
    }
}

/// Reports one item's answer to the observers and the log.
fn report<H>(ctx: &Ctx<H>, p: Pending, result: std::result::Result<Settled, &Error>) -> Option<Slot> {
    let (id, token, op) = (p.lease.id.as_str(), p.lease.token, p.op.op());
    let _span =
        info_span!("job", queue = ctx.queue.name(), job_id = %id, attempt = p.lease.attempt, lane = p.lease.lane())
            .entered();
    let s = &ctx.settings;
    match result {
        Ok(done) => {
            debug!(outcome = ?done.outcome, "{op}");
            s.observers.emit(Event::Settled {
                id,
                token,
                op,
                outcome: done.outcome,
                server_ms: done.server_ms,
            });
        }
        Err(error) => {
            warn!(%error, "{op} not applied");
            s.observers.emit(Event::SettleFailed { id, token, op, error });
        }
    }
    if p.kept {
        ctx.keeper.release(token);
    }
    p.slot
}

/// Sends one batch (claiming as many jobs as it settles, unless stopping),
/// retrying transient failures for the items whose lease has not lapsed
/// (repeats are safe: an applied settlement answers "already settled").
/// Empties `batch`; returns the new leases and the settled items' slots
/// for them (dropping a slot frees it for the claim loop).
async fn settle_batch<H>(ctx: &Ctx<H>, batch: &mut Vec<Pending>) -> (Vec<Lease>, Vec<Slot>) {
    #[cfg(echomq_faults)]
    if crate::faults::active("settler-panic") {
        panic!("fault: settler-panic");
    }
    let s = &ctx.settings;
    let mut pause = Duration::from_millis(10);
    let mut first_try = true;
    loop {
        for p in batch.iter() {
            s.observers.emit(Event::SettleSent {
                id: &p.lease.id,
                token: p.lease.token,
                op: p.op.op(),
            });
        }
        // Slots owed since leasing ahead stopped are retired here rather
        // than reused for the next leases.
        let mut owed = ctx.slots.owed();
        for p in batch.iter_mut().filter(|p| p.slot.is_some()) {
            if owed == 0 {
                break;
            }
            drop(p.slot.take());
            owed -= 1;
        }
        let items: Vec<(&Lease, &Settle)> = batch.iter().map(|p| (&*p.lease, &p.op)).collect();
        // A resend after a failure of unknown outcome claims nothing: jobs
        // the lost call may have leased would be stranded twice over.
        let claim = if ctx.stop.is_cancelled() || !first_try {
            0
        } else {
            batch.iter().filter(|p| p.slot.is_some()).count()
        };
        first_try = false;
        let sent = Instant::now();
        match ctx.queue.settle_and_claim(&items, claim, s.lease).await {
            Ok((results, leases)) => {
                if let Some(a) = &ctx.auto {
                    AutoPrefetch::record(&a.round_trip_us, sent.elapsed());
                    ctx.slots.lease_ahead(a.on(), s.extra());
                }
                let mut slots = Vec::with_capacity(batch.len());
                for (p, r) in batch.drain(..).zip(results) {
                    slots.extend(report(ctx, p, r.as_ref().map(|d| *d)));
                }
                return (leases, slots);
            }
            Err(error) => {
                let now = Instant::now();
                let retry = error.is_transient();
                let (keep, give_up): (Vec<Pending>, Vec<Pending>) =
                    batch.drain(..).partition(|p| retry && now + pause < p.clock.until());
                for p in give_up {
                    warn!(%error, job_id = %p.lease.id, "not applied; the reaper will return the job when its lease lapses");
                    drop(report(ctx, p, Err(&error)));
                }
                *batch = keep;
                if batch.is_empty() {
                    return (Vec::new(), Vec::new());
                }
                debug!(%error, items = batch.len(), "settlement failed; retrying");
                sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
        }
    }
}
