//! Background upkeep of queues: the [`Reaper`] (expired leases, due
//! delayed jobs) and the maintenance task a [`Client`](crate::Client) runs
//! for the queues its consumers serve.
//!
//! One maintenance task per client looks at every registered queue: a
//! queue holding leases, or with delayed jobs due soon, every reap interval
//! (the shortest any of its consumers asked for); an idle queue (no lease,
//! no delayed job due within [`IDLE_INTERVAL`]) only every
//! [`IDLE_INTERVAL`], or at once when a consumer of this process leases
//! from it. A look is not a script call: the queues due are looked at
//! together, in one pipelined round trip of plain O(log n) reads (per hash
//! slot on a cluster): the server's `TIME`, each queue's earliest lease
//! deadline, earliest delayed job and (feature `cron`) earliest schedule
//! look time. Only a queue with a lapsed lease or a due delayed job gets
//! the reap script, and only one with a due schedule a scheduling pass. So
//! 10,000 idle queues cost about 2,000 queue looks a second (two or three
//! reads each, a few pipelines), not 4,000 script calls. The price of the
//! idle pace: a lease taken by *another* process from a queue this process
//! saw idle is reaped up to [`IDLE_INTERVAL`] after its deadline if that
//! process dies (its own maintenance, while it lives, reaps on time). The
//! `TIME` of each look is also the look at the server's clock that holds
//! reaping after a clock step (see [`MAX_STEP_HOLD`]).
//!
//! With the `cron` feature the same task runs the scheduling passes of each
//! queue's cron schedules (`crate::schedule`): when a schedule's next
//! tick comes on the server's clock, and at least every
//! `schedule::LOOK_INTERVAL` a look (so a schedule
//! stored by another process is picked up within it). A pass makes jobs;
//! it never runs a handler.
//!
//! The same task runs the consistency sweep ([`sweep`]) of all its queues:
//! one walk of the keyspace per key prefix (`SCAN MATCH`, about
//! [`SWEEP_STEP`] keys a step, one step every [`SWEEP_PACE`], on each
//! master of a cluster) finds the job hashes and dedup markers of every
//! queue, and each queue checks those the step found with one script call;
//! each queue's own sets are swept beside one of its looks (one call for a
//! small queue). A sweep starts when the task starts (or a queue it does
//! not yet cover is registered, or the connection was made anew), then
//! every [`SWEEP_INTERVAL`]. Its cost grows with the keyspace, once, not
//! with keyspace × queues: 10,000 queues over 90,000 keys take about 140
//! SCAN steps a sweep, where a walk per queue took 2.8 million. It is a
//! safety net for torn writes, not a hot path.

mod clock;
mod look;
pub mod reaper;
pub mod sweep;
mod task;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub use self::clock::{CLOCK_STEP_TOLERANCE, MAX_STEP_HOLD};
pub use self::reaper::{ReapReport, Reaper, ReaperHandle};
use self::sweep::Walk;
pub use self::sweep::{MAX_SWEEP_BATCH, SweepCursor, SweepReport, sweep_queues};
use crate::queue::{Queue, Upkeep, UpkeepGuard};

/// How often the maintenance task looks at an idle queue.
pub const IDLE_INTERVAL: Duration = Duration::from_secs(5);
/// How often the maintenance task looks at a queue whose outbox the relay
/// found or left messages for (flows over several queues) within
/// [`RELAY_HOT_FOR`], so a step's end reaches its flow within about this
/// long while the flow runs.
pub const RELAY_HOT_INTERVAL: Duration = Duration::from_millis(20);
/// How long a queue stays looked at every [`RELAY_HOT_INTERVAL`] after the
/// relay last had messages from it or delivered steps to it, or a
/// settlement there left a message on its outbox.
pub const RELAY_HOT_FOR: Duration = Duration::from_secs(2);
/// Time between the starts of two consistency sweeps of a queue.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(600);
/// Keys one sweep step looks at (a SCAN COUNT hint: the job phase scans the
/// whole database, the set phases only the queue's sets).
pub const SWEEP_STEP: usize = 500;
/// The shortest time between two sweep steps of a queue, so a sweep costs
/// a busy queue a small, steady share of the server (about 500 keys looked
/// at per second).
pub const SWEEP_PACE: Duration = Duration::from_secs(1);

