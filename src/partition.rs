//! Partitioned queues: one logical queue spread over several slots, and so
//! over several masters of a Valkey Cluster.
//!
//! A queue lives in one hash slot (its keys share the hash tag `{name}`),
//! so on a cluster it is as fast as the one master that holds that slot,
//! however many masters there are; the peers pin a queue to one slot the
//! same way. A [`PartitionedQueue`] of `n` partitions is `n` ordinary
//! queues, `NAME~0` to `NAME~(n-1)` (each its own slot, spread over the
//! masters by their names), with one handle that routes each enqueue to a
//! partition and adds up what they hold; a [`Worker`](crate::Worker)
//! serves every partition with equal weight
//! ([`Worker::partitioned`](crate::Worker::partitioned)), so it claims
//! from them in turn while they have work.
//!
//! **Routing.** A job goes to the partition its *routing key* hashes to:
//! its lane if it has one, else its sequence key
//! ([`EnqueueOptions::sequence`]), else its dedup id if it has one, else
//! its id. A
//! job enqueued without an id gets a random one (a UUID) here, since each
//! partition would mint numbers that the others mint too. So the same
//! caller-chosen id, or the same dedup id, always reaches the same
//! partition, where its duplicate is recognised, a lane's jobs share
//! one partition, where the lane's caps, rate and turn hold, and a
//! sequence's jobs share one, where they keep their order. The hash is
//! FNV-1a (64 bits) of the key's bytes, modulo `n`: stable across
//! processes and versions.
//!
//! **Ordering.** Within a partition, jobs are claimed in priority, then
//! enqueue, order, as in any queue (when a claimed job runs is up to the
//! worker that leased it); across partitions there is no order. So the
//! jobs of one lane (one partition) keep their order; a queue's jobs as a
//! whole do not.
//!
//! **The number of partitions is part of the queue.** Opening a
//! partitioned queue with fewer partitions than it has is refused (jobs
//! in the others would never run); opening it with more re-routes ids and
//! dedup ids, so a duplicate enqueued across the change may make a second
//! job. Choose it once, a few times the number of masters, so the
//! partitions spread evenly.

use std::sync::Arc;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::job::{Counts, EnqueueOptions, Enqueued, JobInfo};
use crate::keys::MAX_QUEUE_NAME_BYTES;
use crate::queue::{Backing, Queue, QueueOptions};

/// The most partitions a queue may have: as many queues as one
/// [`Worker`](crate::Worker) serves ([`MAX_QUEUES`](crate::worker::MAX_QUEUES)),
/// so one worker can serve them all (the worker checks the two agree).
pub const MAX_PARTITIONS: usize = 1_000;

/// A handle on a queue spread over partitions (see the [module
/// docs](self)): cheap to clone.
#[derive(Clone, Debug)]
pub struct PartitionedQueue {
    name: Arc<str>,
    parts: Arc<[Queue]>,
}

/// The name of partition `i` of queue `name`.
pub fn partition_name(name: &str, i: usize) -> String {
    format!("{name}~{i}")
}

/// FNV-1a, 64 bits: a stable hash, so every process routes alike.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// What picks a job's partition: its lane, else its sequence key, else its
/// dedup id, else its id.
fn routing_key(opts: &EnqueueOptions) -> Option<&str> {
    opts.lane
        .as_deref()
        .or(opts.sequence.as_deref())
        .or(opts.dedup.as_ref().map(|(d, _)| d.as_str()))
        .or(opts.id.as_deref())
}

