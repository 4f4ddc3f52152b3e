//! Server clock steps. Every deadline is the server's clock, so a step of
//! that clock (an operator setting the time, a VM resumed, a failover to a
//! node whose clock is off) moves every lease at once: forward past the
//! lease, every held lease looks expired, and reaping them would cost each
//! running job a stall (and fail those at their `max_stalls`) although
//! their workers are alive and renewing.
//!
//! So before reaping, the maintenance task and [`Reaper::run`](super::Reaper::run)
//! read the server's `TIME` and compare how far it moved with how far this
//! process's monotonic clock moved since the last look. A forward step
//! larger than [`CLOCK_STEP_TOLERANCE`] holds lease reaping for the step's
//! size, at most [`MAX_STEP_HOLD`]: long enough for every live worker
//! (heartbeat at most a third of its lease, by default) to renew against the
//! new clock, so only leases whose holders are gone are reaped once the hold
//! ends. A backward step is logged; leases then run longer by the step (a
//! dead worker's job is reaped that much later), and finished jobs keep their
//! order (`lua/lib/sets.lua` `apply_moves` never scores a finish below the
//! newest one of its set).

use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use crate::error::{Error, Result};
use crate::queue::Queue;

/// A server clock moving this much more (or less) than the monotonic clock
/// between two looks counts as a step. Round trips and clock slewing stay
/// far below it.
pub const CLOCK_STEP_TOLERANCE: Duration = Duration::from_secs(1);
/// The longest lease reaping is held after a forward step of the server's
/// clock.
pub const MAX_STEP_HOLD: Duration = Duration::from_secs(60);

/// What one look at the server's clock found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The first look, or the clock moved as expected.
    None,
    /// The server's clock jumped ahead by about this much.
    Forward(Duration),
    /// The server's clock went back by about this much.
    Backward(Duration),
}

/// The server's clock against this process's monotonic clock.
#[derive(Debug, Default)]
pub(crate) struct ClockWatch {
    /// The last look: the server's time (ms) and when it was read (the
    /// middle of the round trip).
    base: Option<(u64, Instant)>,
    /// No lease is reaped before this.
    hold_until: Option<Instant>,
}

impl ClockWatch {
    /// Reads the server's clock and compares it with the last look.
    pub(crate) async fn look(&mut self, queue: &Queue) -> Result<Step> {
        let sent = Instant::now();
        let (s, us): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut queue.conn())
            .await
            .map_err(Error::from_redis)?;
        let got = Instant::now();
        Ok(self.observe(s * 1000 + us / 1000, sent, got))
    }

    /// Records the server time `server_ms`, read by a round trip from
    /// `sent` to `got`, and says whether the clock stepped since the last
    /// one. A forward step starts (or lengthens) a hold of lease reaping.
    pub(crate) fn observe(&mut self, server_ms: u64, sent: Instant, got: Instant) -> Step {
        let mid = sent + (got - sent) / 2;
        let step = match self.base {
            None => Step::None,
            Some((base_ms, base_at)) => {
                let tol = CLOCK_STEP_TOLERANCE.as_millis() as u64;
                let half_trip = ((got - sent) / 2).as_millis() as u64;
                let expected = base_ms.saturating_add(mid.saturating_duration_since(base_at).as_millis() as u64);
                if server_ms > expected.saturating_add(tol + half_trip) {
                    Step::Forward(Duration::from_millis(server_ms - expected))
                } else if server_ms.saturating_add(tol + half_trip) < expected {
                    Step::Backward(Duration::from_millis(expected - server_ms))
                } else {
                    Step::None
                }
            }
        };
        self.base = Some((server_ms, mid));
        match step {
            Step::Forward(d) => {
                let until = got + d.min(MAX_STEP_HOLD);
                self.hold_until = Some(self.hold_until.map_or(until, |h| h.max(until)));
                warn!(
                    step = ?d,
                    hold = ?d.min(MAX_STEP_HOLD),
                    "the server's clock jumped ahead; holding lease reaping so live workers renew first"
                );
            }
            Step::Backward(d) => warn!(
                step = ?d,
                "the server's clock went back; leases run longer by the step, delayed jobs start later"
            ),
            Step::None => {}
        }
        step
    }

    /// How long lease reaping is still held, if it is.
    pub(crate) fn held_for(&self, now: Instant) -> Option<Duration> {
        self.hold_until.filter(|h| *h > now).map(|h| h - now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Steps are told from the monotonic clock's progress; a forward step holds reaping for its size, at most MAX_STEP_HOLD.
    #[test]
    fn steps_are_detected_against_the_monotonic_clock() {
        let mut w = ClockWatch::default();
        let t0 = Instant::now();
        assert_eq!(
            w.observe(1_000_000, t0, t0),
            Step::None,
            "the first look has nothing to compare"
        );
        let t1 = t0 + Duration::from_secs(10);
        assert_eq!(
            w.observe(1_010_300, t1, t1),
            Step::None,
            "300 ms of drift is within tolerance"
        );
        assert_eq!(w.held_for(t1), None);
        let t2 = t1 + Duration::from_secs(10);
        assert_eq!(
            w.observe(1_020_300 + 30_000, t2, t2),
            Step::Forward(Duration::from_secs(30))
        );
        assert_eq!(w.held_for(t2), Some(Duration::from_secs(30)));
        let t3 = t2 + Duration::from_secs(1);
        assert_eq!(
            w.observe(1_051_300 + 3_600_000, t3, t3),
            Step::Forward(Duration::from_secs(3_600))
        );
        assert_eq!(
            w.held_for(t3),
            Some(MAX_STEP_HOLD),
            "a huge step holds at most MAX_STEP_HOLD"
        );
        let t4 = t3 + Duration::from_secs(1);
        assert_eq!(w.observe(1_052_300, t4, t4), Step::Backward(Duration::from_secs(3_600)));
        assert_eq!(w.held_for(t3 + MAX_STEP_HOLD), None, "the hold ends");
        // A slow round trip is not a step: the server read its clock somewhere inside it (here at its very end).
        let t5 = t4 + Duration::from_secs(5);
        assert_eq!(
            w.observe(1_052_300 + 10_000, t5, t5 + Duration::from_secs(5)),
            Step::None
        );
    }
}
