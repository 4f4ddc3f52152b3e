//! The worker registry: each running worker announces itself in every
//! queue it serves, every [`ANNOUNCE_EVERY`], so an operator (the
//! dashboard's workers page, [`Queue::workers`]) sees which processes
//! serve a queue, with what concurrency, how many jobs they run, and when
//! they were last heard from. It costs each worker process a few commands
//! per queue per announcement, nothing per job. The announcement carries
//! the worker's counts for the queue's history too (`history.rs`).
//!
//! Keys (same slot as the queue): `workers`, a hash of name → the worker's
//! JSON record, and `workers:seen`, a zset of name → when it last announced
//! (server ms). A worker that stops takes its entry away; one that died is
//! listed until [`FORGET_AFTER`] passes without an announcement, when the
//! next announcement of any worker of the queue drops it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::admin::history::Counts;
use crate::error::{Error, Result};
use crate::queue::Queue;

/// How often a running worker announces itself.
pub const ANNOUNCE_EVERY: Duration = Duration::from_secs(10);
/// How long a worker not heard from stays listed.
pub const FORGET_AFTER: Duration = Duration::from_secs(300);

/// One worker serving a queue, as it announced itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// Its name: the holder name its claims record
    /// ([`Worker::name`](crate::Worker::name), by default `HOST:PID/N`).
    pub name: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Every queue it serves.
    pub queues: Vec<String>,
    /// Its concurrency: handlers at once.
    pub concurrency: usize,
    /// Handlers running at its last announcement.
    pub running: usize,
    /// When it started (server ms).
    pub started_ms: u64,
    /// When it last announced itself (server ms; filled in on reading).
    #[serde(default)]
    pub last_seen_ms: u64,
}

impl Queue {
    /// The workers serving this queue, by name: those that announced
    /// themselves within [`FORGET_AFTER`] (a live one every
    /// [`ANNOUNCE_EVERY`]), each with when it was last heard from.
    ///
    /// # Errors
    /// Server errors.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let now = self.server_time_ms().await?;
        let since = now.saturating_sub(u64::try_from(FORGET_AFTER.as_millis()).unwrap_or(u64::MAX));
        let base = &self.keys().base;
        let seen: Vec<(String, f64)> = redis::cmd("ZRANGEBYSCORE")
            .arg(format!("{base}workers:seen"))
            .arg(since)
            .arg("+inf")
            .arg("WITHSCORES")
            .query_async(&mut self.conn())
            .await
            .map_err(Error::from_redis)?;
        if seen.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
        let records: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
            .arg(format!("{base}workers"))
            .arg(&names)
            .query_async(&mut self.conn())
            .await
            .map_err(Error::from_redis)?;
        let mut out: Vec<WorkerInfo> = seen
            .iter()
            .zip(records)
            .filter_map(|((_, at), rec)| {
                let mut w: WorkerInfo = serde_json::from_slice(&rec?).ok()?;
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                {
                    w.last_seen_ms = *at as u64;
                }
                Some(w)
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Announces `worker` in this queue, adds its `counts` since the last
    /// announcement to the queue's history (in the same transaction), and
    /// drops the workers not heard from within [`FORGET_AFTER`].
    pub(crate) async fn announce_worker(&self, worker: &WorkerInfo, counts: &Counts) -> Result<()> {
        let now = self.server_time_ms().await?;
        let before = now.saturating_sub(u64::try_from(FORGET_AFTER.as_millis()).unwrap_or(u64::MAX));
        let base = &self.keys().base;
        let (seen, hash) = (format!("{base}workers:seen"), format!("{base}workers"));
        let gone: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(&seen)
            .arg("-inf")
            .arg(format!("({before}"))
            .arg("LIMIT")
            .arg(0)
            .arg(100)
            .query_async(&mut self.conn())
            .await
            .map_err(Error::from_redis)?;
        let record = serde_json::to_string(worker).map_err(Error::Encode)?;
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("HSET").arg(&hash).arg(&worker.name).arg(record).ignore();
        pipe.cmd("ZADD").arg(&seen).arg(now).arg(&worker.name).ignore();
        if !gone.is_empty() {
            pipe.cmd("HDEL").arg(&hash).arg(&gone).ignore();
            pipe.cmd("ZREM").arg(&seen).arg(&gone).ignore();
        }
        counts.write(&mut pipe, self.keys(), now);
        pipe.query_async::<()>(&mut self.conn())
            .await
            .map_err(Error::from_redis)
    }

    /// Takes worker `name` out of this queue's registry (it stopped), and
    /// adds its last `counts` to the queue's history.
    pub(crate) async fn withdraw_worker(&self, name: &str, counts: &Counts) -> Result<()> {
        let now = if counts.is_empty() {
            0
        } else {
            self.server_time_ms().await?
        };
        let base = &self.keys().base;
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("HDEL").arg(format!("{base}workers")).arg(name).ignore();
        pipe.cmd("ZREM").arg(format!("{base}workers:seen")).arg(name).ignore();
        counts.write(&mut pipe, self.keys(), now);
        pipe.query_async::<()>(&mut self.conn())
            .await
            .map_err(Error::from_redis)
    }
}
