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
//! queue's cron schedules ([`crate::schedule`]): when a schedule's next
//! tick comes on the server's clock, and at least every
//! [`LOOK_INTERVAL`](crate::schedule::LOOK_INTERVAL) a look (so a schedule
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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};
use tracing::warn;

pub use self::clock::{CLOCK_STEP_TOLERANCE, MAX_STEP_HOLD};
use self::reaper::DEFAULT_REAP_BATCH;
pub use self::reaper::{ReapReport, Reaper, ReaperHandle};
use self::sweep::Walk;
pub use self::sweep::{SweepCursor, SweepReport, sweep_queues};
use crate::queue::{Queue, Upkeep, UpkeepGuard};

/// How often the maintenance task looks at an idle queue.
pub const IDLE_INTERVAL: Duration = Duration::from_secs(5);
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
    fn nudge_schedules(&self, base: &str) {
        #[cfg(feature = "cron")]
        Maintenance::nudge_schedules(self, base);
        #[cfg(not(feature = "cron"))]
        let _ = base;
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

    /// The task: looks at each queue when due (reaping it, running its
    /// schedules when the look finds work) and sweeps, until no queue is
    /// registered.
    async fn run(self: Arc<Self>, _running: Running) {
        let mut link = Link::default();
        // One per node (slot, on a cluster): masters' clocks differ a
        // little, and a look at one must not be compared with another's.
        let mut clocks: HashMap<Option<String>, clock::ClockWatch> = HashMap::new();
        loop {
            let Some(Round { due, walk, wake_at }) = self.next_round() else {
                return;
            };
            if due.is_empty() && walk.is_none() {
                tokio::select! {
                    _ = sleep_until(wake_at) => {}
                    _ = self.changed.notified() => {}
                }
                continue;
            }
            let any = due
                .first()
                .map_or_else(|| walk.as_ref().map(|w| w.via.clone()), |d| Some(d.queue.clone()));
            if let Some(q) = &any
                && link.remade(q).await
            {
                // What the server holds may have lost the tail of its
                // writes (a restart from a torn AOF, a failover to a
                // replica that lagged): sweep before reaping promotes.
                tracing::info!("connection to the server made anew; sweeping every queue");
                self.sweep_all_now();
                continue;
            }
            // One walk step over the keyspace for every queue's job hashes
            // and dedup markers (see `sweep::Walk`), first, so a sweep due
            // since start-up or a reconnection repairs (a little) before
            // the reaps promote and return jobs.
            if let Some(walk) = walk {
                self.step_walk(walk).await;
            }
            if due.is_empty() {
                continue;
            }
            let (looks, held) = look_at(&due, &mut clocks).await;
            for d in due {
                let look = looks.get(d.queue.base()).copied();
                self.tend(d, look, held).await;
            }
        }
    }

    /// What this round of the task does, read under the lock: the queues
    /// due, the walk's step if one is due, and when to wake if nothing is.
    /// `None` when no queue is registered (the task ends).
    fn next_round(&self) -> Option<Round> {
        let mut st = self.lock();
        if st.queues.is_empty() {
            // Under the lock, so a registration from now on starts a new task.
            st.running = 0;
            return None;
        }
        let now = Instant::now();
        let due: Vec<Due> = st
            .queues
            .values()
            .filter(|e| e.next <= now || e.next_schedules <= now)
            .map(|e| Due {
                queue: e.queue.clone(),
                interval: e.interval(),
                reap: e.next <= now,
                sweep: (e.next <= now && e.next_sweep <= now).then(|| e.sweep.clone()),
                schedules: (e.next_schedules <= now).then_some(e.next_schedules),
            })
            .collect();
        // The walk's step (a copy of the walk, put back after it), with a
        // queue to walk through.
        let walk = if st.next_walk <= now {
            if st.walk.is_done() {
                st.walk = Walk::new(st.queues.values().map(|e| &e.queue));
                st.rewalk = false;
            }
            let via = st.queues.values().next().map(|e| e.queue.clone());
            st.stepping = via.is_some();
            via.map(|via| WalkStep {
                via,
                walk: st.walk.clone(),
                round: st.walk_round,
            })
        } else {
            None
        };
        let wake_at = st
            .queues
            .values()
            .map(|e| e.next.min(e.next_schedules))
            .min()
            .unwrap_or(now + IDLE_INTERVAL)
            .min(st.next_walk);
        Some(Round { due, walk, wake_at })
    }

    /// Takes one step of the sweep's walk and puts it back, with when the
    /// next step is due.
    async fn step_walk(&self, step: WalkStep) {
        let WalkStep { via, mut walk, round } = step;
        if let Err(e) = walk
            .step(&via, SWEEP_STEP, |base| {
                self.lock().queues.get(base).map(|e| e.queue.clone())
            })
            .await
        {
            warn!(error = %e, "consistency sweep walk step failed; will retry");
        }
        let mut st = self.lock();
        st.stepping = false;
        // Unless `sweep_all_now` started a new walk meanwhile.
        if st.walk_round == round {
            let now = Instant::now();
            if walk.is_done() {
                tracing::debug!(rewalk = st.rewalk, "consistency sweep walk done");
            }
            st.next_walk = match (walk.is_done(), st.rewalk) {
                (false, _) => now + SWEEP_PACE,
                (true, true) => now,
                (true, false) => now + SWEEP_INTERVAL,
            };
            st.walk = walk;
        }
    }

    /// Upkeep of one due queue: its sets' sweep step, a reap when its look
    /// found work (and no clock step holds reaping), a scheduling pass when
    /// its schedules are due; then when each is due again.
    async fn tend(&self, due: Due, look: Option<look::Look>, held: Option<Duration>) {
        let Due {
            queue,
            interval,
            reap,
            sweep,
            schedules,
        } = due;
        // The sets' sweep step first, as the walk's above.
        let swept = match sweep {
            Some(cursor) => step(&queue, &cursor).await,
            None => None,
        };
        let next = match (reap, look, held) {
            (false, _, _) => None,
            // Nothing to reap: no script call.
            (true, Some(l), _) if !l.reap_due() => Some(after_look(&l, interval)),
            (true, _, None) => Some(pass(&queue, interval).await),
            // Held after a clock step: look again when the hold ends.
            (true, _, Some(hold)) => Some(Instant::now() + hold),
        };
        let next_schedules = match (schedules, look) {
            (None, _) => None,
            (Some(due_at), Some(l)) if !l.schedules_due() => Some((due_at, schedules_after_look(&l))),
            (Some(due_at), _) => Some((due_at, schedule_pass(&queue).await)),
        };
        let mut st = self.lock();
        let Some(e) = st.queues.get_mut(queue.base()) else {
            return;
        };
        if let Some(next) = next {
            e.next = next;
        }
        if let Some((due_at, at)) = next_schedules {
            // A nudge during the pass (a schedule stored here meanwhile)
            // keeps its earlier time.
            e.next_schedules = if e.next_schedules == due_at {
                at
            } else {
                at.min(e.next_schedules)
            };
        }
        if let Some(cursor) = swept {
            if cursor.sets_done() {
                e.sweep = SweepCursor::sets();
                e.next_sweep = Instant::now() + SWEEP_INTERVAL;
            } else {
                e.sweep = cursor;
                e.next_sweep = Instant::now() + SWEEP_PACE;
            }
        }
    }
}

