//! Cheap looks at many queues: which of them have work for the reap and
//! scheduling scripts. One pipelined round trip of plain reads for all the
//! queues due (one per hash slot on a cluster, since a pipeline goes to one
//! slot's master): `TIME`, then per queue the earliest lease deadline
//! (`ZRANGE active 0 0 WITHSCORES`), the earliest delayed job's due time
//! (the same on `delayed`), the messages on its outbox for other queues
//! (`LLEN outbox`, see `src/relay.rs`) and, with the `cron` feature, the
//! earliest look time of its schedules. Each is O(log n) on the server, against a script
//! call per queue per look; only a queue with a lapsed lease, a due delayed
//! job or a due schedule then gets its script. The round trips (one per
//! 1,000 queues, or per slot) run side by side.
//!
//! Deadlines and due times are the server's clock, so they are compared
//! with the `TIME` read in the same round trip (before the reads, so a
//! lease that lapses during the round trip is seen at the next look). That
//! `TIME` is also the maintenance task's look at the server's clock (see
//! `clock`): a step holds reaping as before.

use std::collections::HashMap;
use std::sync::Arc;

use redis::Value;
use tokio::time::Instant;

use crate::queue::Queue;

/// Most queues one pipeline looks at (each costs two or three commands).
const QUEUES_PER_PIPELINE: usize = 1_000;

/// What one look found for one queue (server ms throughout).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Look {
    /// The server's clock when the queue was looked at.
    pub server_ms: u64,
    /// When the round trip was sent, on this process's monotonic clock
    /// (waits are measured from it, so never too late).
    pub sent: Instant,
    /// The earliest lease deadline, if a lease is held.
    pub lease: Option<u64>,
    /// The earliest delayed job's due time.
    pub delayed: Option<u64>,
    /// The earliest look time of the queue's schedules (`None` without
    /// schedules, or without the `cron` feature).
    pub schedules: Option<u64>,
    /// Messages on the queue's outbox, for the relay.
    pub outbox: u64,
}

impl Look {
    /// True when the reap script has work: a lease past its deadline (as
    /// `lua/reap.lua` takes it: deadline < TIME) or a delayed job due
    /// (due <= TIME, as `promote_due`).
    pub(crate) fn reap_due(&self) -> bool {
        self.lease.is_some_and(|d| d < self.server_ms) || self.delayed.is_some_and(|d| d <= self.server_ms)
    }

    /// True when a schedule's look time has come (`lua/schedule_due.lua`).
    pub(crate) fn schedules_due(&self) -> bool {
        self.schedules.is_some_and(|t| t <= self.server_ms)
    }
}

/// One group's round trip: the server time it read, and when it was sent
/// and answered (for the clock watch).
pub(crate) struct Trip {
    /// The group (`Conn::slot_group`) whose node answered.
    pub node: Option<String>,
    pub server_ms: u64,
    pub sent: Instant,
    pub got: Instant,
}

/// Most look round trips in flight at once (on a cluster, a process whose
/// queues each have a slot of their own makes one per queue).
const TRIPS_IN_FLIGHT: usize = 32;

/// Looks at `queues`; returns each one's look by base (a queue missing from
/// it could not be looked at: fall back to its scripts) and each round
/// trip's clock reading. The round trips run side by side, at most
/// [`TRIPS_IN_FLIGHT`] at once.
pub(crate) async fn look(queues: &[Queue]) -> (HashMap<Arc<str>, Look>, Vec<Trip>) {
    let mut groups: HashMap<Option<String>, Vec<Queue>> = HashMap::new();
    for q in queues {
        groups.entry(q.conn().slot_group(q.base())).or_default().push(q.clone());
    }
    let mut trips_to_make = Vec::new();
    for (node, group) in groups {
        for chunk in group.chunks(QUEUES_PER_PIPELINE) {
            trips_to_make.push((node.clone(), chunk.to_vec()));
        }
    }
    let mut looks = HashMap::with_capacity(queues.len());
    let mut trips = Vec::new();
    let mut in_flight = tokio::task::JoinSet::new();
    let mut to_make = trips_to_make.into_iter();
    loop {
        while in_flight.len() < TRIPS_IN_FLIGHT {
            let Some((node, chunk)) = to_make.next() else { break };
            in_flight.spawn(async move { (node, look_group(&chunk).await) });
        }
        let Some(done) = in_flight.join_next().await else { break };
        match done {
            Ok((node, Ok((trip, found)))) => {
                trips.push(Trip { node, ..trip });
                looks.extend(found);
            }
            Ok((_, Err(e))) => {
                tracing::debug!(error = %e, "a look at idle queues failed; their scripts run instead");
            }
            // A look that panicked (it does not) or was cancelled: those
            // queues run their scripts.
            Err(e) => tracing::debug!(error = %e, "a look task ended early"),
        }
    }
    (looks, trips)
}

