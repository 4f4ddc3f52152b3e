//! Leasing ahead of free handlers ([`Worker::prefetch`](super::Worker::prefetch)):
//! the consumer's lease slots, automatic prefetch's measurements, and the
//! wait of a job leased ahead for a free handler.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::AUTO_PREFETCH_RATIO;

/// What automatic prefetch decides on: moving averages of handler run
/// time and of settle round trips (in µs; 0 until the first sample).
#[derive(Default)]
pub(super) struct AutoPrefetch {
    pub(super) handler_us: AtomicU64,
    pub(super) round_trip_us: AtomicU64,
}

impl AutoPrefetch {
    /// Lease ahead while handlers are short next to a round trip.
    pub(super) fn on(&self) -> bool {
        let (h, r) = (
            self.handler_us.load(Ordering::Relaxed),
            self.round_trip_us.load(Ordering::Relaxed),
        );
        h > 0 && r > 0 && h < AUTO_PREFETCH_RATIO.saturating_mul(r)
    }
    /// Adds a sample to a moving average (weight 1/8; racing updates may
    /// drop a sample, which an average can afford).
    pub(super) fn record(avg: &AtomicU64, sample: Duration) {
        let x = u64::try_from(sample.as_micros()).unwrap_or(u64::MAX).max(1);
        let old = avg.load(Ordering::Relaxed);
        let new = if old == 0 { x } else { old - old / 8 + x / 8 };
        avg.store(new.max(1), Ordering::Relaxed);
    }
}

/// The consumer's lease slots: a semaphore whose size automatic prefetch
/// grows by the prefetch while leasing ahead and shrinks back after.
pub(super) struct Slots {
    sem: Arc<Semaphore>,
    /// Leasing ahead now (automatic prefetch); switched under `switching`.
    ahead: AtomicBool,
    switching: Mutex<()>,
    /// Permits still to retire after leasing ahead stopped: slots in use
    /// then are retired as they come back (an atomic, so dropping a slot,
    /// once per job, takes no lock).
    debt: AtomicUsize,
}

/// One lease slot; dropping it frees it (or retires it, see [`Slots`]).
pub(super) struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    slots: Arc<Slots>,
}

impl Slots {
    pub(super) fn new(n: usize) -> Arc<Slots> {
        Arc::new(Slots {
            sem: Arc::new(Semaphore::new(n)),
            ahead: AtomicBool::new(false),
            switching: Mutex::new(()),
            debt: AtomicUsize::new(0),
        })
    }
    /// Slots still to retire.
    pub(super) fn owed(&self) -> usize {
        self.debt.load(Ordering::Relaxed)
    }
    fn slot(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Slot {
        Slot {
            permit: Some(permit),
            slots: self.clone(),
        }
    }
    pub(super) async fn acquire(self: &Arc<Self>) -> Option<Slot> {
        Some(self.slot(self.sem.clone().acquire_owned().await.ok()?))
    }
    pub(super) fn try_acquire(self: &Arc<Self>) -> Option<Slot> {
        Some(self.slot(self.sem.clone().try_acquire_owned().ok()?))
    }
    /// Starts or stops leasing `extra` slots ahead of the handlers. (A
    /// slot dropped while this runs may come back as a free permit though
    /// it is owed; a later drop then pays for it, so the total settles at
    /// the right size.)
    pub(super) fn lease_ahead(&self, on: bool, extra: usize) {
        if self.ahead.load(Ordering::Relaxed) == on {
            return;
        }
        let _switching = self.switching.lock().unwrap_or_else(|e| e.into_inner());
        if self.ahead.swap(on, Ordering::Relaxed) == on {
            return;
        }
        if on {
            let owed = self.debt.swap(0, Ordering::SeqCst);
            let cancelled = owed.min(extra);
            self.debt.fetch_add(owed - cancelled, Ordering::SeqCst);
            self.sem.add_permits(extra - cancelled);
        } else {
            let retired = self.sem.forget_permits(extra);
            self.debt.fetch_add(extra - retired, Ordering::SeqCst);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            let owed = self
                .slots
                .debt
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| d.checked_sub(1));
            if owed.is_ok() {
                p.forget();
            }
        }
    }
}

/// When a job's handler may start.
pub(super) enum Turn {
    /// A handler was free at once.
    Now(OwnedSemaphorePermit),
    /// A handler freed up while the job (leased ahead) waited.
    AfterWait(OwnedSemaphorePermit),
    /// Shutdown began: the job goes back unstarted.
    Stopping,
    /// No handler freed up within the prefetch wait.
    TooLong,
}

#[cfg(test)]
mod tests {
    use super::*;

    // Switching leasing ahead off retires the extra slots: the free ones at
    // once, the ones in use as they come back; switching on again cancels
    // what is still owed before adding any.
    #[test]
    fn slots_grow_and_retire() {
        let slots = Slots::new(1);
        slots.lease_ahead(true, 4);
        assert_eq!(slots.sem.available_permits(), 5);
        let held: Vec<Slot> = (0..3).map(|_| slots.try_acquire().unwrap()).collect();
        slots.lease_ahead(false, 4);
        assert_eq!((slots.sem.available_permits(), slots.owed()), (0, 2));
        drop(held);
        assert_eq!((slots.sem.available_permits(), slots.owed()), (1, 0));
        let held = slots.try_acquire().unwrap();
        assert!(slots.try_acquire().is_none(), "one slot while not leasing ahead");
        slots.lease_ahead(false, 4);
        slots.lease_ahead(true, 4);
        slots.lease_ahead(true, 4);
        assert_eq!(slots.sem.available_permits(), 4);
        slots.lease_ahead(false, 4);
        assert_eq!((slots.sem.available_permits(), slots.owed()), (0, 0));
        let held2 = {
            slots.lease_ahead(true, 4);
            (0..4).map(|_| slots.try_acquire().unwrap()).collect::<Vec<_>>()
        };
        slots.lease_ahead(false, 4);
        assert_eq!(slots.owed(), 4);
        slots.lease_ahead(true, 4);
        assert_eq!(
            (slots.sem.available_permits(), slots.owed()),
            (0, 0),
            "debt cancelled, nothing added"
        );
        drop((held, held2));
        assert_eq!(slots.sem.available_permits(), 5);
    }
}
