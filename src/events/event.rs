//! What a reader hands out: [`QueueEvent`]s of an [`EventKind`], read from
//! an [`EventCursor`], and how a stream entry becomes events.

use std::fmt;

use redis::Value;

use crate::error::{Error, Result};

/// Where an [`EventReader`](super::EventReader) starts.
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
    /// [`Queue::server_time_ms`](crate::Queue::server_time_ms)). A start by time asks for whatever is
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
pub(super) fn parse_id(s: &str) -> Option<(u64, u64, Option<usize>)> {
    let (entry, index) = match s.split_once('.') {
        Some((e, i)) => (e, Some(i.parse().ok()?)),
        None => (s, None),
    };
    let (ms, seq) = entry.split_once('-').unwrap_or((entry, "0"));
    Some((ms.parse().ok()?, seq.parse().ok()?, index))
}

/// The stream entry of event id `id` and the event's place in it (`None`:
/// the whole entry, as for an entry of one event).
pub(super) fn split_id(id: &str) -> (&str, Option<usize>) {
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
    /// pending unless a `Failed`, `Cancelled` or `Expired` event follows).
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
    /// A job ended expired: not started before its expiry
    /// ([`EnqueueOptions::expires_at`](crate::EnqueueOptions::expires_at)).
    Expired,
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
            "expired" => EventKind::Expired,
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
            EventKind::Expired => "expired",
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
    /// [`EVENT_TEXT_MAX_BYTES`](super::EVENT_TEXT_MAX_BYTES)).
    pub error: Option<String>,
    /// When a delayed job is due (server ms).
    pub due_ms: Option<u64>,
    /// The progress reported (JSON, at most [`EVENT_TEXT_MAX_BYTES`](super::EVENT_TEXT_MAX_BYTES)).
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

/// The events of an XRANGE reply, in order: one per plain entry, and one
/// per job of an entry that holds several (fields `e`, `n` and `z`: each
/// job's id, its field count m and its m fields, joined by NUL bytes; or
/// `v`, the same as a JSON array; or, as 0.2 wrote them, `j`, a JSON array
/// of each job's flat field list; lua/lib/events.lua `events_flush`).
pub(super) fn entries(v: Value) -> Result<Vec<QueueEvent>> {
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
        let Some(at) = kv.iter().position(|(k, _)| k == "z" || k == "v" || k == "j") else {
            out.push(QueueEvent::from_entry(id, kv));
            continue;
        };
        let kind = kv
            .iter()
            .find(|(k, _)| k == "e")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let (name, body) = &kv[at];
        let jobs = if name == "z" {
            let parts = body
                .split('\0')
                .map(|p| serde_json::Value::String(p.to_owned()))
                .collect();
            columns(parts).ok_or_else(|| bad("an entry's jobs are not (id, m, m fields)*"))?
        } else if name == "v" {
            let parts = serde_json::from_str(body).map_err(|e| bad(&format!("an entry's jobs: {e}")))?;
            columns(parts).ok_or_else(|| bad("an entry's jobs are not [id, m, m fields]*"))?
        } else {
            serde_json::from_str::<Vec<Vec<String>>>(body).map_err(|e| bad(&format!("an entry's jobs: {e}")))?
        };
        for (i, job) in jobs.into_iter().enumerate() {
            // a job's own `e` (an event of another kind than the
            // entry's) comes later and wins
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

/// The jobs of a batched entry's `z` or `v` (id, m, then m name-value
/// pairs, for each job in turn) as each job's flat field list, "id" first;
/// None when it is not that shape.
fn columns(flat: Vec<serde_json::Value>) -> Option<Vec<Vec<String>>> {
    let text = |v: serde_json::Value| match v {
        serde_json::Value::String(s) => Some(s),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let mut jobs = Vec::new();
    let mut it = flat.into_iter();
    while let Some(id) = it.next() {
        let m: u64 = text(it.next()?)?.parse().ok()?;
        let mut job = Vec::with_capacity(2 + 2 * m.min(8) as usize);
        job.push("id".to_owned());
        job.push(text(id)?);
        for _ in 0..m {
            job.push(text(it.next()?)?);
            job.push(text(it.next()?)?);
        }
        jobs.push(job);
    }
    Some(jobs)
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
        // 0.3's batched entries: id, field count, fields, for each job.
        let v = Value::Array(vec![entry(
            "8-2",
            &[
                "e",
                "claimed",
                "n",
                "3",
                "v",
                r#"["10",2,"a","1","tk","5","11",0,"12",1,"ln","x\/y"]"#,
            ],
        )]);
        let evs = entries(v).unwrap();
        let ids: Vec<&str> = evs.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["8-2.0", "8-2.1", "8-2.2"]);
        assert!(evs.iter().all(|e| e.kind == EventKind::Claimed));
        assert_eq!(evs[0].job_id.as_deref(), Some("10"));
        assert_eq!((evs[0].attempt, evs[0].token), (Some(1), Some(5)));
        assert_eq!((evs[1].job_id.as_deref(), evs[1].attempt), (Some("11"), None));
        assert_eq!(evs[2].lane.as_deref(), Some("x/y"));
        let z = Value::Array(vec![entry(
            "8-3",
            &["e", "completed", "n", "2", "z", "10\u{0}1\u{0}kd\u{0}mail\u{0}11\u{0}0"],
        )]);
        let evs = entries(z).unwrap();
        assert_eq!(evs.len(), 2);
        assert_eq!(
            (evs[0].job_id.as_deref(), evs[0].job_kind.as_deref()),
            (Some("10"), Some("mail"))
        );
        assert_eq!((evs[1].id.as_str(), evs[1].job_id.as_deref()), ("8-3.1", Some("11")));
        let mixed = Value::Array(vec![entry(
            "8-4",
            &[
                "e",
                "completed",
                "n",
                "2",
                "z",
                "10\u{0}0\u{0}11\u{0}2\u{0}e\u{0}claimed\u{0}a\u{0}1",
            ],
        )]);
        let evs = entries(mixed).unwrap();
        assert_eq!(
            (evs[0].kind.clone(), evs[1].kind.clone()),
            (EventKind::Completed, EventKind::Claimed)
        );
        assert_eq!(evs[1].attempt, Some(1));
        for bad in [
            "10\u{0}2\u{0}a",
            "10",
            "10\u{0}x",
            "",
            "10\u{0}18446744073709551615\u{0}a\u{0}1",
        ] {
            let junk = Value::Array(vec![entry("9-1", &["e", "claimed", "n", "2", "z", bad])]);
            assert!(matches!(entries(junk), Err(Error::Protocol { .. })), "{bad:?}");
        }
        for bad in [
            r#"["10",2,"a","1"]"#,
            r#"["10"]"#,
            r#"["10","x"]"#,
            r#"[["10"]]"#,
            r#"{"a":1}"#,
            "[1,",
        ] {
            let junk = Value::Array(vec![entry("9-0", &["e", "claimed", "n", "2", "v", bad])]);
            assert!(matches!(entries(junk), Err(Error::Protocol { .. })), "{bad}");
        }
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
