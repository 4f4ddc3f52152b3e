//! The claim loop, which leases jobs while slots are free from the queues
//! the selection gives them to, and the wake-up, which waits with one
//! blocking call on the wake lists of all idle queues.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, sleep_until};
use tracing::{debug, warn};

use super::Ctx;
use super::MAX_CLAIM_BATCH;
use super::prefetch::Slot;
use crate::conn::Dedicated;
use crate::error::Error;

/// How long a push to a worker's own wake list lives: it is popped at once
/// by the wake-up it ends; one left by a worker that died goes with it.
const OWN_WAKE_TTL_MS: u64 = 60_000;

/// Claims while slots are free, until `stop`. (At full load the settler
/// refills most slots itself, in the call that settles their jobs.)
pub(super) async fn claim_loop(ctx: Arc<Ctx>) {
    loop {
        let first = tokio::select! {
            p = ctx.slots.acquire() => match p { Some(p) => p, None => break },
            _ = ctx.stop.cancelled() => break,
        };
        let mut permits = vec![first];
        while permits.len() < MAX_CLAIM_BATCH {
            match ctx.slots.try_acquire() {
                Some(p) => permits.push(p),
                None => break,
            }
        }
        let now = Instant::now();
        let (plan, hold_ends) = {
            let mut s = ctx.turns();
            (s.plan(permits.len(), now), s.hold_ends(now))
        };
        if plan.is_empty() {
            // No queue is ready: wait for a wake-up (or a poll) or a hold's end.
            drop(permits);
            let far = now + ctx.settings.poll_interval;
            tokio::select! {
                _ = ctx.work.notified() => {}
                _ = sleep_until(hold_ends.unwrap_or(far).min(far)) => {}
                _ = ctx.stop.cancelled() => break,
            }
            continue;
        }
        // Slots the plan did not use go back now.
        let used: usize = plan.iter().map(|(_, n)| n).sum();
        permits.truncate(used);
        if let [(q, _)] = plan[..] {
            claim(&ctx, q, permits).await;
            continue;
        }
        // Several queues: their claims go out together.
        let mut claims = JoinSet::new();
        for (q, n) in plan {
            let slots: Vec<Slot> = permits.drain(..n).collect();
            let ctx = ctx.clone();
            claims.spawn(async move { claim(&ctx, q, slots).await });
        }
        while claims.join_next().await.is_some() {}
    }
}

/// Claims `slots.len()` jobs from queue `q` and starts them.
async fn claim(ctx: &Arc<Ctx>, q: usize, slots: Vec<Slot>) {
    let queue = ctx.queue(q);
    let asked = slots.len();
    let sent = Instant::now();
    queue.upkeep().ensure_running();
    match queue.claim_or_wait(asked, ctx.settings.lease).await {
        Ok((leases, wait)) => {
            ctx.claimed(q, asked, leases.len(), wait);
            if !leases.is_empty() {
                queue.upkeep().nudge(queue.base());
            }
            for (lease, slot) in leases.into_iter().zip(slots) {
                ctx.start(q, lease, sent, slot);
            }
        }
        Err(e) => {
            drop(slots);
            let pause = ctx.turns().failed(q, asked, Instant::now());
            warn!(queue = queue.name(), error = %e, ?pause, "claim failed; retrying");
        }
    }
}

