//! Reading a queue: a job's record, counts, the server clock.

use super::Queue;
use crate::error::{Error, Result};
use crate::job::{Counts, JobInfo, JobState};
use crate::limits::Limits;

/// A job hash as field/value pairs.
pub(crate) type HashFields = Vec<(String, Vec<u8>)>;

/// A job's record from its hash fields and its deadline or due time.
pub(crate) fn job_info(id: &str, fields: HashFields, deadline_ms: Option<u64>) -> Result<JobInfo> {
    let mut info = JobInfo {
        id: id.to_owned(),
        state: JobState::Pending,
        attempts: 0,
        failures: 0,
        stalls: 0,
        payload: Vec::new(),
        last_error: None,
        created_ms: 0,
        finished_ms: None,
        deadline_ms,
        token: 0,
        limits: Limits::default(),
        progress: None,
        checkpoint: None,
        first_started_ms: None,
        errors: Vec::new(),
        result: None,
        holder: None,
        cancel_requested_ms: None,
        lane: None,
        kind: None,
        expires_at_ms: None,
    };
    let num = |v: &[u8]| {
        std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // a split payload's later parts (lua/lib/payload.lua), in order
    let mut parts: [Option<Vec<u8>>; 3] = [None, None, None];
    for (f, v) in fields {
        match f.as_str() {
            "p" => info.payload = v,
            "p2" => parts[0] = Some(v),
            "p3" => parts[1] = Some(v),
            "p4" => parts[2] = Some(v),
            "st" => {
                let s = String::from_utf8_lossy(&v);
                info.state = JobState::parse(&s).ok_or_else(|| Error::Protocol {
                    script: "job",
                    detail: format!("unknown state {s:?}"),
                })?;
            }
            "a" => info.attempts = num(&v),
            "tk" => info.token = num(&v),
            "lm" => info.limits = Limits::decode(&v),
            "pg" => info.progress = serde_json::from_slice(&v).ok(),
            "ck" => info.checkpoint = serde_json::from_slice(&v).ok(),
            "fs" => info.first_started_ms = Some(num(&v)),
            "eh" => info.errors = serde_json::from_slice(&v).unwrap_or_default(),
            "f" => info.failures = num(&v),
            "s" => info.stalls = num(&v),
            "err" => info.last_error = Some(String::from_utf8_lossy(&v).into_owned()),
            "ct" => info.created_ms = num(&v),
            "ft" => info.finished_ms = Some(num(&v)),
            "rs" => info.result = serde_json::from_slice(&v).ok(),
            "hd" => info.holder = Some(String::from_utf8_lossy(&v).into_owned()),
            "cx" => info.cancel_requested_ms = Some(num(&v)),
            "ln" => info.lane = Some(String::from_utf8_lossy(&v).into_owned()),
            "kd" => info.kind = Some(String::from_utf8_lossy(&v).into_owned()),
            "xa" => info.expires_at_ms = Some(num(&v)),
            _ => {}
        }
    }
    for part in parts.into_iter().flatten() {
        info.payload.extend_from_slice(&part);
    }
    info.payload = crate::compression::readable(std::mem::take(&mut info.payload), &info.id);
    Ok(info)
}

impl Queue {
    /// Reads a job's record.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue, id: &str) -> echomq::Result<()> {
    /// let job = queue.job(id).await?;
    /// println!("{:?} after {} attempts, last error {:?}", job.state, job.attempts, job.last_error);
    /// let counts = queue.counts().await?;
    /// println!("{} pending, {} active", counts.pending, counts.active);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidId`], [`Error::JobNotFound`], server errors.
    pub async fn job(&self, id: &str) -> Result<JobInfo> {
        crate::validate::id("job id", id)?;
        let k = self.keys();
        let (fields, active, delayed): (HashFields, Option<f64>, Option<f64>) = redis::pipe()
            .atomic()
            .hgetall(k.job(id))
            .zscore(&k.active, id)
            .zscore(&k.delayed, id)
            .query_async(&mut self.conn())
            .await
            .map_err(Error::from_redis)?;
        if fields.is_empty() {
            return Err(Error::JobNotFound(id.to_owned()));
        }
        job_info(id, fields, active.or(delayed).map(|s| s as u64))
    }

    /// Counts jobs per state, read in one atomic step.
    ///
    /// # Errors
    /// Server errors.
    pub async fn counts(&self) -> Result<Counts> {
        let k = self.keys();
        let (pending, delayed, active, completed, failed, cancelled, expired, paused) = redis::pipe()
            .atomic()
            .zcard(&k.pending)
            .zcard(&k.delayed)
            .zcard(&k.active)
            .zcard(&k.completed)
            .zcard(&k.failed)
            .zcard(&k.cancelled)
            .zcard(&k.expired)
            .hexists(&k.meta, "paused")
            .query_async(&mut self.conn())
            .await
            .map_err(Error::from_redis)?;
        Ok(Counts {
            pending,
            delayed,
            active,
            completed,
            failed,
            cancelled,
            expired,
            paused,
        })
    }

    /// The id of the job that holds dedup id `dedup_id` now
    /// ([`EnqueueOptions::dedup`](crate::EnqueueOptions::dedup),
    /// `dedup_for` and `unique`), or `None` when no job does: what an
    /// enqueue with it would answer as `Deduplicated` (a by-states holder
    /// only while its state is one of its [`Unique`](crate::Unique)'s).
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad dedup id; server errors.
    pub async fn dedup_holder(&self, dedup_id: &str) -> Result<Option<String>> {
        crate::validate::id("dedup id", dedup_id)?;
        let marker: Option<String> = redis::cmd("GET")
            .arg(format!("{}de:{dedup_id}", self.keys().base))
            .query_async(&mut self.conn())
            .await
            .map_err(Error::from_redis)?;
        let Some(marker) = marker else { return Ok(None) };
        // A by-states marker (EnqueueOptions::unique) is "ID\x1fLETTERS" and
        // holds while the job's state is one of them (lua/lib/keyspace.lua).
        let Some((id, letters)) = marker.split_once('\x1f') else {
            return Ok(Some(marker));
        };
        let state: Option<String> = redis::cmd("HGET")
            .arg(self.keys().job(id))
            .arg("st")
            .query_async(&mut self.conn())
            .await
            .map_err(Error::from_redis)?;
        let holds = state
            .as_deref()
            .and_then(JobState::parse)
            .is_some_and(|s| letters.contains(crate::job::Unique::letter(s)));
        Ok(holds.then(|| id.to_owned()))
    }

    /// How long the job next in line has waited since it was created, on
    /// the server's clock: zero when nothing is pending. With lanes in use,
    /// the first pending job in the pending set's order stands for it (an
    /// unlaned one first, else the laned job with the lowest id). What an
    /// autoscaler watches beside [`Counts::pending`](crate::Counts::pending)
    /// (the backlog): both are gauges with the `metrics` feature.
    ///
    /// # Errors
    /// Server errors.
    pub async fn lag(&self) -> Result<std::time::Duration> {
        let k = self.keys();
        let next: Vec<String> = redis::cmd("ZRANGE")
            .arg(&k.pending)
            .arg(0)
            .arg(0)
            .query_async(&mut self.conn())
            .await
            .map_err(Error::from_redis)?;
        let Some(id) = next.first() else {
            return Ok(std::time::Duration::ZERO);
        };
        let (ct, now): (Option<u64>, (u64, u64)) = redis::pipe()
            .cmd("HGET")
            .arg(k.job(id))
            .arg("ct")
            .cmd("TIME")
            .query_async(&mut self.conn())
            .await
            .map_err(Error::from_redis)?;
        let now_ms = now.0 * 1000 + now.1 / 1000;
        Ok(std::time::Duration::from_millis(
            ct.map_or(0, |ct| now_ms.saturating_sub(ct)),
        ))
    }

    /// The server's clock (ms since the Unix epoch), the time base of every
    /// deadline.
    ///
    /// # Errors
    /// Server errors.
    pub async fn server_time_ms(&self) -> Result<u64> {
        let (s, us): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn())
            .await
            .map_err(Error::from_redis)?;
        Ok(s * 1000 + us / 1000)
    }
}

