//! The keeper: renews the leases of finished jobs until their settlements
//! are answered, so a slow settle call (or a settler held up by a slow
//! observer) cannot let a lease lapse and the job run again.
//!
//! One task with one timer for every settlement in flight, rather than a
//! timer per job: almost every settlement is answered within milliseconds,
//! long before its lease needs renewing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::heartbeat::{Beat, Heartbeat};
use crate::lease::Lease;
use crate::queue::Queue;

#[derive(Default)]
pub(super) struct Keeper {
    /// Settlements in flight, by fencing token (unique in the queue).
    held: Mutex<HashMap<u64, (Arc<Lease>, Heartbeat)>>,
    /// Wakes the keeper when the first settlement comes in.
    first: Notify,
}

impl Keeper {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (Arc<Lease>, Heartbeat)>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `lease` alive (renewing it as `heart` says) until [`release`](Self::release).
    pub(super) fn hold(&self, lease: Arc<Lease>, heart: Heartbeat) {
        let mut held = self.lock();
        let was_empty = held.is_empty();
        held.insert(lease.token, (lease, heart));
        drop(held);
        if was_empty {
            self.first.notify_one();
        }
    }

    /// The settlement of the job with `token` was answered.
    pub(super) fn release(&self, token: u64) {
        self.lock().remove(&token);
    }

    /// Renews what it holds when due, until `done` fires.
    pub(super) async fn run(self: Arc<Self>, queue: Queue, done: CancellationToken) {
        loop {
            let next = self.lock().values().map(|(_, h)| h.next()).min();
            match next {
                None => tokio::select! {
                    _ = self.first.notified() => continue,
                    _ = done.cancelled() => return,
                },
                // A settlement held after this sleep began is due no sooner
                // than a beat after its last renewal, and beats come at most
                // every half safety window: waking at least every
                // quarter of one keeps every renewal inside it.
                Some(at) => tokio::select! {
                    _ = sleep_until(at.min(Instant::now() + self.quarter())) => {}
                    _ = done.cancelled() => return,
                },
            }
            let now = Instant::now();
            let due: Vec<(Arc<Lease>, Heartbeat)> = {
                let mut held = self.lock();
                let tokens: Vec<u64> = held
                    .iter()
                    .filter(|(_, (_, h))| h.next() <= now)
                    .map(|(t, _)| *t)
                    .collect();
                tokens.into_iter().filter_map(|t| held.remove(&t)).collect()
            };
            for (lease, mut heart) in due {
                // Quiet: a loss here is most likely the settlement landing first.
                if let Beat::Alive { .. } = heart.beat(&queue, &lease, None).await {
                    self.lock().entry(lease.token).or_insert((lease, heart));
                }
            }
        }
    }

    /// A quarter of the shortest beat interval of what it holds.
    fn quarter(&self) -> std::time::Duration {
        self.lock()
            .values()
            .map(|(_, h)| h.interval())
            .min()
            .unwrap_or_default()
            / 4
    }
}
