//! Throughput and the live feed, from each queue's lifecycle event stream.
//!
//! One [`Feed`] per shown queue lives in the router's state, shared by
//! every page and every open event stream: it holds an [`EventReader`]
//! (its cursor is the last event read), the completed and failed events
//! counted per time bucket over the chart's window, and the latest events.
//! Each sample reads only the events added since the last one, at most
//! [`MAX_READ_PER_SAMPLE`], however many pages are open: a feed read less
//! than half a sample period ago is not read again.
//!
//! Counting events, not the growth of the completed count, keeps the rate
//! true when retention holds that count flat (`keep_completed` full, or
//! `Retention::None`). A queue whose events are off has no reader (its
//! connection is closed): the pages fall back to the counts and say so.
//!
//! A feed's first reader starts at the chart's window (a start by server
//! time), so the chart and the feed show what the stream still holds of
//! the window at once; a reader that fell behind starts again at the
//! newest event.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::{EventCursor, EventKind, EventReader, Queue, QueueEvent};

/// Buckets in the chart's window (the chart draws one point per bucket;
/// a bucket is one sample period long).
pub(crate) const BUCKETS: u64 = 60;
/// The most events one sample reads from a queue's stream (100 per round
/// trip). A queue that writes more per sample period is skipped ahead to
/// its newest event and its rate shown as a lower bound.
pub(crate) const MAX_READ_PER_SAMPLE: usize = 5_000;
/// The latest events a feed keeps: the queue page shows
/// [`FEED_SHOWN`] of them, a job's page those of its job.
const KEPT: usize = 500;
/// The latest events the queue page's feed shows.
pub(crate) const FEED_SHOWN: usize = 20;
/// How often a feed reads the queue's event settings and the server's
/// clock again.
const RECHECK_EVERY: Duration = Duration::from_secs(5);
/// The longest one read of a queue's events may take. A reader's
/// connection has no response timeout of its own (it is made for blocking
/// reads): without this a dead server would hold the feed, and every page
/// that waits on it, forever.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A feed nobody asked for this long is dropped (with its reader's
/// connection); the next page to ask opens a new one.
const IDLE_AFTER: Duration = Duration::from_secs(120);

/// One event as the feed shows it.
#[derive(Debug, Clone)]
pub(crate) struct FeedEvent {
    pub(crate) id: String,
    pub(crate) at_ms: u64,
    pub(crate) kind: String,
    pub(crate) job_id: Option<String>,
    pub(crate) attempt: Option<u32>,
    pub(crate) error: Option<String>,
}

impl FeedEvent {
    fn of(ev: &QueueEvent) -> FeedEvent {
        FeedEvent {
            id: ev.id.clone(),
            at_ms: ev.at_ms,
            kind: ev.kind.as_str().to_owned(),
            job_id: ev.job_id.clone(),
            attempt: ev.attempt,
            error: ev.error.clone(),
        }
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "at": crate::html::time(self.at_ms),
            "event": self.kind,
            "job": self.job_id,
            "attempt": self.attempt,
            "error": self.error,
        })
    }
}

/// What a page shows of a queue's throughput.
#[derive(Debug, Clone, Default)]
pub(crate) struct Throughput {
    /// Whether the queue records events: when not, there is no series and
    /// the rate comes from the counts.
    pub(crate) events_on: bool,
    /// Completed jobs per second in the last whole bucket.
    pub(crate) completed_rate: f64,
    /// Failed jobs (for good) per second in the last whole bucket.
    pub(crate) failed_rate: f64,
    /// Completed jobs in each whole bucket of the window, oldest first.
    pub(crate) completed: Vec<u64>,
    /// Failed jobs in each whole bucket of the window, oldest first.
    pub(crate) failed: Vec<u64>,
    /// Whether events were skipped within the window (the reader fell
    /// behind, or lost its connection): the figures are then lower bounds.
    pub(crate) partial: bool,
    /// Server ms since which the feed has counted: the start of the
    /// chart's window when the feed first read (the stream holds what
    /// happened before, up to its cap).
    pub(crate) since_ms: u64,
}