/// The longest pause between two looks of [`Queue::wait`].
const WAIT_POLL_MAX: std::time::Duration = std::time::Duration::from_millis(250);

impl Queue {
    /// Waits until job `id` has finished (completed, failed or cancelled) and returns
    /// its record, or gives up after `timeout` ([`Error::Timeout`]). It
    /// looks at the record with a growing pause (5 ms doubling to 250 ms),
    /// so a long wait costs the server about four reads a second.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue, id: &str) -> echomq::Result<()> {
    /// use std::time::Duration;
    /// let done = queue.wait(id, Duration::from_secs(30)).await?;
    /// println!("{:?}", done.state);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::JobNotFound`] (never enqueued, or its
    /// record deleted by retention as it finished); server errors.
    pub async fn wait(&self, id: &str, timeout: std::time::Duration) -> Result<JobInfo> {
        let until = crate::validate::later(tokio::time::Instant::now(), timeout);
        let mut pause = std::time::Duration::from_millis(5);
        loop {
            let info = self.job(id).await?;
            if info.state.is_terminal() {
                return Ok(info);
            }
            let now = tokio::time::Instant::now();
            if now >= until {
                return Err(Error::Timeout(timeout));
            }
            tokio::time::sleep(pause.min(until - now)).await;
            pause = (pause * 2).min(WAIT_POLL_MAX);
        }
    }
}
