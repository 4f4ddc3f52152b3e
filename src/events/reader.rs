//! [`EventReader`]: reads a queue's events in order on a connection of its
//! own, and waits for new ones.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use redis::Value;

use super::event::{entries, parse_id, split_id};
use super::{BATCH, BLOCK, EventCursor, QueueEvent};
use crate::conn::Dedicated;
use crate::error::{Error, Result};
use crate::queue::Queue;

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
    /// A reader of `queue`'s events from `from` ([`Queue::events`]).
    pub(super) async fn open(queue: &Queue, from: EventCursor) -> Result<EventReader> {
        let mut conn = queue.link().blocking_connection().await?;
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
                    .arg(&queue.keys().events)
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
            queue: queue.clone(),
            conn,
            cursor,
            check,
            buf: VecDeque::new(),
        })
    }

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
