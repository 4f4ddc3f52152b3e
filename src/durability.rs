//! How far a write must have gone before echomq answers for it: the
//! primary's reply (the default), or also replicas' acknowledgements
//! (`WAIT`), or an fsync to the append-only file of the primary and of
//! replicas (`WAITAOF`). Set per queue handle with
//! [`QueueOptions::durability`](crate::QueueOptions::durability).
//!
//! Replication is asynchronous: a primary answers a write before any
//! replica has it, so a primary that dies just after answering can take
//! acknowledged writes with it when a replica is promoted (Sentinel, or
//! Cluster failover). What each setting promises then:
//!
//! | setting | an `enqueue` answered `Ok` | a settlement |
//! | --- | --- | --- |
//! | [`Primary`](Durability::Primary) | may be lost in a failover (the job never runs) | may be lost: the job is leased again after its lease and runs once more |
//! | [`Replicas`](Durability::Replicas) | held by the primary and `count` replicas: survives a failover that promotes one of them | the same; a shortfall is logged, never an error |
//! | [`Fsynced`](Durability::Fsynced) | also on disk (the primary's AOF and `replicas` replicas'): survives those servers' restarts | the same |
//!
//! `WAIT` does not roll a write back: when fewer replicas confirm within
//! the timeout, the write is still on the primary. An enqueue then answers
//! [`Error::NotDurable`] with the job ids, which is transient: enqueue
//! again with the same ids ([`EnqueueOptions::id`](crate::EnqueueOptions::id))
//! once replicas are back, and an existing job is not duplicated. A
//! settlement that falls short is already applied and cannot be undone;
//! the worker logs a warning, and if that settlement is lost, the job runs
//! again (at-least-once holds either way).
//!
//! A cancel ([`Queue::cancel`](crate::Queue::cancel), `cancel_many`) is
//! confirmed as an enqueue is (one lost in a failover would let the job
//! run): short, it answers [`Error::NotDurable`] with the ids, and
//! cancelling again answers
//! [`Cancel::Finished`](crate::admin::Cancel::Finished) for those already
//! cancelled. Adding a flow ([`Queue::add_flow`](crate::Queue::add_flow))
//! and opening and closing a batch
//! ([`Queue::open_batch`](crate::Queue::open_batch),
//! [`Batch::close`](crate::batch::Batch::close)) are confirmed too (a
//! close lost in a failover would leave the batch open, its callbacks
//! never enqueued): short, they answer [`Error::NotDurable`] with the
//! flow's or batch's id, and doing it again with that id answers
//! [`Error::NotDurable`] again while the first write is on the primary
//! alone, then [`Error::FlowExists`], [`Error::BatchExists`] or
//! [`Error::BatchClosed`] once it is confirmed (after a failover that
//! lost it, doing it again writes it anew). Other operator writes (retry, remove, promote) and the
//! schedules' ticks are not confirmed; a tick whose job a failover lost is
//! taken again by the next pass on the new master, which lost the record
//! of the tick with it.
//!
//! Claims and heartbeats are not confirmed either (a claim waiting for
//! replicas would hold up every worker of the client). A failover within
//! the replication lag of a claim can promote a replica that never had
//! it: the job is pending there and is claimed again, with the same
//! attempt number, while the first holder may still be running it. That
//! holder's settlement and heartbeats are refused
//! ([`Error::LeaseLost`]): the job runs once more (at-least-once), and
//! for that moment a lane's cap or the queue's
//! ([`Throttles`](crate::throttle::Throttles)) counts one job fewer than
//! are running, since the new master holds no lease of the lost claim.
//!
//! The confirmation travels in one pipeline right behind the script call
//! it confirms, so it reaches the node that ran the script, on the same
//! connection: `WAIT` counts only the replicas of the node that took the
//! writes. A reconnect, a failover or a cluster's fallback to another node
//! between the two cannot make another master's replicas confirm a write
//! they never saw (the redis crate's cluster connection sends a command
//! whose node is down to a random connected node, another master too).
//! A connection lost during the pair fails the call as a whole with a
//! transient error: its outcome is unknown, as for any call whose answer
//! was lost (enqueue again with the same ids).
//!
//! A confirmation covers everything the call found, not only what it
//! wrote. The server counts the replicas that hold the writes of the
//! confirming connection, so a call that found its work done (an enqueue
//! of an id that exists, a relay's delivery of an end already written, a
//! remembered settlement) would be confirmed at once while what it found,
//! another connection's write, may be on the primary alone. Every call
//! that is confirmed therefore writes (and deletes) a mark key as it ends,
//! so its confirmation waits for the replicas to hold everything the
//! primary held when it ran. Doing a write again from another process
//! after [`Error::NotDurable`] answers `NotDurable` until the first write
//! is on the replicas.
//!
//! It costs no round trip of its own, but its answer waits for the
//! slowest confirming replica. Concurrent enqueues and a worker's
//! settlements are batched, so one confirmation covers a batch (a bulk
//! enqueue: one per chunk of jobs).
//!
//! The server answers nothing else on that connection until the
//! confirmation returns, and echomq sends it on the client's shared
//! connection: while replicas are missing or slow, every call of that
//! [`Client`](crate::Client) (other queues' claims, heartbeats) queues
//! behind it for up to the timeout. Keep the timeout short next to the
//! leases (tens to hundreds of milliseconds) and below the client's
//! response timeout, and give queues with a durability setting a `Client`
//! of their own when other queues must not feel a replica's outage.

