//! The heartbeat of one job: renews its lease while the handler runs and
//! until its settlement is applied, and decides when the lease can no
//! longer be trusted.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{Instant, timeout_at};
use tracing::{debug, warn};

use super::event::{Observers, WorkerEvent};
use super::settings::Settings;
use crate::error::Error;
use crate::lease::Lease;
use crate::queue::Queue;
use crate::validate::later;

/// Until when a lease surely holds on the server (the lease counted from
/// when its claim or last renewal was sent), shared by the job's task,
/// which renews it, and the settler, which stops retrying past it.
#[derive(Clone)]
pub(super) struct LeaseClock(Arc<Mutex<Instant>>);

impl LeaseClock {
    pub(super) fn new(until: Instant) -> LeaseClock {
        LeaseClock(Arc::new(Mutex::new(until)))
    }
    pub(super) fn until(&self) -> Instant {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn set(&self, until: Instant) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = until;
    }
}

/// What a beat found.
pub(super) enum Beat {
    /// Renewed (or a transient failure to retry shortly); `cancel` when the
    /// renewal found an operator's cancel request.
    Alive { cancel: bool },
    /// The lease is lost, or could not be confirmed within the safety
    /// window: stop, and settle nothing.
    Lost,
}

pub(super) struct Heartbeat {
    /// Between beats; `None` with heartbeats off.
    every: Option<Duration>,
    lease: Duration,
    window: Duration,
    /// When the last confirmed claim or renewal was sent.
    confirmed: Instant,
    next: Instant,
    clock: LeaseClock,
}

impl Heartbeat {
    pub(super) fn new(s: &Settings, claimed_at: Instant) -> Heartbeat {
        let mut h = Heartbeat {
            every: s.heartbeat(),
            lease: s.lease,
            window: s.safety_window(),
            confirmed: claimed_at,
            next: claimed_at,
            clock: LeaseClock::new(later(claimed_at, s.lease)),
        };
        h.next = h.after(claimed_at);
        h
    }

    /// The next beat after a confirmation at `at`. With heartbeats off it
    /// is the end of the safety window, where the beat gives up: a handler
    /// whose lease lapses is cancelled whether or not heartbeats run.
    fn after(&self, at: Instant) -> Instant {
        match self.every {
            Some(d) => later(at, d),
            None => later(self.confirmed, self.window),
        }
    }

    pub(super) fn next(&self) -> Instant {
        self.next
    }

    /// The time between beats (the safety window with heartbeats off).
    pub(super) fn interval(&self) -> Duration {
        self.every.unwrap_or(self.window)
    }

    pub(super) fn clock(&self) -> LeaseClock {
        self.clock.clone()
    }

    /// The handler has returned: from now on the lease is renewed until
    /// the settlement is answered, with heartbeats off too (every third of
    /// the safety window then), so a slow settle call cannot let it lapse.
    pub(super) fn settling(&mut self) {
        if self.every.is_none() {
            let every = self.window / 3;
            self.every = Some(every);
            self.next = later(self.confirmed, every);
        }
    }

    /// The lease was renewed outside a beat (a job leased ahead, renewed
    /// before it starts), with the renewal sent at `sent`.
    pub(super) fn renewed(&mut self, sent: Instant) {
        self.confirmed = sent;
        self.clock.set(later(sent, self.lease));
        self.next = self.after(sent);
    }

    /// One beat, due at [`next`](Self::next): renews the lease within the
    /// safety window, or gives up. A loss is reported to `observers`, if given.
    pub(super) async fn beat(&mut self, q: &Queue, lease: &Lease, observers: Option<&Observers>) -> Beat {
        let emit = |e: WorkerEvent<'_>| {
            if let Some(o) = observers {
                o.emit(e);
            }
        };
        let sent = Instant::now();
        let safe_until = later(self.confirmed, self.window);
        // Past the window (e.g. this process was paused) the attempt has
        // given up: renewing now would only delay the redelivery.
        let renewal = async {
            if sent >= safe_until {
                return Err(Error::Timeout(self.window));
            }
            q.renew(lease, self.lease).await
        };
        match timeout_at(safe_until, renewal).await {
            Ok(Ok((deadline_ms, cancel))) => {
                self.renewed(sent);
                emit(WorkerEvent::Extended {
                    queue: q.name(),
                    id: &lease.id,
                    token: lease.token,
                    deadline_ms,
                });
                Beat::Alive { cancel }
            }
            Ok(Err(e @ (Error::LeaseLost { .. } | Error::JobNotFound(_)))) => {
                if observers.is_some() {
                    warn!(error = %e, "lease lost; its result will not be settled");
                }
                emit(WorkerEvent::LeaseLost {
                    queue: q.name(),
                    id: &lease.id,
                    token: lease.token,
                    confirmed: true,
                });
                Beat::Lost
            }
            Ok(Err(e)) if Instant::now() < safe_until => {
                debug!(error = %e, "heartbeat failed; retrying");
                let retry = (self.every.unwrap_or(self.window) / 4).max(Duration::from_millis(5));
                self.next = later(Instant::now(), retry).min(safe_until);
                Beat::Alive { cancel: false }
            }
            _ => {
                if observers.is_some() {
                    warn!("lease not confirmed within the safety window; its result will not be settled");
                }
                emit(WorkerEvent::LeaseLost {
                    queue: q.name(),
                    id: &lease.id,
                    token: lease.token,
                    confirmed: false,
                });
                Beat::Lost
            }
        }
    }
}
