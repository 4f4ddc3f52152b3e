//! Lifecycle events: what happened to a queue's jobs, in order, from any
//! process.
//!
//! Every state transition appends one entry to the queue's capped stream
//! (`PREFIX:{Q}:events`) inside the same script that makes the transition,
//! so the events never disagree with the state: an event is there exactly
//! when its transition happened. The stream id is the server's time of the
//! transition. [`Queue::events`] opens an [`EventReader`] that reads them
//! from a given point ([`EventCursor`]) on a connection of its own, and
//! waits for new ones.
//!
//! Whether a queue records events, and how many it keeps (the stream is
//! trimmed to about [`EventSettings::max_len`] entries), are stored on the
//! server, in the queue's meta hash, so every process honours them:
//! [`Queue::set_events`]. Events are on by default
//! ([`DEFAULT_EVENTS_MAX_LEN`] kept).
//!
//! A reader that falls more than the cap behind loses events; it says so
//! once with [`Error::EventsTrimmed`] and reads on from the oldest event
//! left.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use redis::Value;

use crate::conn::Dedicated;
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

/// Where an [`EventReader`] starts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventCursor {
    /// Only events after the reader opens.
    Now,
    /// The oldest event the stream still holds, then on.
    Start,
    /// After the event with this id ([`QueueEvent::id`], saved by an
    /// earlier reader): no event is lost or repeated, unless the stream
    /// was trimmed past it, which the reader reports
    /// ([`Error::EventsTrimmed`]).
    After(String),
    /// The events the stream still holds from this server time on
    /// (milliseconds since the Unix epoch, as event ids carry it; see
    /// [`Queue::server_time_ms`]). A start by time asks for whatever is
    /// there, so no trimming is reported before the first event.
    Since(u64),
}

impl EventCursor {
    /// `"$"` or `"now"`: [`Now`](Self::Now); `"0"` or `"start"`:
    /// [`Start`](Self::Start); an event id (`MS-SEQ` or `MS`): after it.
    ///
    /// # Errors
    /// [`Error::InvalidId`] for anything else.
    pub fn parse(s: &str) -> Result<EventCursor> {
        match s {
            "$" | "now" => return Ok(EventCursor::Now),
            "0" | "0-0" | "start" => return Ok(EventCursor::Start),
            _ => {}
        }
        if parse_id(s).is_some() {
            Ok(EventCursor::After(s.to_owned()))
        } else {
            Err(Error::InvalidId {
                what: "event id",
                value: crate::error::excerpt(s),
                reason: "must be an event id (MS-SEQ), \"0\" (the start) or \"$\" (now)",
            })
        }
    }
}

/// A stream id `MS-SEQ` (or `MS`) as numbers.
fn parse_id(s: &str) -> Option<(u64, u64)> {
    let (ms, seq) = s.split_once('-').unwrap_or((s, "0"));
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// A job was added (pending, or delayed until [`QueueEvent::due_ms`]).
    Enqueued,
    /// A waiting job took a newer enqueue's payload (dedup with replace).
    Replaced,
    /// A delayed job became pending (its time came, or by hand).
    Promoted,
    /// A job was leased to a worker.
    Claimed,
    /// A running job reported progress ([`QueueEvent::progress`]).
    Progress,
    /// A job completed.
    Completed,
    /// A failed attempt; the job runs again (pending, or delayed until
    /// [`QueueEvent::due_ms`]).
    Retried,
    /// A job failed for good ([`QueueEvent::error`] says why; `"stalled"`
    /// when the reaper failed it).
    Failed,
    /// A lease expired: the reaper took the job back (it goes back to
    /// pending unless a `Failed` or `Cancelled` event follows).
    Stalled,
    /// A worker gave a job back unrun (graceful shutdown).
    Released,
    /// A handler asked to run the job later.
    Snoozed,
    /// A handler said it hit a rate limit: the job waits, and its lane (or
    /// the queue) stops a while.
    RateLimited,
    /// A job ended cancelled.
    Cancelled,
    /// A running job's cancel was requested (it ends cancelled unless its
    /// attempt completes it).
    CancelRequested,
    /// A finished job was made pending again by hand (`retry_failed`).
    Requeued,
    /// A waiting or finished job was removed by hand.
    Removed,
    /// The queue was paused.
    Paused,
    /// The queue was resumed.
    Resumed,
    /// An event this version does not know (written by a newer echomq).
    Other(String),
}

