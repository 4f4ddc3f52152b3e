//! The claim loop: leases jobs while slots are free, and waits for a
//! wake-up when there is nothing to lease.

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::Ctx;
use super::MAX_CLAIM_BATCH;
use super::handler::Handler;
use crate::conn::Dedicated;
use crate::error::Error;
use crate::queue::Queue;

/// Claims while slots are free, until `stop`. (At full load the settler
/// refills most slots itself, in the call that settles their jobs.)
pub(super) async fn claim_loop<T, H>(ctx: Arc<Ctx<H>>)
where
    T: DeserializeOwned + Send + 'static,
    H: Handler<T>,
{
    let s = &ctx.settings;
    let mut waiter: Option<Dedicated> = None;
    let mut errors = 0u32;
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
        let sent = Instant::now();
        ctx.queue.client().maintenance().ensure_running();
        match ctx.queue.claim_or_wait(permits.len(), s.lease).await {
            Ok((leases, wait)) if leases.is_empty() => {
                errors = 0;
                drop(permits);
                // A rate limit stopped the claim: nothing can be leased
                // before its window reopens (a wake-up may still come
                // first, for another lane's job).
                let poll = wait.map_or(s.poll_interval, |w| w.min(s.poll_interval));
                wait_for_work(&ctx.queue, &mut waiter, poll, &ctx.stop).await;
            }
            Ok((leases, _)) => {
                errors = 0;
                ctx.queue.client().maintenance().nudge(ctx.queue.base());
                for (lease, permit) in leases.into_iter().zip(permits) {
                    ctx.start::<T>(lease, sent, permit);
                }
            }
            Err(e) => {
                drop(permits);
                errors = errors.saturating_add(1);
                let pause = Duration::from_millis(50u64 << errors.min(6));
                warn!(queue = ctx.queue.name(), error = %e, ?pause, "claim failed; retrying");
                tokio::select! { _ = sleep(pause) => {}, _ = ctx.stop.cancelled() => break }
            }
        }
    }
}

/// Waits for a wake token (pushed by enqueue, retry, release, reap and
/// promotion) on a dedicated blocking connection, at most `poll`.
async fn wait_for_work(queue: &Queue, waiter: &mut Option<Dedicated>, poll: Duration, stop: &CancellationToken) {
    if waiter.is_none() {
        match queue.client().blocking_connection().await {
            Ok(c) => *waiter = Some(c),
            Err(e) => {
                debug!(queue = queue.name(), error = %e, "no blocking connection; polling");
                tokio::select! { _ = sleep(poll) => {}, _ = stop.cancelled() => {} }
                return;
            }
        }
    }
    let Some(conn) = waiter.as_mut() else { return };
    let mut cmd = redis::cmd("BLPOP");
    cmd.arg(&queue.keys().wake).arg(poll.as_secs_f64());
    // No response timeout on this connection (BLPOP blocks by design), so
    // bound the wait here: a connection that died silently is replaced.
    let blpop = tokio::time::timeout(
        poll + Duration::from_secs(1),
        cmd.query_async::<Option<(String, String)>>(conn),
    );
    tokio::select! {
        r = blpop => if let Err(e) = r.map_err(|_| Error::Timeout(poll)).and_then(|r| r.map_err(Error::from_redis)) {
            debug!(queue = queue.name(), error = %e, "wake-up wait failed; reconnecting");
            *waiter = None;
            tokio::select! { _ = sleep(poll.min(Duration::from_millis(200))) => {}, _ = stop.cancelled() => {} }
        },
        // The reply of an abandoned BLPOP would arrive later on this
        // connection: drop it rather than reuse it.
        _ = stop.cancelled() => *waiter = None,
    }
}
