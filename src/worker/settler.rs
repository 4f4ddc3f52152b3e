//! The settler: sends finished jobs' settlements in batches, and leases
//! the next jobs for the slots they free in the same call.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info_span, warn};

use super::Ctx;
use super::event::WorkerEvent;
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
    /// The job's queue (its index in the worker).
    pub q: usize,
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
/// was in flight goes in the next ([`Queue::settle_and_claim`]), one call
/// per queue (each queue is its own hash slot), the calls of several queues
/// side by side. The same call leases new jobs from its queue for the slots
/// the settled ones free, as many as the selection between queues gives it
/// (all of them for a one-queue worker), so a busy consumer makes a fraction
/// of a call per job and a consumer at concurrency 1 one call per job. An
/// idle one adds no delay. Runs until `done` fires and the channel is empty.
///
/// [`Queue::settle_and_claim`]: crate::Queue::settle_and_claim
pub(super) async fn settler(ctx: Arc<Ctx>, mut rx: mpsc::UnboundedReceiver<Pending>, done: CancellationToken) {
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
        let mut groups: BTreeMap<usize, Vec<Pending>> = BTreeMap::new();
        for p in batch.drain(..) {
            groups.entry(p.q).or_default().push(p);
        }
        let mut answers = Vec::with_capacity(groups.len());
        if groups.len() == 1 {
            for (q, group) in groups {
                answers.push((q, settle_batch(&ctx, q, group).await));
            }
        } else {
            let mut calls = JoinSet::new();
            for (q, group) in groups {
                let ctx = ctx.clone();
                calls.spawn(async move { (q, settle_batch(&ctx, q, group).await) });
            }
            while let Some(r) = calls.join_next().await {
                match r {
                    Ok(a) => answers.push(a),
                    // Its items are lost with the panic: the reaper returns them.
                    Err(e) => warn!(error = %e, "a settle call's task died"),
                }
            }
        }
        for (q, (leases, mut slots)) in answers {
            for lease in leases {
                match slots.pop() {
                    // Leased just as shutdown began: hand it straight back here,
                    // not through a job task, which shutdown may already have
                    // stopped waiting for.
                    Some(slot) if ctx.stop.is_cancelled() => batch.push(Pending {
                        q,
                        clock: LeaseClock::new(crate::validate::later(sent, ctx.settings.lease)),
                        lease: Arc::new(lease),
                        op: Settle::Release,
                        slot: Some(slot),
                        kept: false,
                    }),
                    Some(slot) => ctx.start(q, lease, sent, slot),
                    None => break,
                }
            }
        }
    }
}

/// Reports one item's answer to the observers and the log.
fn report(ctx: &Ctx, p: Pending, result: std::result::Result<Settled, &Error>) -> Option<Slot> {
    let (id, token, op) = (p.lease.id.as_str(), p.lease.token, p.op.op());
    let queue = ctx.queue(p.q).name();
    let span = info_span!("job", queue, job_id = %id, attempt = p.lease.attempt, lane = p.lease.lane());
    #[cfg(feature = "otel")]
    crate::otel::set_parent(&span, p.lease.traceparent());
    let _span = span.entered();
    let s = &ctx.settings;
    match result {
        Ok(done) => {
            debug!(outcome = ?done.outcome, "{op}");
            ctx.queues[p.q].tally.settled(done.outcome);
            #[cfg(feature = "metrics")]
            crate::metrics::settled(queue, done.outcome);
            s.observers.emit(WorkerEvent::Settled {
                queue,
                id,
                token,
                op,
                outcome: done.outcome,
                server_ms: done.server_ms,
            });
        }
        Err(error) => {
            warn!(%error, "{op} not applied");
            #[cfg(feature = "metrics")]
            crate::metrics::settle_failed(queue);
            s.observers.emit(WorkerEvent::SettleFailed {
                queue,
                id,
                token,
                op,
                error,
            });
        }
    }
    if p.kept {
        ctx.keeper.release(p.q, token);
    }
    p.slot
}

/// Sends one batch of queue `q` (claiming from `q` the jobs the selection
/// gives it for the slots the batch frees, unless stopping), retrying
/// transient failures for the items whose lease has not lapsed (repeats
/// are safe: an applied settlement answers "already settled"). Returns the
/// new leases and the settled items' slots for them (dropping a slot frees
/// it for the claim loop).
async fn settle_batch(ctx: &Ctx, q: usize, mut batch: Vec<Pending>) -> (Vec<Lease>, Vec<Slot>) {
    #[cfg(echomq_faults)]
    if crate::faults::active("settler-panic") {
        panic!("fault: settler-panic");
    }
    let s = &ctx.settings;
    let mut pause = Duration::from_millis(10);
    let mut first_try = true;
    loop {
        for p in batch.iter() {
            s.observers.emit(WorkerEvent::SettleSent {
                queue: ctx.queue(q).name(),
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
            let freed = batch.iter().filter(|p| p.slot.is_some()).count();
            ctx.turns().share(q, freed, Instant::now())
        };
        first_try = false;
        let sent = Instant::now();
        match ctx.queue(q).settle_and_claim_or_wait(&items, claim, s.lease).await {
            Ok((results, leases, wait)) => {
                if claim > 0 {
                    ctx.claimed(q, claim, leases.len(), wait);
                }
                if let Some(a) = &ctx.auto {
                    AutoPrefetch::record(&a.round_trip_us, sent.elapsed());
                    ctx.slots.lease_ahead(a.on(), s.extra());
                }
                let mut slots = Vec::with_capacity(batch.len());
                for (p, r) in batch.into_iter().zip(results) {
                    slots.extend(report(ctx, p, r.as_ref().map(|d| *d)));
                }
                return (leases, slots);
            }
            Err(error) => {
                let now = Instant::now();
                let retry = error.is_transient();
                let (keep, give_up): (Vec<Pending>, Vec<Pending>) =
                    batch.drain(..).partition(|p| retry && now + pause < p.clock.until());
                if claim > 0 {
                    // The claim's outcome is unknown; the resend claims nothing.
                    ctx.claimed(q, claim, claim, None);
                }
                for p in give_up {
                    warn!(%error, job_id = %p.lease.id, "not applied; the reaper will return the job when its lease lapses");
                    drop(report(ctx, p, Err(&error)));
                }
                batch = keep;
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