impl EventKind {
    fn parse(s: &str) -> EventKind {
        match s {
            "enqueued" => EventKind::Enqueued,
            "replaced" => EventKind::Replaced,
            "promoted" => EventKind::Promoted,
            "claimed" => EventKind::Claimed,
            "progress" => EventKind::Progress,
            "completed" => EventKind::Completed,
            "retried" => EventKind::Retried,
            "failed" => EventKind::Failed,
            "stalled" => EventKind::Stalled,
            "released" => EventKind::Released,
            "snoozed" => EventKind::Snoozed,
            "rate_limited" => EventKind::RateLimited,
            "cancelled" => EventKind::Cancelled,
            "cancel_requested" => EventKind::CancelRequested,
            "requeued" => EventKind::Requeued,
            "removed" => EventKind::Removed,
            "paused" => EventKind::Paused,
            "resumed" => EventKind::Resumed,
            other => EventKind::Other(other.to_owned()),
        }
    }

    /// The event's name as stored (`"claimed"`, `"rate_limited"`...).
    pub fn as_str(&self) -> &str {
        match self {
            EventKind::Enqueued => "enqueued",
            EventKind::Replaced => "replaced",
            EventKind::Promoted => "promoted",
            EventKind::Claimed => "claimed",
            EventKind::Progress => "progress",
            EventKind::Completed => "completed",
            EventKind::Retried => "retried",
            EventKind::Failed => "failed",
            EventKind::Stalled => "stalled",
            EventKind::Released => "released",
            EventKind::Snoozed => "snoozed",
            EventKind::RateLimited => "rate_limited",
            EventKind::Cancelled => "cancelled",
            EventKind::CancelRequested => "cancel_requested",
            EventKind::Requeued => "requeued",
            EventKind::Removed => "removed",
            EventKind::Paused => "paused",
            EventKind::Resumed => "resumed",
            EventKind::Other(s) => s,
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One lifecycle event of a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueEvent {
    /// The stream id (`MS-SEQ`): save it to resume after this event
    /// ([`EventCursor::After`]).
    pub id: String,
    /// When it happened: server ms since the Unix epoch (the id's first part).
    pub at_ms: u64,
    /// What happened.
    pub kind: EventKind,
    /// The job (none for queue events: paused, resumed).
    pub job_id: Option<String>,
    /// The job's attempt (claims so far), where the record had one.
    pub attempt: Option<u32>,
    /// The fencing token of the attempt concerned, where there was one.
    pub token: Option<u64>,
    /// The job's lane.
    pub lane: Option<String>,
    /// The job's kind (see [`Kinds`](crate::Kinds)).
    pub job_kind: Option<String>,
    /// The error of a failure, retry or cancel (at most
    /// [`EVENT_TEXT_MAX_BYTES`]).
    pub error: Option<String>,
    /// When a delayed job is due (server ms).
    pub due_ms: Option<u64>,
    /// The progress reported (JSON, at most [`EVENT_TEXT_MAX_BYTES`]).
    pub progress: Option<String>,
}

impl QueueEvent {
    fn from_entry(id: String, fields: Vec<(String, String)>) -> QueueEvent {
        let at_ms = parse_id(&id).map_or(0, |(ms, _)| ms);
        let mut ev = QueueEvent {
            id,
            at_ms,
            kind: EventKind::Other(String::new()),
            job_id: None,
            attempt: None,
            token: None,
            lane: None,
            job_kind: None,
            error: None,
            due_ms: None,
            progress: None,
        };
        for (f, v) in fields {
            match f.as_str() {
                "e" => ev.kind = EventKind::parse(&v),
                "id" => ev.job_id = Some(v),
                "a" => ev.attempt = v.parse().ok(),
                "tk" => ev.token = v.parse().ok(),
                "ln" => ev.lane = Some(v),
                "kd" => ev.job_kind = Some(v),
                "err" => ev.error = Some(v),
                "due" => ev.due_ms = v.parse().ok(),
                "pg" => ev.progress = Some(v),
                _ => {}
            }
        }
        ev
    }
}

/// Reads a queue's lifecycle events in order, waiting for new ones, on a
/// connection of its own ([`Queue::events`]). Any process may open any
/// number of readers; reading changes nothing on the server.
pub struct EventReader {
    queue: Queue,
    conn: Dedicated,
    /// The id of the last event handed out ("0-0": none yet).
    cursor: String,
    /// Whether the cursor names an event the stream should still hold
    /// (checked on each read, to notice trimming past it).
    check: bool,
    buf: VecDeque<QueueEvent>,
}

impl fmt::Debug for EventReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventReader")
            .field("queue", &self.queue.name())
            .field("cursor", &self.cursor)
            .finish_non_exhaustive()
    }
}

impl EventReader {
    /// The id of the last event [`next`](Self::next) returned (or the
    /// starting point): where a new reader resumes with
    /// [`EventCursor::After`].
    pub fn cursor(&self) -> &str {
        &self.cursor
    }