/// One queue's feed.
struct Feed {
    queue: Queue,
    /// None while events are off (or before the first read).
    reader: Option<EventReader>,
    events_on: bool,
    /// When the settings and the clock were last read.
    checked: Option<Instant>,
    /// The server's clock: its ms at the `Instant`, so that the current
    /// bucket is known without a round trip per sample.
    clock: (u64, Instant),
    /// Completed and failed events per bucket number (server ms / bucket).
    buckets: BTreeMap<u64, (u64, u64)>,
    latest: VecDeque<FeedEvent>,
    /// When events were last read.
    read_at: Option<Instant>,
    /// Server ms when events were last skipped (the reader fell behind,
    /// or its connection broke).
    skipped_ms: Option<u64>,
    /// Server ms from which counting started (the window's start when the
    /// first reader opened; 0 before).
    since_ms: u64,
    /// When a page last asked (for dropping idle feeds).
    used: Instant,
}

impl Feed {
    fn server_now(&self) -> u64 {
        let (ms, at) = self.clock;
        ms + u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX / 2)
    }

    /// Opens the feed's reader: at its first opening, from the start of
    /// the chart's window (what the stream still holds of it, bounded by
    /// the read cap), later from the newest event.
    async fn open_reader(&mut self, bucket_ms: u64) -> echomq::Result<()> {
        if self.since_ms == 0 {
            let start = (self.server_now() / bucket_ms).saturating_sub(BUCKETS) * bucket_ms;
            self.reader = Some(open(&self.queue, EventCursor::Since(start)).await?);
            self.since_ms = start;
        } else {
            self.reader = Some(open(&self.queue, EventCursor::Now).await?);
        }
        Ok(())
    }

    /// Reads what is new, unless read within `fresh`.
    async fn refresh(&mut self, bucket_ms: u64, fresh: Duration) -> echomq::Result<()> {
        self.used = Instant::now();
        if self.read_at.is_some_and(|at| at.elapsed() < fresh) {
            return Ok(());
        }
        if self.checked.is_none_or(|at| at.elapsed() >= RECHECK_EVERY) {
            let on = self.queue.event_settings().await?.is_enabled();
            let ms = self.queue.server_time_ms().await?;
            self.clock = (ms, Instant::now());
            self.checked = Some(Instant::now());
            if !on {
                // Nothing will be written: free the reader's connection.
                self.reader = None;
            }
            self.events_on = on;
        }
        if !self.events_on {
            self.read_at = Some(Instant::now());
            return Ok(());
        }
        if self.reader.is_none() {
            self.open_reader(bucket_ms).await?;
        }
        let mut read = 0;
        let mut behind = false;
        while let Some(reader) = self.reader.as_mut() {
            if read >= MAX_READ_PER_SAMPLE {
                behind = true;
                break;
            }
            let next = tokio::time::timeout(READ_TIMEOUT, reader.next_within(Duration::ZERO))
                .await
                .unwrap_or(Err(echomq::Error::Timeout(READ_TIMEOUT)));
            match next {
                Ok(Some(ev)) => {
                    read += 1;
                    self.count(&ev, bucket_ms);
                }
                Ok(None) => break,
                Err(echomq::Error::EventsTrimmed { .. }) => {
                    behind = true;
                    break;
                }
                Err(e) => {
                    // A broken connection: the next read opens another,
                    // from then on; what was written in between is lost.
                    self.reader = None;
                    self.skipped_ms = Some(self.server_now());
                    return Err(e);
                }
            }
        }
        if behind {
            tracing::debug!(
                queue = self.queue.name(),
                read,
                "dashboard fell behind the events; skipping ahead"
            );
            self.skipped_ms = Some(self.server_now());
            self.reader = Some(open(&self.queue, EventCursor::Now).await?);
        }
        let oldest = (self.server_now() / bucket_ms).saturating_sub(BUCKETS);
        self.buckets = self.buckets.split_off(&oldest);
        self.read_at = Some(Instant::now());
        Ok(())
    }

    fn count(&mut self, ev: &QueueEvent, bucket_ms: u64) {
        let b = ev.at_ms / bucket_ms;
        match ev.kind {
            EventKind::Completed => self.buckets.entry(b).or_default().0 += 1,
            EventKind::Failed => self.buckets.entry(b).or_default().1 += 1,
            _ => {}
        }
        if self.latest.len() == KEPT {
            self.latest.pop_front();
        }
        self.latest.push_back(FeedEvent::of(ev));
    }

    fn throughput(&self, bucket_ms: u64) -> Throughput {
        let now = self.server_now() / bucket_ms;
        let secs = bucket_ms as f64 / 1000.0;
        let (mut completed, mut failed) = (Vec::new(), Vec::new());
        for b in now.saturating_sub(BUCKETS)..now {
            let (c, f) = self.buckets.get(&b).copied().unwrap_or_default();
            completed.push(c);
            failed.push(f);
        }
        let window_start = now.saturating_sub(BUCKETS) * bucket_ms;
        Throughput {
            events_on: self.events_on,
            completed_rate: completed.last().copied().unwrap_or(0) as f64 / secs,
            failed_rate: failed.last().copied().unwrap_or(0) as f64 / secs,
            completed,
            failed,
            partial: self.skipped_ms.is_some_and(|ms| ms >= window_start),
            since_ms: self.since_ms,
        }
    }
}

