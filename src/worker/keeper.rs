//! The keeper: renews the leases of finished jobs until their settlements
//! are answered, so a slow settle call (or a settler held up by a slow
//! observer) cannot let a lease lapse and the job run again.
//!
//! One task with one timer for every settlement in flight, rather than a
//! timer per job: almost every settlement is answered within milliseconds,
//! long before its lease needs renewing.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::heartbeat::{Beat, Heartbeat};
use crate::lease::Lease;
use crate::queue::Queue;

#[derive(Default)]
pub(super) struct Keeper {
    state: Mutex<State>,
    /// Wakes the keeper when the first settlement comes in.
    first: Notify,
}

/// A settlement in flight: its queue's index and its token.
type Key = (usize, u64);

#[derive(Default)]
struct State {
    /// Settlements in flight, by queue (its index in the worker) and
    /// fencing token (unique in the queue).
    held: HashMap<Key, (Arc<Lease>, Heartbeat)>,
    /// Those whose renewal is running (taken out of `held` meanwhile).
    renewing: HashSet<Key>,
    /// Those released while their renewal ran: not put back after it.
    released: HashSet<Key>,
}

impl Keeper {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `lease` alive (renewing it as `heart` says) until [`release`](Self::release).
    pub(super) fn hold(&self, q: usize, lease: Arc<Lease>, heart: Heartbeat) {
        let mut s = self.lock();
        let was_empty = s.held.is_empty();
        s.held.insert((q, lease.token), (lease, heart));
        drop(s);
        if was_empty {
            self.first.notify_one();
        }
    }

    /// The settlement of the job of queue `q` with `token` was answered (or given up).
    pub(super) fn release(&self, q: usize, token: u64) {
        let key = (q, token);
        let mut s = self.lock();
        if s.held.remove(&key).is_none() && s.renewing.contains(&key) {
            s.released.insert(key);
        }
    }

    /// Takes out what is due at `now`, marked as being renewed.
    fn take_due(&self, now: Instant) -> Vec<(usize, Arc<Lease>, Heartbeat)> {
        let mut s = self.lock();
        let keys: Vec<Key> = s
            .held
            .iter()
            .filter(|(_, (_, h))| h.next() <= now)
            .map(|(k, _)| *k)
            .collect();
        let due: Vec<_> = keys
            .into_iter()
            .filter_map(|k| s.held.remove(&k).map(|(l, h)| (k.0, l, h)))
            .collect();
        s.renewing.extend(due.iter().map(|(q, l, _)| (*q, l.token)));
        due
    }

    /// A renewal ended: holds the lease again if it is still alive and
    /// was not released meanwhile.
    fn renewed(&self, q: usize, lease: Arc<Lease>, heart: Heartbeat, alive: bool) {
        let key = (q, lease.token);
        let mut s = self.lock();
        s.renewing.remove(&key);
        if s.released.remove(&key) || !alive {
            return;
        }
        s.held.entry(key).or_insert((lease, heart));
    }

    /// Renews what it holds when due (a job of queue `q` through
    /// `queues[q]`), until `done` fires.
    pub(super) async fn run(self: Arc<Self>, queues: Vec<Queue>, done: CancellationToken) {
        loop {
            let next = self.lock().held.values().map(|(_, h)| h.next()).min();
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
            for (q, lease, mut heart) in self.take_due(Instant::now()) {
                // Quiet: a loss here is most likely the settlement landing first.
                let alive = matches!(heart.beat(&queues[q], &lease, None).await, Beat::Alive { .. });
                self.renewed(q, lease, heart, alive);
            }
        }
    }

    /// A quarter of the shortest beat interval of what it holds.
    fn quarter(&self) -> std::time::Duration {
        self.lock()
            .held
            .values()
            .map(|(_, h)| h.interval())
            .min()
            .unwrap_or_default()
            / 4
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limits::Limits;
    use crate::worker::settings::Settings;

    fn lease(token: u64) -> Arc<Lease> {
        Arc::new(Lease {
            queue: Arc::from("emq:{q}:"),
            id: token.to_string(),
            token,
            attempt: 1,
            failures: 0,
            limits: Limits::default(),
            payload: Vec::new(),
            created_ms: 0,
            deadline_ms: 0,
            claimed_ms: 0,
            cancel_requested: false,
            lane: None,
            kind: None,
            traceparent: None,
        })
    }

    // A settlement answered while its lease's renewal runs is not held
    // again afterwards (it would be renewed until the process exits); one
    // still in flight is, unless its renewal found the lease lost.
    #[test]
    fn a_release_during_a_renewal_sticks() {
        let k = Keeper::default();
        let s = Settings::default();
        let start = Instant::now();
        for t in [1, 2, 3] {
            k.hold(0, lease(t), Heartbeat::new(&s, start));
        }
        // The same token in another queue is another settlement.
        k.hold(1, lease(1), Heartbeat::new(&s, start));
        let due = k.take_due(start + Duration::from_secs(3600));
        assert_eq!(due.len(), 4);
        assert!(k.lock().held.is_empty());
        k.release(0, 1);
        for (q, l, h) in due {
            let alive = l.token != 3;
            k.renewed(q, l, h, alive);
        }
        let s = k.lock();
        let mut held: Vec<Key> = s.held.keys().copied().collect();
        held.sort();
        assert_eq!(held, vec![(0, 2), (1, 1)]);
        assert!(s.renewing.is_empty() && s.released.is_empty());
    }
}