/// One round of the maintenance task (see [`Maintenance::next_round`]).
struct Round {
    due: Vec<Due>,
    walk: Option<WalkStep>,
    wake_at: Instant,
}

/// A step of the sweep's walk: a copy of the walk, the queue whose
/// connection it goes through, and the walk's round (a new walk started
/// meanwhile makes the step's result stale).
struct WalkStep {
    via: Queue,
    walk: Walk,
    round: u64,
}

/// Looks at the due queues in one round trip (per slot on a cluster):
/// only those with work get their scripts. Its `TIME` is the look at the
/// server's clock right before reaping: a step since the last look holds
/// lease reaping (see `clock`), and the longest hold is returned.
async fn look_at(
    due: &[Due],
    clocks: &mut HashMap<Option<String>, clock::ClockWatch>,
) -> (HashMap<Arc<str>, look::Look>, Option<Duration>) {
    let queues: Vec<Queue> = due.iter().map(|d| d.queue.clone()).collect();
    let (looks, trips) = look::look(&queues).await;
    for t in &trips {
        clocks
            .entry(t.node.clone())
            .or_default()
            .observe(t.server_ms, t.sent, t.got);
    }
    if trips.is_empty() && due.iter().any(|d| d.reap) {
        // No look answered: read the clock as before the scripts.
        let q = &due[0].queue;
        let node = q.conn().slot_group(q.base());
        if let Err(e) = clocks.entry(node).or_default().look(q).await {
            tracing::debug!(error = %e, "TIME failed; the reap will fail too and be retried");
        }
    }
    // A step seen on any node holds reaping everywhere: holding only
    // delays a reap, which is the safe side.
    let now = Instant::now();
    let held = clocks.values().filter_map(|c| c.held_for(now)).max();
    (looks, held)
}

