//! A queue's history: how many jobs completed, failed and were retried,
//! and how long they waited, per minute over the last day and per hour
//! over the last week ([`Queue::history`]).
//!
//! The counts cost nothing per job on the server: each worker counts in
//! its own memory (a [`Tally`] per queue, atomics) and adds what it
//! counted to the server's buckets with its registry announcement
//! ([`ANNOUNCE_EVERY`](crate::admin::ANNOUNCE_EVERY), `src/worker/registry.rs`), in the same
//! transaction, and once more when it stops. A count therefore lands in
//! the bucket of the announcement that carries it, up to
//! [`ANNOUNCE_EVERY`](crate::admin::ANNOUNCE_EVERY) after the job settled.
//!
//! Keys (same slot as the queue): `stats:m:MINUTE` (minutes since the
//! Unix epoch, server time), a hash of counter → count, expiring
//! [`MINUTES_KEPT`] after its minute; `stats:h:HOUR`, the same per hour,
//! expiring [`HOURS_KEPT`] after its hour. Expiry keeps them bounded: at
//! most about 1,500 minute keys and 170 hour keys per queue, whatever the
//! traffic. An announcement with something to add costs one `HINCRBY` per
//! non-zero counter (five counters) and one `EXPIRE` in each of the two
//! keys: at most 12 commands, inside the announcement's `MULTI`.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::keys::Keys;
use crate::queue::Queue;

/// How long a minute's counts stay on the server after their minute.
pub const MINUTES_KEPT: Duration = Duration::from_secs(25 * 3_600);
/// How long an hour's counts stay on the server after their hour.
pub const HOURS_KEPT: Duration = Duration::from_secs(8 * 86_400);

const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 3_600_000;

/// The counters of one bucket, as their hash fields name them.
const FIELDS: [&str; 5] = ["completed", "failed", "retried", "wait_ms", "waited"];

/// How far back a [`Queue::history`] looks, and how coarse its buckets are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Span {
    /// The last hour, 60 buckets of a minute.
    Hour,
    /// The last 24 hours, 96 buckets of 15 minutes.
    Day,
    /// The last 7 days, 168 buckets of an hour.
    Week,
}

impl Span {
    /// Every span, shortest first.
    pub const ALL: [Span; 3] = [Span::Hour, Span::Day, Span::Week];

    /// Its short name: `1h`, `24h`, `7d` (what [`FromStr`] reads).
    pub fn as_str(self) -> &'static str {
        match self {
            Span::Hour => "1h",
            Span::Day => "24h",
            Span::Week => "7d",
        }
    }

    /// How long one of its buckets is.
    pub fn bucket(self) -> Duration {
        Duration::from_millis(self.bucket_ms())
    }

    /// How many buckets it has.
    pub fn buckets(self) -> usize {
        match self {
            Span::Hour => 60,
            Span::Day => 96,
            Span::Week => 168,
        }
    }

    fn bucket_ms(self) -> u64 {
        match self {
            Span::Hour => MINUTE_MS,
            Span::Day => 15 * MINUTE_MS,
            Span::Week => HOUR_MS,
        }
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Span {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Span::ALL
            .into_iter()
            .find(|span| span.as_str() == s)
            .ok_or_else(|| Error::InvalidOption {
                name: "history span",
                reason: format!("{:?} is not one of 1h, 24h, 7d", crate::error::excerpt(s)),
            })
    }
}

/// One bucket of a queue's history: what the queue's workers counted in
/// it, by every process that announced in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Bucket {
    /// When it starts (server ms).
    pub start_ms: u64,
    /// Jobs completed.
    pub completed: u64,
    /// Jobs that failed for good (a `fail`, or a failure at their last
    /// attempt).
    pub failed: u64,
    /// Failed attempts that are to run again.
    pub retried: u64,
    /// The sum of the waits counted (ms): from enqueue to the first
    /// attempt's handler start (a delayed job's delay is part of it).
    pub wait_ms: u64,
    /// How many waits were counted (first attempts started).
    pub waited: u64,
}