    /// The next event, waiting as long as it takes for one.
    ///
    /// # Errors
    /// [`Error::EventsTrimmed`] once when the stream was trimmed past the
    /// reader (the next call goes on from the oldest event left); server
    /// errors.
    pub async fn next(&mut self) -> Result<QueueEvent> {
        loop {
            if let Some(ev) = self.next_within(BLOCK).await? {
                return Ok(ev);
            }
        }
    }

    /// The next event, or `None` when none comes within `wait`.
    ///
    /// # Errors
    /// As [`next`](Self::next).
    pub async fn next_within(&mut self, wait: Duration) -> Result<Option<QueueEvent>> {
        if let Some(ev) = self.pop() {
            return Ok(Some(ev));
        }
        self.fetch().await?;
        if let Some(ev) = self.pop() {
            return Ok(Some(ev));
        }
        if wait.is_zero() {
            return Ok(None);
        }
        // Wait for an entry after the cursor; XREAD's reply is dropped and
        // the entries are read again with the trim check (fetch).
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut cmd = redis::cmd("XREAD");
        cmd.arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(ms)
            .arg("STREAMS")
            .arg(&self.queue.keys().events)
            .arg(&self.cursor);
        let r = tokio::time::timeout(wait + Duration::from_secs(1), cmd.query_async::<Value>(&mut self.conn))
            .await
            .map_err(|_| Error::Timeout(wait))?
            .map_err(Error::from_redis)?;
        if matches!(r, Value::Nil) {
            return Ok(None);
        }
        self.fetch().await?;
        Ok(self.pop())
    }

    fn pop(&mut self) -> Option<QueueEvent> {
        let ev = self.buf.pop_front()?;
        self.cursor.clone_from(&ev.id);
        self.check = true;
        Some(ev)
    }