/// Every shown queue's feed, by name.
#[derive(Default)]
pub(crate) struct Feeds {
    map: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Feed>>>>,
}

/// A queue's feed read up to now.
pub(crate) struct Snapshot {
    pub(crate) throughput: Throughput,
    /// The newest events, newest first (up to [`FEED_SHOWN`]).
    pub(crate) latest: Vec<FeedEvent>,
    /// The newest event's id ("" when none): whether the feed moved.
    pub(crate) newest: String,
}

impl Feeds {
    fn get(&self, queue: &Queue) -> Arc<tokio::sync::Mutex<Feed>> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        // Drop idle feeds (a feed being read is locked: kept).
        map.retain(|_, f| match f.try_lock() {
            Ok(f) => f.used.elapsed() < IDLE_AFTER,
            Err(_) => true,
        });
        map.entry(queue.name().to_owned())
            .or_insert_with(|| {
                Arc::new(tokio::sync::Mutex::new(Feed {
                    queue: queue.clone(),
                    reader: None,
                    events_on: false,
                    checked: None,
                    clock: (0, Instant::now()),
                    buckets: BTreeMap::new(),
                    latest: VecDeque::new(),
                    read_at: None,
                    skipped_ms: None,
                    since_ms: 0,
                    used: Instant::now(),
                }))
            })
            .clone()
    }

    /// `queue`'s throughput and latest events, reading what the stream
    /// gained since the last read (unless that was under half of `every`
    /// ago: another page's stream read it).
    pub(crate) async fn snapshot(&self, queue: &Queue, every: Duration) -> echomq::Result<Snapshot> {
        let feed = self.get(queue);
        let mut feed = feed.lock().await;
        let bucket_ms = bucket_ms(every);
        feed.refresh(bucket_ms, every / 2).await?;
        Ok(Snapshot {
            throughput: feed.throughput(bucket_ms),
            latest: feed.latest.iter().rev().take(FEED_SHOWN).cloned().collect(),
            newest: feed.latest.back().map(|e| e.id.clone()).unwrap_or_default(),
        })
    }

    /// The events of job `id` the feed still keeps, oldest first (none
    /// when events are off or the job's are older than the feed).
    pub(crate) async fn of_job(
        &self,
        queue: &Queue,
        every: Duration,
        id: &str,
    ) -> echomq::Result<(bool, Vec<FeedEvent>)> {
        let feed = self.get(queue);
        let mut feed = feed.lock().await;
        feed.refresh(bucket_ms(every), every / 2).await?;
        let events = feed
            .latest
            .iter()
            .filter(|e| e.job_id.as_deref() == Some(id))
            .cloned()
            .collect();
        Ok((feed.events_on, events))
    }
}

/// A reader from `from`, within the read time limit.
async fn open(queue: &Queue, from: EventCursor) -> echomq::Result<EventReader> {
    tokio::time::timeout(READ_TIMEOUT, queue.events(from))
        .await
        .unwrap_or(Err(echomq::Error::Timeout(READ_TIMEOUT)))
}

fn bucket_ms(every: Duration) -> u64 {
    u64::try_from(every.as_millis()).unwrap_or(1000).max(1)
}