impl Bucket {
    /// The mean wait in it (ms), if any job started.
    pub fn mean_wait_ms(&self) -> Option<u64> {
        self.wait_ms.checked_div(self.waited)
    }

    fn add(&mut self, c: &Counts) {
        self.completed += c.completed;
        self.failed += c.failed;
        self.retried += c.retried;
        self.wait_ms += c.wait_ms;
        self.waited += c.waited;
    }
}

/// Counts taken from a [`Tally`], on their way to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Counts {
    completed: u64,
    failed: u64,
    retried: u64,
    wait_ms: u64,
    waited: u64,
}

impl Counts {
    fn values(&self) -> [u64; 5] {
        [self.completed, self.failed, self.retried, self.wait_ms, self.waited]
    }

    fn from_fields(fields: &[Option<u64>]) -> Counts {
        let v = |i: usize| fields.get(i).copied().flatten().unwrap_or(0);
        Counts {
            completed: v(0),
            failed: v(1),
            retried: v(2),
            wait_ms: v(3),
            waited: v(4),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.values().iter().all(|v| *v == 0)
    }

    /// Adds the commands that add these counts to the buckets of `now_ms`
    /// to `pipe` (nothing when there is nothing to add).
    pub(crate) fn write(&self, pipe: &mut redis::Pipeline, keys: &Keys, now_ms: u64) {
        if self.is_empty() {
            return;
        }
        let minute = now_ms / MINUTE_MS;
        let hour = now_ms / HOUR_MS;
        let kept = |d: Duration| d.as_secs();
        let targets = [
            (keys.stats_minute(minute), MINUTE_MS / 1000 + kept(MINUTES_KEPT)),
            (keys.stats_hour(hour), HOUR_MS / 1000 + kept(HOURS_KEPT)),
        ];
        for (key, ttl) in targets {
            for (field, n) in FIELDS.iter().zip(self.values()) {
                if n > 0 {
                    pipe.cmd("HINCRBY").arg(&key).arg(*field).arg(n).ignore();
                }
            }
            pipe.cmd("EXPIRE").arg(&key).arg(ttl).ignore();
        }
    }
}

/// One worker's counts for one queue since it last wrote them: what its
/// jobs did, counted in memory as they settle, at no server cost.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    completed: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    wait_ms: AtomicU64,
    waited: AtomicU64,
}

