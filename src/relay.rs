//! The relay: carries the messages one queue's scripts left for another
//! queue to it.
//!
//! A flow whose steps, or a batch whose members, are on several queues
//! spans several hash slots (on a Cluster, several masters), and no script
//! may touch two slots. So a script that must change another queue's
//! state (make a flow's step or a batch's member there, cancel it, or tell
//! the home queue that one ended) pushes a message onto its own queue's
//! `outbox` list in the same atomic call as the change that caused it
//! (`lua/lib/outbox.lua`). The relay reads an
//! outbox in order, runs each message's `deliver` script on the
//! queue it names, and only then takes the message off the outbox: a
//! message is delivered at least once, through a crash of the relaying
//! process or a failover (with a [`Durability`](crate::durability::Durability)
//! that waits for replicas, the delivery is confirmed on them first).
//! Delivering is idempotent: a message that makes a job leaves a receipt
//! on its queue, an end is written (or counted) once at home, and every
//! message carries its flow's or batch's creation time, so one of an older
//! one of the same id changes nothing. A delivery applies a queue's messages in the order its
//! outbox holds them (a step's cancel after its making).
//!
//! Who relays: the call that wrote the messages
//! ([`Queue::add_flow`](crate::Queue::add_flow),
//! [`Flow::cancel`](crate::flow::Flow::cancel), an add through
//! [`Batch::on`](crate::batch::Batch::on)) at once, and the
//! maintenance task of every process with a worker on a queue, when its
//! look at the queue finds messages: within
//! [`RELAY_HOT_INTERVAL`](crate::maintenance::RELAY_HOT_INTERVAL) of a
//! settlement whose reply says it left one (a step's or member's end), and while the
//! relay has been busy with the queue in the last
//! [`RELAY_HOT_FOR`](crate::maintenance::RELAY_HOT_FOR); otherwise within
//! the reap interval (an end written by a settlement from a process with
//! no worker on the queue); right after a reap pass that ended jobs (a
//! job failed as stalled, cancelled or expired by the reap may be another
//! queue's step or member); and every pass of a
//! [`Reaper`](crate::Reaper) of the queue (the upkeep of a queue whose
//! consumers run without the client's maintenance). An atomic completion
//! ([`Queue::complete_with`](crate::Queue::complete_with)) that left an
//! end heats the queue as a settlement does. A delivery that leaves
//! messages on its target's outbox goes on with that outbox.

use std::collections::VecDeque;

use tracing::warn;

use crate::error::{Error, Result};
use crate::keys::Keys;
use crate::queue::Queue;
use crate::store;

/// Messages read from an outbox per round trip.
const READ: usize = 100;

/// Most outboxes one relay run goes on to (each delivery may leave
/// messages on its target's outbox, and that one's on the next).
const MAX_OUTBOXES: usize = 64;