use std::time::Duration;

use crate::conn::Conn;
use crate::error::{Error, Result};

/// The longest [`Durability`] timeout accepted.
pub const MAX_DURABILITY_TIMEOUT: Duration = Duration::from_secs(60);
/// The most replicas a [`Durability`] setting may wait for.
pub const MAX_DURABILITY_REPLICAS: u32 = 64;

/// How far a write must have gone before echomq answers for it (see the
/// [module](self) for what each promises under failover).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// The primary applied it (what the server answers by itself).
    #[default]
    Primary,
    /// And `count` replicas acknowledged it within `timeout` (`WAIT`).
    Replicas {
        /// Replicas that must acknowledge (1 to [`MAX_DURABILITY_REPLICAS`]).
        count: u32,
        /// How long to wait for them (1 ms to [`MAX_DURABILITY_TIMEOUT`];
        /// keep it below the client's response timeout).
        timeout: Duration,
    },
    /// And it was fsynced to the primary's append-only file and to
    /// `replicas` replicas' within `timeout` (`WAITAOF 1 replicas`). Needs
    /// `appendonly yes` on the primary and a server with `WAITAOF` (Redis
    /// 7.2 and later, Valkey); checked when the queue handle is made.
    Fsynced {
        /// Replicas that must fsync too (0 to [`MAX_DURABILITY_REPLICAS`]).
        replicas: u32,
        /// How long to wait (1 ms to [`MAX_DURABILITY_TIMEOUT`]).
        timeout: Duration,
    },
}

/// What a confirmation said: `None` when the writes are as durable as
/// asked, a [`Shortfall`] when fewer confirmed, an error when it cannot
/// be used at all.
pub(crate) type Confirmed = Result<Option<Shortfall>>;

/// A write of one named thing (a batch, a flow) answered as its
/// confirmation says: [`Error::NotDurable`] naming `id` when it fell short.
pub(crate) fn confirm(confirmed: Confirmed, id: &str) -> Result<()> {
    match confirmed? {
        None => Ok(()),
        Some(s) => Err(Error::NotDurable {
            ids: vec![id.to_owned()],
            acked: s.acked,
            wanted: s.wanted,
        }),
    }
}

/// A confirmation that fell short: how many replicas (or, for `Fsynced`,
/// fsyncs counting the primary's) confirmed, and how many were asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shortfall {
    pub acked: u32,
    pub wanted: u32,
}

impl Durability {
    pub(crate) fn check(&self) -> Result<()> {
        let (n, min, timeout) = match *self {
            Durability::Primary => return Ok(()),
            Durability::Replicas { count, timeout } => (count, 1, timeout),
            Durability::Fsynced { replicas, timeout } => (replicas, 0, timeout),
        };
        if !(min..=MAX_DURABILITY_REPLICAS).contains(&n) {
            return Err(Error::InvalidOption {
                name: "durability",
                reason: format!("{n} replicas is not within {min}..={MAX_DURABILITY_REPLICAS}"),
            });
        }
        if timeout < Duration::from_millis(1) || timeout > MAX_DURABILITY_TIMEOUT {
            return Err(Error::InvalidOption {
                name: "durability",
                reason: format!("a timeout of {timeout:?} is not within 1ms..={MAX_DURABILITY_TIMEOUT:?}"),
            });
        }
        Ok(())
    }

    /// The command that confirms the writes sent before it on the same
    /// connection (`WAIT` or `WAITAOF`), and how many confirmations it
    /// asks for; `None` for [`Primary`](Durability::Primary).
    pub(crate) fn confirmation(&self) -> Option<redis::Cmd> {
        match *self {
            Durability::Primary => None,
            Durability::Replicas { count, timeout } => {
                let mut c = redis::cmd("WAIT");
                c.arg(count).arg(timeout_ms(timeout));
                Some(c)
            }
            Durability::Fsynced { replicas, timeout } => {
                let mut c = redis::cmd("WAITAOF");
                c.arg(1).arg(replicas).arg(timeout_ms(timeout));
                Some(c)
            }
        }
    }