impl PartitionedQueue {
    pub(crate) async fn open(backing: &Backing, name: &str, partitions: usize, opts: QueueOptions) -> Result<Self> {
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            return Err(Error::InvalidOption {
                name: "partitions",
                reason: format!("{partitions} is not within 1..={MAX_PARTITIONS}"),
            });
        }
        crate::keys::validate_queue_name(name)?;
        if partition_name(name, partitions - 1).len() > MAX_QUEUE_NAME_BYTES {
            return Err(Error::InvalidQueueName {
                name: crate::error::excerpt(name),
                reason: "too long with its partition suffix (~N)",
            });
        }
        // Fewer partitions than the queue has would strand the jobs of the others.
        let beyond = partition_name(name, partitions);
        if crate::admin::queues::queue_exists(backing.link.conn(), &opts.prefix, &beyond).await? {
            return Err(Error::InvalidOption {
                name: "partitions",
                reason: format!("queue {name} has more than {partitions} partitions ({beyond} exists)"),
            });
        }
        let mut parts = Vec::with_capacity(partitions);
        for i in 0..partitions {
            parts.push(backing.open(&partition_name(name, i), opts.clone()).await?);
        }
        Ok(PartitionedQueue {
            name: Arc::from(name),
            parts: parts.into(),
        })
    }

    /// The logical queue's name (its partitions are `NAME~0`, `NAME~1`, …).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The partitions, in order: ordinary queues (to inspect or operate
    /// one, or to serve them with weights of your own).
    pub fn partitions(&self) -> &[Queue] {
        &self.parts
    }

    /// The partition a routing key goes to.
    fn index_of(&self, key: &str) -> usize {
        (fnv1a(key.as_bytes()) % self.parts.len() as u64) as usize
    }

    /// The partition `opts` send a job to, and the options with the job's
    /// id filled in when the caller gave none.
    fn route(&self, opts: &EnqueueOptions) -> (usize, EnqueueOptions) {
        let mut opts = opts.clone();
        if opts.id.is_none() {
            opts.id = Some(uuid::Uuid::new_v4().to_string());
        }
        let i = routing_key(&opts).map_or(0, |k| self.index_of(k));
        (i, opts)
    }

    /// The partition `opts` would send a job to (by its lane, sequence key, dedup id or
    /// id; `None` for a job without any, which goes to a random one).
    pub fn partition_for(&self, opts: &EnqueueOptions) -> Option<&Queue> {
        Some(&self.parts[self.index_of(routing_key(opts)?)])
    }

    /// Enqueues `payload` with default options (an id made here, see the
    /// [module docs](self)); returns its id.
    ///
    /// # Errors
    /// As [`Queue::enqueue`].
    pub async fn enqueue<T: Serialize + ?Sized>(&self, payload: &T) -> Result<String> {
        Ok(self.enqueue_with(payload, &EnqueueOptions::default()).await?.id)
    }

    /// Enqueues `payload` with `opts` in the partition its lane, sequence key, dedup id
    /// or id hashes to.
    ///
    /// # Errors
    /// As [`Queue::enqueue_with`].
    pub async fn enqueue_with<T: Serialize + ?Sized>(&self, payload: &T, opts: &EnqueueOptions) -> Result<Enqueued> {
        let (i, opts) = self.route(opts);
        self.parts[i].enqueue_with(payload, &opts).await
    }

    /// Enqueues `jobs` (each with its options), one bulk call per partition
    /// they go to; answers in the order given.
    ///
    /// # Errors
    /// As [`Queue::enqueue_bulk_with`]; an error leaves the jobs of the
    /// partitions sent before it enqueued (enqueue them again with the same
    /// ids: an existing id is not duplicated).
    pub async fn enqueue_bulk_with<T: Serialize>(&self, jobs: &[(T, EnqueueOptions)]) -> Result<Vec<Enqueued>> {
        let mut by_part: Vec<Vec<(usize, &T, EnqueueOptions)>> = (0..self.parts.len()).map(|_| Vec::new()).collect();
        for (n, (payload, opts)) in jobs.iter().enumerate() {
            let (i, opts) = self.route(opts);
            by_part[i].push((n, payload, opts));
        }
        let mut out: Vec<Option<Enqueued>> = vec![None; jobs.len()];
        for (i, batch) in by_part.iter().enumerate() {
            if batch.is_empty() {
                continue;
            }
            let done = self.parts[i]
                .enqueue_all(batch.iter().map(|(_, p, o)| (*p, o)), None)
                .await?;
            for ((n, ..), e) in batch.iter().zip(done) {
                out[*n] = Some(e);
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// The job with `id`: looked up in the partition its id hashes to
    /// first, then in the others (a job routed by its lane, sequence key or
    /// dedup id may be in another).
    ///
    /// # Errors
    /// [`Error::JobNotFound`] when no partition holds it; as [`Queue::job`].
    pub async fn job(&self, id: &str) -> Result<JobInfo> {
        let first = self.index_of(id);
        let order = std::iter::once(first).chain((0..self.parts.len()).filter(|i| *i != first));
        for i in order {
            match self.parts[i].job(id).await {
                Err(Error::JobNotFound(_)) => continue,
                r => return r,
            }
        }
        Err(Error::JobNotFound(id.to_owned()))
    }

    /// The partitions' counts added up (`paused` when every partition is).
    ///
    /// # Errors
    /// As [`Queue::counts`].
    pub async fn counts(&self) -> Result<Counts> {
        let mut sum = Counts {
            paused: true,
            ..Counts::default()
        };
        for q in self.parts.iter() {
            let c = q.counts().await?;
            sum.pending += c.pending;
            sum.delayed += c.delayed;
            sum.active += c.active;
            sum.completed += c.completed;
            sum.failed += c.failed;
            sum.cancelled += c.cancelled;
            sum.expired += c.expired;
            sum.paused &= c.paused;
        }
        Ok(sum)
    }

    /// Pauses every partition; returns the jobs they hold pending.
    ///
    /// # Errors
    /// As [`Queue::pause`] (the partitions before the failing one stay paused).
    pub async fn pause(&self) -> Result<u64> {
        let mut n = 0;
        for q in self.parts.iter() {
            n += q.pause().await?;
        }
        Ok(n)
    }

    /// Resumes every partition; returns the jobs they hold pending.
    ///
    /// # Errors
    /// As [`Queue::resume`].
    pub async fn resume(&self) -> Result<u64> {
        let mut n = 0;
        for q in self.parts.iter() {
            n += q.resume().await?;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The hash is FNV-1a 64 (its published test vectors), so routing never changes between versions.
    #[test]
    fn the_routing_hash_is_fnv1a() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    // A lane routes first, then a sequence key, then a dedup id, then the id.
    #[test]
    fn routing_keys_in_order() {
        let o = EnqueueOptions::new().id("j").dedup("d");
        assert_eq!(routing_key(&o), Some("d"));
        let o = o.sequence("s");
        assert_eq!(routing_key(&o), Some("s"));
        assert_eq!(routing_key(&o.lane("l")), Some("l"));
        assert_eq!(routing_key(&EnqueueOptions::new().id("j")), Some("j"));
    }
}