/// Delivers every message waiting on `queue`'s outbox, then those the
/// deliveries left on their targets' outboxes; answers how many it
/// delivered. A message that cannot be delivered now (a server error, a
/// delivery not confirmed as durable as the queue asks) stops the run with
/// that error and stays, with those behind it, for the next run. One this
/// build does not know (a newer process wrote it) stays too, for a newer
/// process to deliver, and the messages behind it for the same queue wait
/// behind it. Messages go [`READ`] at a time, those for one queue in one
/// script call, and are taken off in one round trip.
///
/// # Errors
/// A server error, or [`Error::NotDurable`].
pub(crate) async fn relay(queue: &Queue) -> Result<u64> {
    let prefix = &queue.options().prefix;
    let keep_failed = queue.options().keep_failed.arg();
    let durability = queue.options().durability;
    let mut todo = VecDeque::from([queue.name().to_owned()]);
    let mut delivered = 0;
    let mut visited = 0;
    while let Some(name) = todo.pop_front() {
        visited += 1;
        if visited > MAX_OUTBOXES {
            break;
        }
        let source = Keys::new(prefix, &name)?;
        let mut conn = queue.link().conn().homed(&source.base);
        loop {
            let messages: Vec<Vec<u8>> = redis::cmd("LRANGE")
                .arg(&source.outbox)
                .arg(0)
                .arg(READ - 1)
                .query_async(&mut conn)
                .await
                .map_err(Error::from_redis)?;
            let read = messages.len();
            let mut progress = 0;
            // Messages for different queues do not depend on each other;
            // those for one queue go in one call, in their order.
            for (target, group) in by_target(&name, &messages) {
                let keys = Keys::new(prefix, &target)?;
                let mut to = queue.link().conn().homed(&keys.base);
                let (done, confirmed) = store::deliver::run(&mut to, &keys, &keep_failed, &group, durability).await?;
                #[cfg(echomq_faults)]
                if crate::faults::active("remote-end-twice") {
                    // as a relay that died before taking them off, and the next
                    store::deliver::run(&mut to, &keys, &keep_failed, &group, durability).await?;
                }
                if let Some(s) = confirmed? {
                    return Err(Error::NotDurable {
                        ids: Vec::new(),
                        acked: s.acked,
                        wanted: s.wanted,
                    });
                }
                if done.applied > 0 {
                    let mut pipe = redis::pipe();
                    for m in &group[..done.applied] {
                        pipe.cmd("LREM").arg(&source.outbox).arg(1).arg(*m).ignore();
                    }
                    let () = pipe.query_async(&mut conn).await.map_err(Error::from_redis)?;
                }
                if !done.known {
                    warn!(
                        queue = %name,
                        target = %target,
                        "a message on the outbox is of a kind this build does not know (a newer echomq wrote it); \
                         it and those behind it for that queue are left for a newer process"
                    );
                }
                if done.applied > 0 {
                    // both ends of a flow over queues are busy for a while
                    queue.upkeep().heat(&source.base);
                    queue.upkeep().heat(&keys.base);
                }
                progress += done.applied;
                delivered += done.applied as u64;
                if done.outbox > 0 && target != name && !todo.contains(&target) {
                    todo.push_back(target);
                }
            }
            if read < READ || progress == 0 {
                break;
            }
        }
    }
    Ok(delivered)
}

impl Queue {
    /// Delivers the messages this queue's calls left for other queues
    /// (steps of flows that span queues, [`Step::on`](crate::flow::Step::on);
    /// members of batches that do, [`Batch::on`](crate::batch::Batch::on)),
    /// and those the deliveries left in turn; answers how many it
    /// delivered. A worker's client does this for each of its queues
    /// soon after a message is written (see the module's notes), and the calls
    /// that write messages ([`add_flow`](Queue::add_flow),
    /// [`Flow::cancel`](crate::flow::Flow::cancel)) at once: call it where
    /// no worker serves the queue, or to move a flow on without waiting.
    ///
    /// # Errors
    /// A server error, or [`Error::NotDurable`] when a delivery is not
    /// confirmed as the queue's [`Durability`](crate::Durability) asks
    /// (the messages not delivered stay, for the next run).
    pub async fn relay(&self) -> Result<u64> {
        relay(self).await
    }
}

/// The messages of outbox `name`, grouped by the queue each is for, each
/// group in the outbox's order. A message that names no queue (echomq
/// writes none) is left on the outbox, with a warning.
fn by_target<'a>(name: &str, messages: &'a [Vec<u8>]) -> Vec<(String, Vec<&'a [u8]>)> {
    let mut groups: Vec<(String, Vec<&[u8]>)> = Vec::new();
    for m in messages {
        let target = m
            .iter()
            .position(|&b| b == 0x1e)
            .and_then(|at| std::str::from_utf8(&m[..at]).ok())
            .filter(|t| crate::validate::queue_name(t).is_ok());
        let Some(target) = target else {
            warn!(queue = %name, "a message on the outbox names no queue; left there");
            continue;
        };
        match groups.iter_mut().find(|(t, _)| t == target) {
            Some((_, g)) => g.push(m),
            None => groups.push((target.to_owned(), vec![m])),
        }
    }
    groups
}

/// [`relay`], for a caller that goes on whatever happens: a failure is
/// logged, and the messages wait for the next run.
pub(crate) async fn relay_or_log(queue: &Queue) {
    if let Err(e) = relay(queue).await {
        warn!(queue = queue.name(), error = %e, "relaying the outbox failed; will retry");
    }
}
