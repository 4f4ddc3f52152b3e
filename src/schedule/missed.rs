//! Missed ticks: what a schedule does about ticks nobody took in time
//! (every scheduler was down, paused or cut off), and the plan of ticks a
//! scheduler offers in one call, which bounds the work whatever the gap.

use std::time::Duration;

use super::timing::Timing;

/// Default grace: a tick taken up to a minute after its time is on time
/// (as Quartz's default misfire threshold).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);
/// The shortest grace accepted: twice the
/// [`LOOK_INTERVAL`](super::LOOK_INTERVAL), so that while any scheduler
/// runs no tick is missed, not even the first ticks of a schedule stored by
/// a process that runs no scheduler (others see it within a look
/// interval), nor a tick whose pass waited behind other upkeep.
pub const MIN_GRACE: Duration = Duration::from_secs(10);
/// Most ticks one scheduling call offers for one schedule; a longer run of
/// on-time ticks is taken in several calls, one after another.
pub const MAX_TICKS_PER_CALL: usize = 100;

/// What a schedule does about missed ticks.
///
/// A tick is **missed** when it is taken (by a scheduling pass, on the
/// server's clock) more than the schedule's
/// [`grace`](crate::schedule::Schedule::grace) after its time: exactly,
/// when `server_now - tick > grace`. Ticks within the grace are on time and
/// each makes its job, however late within it. So a scheduler down for a
/// shorter time than the grace misses nothing: the ticks it would have
/// taken are made, in order, when a scheduler next runs.
///
/// Whatever the policy, the work is bounded: the missed ticks are never
/// walked one by one (the latest missed tick is found directly from the
/// cron expression), so a schedule every second whose schedulers were all
/// down for a week costs one call, not 600,000 jobs or loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Missed {
    /// Run the latest missed tick: one job for a run of missed ticks, with
    /// that tick's id (`cron:NAME@TICK`); the older missed ticks make none.
    /// The default: a nightly job whose workers were down at night runs
    /// once when they come back.
    #[default]
    RunLatest,
    /// Skip to now: missed ticks make no job; the next on-time tick does.
    Skip,
}

impl Missed {
    /// As the scripts store it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Missed::RunLatest => "latest",
            Missed::Skip => "skip",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Missed> {
        match s {
            "latest" => Some(Missed::RunLatest),
            "skip" => Some(Missed::Skip),
            _ => None,
        }
    }
}

/// The ticks one scheduling call offers for one schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Ascending, each the tick after the one before: first the latest
    /// missed tick after `last` (if any), then the on-time ticks up to
    /// `now`, at most [`MAX_TICKS_PER_CALL`] in all.
    pub ticks: Vec<u64>,
    /// The tick after the last one offered (`None`: no tick follows).
    pub next: Option<u64>,
}

/// The ticks after `last` (the schedule's last tick done) that are due at
/// server time `now`: the latest one missed by more than `grace_ms` (found
/// directly, never by walking the missed ones), then those within the
/// grace, at most `cap` in all. The script decides again on its own
/// clock; this only proposes.
pub(crate) fn plan(timing: &Timing, last: u64, now: u64, grace_ms: u64, cap: usize) -> Plan {
    let mut ticks = Vec::new();
    let mut from = last;
    // Missed: tick < now - grace.
    if let Some(cutoff) = now.checked_sub(grace_ms + 1)
        && let Some(latest) = timing.latest_at_or_before(cutoff)
        && latest > last
    {
        ticks.push(latest);
        from = latest;
    }
    let mut next = timing.next_after(from);
    while let Some(t) = next {
        if t > now || ticks.len() >= cap {
            break;
        }
        ticks.push(t);
        next = timing.next_after(t);
    }
    Plan { ticks, next }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000;
    /// 2026-01-01T00:00:00Z.
    const T0: u64 = 1_767_225_600_000;

    fn every_second() -> Timing {
        Timing::parse("* * * * * *", "UTC").unwrap()
    }

    // On time: every tick after the last one done, up to now, in order.
    #[test]
    fn on_time_ticks_in_order() {
        let p = plan(&every_second(), T0, T0 + 3 * S + 500, 60 * S, 100);
        assert_eq!(p.ticks, [T0 + S, T0 + 2 * S, T0 + 3 * S]);
        assert_eq!(p.next, Some(T0 + 4 * S));
        // Nothing due yet.
        let p = plan(&every_second(), T0 + 3 * S, T0 + 3 * S + 999, 60 * S, 100);
        assert!(p.ticks.is_empty());
        assert_eq!(p.next, Some(T0 + 4 * S));
    }

    // A tick exactly `grace` old is on time; one a millisecond older is missed.
    #[test]
    fn the_grace_boundary() {
        let grace = 10 * S;
        let p = plan(&every_second(), T0, T0 + S + grace, grace, 100);
        assert_eq!(p.ticks.first(), Some(&(T0 + S)), "on time at exactly the grace");
        // Now T0+1s and T0+2s are missed (by 1 ms for T0+2s), T0+3s is on time.
        let p = plan(&every_second(), T0, T0 + 2 * S + grace + 1, grace, 100);
        assert_eq!(
            p.ticks[0],
            T0 + 2 * S,
            "the latest missed tick, the older one passed over"
        );
        assert_eq!(p.ticks[1], T0 + 3 * S);
    }

    // A week down for a schedule every second: one missed tick offered, then the grace's worth; bounded work.
    #[test]
    fn a_week_down_is_bounded() {
        let week = 7 * 86_400 * S;
        let started = std::time::Instant::now();
        let p = plan(&every_second(), T0, T0 + week, 60 * S, MAX_TICKS_PER_CALL);
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
        assert_eq!(p.ticks[0], T0 + week - 61 * S, "the latest missed tick");
        assert_eq!(p.ticks[1], T0 + week - 60 * S, "the oldest on-time tick");
        assert_eq!(p.ticks.last(), Some(&(T0 + week)));
        assert_eq!(p.ticks.len(), 62);
        // A longer grace is taken MAX_TICKS_PER_CALL at a time.
        let p = plan(&every_second(), T0, T0 + week, 3_600 * S, MAX_TICKS_PER_CALL);
        assert_eq!(p.ticks.len(), MAX_TICKS_PER_CALL);
        assert_eq!(p.next, Some(p.ticks.last().unwrap() + S));
    }

    // A schedule with no further tick plans nothing and says so.
    #[test]
    fn no_tick_follows() {
        let once = Timing::parse("0 0 0 1 1 * 2020", "UTC").unwrap();
        let p = plan(&once, T0, T0 + S, 60 * S, 100);
        assert!(p.ticks.is_empty());
        assert_eq!(p.next, None);
    }
}
