//! One scheduling pass over a queue's schedules ([`Queue::run_schedules`]):
//! read the schedules whose look time has come (one script), plan each
//! one's ticks from its expression, and offer them (one script per
//! schedule), which makes the jobs of those the server's clock has reached.

use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, warn};

use super::missed::{MAX_TICKS_PER_CALL, plan};
use super::timing::Timing;
use crate::error::Result;
use crate::queue::Queue;
use crate::store;
use crate::store::schedule_due::DueSchedule;
use crate::store::schedule_fire::{Fire, Offer};

/// Most schedules one pass reads (and offers ticks for); a pass that finds
/// more due is followed by another at once.
pub const SCHEDULES_PER_PASS: usize = 100;
/// The longest a scheduler waits between two passes over a queue: a
/// schedule stored or changed by another process is seen within it (this
/// process's own changes at once).
pub const LOOK_INTERVAL: Duration = Duration::from_secs(5);
/// The pause before a pass that failed is tried again.
pub const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// What one scheduling pass did ([`Queue::run_schedules`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SchedulesReport {
    /// The server's clock when the pass read the schedules.
    pub server_ms: u64,
    /// Each schedule whose ticks were offered, with what came of them.
    pub fired: Vec<Fired>,
    /// When the next pass is due (server ms): the earliest look time of
    /// the queue's schedules after this pass, or `server_ms` when more are
    /// due at once; `None` without schedules. A scheduler still looks every
    /// [`LOOK_INTERVAL`], for changes made by other processes.
    pub next_pass_ms: Option<u64>,
    /// When the schedules were read, on this process's monotonic clock.
    looked_at: Instant,
}

/// What the ticks offered for one schedule made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fired {
    /// The schedule.
    pub schedule: String,
    /// The server's clock when the ticks were taken: it decided which were
    /// due and which missed.
    pub server_ms: u64,
    /// The jobs of the ticks taken, in tick order.
    pub jobs: Vec<ScheduledJob>,
    /// The latest tick taken as missed (more than the grace late), if any:
    /// under [`Missed::RunLatest`](super::Missed::RunLatest) it is among
    /// `jobs`, under [`Missed::Skip`](super::Missed::Skip) it made none.
    pub missed_ms: Option<u64>,
}

/// A tick's job.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduledJob {
    /// The tick (server ms).
    pub tick_ms: u64,
    /// The job's id, `cron:NAME@TICK`.
    pub id: String,
    /// True when this pass made it; false when a job with its id was
    /// already there (left as it was).
    pub created: bool,
}

/// What offering a schedule's ticks came to, beyond the jobs.
enum FireAnswer {
    Fired(Fired, Option<u64>),
    /// The schedule changed since it was read: read it again at once.
    Stale,
    Gone,
}

impl Queue {
    /// One scheduling pass over this queue's schedules: the ticks that have
    /// come on the server's clock become jobs, at most one each, whichever
    /// processes run passes at the same time. The maintenance task of a
    /// [`Client`](crate::Client) runs passes for the queues its consumers
    /// serve, and a [`Scheduler`](super::Scheduler) for any queue; call this
    /// by hand in a process with neither, or in tests.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// let report = queue.run_schedules().await?;
    /// for fired in &report.fired {
    ///     for job in &fired.jobs {
    ///         println!("{}: tick {} is job {}", fired.schedule, job.tick_ms, job.id);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Server errors (the pass can simply be run again: a tick is taken at
    /// most once whatever happened to a reply).
    pub async fn run_schedules(&self) -> Result<SchedulesReport> {
        let due = store::schedule_due::run(&mut self.conn(), self.keys(), SCHEDULES_PER_PASS).await?;
        let looked_at = Instant::now();
        let now = due.server_ms;
        let mut next = due.next_look_ms;
        if due.schedules.len() >= SCHEDULES_PER_PASS {
            next = Some(now);
        }
        let mut fired = Vec::new();
        for d in due.schedules {
            let timing = match Timing::parse(&d.cron, &d.zone) {
                Ok(t) => t,
                Err(e) => {
                    // Stored by another build (a newer croner?): left to
                    // schedulers that can read it.
                    warn!(queue = self.name(), schedule = %d.name, error = %e, "cannot read this schedule's timing; left to other schedulers");
                    continue;
                }
            };
            let plan = plan(&timing, d.last, now, d.grace_ms, MAX_TICKS_PER_CALL);
            match self.fire(&d, &plan.ticks, plan.next).await? {
                FireAnswer::Fired(f, look) => {
                    if let Some(look) = look {
                        next = Some(next.map_or(look, |n| n.min(look)));
                    }
                    log_fired(self, &f);
                    fired.push(f);
                }
                FireAnswer::Stale => next = Some(now),
                FireAnswer::Gone => {}
            }
        }
        Ok(SchedulesReport {
            server_ms: now,
            fired,
            next_pass_ms: next,
            looked_at,
        })
    }

    /// Offers `ticks` of schedule `d` (one script call).
    async fn fire(&self, d: &DueSchedule, ticks: &[u64], next: Option<u64>) -> Result<FireAnswer> {
        let offer = Offer {
            name: &d.name,
            cron: &d.cron,
            zone: &d.zone,
            ticks,
            next,
        };
        let fired = match store::schedule_fire::run(&mut self.conn(), self.keys(), &offer).await? {
            Fire::Fired(f) => f,
            Fire::Stale => return Ok(FireAnswer::Stale),
            Fire::Gone => return Ok(FireAnswer::Gone),
        };
        let jobs = fired
            .jobs
            .into_iter()
            .map(|j| ScheduledJob {
                tick_ms: j.tick_ms,
                id: j.id,
                created: j.created,
            })
            .collect();
        let f = Fired {
            schedule: d.name.clone(),
            server_ms: fired.server_ms,
            jobs,
            missed_ms: fired.missed_ms,
        };
        Ok(FireAnswer::Fired(f, fired.look_ms))
    }
}

fn log_fired(queue: &Queue, f: &Fired) {
    for job in f.jobs.iter().filter(|j| j.created) {
        debug!(queue = queue.name(), schedule = %f.schedule, tick_ms = job.tick_ms, job_id = %job.id, "scheduled job made");
    }
    if let Some(missed) = f.missed_ms {
        warn!(
            queue = queue.name(),
            schedule = %f.schedule,
            missed_tick_ms = missed,
            server_ms = f.server_ms,
            "schedule missed ticks (no scheduler ran within its grace); its missed-tick policy applied"
        );
    }
}

/// When to run the next pass after `report`: at its next pass time,
/// measured on this process's monotonic clock from when the schedules were
/// read (so never early, and a client clock off by any amount changes
/// nothing), and at most [`LOOK_INTERVAL`] away.
pub(crate) fn next_pass(report: &SchedulesReport) -> Instant {
    let wait = report.next_pass_ms.map_or(LOOK_INTERVAL, |t| {
        Duration::from_millis(t.saturating_sub(report.server_ms)).min(LOOK_INTERVAL)
    });
    report.looked_at + wait
}

/// One scheduling pass, as the maintenance task of a client and a
/// [`Scheduler`](super::Scheduler) run it: returns when the next is due
/// (after a failure, logged, [`RETRY_PAUSE`] from now).
pub(crate) async fn maintain(queue: &Queue) -> Instant {
    match queue.run_schedules().await {
        Ok(report) => next_pass(&report),
        Err(e) => {
            warn!(queue = queue.name(), error = %e, "scheduling pass failed; retrying");
            Instant::now() + RETRY_PAUSE
        }
    }
}