impl Tally {
    /// A settlement the server applied ended with `outcome`.
    pub(crate) fn settled(&self, outcome: crate::settlement::Outcome) {
        use crate::settlement::Outcome;
        let counter = match outcome {
            Outcome::Completed => &self.completed,
            Outcome::Failed => &self.failed,
            Outcome::Retrying { .. } => &self.retried,
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A job's first attempt started `wait` after it was enqueued.
    pub(crate) fn started(&self, wait: Duration) {
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        self.wait_ms.fetch_add(ms, Ordering::Relaxed);
        self.waited.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes the counts so far, leaving zeros.
    pub(crate) fn take(&self) -> Counts {
        let t = |a: &AtomicU64| a.swap(0, Ordering::Relaxed);
        Counts {
            completed: t(&self.completed),
            failed: t(&self.failed),
            retried: t(&self.retried),
            wait_ms: t(&self.wait_ms),
            waited: t(&self.waited),
        }
    }

    /// Puts back counts that could not be written, for the next write.
    /// (A write whose reply was lost may have been applied: those counts
    /// are then counted twice.)
    pub(crate) fn give_back(&self, c: Counts) {
        let add = |a: &AtomicU64, n: u64| a.fetch_add(n, Ordering::Relaxed);
        add(&self.completed, c.completed);
        add(&self.failed, c.failed);
        add(&self.retried, c.retried);
        add(&self.wait_ms, c.wait_ms);
        add(&self.waited, c.waited);
    }
}

impl Queue {
    /// The queue's history over `span`, oldest bucket first, ending with
    /// the bucket that holds the server's current time: every bucket of
    /// the span ([`Span::buckets`]), empty ones with zeros. The counts are
    /// the workers' ([`Worker`](crate::Worker)s and consumers): jobs
    /// settled by hand through the low-level API are not in them. A count
    /// reaches the server with the worker's next announcement, within
    /// [`ANNOUNCE_EVERY`](crate::admin::ANNOUNCE_EVERY) (or when it stops), and lands in the bucket of
    /// that moment.
    ///
    /// Reads 60 keys for [`Span::Hour`], 1,440 for [`Span::Day`] (minutes,
    /// summed into quarters of an hour) and 168 for [`Span::Week`], in one
    /// round trip.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use echomq::admin::Span;
    /// for b in queue.history(Span::Hour).await? {
    ///     println!("{} {} completed, {} failed, mean wait {:?} ms", b.start_ms, b.completed, b.failed, b.mean_wait_ms());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Server errors.
    pub async fn history(&self, span: Span) -> Result<Vec<Bucket>> {
        let now = self.server_time_ms().await?;
        let width = span.bucket_ms();
        let n = span.buckets() as u64;
        let first = (now / width).saturating_sub(n - 1) * width;
        let mut out: Vec<Bucket> = (0..n)
            .map(|i| Bucket {
                start_ms: first + i * width,
                ..Bucket::default()
            })
            .collect();
        // The stored keys to read: minutes, or hours for the week.
        let (step, key): (u64, fn(&Keys, u64) -> String) = match span {
            Span::Week => (HOUR_MS, Keys::stats_hour),
            _ => (MINUTE_MS, Keys::stats_minute),
        };
        let units: Vec<u64> = (first / step..=now / step).collect();
        let mut pipe = redis::pipe();
        for u in &units {
            pipe.cmd("HMGET").arg(key(self.keys(), *u)).arg(&FIELDS[..]);
        }
        let rows: Vec<Vec<Option<u64>>> = pipe.query_async(&mut self.conn()).await.map_err(Error::from_redis)?;
        for (u, row) in units.iter().zip(rows) {
            let i = usize::try_from((u * step - first) / width).unwrap_or(usize::MAX);
            if let Some(b) = out.get_mut(i) {
                b.add(&Counts::from_fields(&row));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Span names read back; anything else is refused.
    #[test]
    fn spans_parse() {
        for s in Span::ALL {
            assert_eq!(s.as_str().parse::<Span>().unwrap(), s);
        }
        assert!(matches!("1d".parse::<Span>(), Err(Error::InvalidOption { .. })));
        assert_eq!(Span::Day.bucket().as_secs() * Span::Day.buckets() as u64, 86_400);
        assert_eq!(Span::Week.bucket().as_secs() * Span::Week.buckets() as u64, 7 * 86_400);
    }

    // Taking empties the tally; what is given back is taken next time.
    #[test]
    fn a_tally_hands_over_its_counts_once() {
        use crate::settlement::Outcome;
        let t = Tally::default();
        t.settled(Outcome::Completed);
        t.settled(Outcome::Completed);
        t.settled(Outcome::Failed);
        t.settled(Outcome::Retrying { due_ms: None });
        t.settled(Outcome::Released);
        t.started(Duration::from_millis(30));
        t.started(Duration::from_millis(10));
        let c = t.take();
        assert_eq!(c.values(), [2, 1, 1, 40, 2]);
        assert!(t.take().is_empty());
        t.give_back(c);
        assert_eq!(t.take(), c);
        let mut b = Bucket::default();
        b.add(&c);
        assert_eq!(b.mean_wait_ms(), Some(20));
        assert_eq!(Bucket::default().mean_wait_ms(), None);
    }
}
