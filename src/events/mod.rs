//! Lifecycle events: what happened to a queue's jobs, in order, from any
//! process.
//!
//! Every state transition appends an event to the queue's capped stream
//! (`PREFIX:{Q}:events`) inside the same script that makes the transition,
//! so the events never disagree with the state: an event is there exactly
//! when its transition happened. The stream id is the server's time of the
//! transition. Consecutive events of one kind made by one script call (a
//! claim or settlement of many jobs, a bulk enqueue) share one stream
//! entry of up to 64 events, which costs the server one write instead of
//! one per job; a reader hands them out one by one, each with an id of its
//! own ([`QueueEvent::id`]). [`Queue::events`] opens an [`EventReader`] that reads them
//! from a given point ([`EventCursor`]) on a connection of its own, and
//! waits for new ones.
//!
//! Whether a queue records events, and how many it keeps (the stream is
//! trimmed to about [`EventSettings::max_len`] entries), are stored on the
//! server, in the queue's meta hash, so every process honours them:
//! [`Queue::set_events`]. The cap counts events: each write trims the
//! stream to about `max_len` divided by the events in that entry. Events are on by default
//! ([`DEFAULT_EVENTS_MAX_LEN`] kept).
//!
//! A reader that falls more than the cap behind loses events; it says so
//! once with [`Error::EventsTrimmed`] and reads on from the oldest event
//! left.

mod event;
mod reader;

use std::time::Duration;

pub use self::event::{EventCursor, EventKind, QueueEvent};
pub use self::reader::EventReader;
use crate::error::{Error, Result};
use crate::queue::Queue;

/// How many events the stream keeps by default (about: trimming is
/// approximate, whole blocks at a time, so it stays cheap).
pub const DEFAULT_EVENTS_MAX_LEN: u64 = 10_000;

/// The largest cap accepted.
pub const MAX_EVENTS_MAX_LEN: u64 = 100_000_000;

/// The longest error or progress text an event carries, in bytes (the
/// job's record keeps the whole of it).
pub const EVENT_TEXT_MAX_BYTES: usize = 512;

/// How many events a reader fetches per round trip.
const BATCH: usize = 100;

/// How long one blocking wait lasts before it is made again (bounds the
/// time a silently dead connection goes unnoticed).
const BLOCK: Duration = Duration::from_secs(5);

/// A queue's event settings, stored on the server ([`Queue::set_events`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventSettings {
    enabled: bool,
    max_len: u64,
}

impl Default for EventSettings {
    fn default() -> Self {
        EventSettings {
            enabled: true,
            max_len: DEFAULT_EVENTS_MAX_LEN,
        }
    }
}

impl EventSettings {
    /// Whether transitions append events (default true). Off, no script
    /// writes to the stream; what it holds stays until trimmed or deleted.
    #[must_use]
    pub fn enabled(mut self, on: bool) -> Self {
        self.enabled = on;
        self
    }

    /// About how many events the stream keeps (default
    /// [`DEFAULT_EVENTS_MAX_LEN`], 1 to [`MAX_EVENTS_MAX_LEN`]).
    #[must_use]
    pub fn max_len(mut self, n: u64) -> Self {
        self.max_len = n;
        self
    }

    /// Whether events are on.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// The stream's cap.
    pub fn cap(&self) -> u64 {
        self.max_len
    }
}

impl Queue {
    /// Opens a reader of the queue's lifecycle events from `from`, on a
    /// connection of its own (blocking reads must not hold up the shared
    /// one).
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use echomq::{EventCursor, EventKind};
    /// let mut events = queue.events(EventCursor::Now).await?;
    /// loop {
    ///     let ev = events.next().await?;
    ///     if ev.kind == EventKind::Failed {
    ///         tracing::warn!(job = ?ev.job_id, error = ?ev.error, "job failed");
    ///     }
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn events(&self, from: EventCursor) -> Result<EventReader> {
        EventReader::open(self, from).await
    }

    /// Turns the queue's events on or off and sets the stream's cap, for
    /// every process (stored in the queue's meta hash; each script reads it
    /// once per call, so the next transition honours it).
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use echomq::EventSettings;
    /// queue.set_events(&EventSettings::default().max_len(1_000)).await?;
    /// queue.set_events(&EventSettings::default().enabled(false)).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a cap of 0 or above
    /// [`MAX_EVENTS_MAX_LEN`]; server errors.
    pub async fn set_events(&self, settings: &EventSettings) -> Result<()> {
        if settings.max_len == 0 || settings.max_len > MAX_EVENTS_MAX_LEN {
            return Err(Error::InvalidOption {
                name: "events max_len",
                reason: format!("{} is not within 1..={MAX_EVENTS_MAX_LEN}", settings.max_len),
            });
        }
        let meta = &self.keys().meta;
        let mut pipe = redis::pipe();
        pipe.atomic();
        if settings.enabled {
            pipe.cmd("HDEL").arg(meta).arg("evoff").ignore();
        } else {
            pipe.cmd("HSET").arg(meta).arg("evoff").arg("1").ignore();
        }
        if settings.max_len == DEFAULT_EVENTS_MAX_LEN {
            pipe.cmd("HDEL").arg(meta).arg("evmax").ignore();
        } else {
            pipe.cmd("HSET").arg(meta).arg("evmax").arg(settings.max_len).ignore();
        }
        pipe.query_async::<()>(&mut self.conn())
            .await
            .map_err(Error::from_redis)
    }

    /// The queue's event settings, as stored.
    ///
    /// # Errors
    /// Server errors.
    pub async fn event_settings(&self) -> Result<EventSettings> {
        let (off, max): (Option<String>, Option<u64>) = redis::cmd("HMGET")
            .arg(&self.keys().meta)
            .arg("evoff")
            .arg("evmax")
            .query_async(&mut self.conn())
            .await
            .map_err(Error::from_redis)?;
        Ok(EventSettings {
            enabled: off.is_none(),
            max_len: max.unwrap_or(DEFAULT_EVENTS_MAX_LEN),
        })
    }
}