/// The queues a client's maintenance task keeps, and when each is due.
#[derive(Default)]
pub(crate) struct Maintenance {
    state: Mutex<State>,
    /// Wakes the task when a queue is added or nudged.
    changed: Notify,
}

struct State {
    queues: HashMap<Arc<str>, Entry>,
    /// The running task's number (0: none), so a task ending late never
    /// marks a newer one as gone.
    running: u64,
    tasks: u64,
    /// The walk of the keyspace under way for the sweep of every queue's
    /// job hashes and dedup markers (done: the next starts anew, with the
    /// queues registered then), and when its next step is due.
    walk: Walk,
    next_walk: Instant,
    /// Bumped when a new walk replaces the one under way, so a step that
    /// ran meanwhile does not put the old one back.
    walk_round: u64,
    /// A queue was registered that the walk under way does not cover (its
    /// prefix's walk had begun): walk again at once when this one ends.
    rewalk: bool,
    /// A step of the walk runs (on a copy of `walk`, which may be further
    /// on than `walk` says).
    stepping: bool,
}

impl Default for State {
    fn default() -> State {
        State {
            queues: HashMap::new(),
            running: 0,
            tasks: 0,
            walk: Walk::default(),
            // At once: the start-up sweep (see `register`).
            next_walk: Instant::now(),
            walk_round: 0,
            rewalk: false,
            stepping: false,
        }
    }
}

struct Entry {
    queue: Queue,
    /// Reap interval per registration (the shortest wins).
    intervals: Vec<Duration>,
    next: Instant,
    /// The sweep of the queue's own sets in progress (its job hashes and
    /// dedup markers are the walk's), and when the next one starts.
    sweep: SweepCursor,
    next_sweep: Instant,
    /// When the queue's schedules are next looked at (never without the
    /// `cron` feature).
    next_schedules: Instant,
    /// Until when its outbox is looked at every [`RELAY_HOT_INTERVAL`].
    hot_until: Option<Instant>,
}

impl Entry {
    fn interval(&self) -> Duration {
        self.intervals.iter().copied().min().unwrap_or(IDLE_INTERVAL)
    }
}

/// The maintenance of a client's queues is the upkeep its queues use.
impl Upkeep for Arc<Maintenance> {
    fn register(&self, queue: &Queue, interval: Duration) -> UpkeepGuard {
        Box::new(Maintenance::register(self, queue, interval))
    }
    fn ensure_running(&self) {
        Maintenance::ensure_running(self);
    }
    fn nudge(&self, base: &str) {
        Maintenance::nudge(self, base);
    }
    fn heat(&self, base: &str) {
        Maintenance::heat(self, base);
    }
    #[cfg(feature = "cron")]
    fn nudge_schedules(&self, base: &str) {
        Maintenance::nudge_schedules(self, base);
    }
}

/// Marks the task `running` as gone when dropped, however it ends (its
/// runtime may shut down with queues still registered), unless a newer
/// task has taken over.
struct Running(Arc<Maintenance>, u64);

impl Drop for Running {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        if st.running == self.1 {
            st.running = 0;
        }
    }
}

/// Keeps a queue under maintenance while it lives.
pub(crate) struct Registration {
    maintenance: Arc<Maintenance>,
    base: Arc<str>,
    interval: Duration,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut st = self.maintenance.lock();
        if let Some(e) = st.queues.get_mut(&self.base) {
            if let Some(i) = e.intervals.iter().position(|d| *d == self.interval) {
                e.intervals.swap_remove(i);
            }
            if e.intervals.is_empty() {
                st.queues.remove(&self.base);
            }
        }
        drop(st);
        self.maintenance.changed.notify_one();
    }
}