    /// What the [`confirmation`](Self::confirmation)'s answer says: `None`
    /// when the writes are as durable as asked, else what fell short. A
    /// node that refuses it because it no longer is the master that took
    /// the writes (a replica after a failover; a cluster's `MOVED`,
    /// `TRYAGAIN` or `CLUSTERDOWN`) confirmed nothing: a shortfall of all.
    /// A refusal that says it cannot be used (an ACL refusal, an unknown
    /// command) is an error.
    pub(crate) fn read(&self, answer: redis::Value) -> Confirmed {
        let wanted = match *self {
            Durability::Primary => return Ok(None),
            Durability::Replicas { count, .. } => count,
            Durability::Fsynced { replicas, .. } => 1 + replicas,
        };
        let acked = match answer.extract_error() {
            Ok(v) => confirmed(&v, *self),
            Err(e) if confirms_nothing(&e) => 0,
            Err(e) => return Err(Error::from_redis(e)),
        };
        Ok((acked < wanted).then_some(Shortfall { acked, wanted }))
    }

    /// Checks once, when a queue handle is made, that the server can keep
    /// this promise: `WAITAOF` exists and the primary has an AOF.
    pub(crate) async fn probe(&self, conn: &mut Conn) -> Result<()> {
        if !matches!(self, Durability::Fsynced { .. }) {
            return Ok(());
        }
        let r: redis::RedisResult<(u32, u32)> = redis::cmd("WAITAOF").arg(1).arg(0).arg(1).query_async(conn).await;
        match r {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("NOPERM") => Err(Error::from_redis(e)),
            Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => Err(Error::from_redis(e)),
            Err(e) => Err(Error::InvalidOption {
                name: "durability",
                reason: format!(
                    "Durability::Fsynced needs WAITAOF (Redis 7.2+, Valkey) and appendonly yes on the primary: {}",
                    e.detail().unwrap_or("the server refused WAITAOF")
                ),
            }),
        }
    }
}

/// True when a failed `WAIT` says nothing was confirmed, rather than that
/// it cannot be used (an ACL refusal, an unknown command): its answer was
/// lost, or the node it reached is not the master that took the writes
/// (after a failover: a replica refuses `WAIT`; a cluster answers
/// `MOVED`, `TRYAGAIN` or `CLUSTERDOWN`).
fn confirms_nothing(e: &redis::RedisError) -> bool {
    crate::error::transient_redis(e) || e.detail().is_some_and(|d| d.contains("replica instances"))
}

/// How many confirmed: `WAIT`'s replica count, or `WAITAOF`'s local fsync
/// (0 or 1) plus its replicas (at most those asked for).
fn confirmed(v: &redis::Value, d: Durability) -> u32 {
    let int = |v: &redis::Value| match v {
        redis::Value::Int(n) => u32::try_from(*n).unwrap_or(0),
        _ => 0,
    };
    match (d, v) {
        (Durability::Fsynced { replicas, .. }, redis::Value::Array(a)) if a.len() == 2 => {
            int(&a[0]).min(1) + int(&a[1]).min(replicas)
        }
        (Durability::Replicas { count, .. }, v) => int(v).min(count),
        _ => 0,
    }
}

fn timeout_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    // The servers' answers count as confirmations up to what was asked; anything else confirms nothing.
    #[test]
    fn answers_count_up_to_what_was_asked() {
        let t = Duration::from_millis(100);
        let wait = Durability::Replicas { count: 1, timeout: t };
        assert_eq!(confirmed(&Value::Int(2), wait), 1);
        assert_eq!(confirmed(&Value::Int(0), wait), 0);
        assert_eq!(confirmed(&Value::Nil, wait), 0);
        let aof = Durability::Fsynced {
            replicas: 1,
            timeout: t,
        };
        assert_eq!(confirmed(&Value::Array(vec![Value::Int(1), Value::Int(3)]), aof), 2);
        assert_eq!(confirmed(&Value::Array(vec![Value::Int(1), Value::Int(0)]), aof), 1);
        assert_eq!(confirmed(&Value::Int(1), aof), 0);
        assert!(Durability::Primary.check().is_ok() && Durability::Primary.confirmation().is_none());
        assert!(aof.check().is_ok() && aof.confirmation().is_some());
    }
}
