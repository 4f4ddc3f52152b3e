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
    /// [`Start`](Self::Start); an event id (`MS-SEQ`, `MS-SEQ.I` or `MS`):
    /// after it.
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
                reason: "must be an event id (MS-SEQ or MS-SEQ.I), \"0\" (the start) or \"$\" (now)",
            })
        }
    }
}

/// An event id as numbers: the stream entry's `MS-SEQ` (or `MS`), and for
/// an event of an entry that holds several, its place in the entry
/// (`MS-SEQ.I`).
fn parse_id(s: &str) -> Option<(u64, u64, Option<usize>)> {
    let (entry, index) = match s.split_once('.') {
        Some((e, i)) => (e, Some(i.parse().ok()?)),
        None => (s, None),
    };
    let (ms, seq) = entry.split_once('-').unwrap_or((entry, "0"));
    Some((ms.parse().ok()?, seq.parse().ok()?, index))
}

/// The stream entry of event id `id` and the event's place in it (`None`:
/// the whole entry, as for an entry of one event).
fn split_id(id: &str) -> (&str, Option<usize>) {
    match id.split_once('.') {
        Some((entry, i)) => (entry, i.parse().ok()),
        None => (id, None),
    }
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
    /// The event's id: the stream entry's id (`MS-SEQ`), followed by
    /// `.I` for the I-th event (from 0) of an entry that holds several.
    /// Save it to resume after this event ([`EventCursor::After`]).
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
        let at_ms = parse_id(&id).map_or(0, |(ms, _, _)| ms);
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
            .arg(split_id(&self.cursor).0);
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
    /// transaction) whether the cursor's own entry is still there: the
    /// stream is trimmed oldest first, so when it is, nothing after it was
    /// trimmed. After an event that is not its entry's last, the batch
    /// starts with the rest of that entry.
    async fn fetch(&mut self) -> Result<()> {
        let key = &self.queue.keys().events;
        let (entry, index) = split_id(&self.cursor);
        let entry = entry.to_owned();
        let from = match index {
            Some(_) => entry.clone(),
            None => format!("({entry}"),
        };
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("XRANGE").arg(key).arg(&entry).arg(&entry);
        pipe.cmd("XRANGE").arg(key).arg(from).arg("+").arg("COUNT").arg(BATCH);
        let (own, batch): (Value, Value) = pipe.query_async(&mut self.conn).await.map_err(Error::from_redis)?;
        let mut batch = entries(batch)?;
        if let Some(last) = index {
            batch.retain(|ev| match split_id(&ev.id) {
                (e, Some(i)) if e == entry => i > last,
                _ => true,
            });
        }
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

/// The events of an XRANGE reply, in order: one per plain entry, and one
/// per job of an entry that holds several (fields `e`, `n` and `j`, the
/// JSON array of each job's flat field list; lua/common.lua `end_call`).
fn entries(v: Value) -> Result<Vec<QueueEvent>> {
    let bad = |detail: &str| Error::Protocol {
        script: "XRANGE",
        detail: detail.to_owned(),
    };
    let text = |v: Value| -> Result<String> {
        let b: Vec<u8> = redis::from_redis_value(v).map_err(|e| bad(&e.to_string()))?;
        // Error texts are cut at a byte count, perhaps inside a character.
        Ok(String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
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
        let id = text(pair.pop().unwrap_or(Value::Nil))?;
        let flat: Vec<Value> = match fields {
            Value::Array(f) => f,
            Value::Map(m) => m.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            _ => return Err(bad("an entry's fields are not an array")),
        };
        let mut kv = Vec::with_capacity(flat.len() / 2);
        let mut it = flat.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            kv.push((text(k)?, text(v)?));
        }
        let Some(jobs) = kv.iter().position(|(k, _)| k == "j") else {
            out.push(QueueEvent::from_entry(id, kv));
            continue;
        };
        let jobs: Vec<Vec<String>> =
            serde_json::from_str(&kv[jobs].1).map_err(|e| bad(&format!("an entry's jobs: {e}")))?;
        let kind = kv
            .iter()
            .find(|(k, _)| k == "e")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        for (i, job) in jobs.into_iter().enumerate() {
            let mut fields = Vec::with_capacity(job.len() / 2 + 1);
            fields.push(("e".to_owned(), kind.clone()));
            let mut it = job.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                fields.push((k, v));
            }
            out.push(QueueEvent::from_entry(format!("{id}.{i}"), fields));
        }
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
        let mut conn = self.link().blocking_connection().await?;
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
        assert_eq!(
            EventCursor::parse("1700000000000-3.63").unwrap(),
            EventCursor::After("1700000000000-3.63".into())
        );
        assert!(EventCursor::parse("abc").is_err());
        assert!(EventCursor::parse("1-x").is_err());
        assert!(EventCursor::parse("1-2.x").is_err());
    }

    // A plain entry reads as one event; an entry of several as one event
    // each, with the entry's kind and ids ENTRY.I.
    #[test]
    fn entries_of_several_events_expand() {
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let entry = |id: &str, f: &[&str]| Value::Array(vec![b(id), Value::Array(f.iter().map(|x| b(x)).collect())]);
        let v = Value::Array(vec![
            entry("5-0", &["e", "claimed", "id", "7", "a", "1"]),
            entry(
                "6-1",
                &[
                    "e",
                    "completed",
                    "n",
                    "2",
                    "j",
                    r#"[["id","8","tk","3"],["id","9","ln","x\/y"]]"#,
                ],
            ),
        ]);
        let evs = entries(v).unwrap();
        let ids: Vec<&str> = evs.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["5-0", "6-1.0", "6-1.1"]);
        assert_eq!(evs[0].kind, EventKind::Claimed);
        assert_eq!(evs[0].attempt, Some(1));
        assert_eq!(evs[1].kind, EventKind::Completed);
        assert_eq!(evs[1].job_id.as_deref(), Some("8"));
        assert_eq!(evs[1].token, Some(3));
        assert_eq!(evs[2].job_id.as_deref(), Some("9"));
        assert_eq!(evs[2].lane.as_deref(), Some("x/y"));
        assert_eq!(evs[2].at_ms, 6);
        let junk = Value::Array(vec![entry("7-0", &["e", "completed", "j", "[1,"])]);
        assert!(matches!(entries(junk), Err(Error::Protocol { .. })));
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