/// How often the maintenance task asks the server (`CLIENT ID`) whether
/// its connection is the one it had; a new one (a server restart, a
/// failover) starts a consistency sweep of every queue at once.
pub const LINK_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Notices that the client's connection to the server was made anew (a
/// restart of the server, a failover, a dropped connection): the server
/// numbers its connections, so `CLIENT ID` answers another number then.
/// On a cluster, each master is asked (a failover of any one of them
/// counts).
#[derive(Default)]
struct Link {
    ids: Option<Vec<(String, Option<i64>)>>,
    next_check: Option<Instant>,
}

impl Link {
    /// True when a connection's id changed since the last look (at most
    /// one look per [`LINK_CHECK_INTERVAL`]; a failed look changes nothing).
    async fn remade(&mut self, queue: &Queue) -> bool {
        let now = Instant::now();
        if self.next_check.is_some_and(|t| t > now) {
            return false;
        }
        self.next_check = Some(now + LINK_CHECK_INTERVAL);
        let mut ids: Vec<(String, Option<i64>)> = match queue.conn().each_node(redis::cmd("CLIENT").arg("ID")).await {
            Ok(ids) => ids
                .into_iter()
                .map(|(node, v)| (node, redis::from_redis_value::<i64>(v).ok()))
                .collect(),
            Err(e) => {
                tracing::debug!(error = %e, "CLIENT ID failed; not checking the connection");
                return false;
            }
        };
        ids.sort();
        self.ids.replace(ids.clone()).is_some_and(|old| old != ids)
    }
}

/// A queue due for upkeep, and which kinds.
struct Due {
    queue: Queue,
    interval: Duration,
    reap: bool,
    /// The sweep's cursor when a sweep step is due too.
    sweep: Option<SweepCursor>,
    /// The schedules' look time, when a scheduling pass is due too.
    schedules: Option<Instant>,
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

/// One scheduling pass over `queue`'s schedules; returns when the next is due.
#[cfg(feature = "cron")]
async fn schedule_pass(queue: &Queue) -> Instant {
    crate::schedule::maintain(queue).await
}

#[cfg(not(feature = "cron"))]
async fn schedule_pass(_queue: &Queue) -> Instant {
    schedules_from_now()
}

/// One sweep step over `queue`'s own sets from `cursor`: one script call
/// checking about [`SWEEP_STEP`] members, going on into the next set
/// phases while each finishes in it (so a small queue's sets take one
/// call). Returns the cursor to go on from (none after an error: the same
/// step is tried again).
async fn step(queue: &Queue, cursor: &SweepCursor) -> Option<SweepCursor> {
    match queue.sweep_sets_step(cursor, SWEEP_STEP).await {
        Ok((next, _)) => Some(next),
        Err(e) => {
            warn!(queue = queue.name(), error = %e, "consistency sweep step failed; will retry");
            None
        }
    }
}

/// When a queue whose look found nothing to reap is due again: as [`pass`]
/// would say after an empty reap.
fn after_look(look: &look::Look, interval: Duration) -> Instant {
    let until_due = look
        .delayed
        .map(|due| Duration::from_millis(due.saturating_sub(look.server_ms)));
    look.sent + reaper::pace(look.lease.is_some(), until_due, interval, IDLE_INTERVAL)
}

/// When a queue whose look found no schedule due is looked at again: at
/// its schedules' next look time, at most the scheduler's look interval
/// away (as a pass that found nothing would say).
#[cfg(feature = "cron")]
fn schedules_after_look(look: &look::Look) -> Instant {
    let wait = look.schedules.map_or(crate::schedule::LOOK_INTERVAL, |t| {
        Duration::from_millis(t.saturating_sub(look.server_ms)).min(crate::schedule::LOOK_INTERVAL)
    });
    look.sent + wait
}

#[cfg(not(feature = "cron"))]
fn schedules_after_look(_look: &look::Look) -> Instant {
    schedules_from_now()
}

/// One reap of `queue` ([`reaper::reap_pass`], the pass a [`Reaper`] runs
/// too); returns when it is due again: at once after a full batch, after
/// `interval` while it holds leases or a delayed job is due soon, else
/// after [`IDLE_INTERVAL`] (or the next due time, if sooner).
async fn pass(queue: &Queue, interval: Duration) -> Instant {
    let started = Instant::now();
    match reaper::reap_pass(queue, DEFAULT_REAP_BATCH).await {
        Ok(r) => match r.due_again(DEFAULT_REAP_BATCH, interval, IDLE_INTERVAL) {
            None => Instant::now(),
            Some(wait) => started + wait,
        },
        Err(e) => {
            warn!(queue = queue.name(), error = %e, "maintenance pass failed; retrying");
            started + interval
        }
    }
}
