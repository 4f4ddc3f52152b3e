//! Leaderless cron schedules (feature `cron`, on by default).
//!
//! A [`Schedule`] (a name, a cron expression with an optional seconds
//! field, a time zone, what to do about missed ticks, and the options of
//! its jobs) is stored in the server with a payload
//! ([`Queue::upsert_schedule`](crate::Queue::upsert_schedule)), so every
//! process agrees on it. Each nominal tick becomes exactly one job, with the
//! id `cron:NAME@TICK` ([`job_id`]), pending from the moment it is made; a
//! scheduler never runs a handler.
//!
//! Schedulers are scheduling passes ([`Queue::run_schedules`](crate::Queue::run_schedules)),
//! run by the maintenance task of every [`Client`](crate::Client) whose
//! consumers serve the queue (no extra daemon), by a [`Scheduler`], or by
//! hand. There is no leader and no lock: any number of passes may offer the
//! same ticks at the same time, from any processes, and a paused or dead
//! one holds nothing up. What makes that safe is one script per schedule
//! and call (`lua/schedule_fire.lua`) that, on the server's clock:
//!
//! - takes a tick only if it is later than the schedule's last tick done,
//!   stored with the schedule, and moves that mark up in the same atomic
//!   step that makes the job: a tick is taken once, even after retention
//!   has deleted its job's record (an id alone would not do);
//! - refuses a tick later than the server's `TIME`: a client clock off by
//!   any amount makes nothing early (a pass plans ticks from the server's
//!   clock, and sleeps on a monotonic clock);
//! - applies the missed-tick policy ([`Missed`]) to ticks taken more than
//!   the schedule's grace late;
//! - refuses ticks planned from an expression or zone that has changed
//!   since the pass read it.
//!
//! A pass offers each schedule's ticks in order from its last tick done,
//! so none is skipped: with several schedulers the one that comes first
//! takes a tick, the others find it done. The work is bounded: a pass reads
//! at most [`SCHEDULES_PER_PASS`] schedules and offers at most
//! [`MAX_TICKS_PER_CALL`] ticks per schedule, and missed ticks are never
//! walked one by one.
//!
//! - `definition`: [`Schedule`], the builder.
//! - `timing`: expressions and zones into ticks (daylight saving).
//! - `missed`: [`Missed`], the grace, and the plan of ticks a pass offers.
//! - `store`: upsert, remove, read and list schedules.
//! - `pass`: one scheduling pass ([`SchedulesReport`]).
//! - `scheduler`: [`Scheduler`], passes in a background task.

mod definition;
mod missed;
mod pass;
mod scheduler;
mod store;
mod timing;

pub use self::definition::{MAX_PREVIEW_TICKS, MAX_SCHEDULE_NAME_BYTES, Schedule};
pub use self::missed::{DEFAULT_GRACE, MAX_TICKS_PER_CALL, MIN_GRACE, Missed};
pub(crate) use self::pass::maintain;
pub use self::pass::{Fired, LOOK_INTERVAL, RETRY_PAUSE, SCHEDULES_PER_PASS, ScheduledJob, SchedulesReport};
pub use self::scheduler::{Scheduler, SchedulerHandle};
pub use self::store::{ScheduleInfo, ScheduleStatus};
pub use self::timing::DEFAULT_TIME_ZONE;

/// The id of the job of schedule `schedule`'s tick at `tick_ms` (server
/// ms): `cron:NAME@TICK`.
///
/// ```
/// assert_eq!(echomq::schedule::job_id("nightly", 1_774_746_000_000), "cron:nightly@1774746000000");
/// ```
pub fn job_id(schedule: &str, tick_ms: u64) -> String {
    format!("cron:{schedule}@{tick_ms}")
}

/// The schedule and tick of a job id that [`job_id`] made; `None` for any
/// other id.
///
/// ```
/// assert_eq!(echomq::schedule::tick_of("cron:a@b@1000"), Some(("a@b", 1000)));
/// assert_eq!(echomq::schedule::tick_of("order-42"), None);
/// ```
pub fn tick_of(job_id: &str) -> Option<(&str, u64)> {
    let rest = job_id.strip_prefix("cron:")?;
    let (name, tick) = rest.rsplit_once('@')?;
    if name.is_empty() || tick.is_empty() || !tick.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((name, tick.parse().ok()?))
}
