//! The maintenance task: each round it plans what is due, steps the
//! sweep's walk, looks at the due queues in one round trip, and tends each
//! (its sets' sweep step, a reap, a scheduling pass), then sleeps until the
//! next is due or a queue is added or nudged.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, sleep_until};
use tracing::warn;

use super::reaper::{self, DEFAULT_REAP_BATCH};
use super::sweep::Walk;
use super::{IDLE_INTERVAL, Maintenance, Running, SWEEP_INTERVAL, SWEEP_PACE, SWEEP_STEP, SweepCursor, clock, look};
use crate::queue::Queue;

impl Maintenance {
    /// The task: looks at each queue when due (reaping it, running its
    /// schedules when the look finds work) and sweeps, until no queue is
    /// registered.
    pub(super) async fn run(self: Arc<Self>, _running: Running) {
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
        // Messages this queue's scripts left for other queues (flows of
        // several queues): carried there now.
        if look.is_some_and(|l| l.outbox > 0) {
            crate::relay::relay_or_log(&queue).await;
        }
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
        // A queue in a flow over several queues: its next message is
        // relayed soon, not at its reap interval.
        let now = Instant::now();
        if e.hot_until.is_some_and(|t| t > now) {
            e.next = e.next.min(now + super::RELAY_HOT_INTERVAL);
        } else {
            e.hot_until = None;
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

/// One scheduling pass over `queue`'s schedules; returns when the next is due.
#[cfg(feature = "cron")]
async fn schedule_pass(queue: &Queue) -> Instant {
    crate::schedule::maintain(queue).await
}

#[cfg(not(feature = "cron"))]
async fn schedule_pass(_queue: &Queue) -> Instant {
    super::schedules_from_now()
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
    super::schedules_from_now()
}

/// One reap of `queue` ([`reaper::reap_pass`], the pass a [`Reaper`] runs
/// too); returns when it is due again: at once after a full batch, after
/// `interval` while it holds leases or a delayed job is due soon, else
/// after [`IDLE_INTERVAL`] (or the next due time, if sooner).
async fn pass(queue: &Queue, interval: Duration) -> Instant {
    let started = Instant::now();
    match reaper::reap_pass(queue, DEFAULT_REAP_BATCH).await {
        Ok(r) => {
            // A job the pass ended may be a step or member of another
            // queue's flow or batch, whose end the reap left on the
            // outbox: carried home now, not at the next look.
            if r.ended() > 0 {
                crate::relay::relay_or_log(queue).await;
            }
            match r.due_again(DEFAULT_REAP_BATCH, interval, IDLE_INTERVAL) {
                None => Instant::now(),
                Some(wait) => started + wait,
            }
        }
        Err(e) => {
            warn!(queue = queue.name(), error = %e, "maintenance pass failed; retrying");
            started + interval
        }
    }
}