impl Maintenance {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reaps `queue` every `interval` (while busy) until the registration
    /// is dropped; starts the task on the current runtime if needed.
    pub(crate) fn register(self: &Arc<Self>, queue: &Queue, interval: Duration) -> Registration {
        let base = queue.base().clone();
        {
            let mut st = self.lock();
            let fresh = !st.queues.contains_key(&base);
            let e = st.queues.entry(base.clone()).or_insert_with(|| Entry {
                queue: queue.clone(),
                intervals: Vec::new(),
                next: Instant::now(),
                sweep: SweepCursor::sets(),
                // At once: a process starting up after a crash (its own, or
                // the server's) sweeps before its consumers have been at it
                // long; paced as every sweep is.
                next_sweep: Instant::now(),
                next_schedules: schedules_from_now(),
                hot_until: None,
            });
            e.intervals.push(interval);
            e.next = Instant::now();
            // A queue the walk under way does not cover (or registered
            // between walks) gets a start-up sweep: a walk a moment from
            // now (so the queues registered together, a worker's or a
            // process's, share one walk), or right after the one under way.
            if fresh && (st.stepping || !st.walk.covers(queue)) {
                if st.walk.is_done() {
                    let now = Instant::now();
                    let soon = now + SWEEP_PACE;
                    st.next_walk = if st.next_walk <= now {
                        soon
                    } else {
                        st.next_walk.min(soon)
                    };
                } else {
                    st.rewalk = true;
                }
            }
        }
        self.ensure_running();
        self.changed.notify_one();
        Registration {
            maintenance: self.clone(),
            base,
            interval,
        }
    }

    /// Starts the task on the current runtime unless one runs. The task
    /// lives on the runtime of the consumer that started it; should that
    /// runtime shut down while other consumers still run, the next claim of
    /// any of them starts it again on theirs.
    pub(crate) fn ensure_running(self: &Arc<Self>) {
        let task = {
            let mut st = self.lock();
            if st.running != 0 || st.queues.is_empty() {
                return;
            }
            st.tasks += 1;
            st.running = st.tasks;
            st.tasks
        };
        // Made before the spawn, so a task dropped before its first poll
        // still clears `running`.
        let running = Running(self.clone(), task);
        tokio::spawn(self.clone().run(running));
    }

    /// A consumer of this process leased from the queue: reap it at its
    /// busy interval from now on.
    pub(crate) fn nudge(&self, base: &str) {
        let mut st = self.lock();
        if let Some(e) = st.queues.get_mut(base) {
            let soon = Instant::now() + e.interval();
            if e.next > soon {
                e.next = soon;
                drop(st);
                self.changed.notify_one();
            }
        }
    }

    /// The relay had messages from the queue, or delivered to it, or a
    /// settlement there left a message: look at its outbox every
    /// [`RELAY_HOT_INTERVAL`] for [`RELAY_HOT_FOR`].
    pub(crate) fn heat(&self, base: &str) {
        let mut st = self.lock();
        if let Some(e) = st.queues.get_mut(base) {
            let now = Instant::now();
            e.hot_until = Some(now + RELAY_HOT_FOR);
            let soon = now + RELAY_HOT_INTERVAL;
            if e.next > soon {
                e.next = soon;
                drop(st);
                self.changed.notify_one();
            }
        }
    }

    /// A schedule of the queue was stored or changed in this process: look
    /// at its schedules now.
    #[cfg(feature = "cron")]
    pub(crate) fn nudge_schedules(&self, base: &str) {
        let mut st = self.lock();
        if let Some(e) = st.queues.get_mut(base) {
            e.next_schedules = Instant::now();
            drop(st);
            self.changed.notify_one();
        }
    }

    /// Starts a new sweep of every queue at once.
    fn sweep_all_now(&self) {
        let now = Instant::now();
        let mut st = self.lock();
        for e in st.queues.values_mut() {
            e.sweep = SweepCursor::sets();
            e.next_sweep = now;
        }
        st.walk = Walk::default();
        st.next_walk = now;
        st.walk_round += 1;
        st.rewalk = false;
    }
}

/// When a newly registered queue's schedules are first looked at: at once
/// (never without the `cron` feature).
fn schedules_from_now() -> Instant {
    if cfg!(feature = "cron") {
        Instant::now()
    } else {
        crate::validate::later(Instant::now(), Duration::MAX)
    }
}