    /// Reads the next batch after the cursor, and (in the same
    /// transaction) whether the cursor's own event is still there: the
    /// stream is trimmed oldest first, so when it is, nothing after it was
    /// trimmed.
    async fn fetch(&mut self) -> Result<()> {
        let key = &self.queue.keys().events;
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("XRANGE").arg(key).arg(&self.cursor).arg(&self.cursor);
        pipe.cmd("XRANGE")
            .arg(key)
            .arg(format!("({}", self.cursor))
            .arg("+")
            .arg("COUNT")
            .arg(BATCH);
        let (own, batch): (Value, Value) = pipe.query_async(&mut self.conn).await.map_err(Error::from_redis)?;
        let batch = entries(batch)?;
        if self.check && entries(own)?.is_empty() {
            // The cursor's event is gone: anything between it and the
            // oldest event left may have been trimmed unread.
            self.check = false;
            let after = std::mem::replace(&mut self.cursor, "0-0".to_owned());
            return Err(Error::EventsTrimmed {
                queue: self.queue.name().to_owned(),
                after,
            });
        }
        self.buf.extend(batch);
        Ok(())
    }
}

/// The entries of an XRANGE reply.
fn entries(v: Value) -> Result<Vec<QueueEvent>> {
    let bad = |detail: &str| Error::Protocol {
        script: "XRANGE",
        detail: detail.to_owned(),
    };
    let Value::Array(items) = v else {
        return Err(bad("not an array"));
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Value::Array(mut pair) = item else {
            return Err(bad("an entry is not an array"));
        };
        if pair.len() != 2 {
            return Err(bad("an entry is not [id, fields]"));
        }
        let fields = pair.pop().unwrap_or(Value::Nil);
        let id: String = redis::from_redis_value(pair.pop().unwrap_or(Value::Nil)).map_err(|e| bad(&e.to_string()))?;
        let fields: Vec<(String, String)> = match fields {
            Value::Array(f) => {
                let mut kv = Vec::with_capacity(f.len() / 2);
                let mut it = f.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    let k: String = redis::from_redis_value(k).map_err(|e| bad(&e.to_string()))?;
                    let v: String = redis::from_redis_value(v).map_err(|e| bad(&e.to_string()))?;
                    kv.push((k, v));
                }
                kv
            }
            Value::Map(m) => {
                let mut kv = Vec::with_capacity(m.len());
                for (k, v) in m {
                    let k: String = redis::from_redis_value(k).map_err(|e| bad(&e.to_string()))?;
                    let v: String = redis::from_redis_value(v).map_err(|e| bad(&e.to_string()))?;
                    kv.push((k, v));
                }
                kv
            }
            _ => return Err(bad("an entry's fields are not an array")),
        };
        out.push(QueueEvent::from_entry(id, fields));
    }
    Ok(out)
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
        let mut conn = self.client().blocking_connection().await?;
        let (cursor, check) = match from {
            EventCursor::Start => ("0-0".to_owned(), false),
            // Reads go on after the cursor (exclusive): the last id before `ms`.
            EventCursor::Since(ms) => (format!("{}-{}", ms.saturating_sub(1), u64::MAX), false),
            EventCursor::After(id) => {
                if parse_id(&id).is_none() {
                    return Err(EventCursor::parse(&id).unwrap_err());
                }
                (id, true)
            }
            EventCursor::Now => {
                let last: Value = redis::cmd("XREVRANGE")
                    .arg(&self.keys().events)
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(1)
                    .query_async(&mut conn)
                    .await
                    .map_err(Error::from_redis)?;
                match entries(last)?.pop() {
                    Some(ev) => (ev.id, true),
                    None => ("0-0".to_owned(), false),
                }
            }
        };
        Ok(EventReader {
            queue: self.clone(),
            conn,
            cursor,
            check,
            buf: VecDeque::new(),
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    // Cursors parse from what the command line takes; junk is refused.
    #[test]
    fn cursors_parse() {
        assert_eq!(EventCursor::parse("$").unwrap(), EventCursor::Now);
        assert_eq!(EventCursor::parse("0").unwrap(), EventCursor::Start);
        assert_eq!(
            EventCursor::parse("1700000000000-3").unwrap(),
            EventCursor::After("1700000000000-3".into())
        );
        assert!(EventCursor::parse("abc").is_err());
        assert!(EventCursor::parse("1-x").is_err());
    }

    // Every known name parses back to itself; unknown ones are kept.
    #[test]
    fn kinds_round_trip() {
        for name in [
            "enqueued",
            "replaced",
            "promoted",
            "claimed",
            "progress",
            "completed",
            "retried",
            "failed",
            "stalled",
            "released",
            "snoozed",
            "rate_limited",
            "cancelled",
            "cancel_requested",
            "requeued",
            "removed",
            "paused",
            "resumed",
            "from_the_future",
        ] {
            assert_eq!(EventKind::parse(name).as_str(), name);
        }
        assert_eq!(EventKind::parse("x"), EventKind::Other("x".into()));
    }
}