/// Per queue, the commands of a look.
const PER_QUEUE: usize = if cfg!(feature = "cron") { 4 } else { 3 };

async fn look_group(queues: &[Queue]) -> redis::RedisResult<(Trip, Vec<(Arc<str>, Look)>)> {
    let mut pipe = redis::pipe();
    // A wrong-typed key answers an error for its command alone; that queue
    // then runs its script, which reports it as before.
    pipe.ignore_errors();
    pipe.cmd("TIME");
    for q in queues {
        let k = q.keys();
        pipe.cmd("ZRANGE").arg(&k.active).arg(0).arg(0).arg("WITHSCORES");
        pipe.cmd("ZRANGE").arg(&k.delayed).arg(0).arg(0).arg("WITHSCORES");
        pipe.cmd("LLEN").arg(&k.outbox);
        if cfg!(feature = "cron") {
            pipe.cmd("ZRANGE").arg(&k.schedules).arg(0).arg(0).arg("WITHSCORES");
        }
    }
    // The first queue's handle: on a cluster it is homed to the group's slot.
    let mut conn = queues[0].conn();
    let sent = Instant::now();
    let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
    let got = Instant::now();
    let mut replies = replies.into_iter();
    let server_ms = replies
        .next()
        .and_then(|v| redis::from_redis_value::<(u64, u64)>(v).ok())
        .map(|(s, us)| s * 1000 + us / 1000)
        .ok_or_else(|| redis::RedisError::from((redis::ErrorKind::Client, "TIME answered no time")))?;
    let mut found = Vec::with_capacity(queues.len());
    for q in queues {
        let lease = first_score(replies.next());
        let delayed = first_score(replies.next());
        // (a wrong-typed outbox reads as empty: the relay would fail on it too)
        let outbox = replies
            .next()
            .and_then(|v| redis::from_redis_value::<u64>(v).ok())
            .unwrap_or(0);
        let schedules = if cfg!(feature = "cron") {
            first_score(replies.next())
        } else {
            Some(None)
        };
        if let (Some(lease), Some(delayed), Some(schedules)) = (lease, delayed, schedules) {
            found.push((
                q.base().clone(),
                Look {
                    server_ms,
                    sent,
                    lease,
                    delayed,
                    schedules,
                    outbox,
                },
            ));
        }
    }
    debug_assert!(replies.next().is_none(), "{PER_QUEUE} replies per queue");
    Ok((
        Trip {
            node: None,
            server_ms,
            sent,
            got,
        },
        found,
    ))
}

/// The score of a `ZRANGE key 0 0 WITHSCORES` reply: `Some(None)` for an
/// empty set, `None` for an error or a reply of another shape. Takes both
/// protocols' forms (`[member, score]`, and `[[member, score]]` on RESP3).
fn first_score(v: Option<Value>) -> Option<Option<u64>> {
    let items = match v? {
        Value::Array(items) => items,
        _ => return None,
    };
    let score = match items.as_slice() {
        [] => return Some(None),
        [Value::Array(pair)] => pair.get(1)?.clone(),
        [_, score] => score.clone(),
        _ => return None,
    };
    let s: f64 = redis::from_redis_value(score).ok()?;
    // Scores are server ms; a negative or odd one reads as "now" (due).
    Some(Some(if s.is_finite() && s > 0.0 { s as u64 } else { 0 }))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Both protocols' WITHSCORES replies are read; errors and odd shapes are told apart from an empty set.
    #[test]
    fn scores_are_read_from_either_protocol() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(first_score(Some(Value::Array(vec![]))), Some(None));
        assert_eq!(
            first_score(Some(Value::Array(vec![bulk("7"), bulk("1700000000123")]))),
            Some(Some(1_700_000_000_123))
        );
        assert_eq!(
            first_score(Some(Value::Array(vec![Value::Array(vec![
                bulk("7"),
                Value::Double(42.0)
            ])]))),
            Some(Some(42))
        );
        assert_eq!(
            first_score(Some(Value::Array(vec![bulk("7"), bulk("-5")]))),
            Some(Some(0))
        );
        assert_eq!(first_score(Some(Value::Nil)), None);
        assert_eq!(first_score(None), None);
    }
}
