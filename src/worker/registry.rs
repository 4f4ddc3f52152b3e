//! A running worker's entry in the registry of every queue it serves
//! (`crate::admin` workers: [`Queue::workers`](crate::Queue::workers)):
//! announced every [`ANNOUNCE_EVERY`], taken away when the worker stops.
//! Each announcement also writes the worker's history counts for the
//! queue (`crate::admin::history`), counted in memory since the last one.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Ctx;
use crate::admin::{ANNOUNCE_EVERY, WorkerInfo};

/// Announces the worker until `stop`, then withdraws it. A failed
/// announcement is logged; the next one comes as planned.
pub(super) async fn announce(ctx: Arc<Ctx>, stop: CancellationToken) {
    let Some(first) = ctx.queues.first().map(|s| s.queue.clone()) else {
        return;
    };
    let name = first.holder().to_owned();
    let process = crate::queue::process_name();
    let (host, pid) = process.rsplit_once(':').unwrap_or((process, ""));
    let started_ms = first.server_time_ms().await.unwrap_or(0);
    let mut tick = tokio::time::interval(ANNOUNCE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => break,
        }
        let concurrency = ctx.settings.concurrency;
        let info = WorkerInfo {
            name: name.clone(),
            host: host.to_owned(),
            pid: pid.parse().unwrap_or(0),
            queues: ctx.queues.iter().map(|s| s.queue.name().to_owned()).collect(),
            concurrency,
            running: concurrency.saturating_sub(ctx.running.available_permits()),
            started_ms,
            last_seen_ms: 0,
        };
        for s in &ctx.queues {
            let counts = s.tally.take();
            if let Err(e) = s.queue.announce_worker(&info, &counts).await {
                s.tally.give_back(counts);
                tracing::debug!(queue = %s.queue.name(), error = %e, "announcing the worker failed");
            }
        }
    }
    // Every settlement has been answered by now (the settler stops
    // first): these are the worker's last counts.
    for s in &ctx.queues {
        let counts = s.tally.take();
        if let Err(e) = s.queue.withdraw_worker(&name, &counts).await {
            tracing::warn!(queue = %s.queue.name(), error = %e, ?counts, "withdrawing the worker failed; its last history counts are lost");
        }
    }
}