/// The wake-up: waits for a wake token (pushed by enqueue, retry, release,
/// reap and promotion) on the idle queues' wake lists, with one blocking
/// call on a dedicated connection whose reply names the list, so only
/// that queue is claimed from. The call also names the worker's own wake
/// list: when a queue goes idle while it blocks, a push there ends it, and
/// the next call names that queue too. Ends the wait for the safety-net
/// poll. Runs until `stop`.
///
/// One of these runs per wake group `g` (see `WakeGroup`): one for all the
/// queues on one server; on a cluster, one per slot, each with a
/// connection of its own, since a blocking call cannot name two slots.
pub(super) async fn waker(ctx: Arc<Ctx>, g: usize) {
    let group = &ctx.wakes[g];
    let mut conn: Option<Dedicated> = None;
    let wake_keys: HashMap<&str, usize> = ctx
        .queues
        .iter()
        .enumerate()
        .map(|(q, s)| (s.queue.keys().wake.as_str(), q))
        .collect();
    let poll = ctx.settings.poll_interval;
    while !ctx.stop.is_cancelled() {
        let mut wait = ctx.turns().wait();
        wait.listen.retain(|q| ctx.wake_of[*q] == g);
        if wait.listen.is_empty() {
            tokio::select! {
                _ = group.idled.notified() => {}
                _ = ctx.stop.cancelled() => return,
            }
            continue;
        }
        let until = wait.poll_at.unwrap_or_else(|| Instant::now() + poll);
        if conn.is_none() {
            match ctx.queue(group.queues[0]).link().blocking_connection().await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    debug!(queues = ctx.names(), error = %e, "no blocking connection; polling");
                    tokio::select! { _ = sleep_until(until) => {}, _ = ctx.stop.cancelled() => return }
                    ctx.timed_out();
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        // The server's timeout has a resolution of about a millisecond; 0
        // would block for ever.
        let secs = until
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let mut cmd = redis::cmd("BLPOP");
        for q in &wait.listen {
            cmd.arg(&ctx.queue(*q).keys().wake);
        }
        cmd.arg(&group.own_wake).arg(secs.as_secs_f64());
        // No response timeout on this connection (BLPOP blocks by design),
        // so bound the wait here: a connection that died silently is replaced.
        let r = {
            let blpop = tokio::time::timeout(
                secs + Duration::from_secs(1),
                cmd.query_async::<Option<(String, String)>>(c),
            );
            tokio::pin!(blpop);
            let mut pushed = false;
            loop {
                tokio::select! {
                    r = &mut blpop => break r,
                    // A queue went idle: end this wait, so the next names it.
                    _ = group.idled.notified(), if !pushed => {
                        pushed = true;
                        end_wait(&ctx, group).await;
                    }
                    // The reply of an abandoned BLPOP would arrive later on
                    // this connection: drop it rather than reuse it.
                    _ = ctx.stop.cancelled() => return,
                }
            }
        };
        match r
            .map_err(|_| Error::Timeout(secs))
            .and_then(|r| r.map_err(Error::from_redis))
        {
            Ok(Some((key, _))) if key == group.own_wake => {}
            Ok(Some((key, _))) => match wake_keys.get(key.as_str()) {
                Some(q) => ctx.woken(*q),
                None => debug!(key, "a wake-up from an unknown list"),
            },
            Ok(None) => ctx.timed_out(),
            Err(e) => {
                debug!(queues = ctx.names(), error = %e, "wake-up wait failed; reconnecting");
                conn = None;
                tokio::select! { _ = sleep(poll.min(Duration::from_millis(200))) => {}, _ = ctx.stop.cancelled() => return }
                // A push may have been missed: look at every idle queue again.
                for q in wait.listen {
                    ctx.woken(q);
                }
            }
        }
    }
}

/// Ends a wake-up's blocking call with a push to the group's own wake
/// list (should it fail, the call ends at its timeout).
async fn end_wait(ctx: &Ctx, group: &super::WakeGroup) {
    let mut conn = ctx.queue(group.queues[0]).conn();
    let r: redis::RedisResult<()> = redis::pipe()
        .cmd("LPUSH")
        .arg(&group.own_wake)
        .arg(1)
        .ignore()
        .cmd("PEXPIRE")
        .arg(&group.own_wake)
        .arg(OWN_WAKE_TTL_MS)
        .ignore()
        .query_async(&mut conn)
        .await;
    if let Err(e) = r {
        debug!(error = %e, "could not end the wake-up's wait early");
    }
}
