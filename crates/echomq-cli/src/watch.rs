//! `watch`: a queue's lifecycle events, printed as they come.

use std::io::Write as _;

use echomq::{Error, EventCursor, QueueEvent};
use serde_json::{Value, json};

use crate::ctx::{Ctx, Output};
use crate::exit::Failure;
use crate::render::iso;

/// Prints the events of the queue given with `-q` from `from`, one line
/// each, until Ctrl-C or `count` events, or (without `follow`) until the
/// newest event the stream holds. A stretch of events trimmed away unread
/// is reported on stderr and the watch goes on.
///
/// # Errors
/// A [`Failure`]: no such queue, a server error.
pub async fn watch(
    ctx: &Ctx,
    from: EventCursor,
    count: Option<u64>,
    follow: bool,
    json: bool,
) -> Result<Output, Failure> {
    let q = ctx.open_given().await?;
    let mut reader = q.events(from).await.map_err(|e| ctx.err(e))?;
    let mut printed = 0u64;
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    while count.is_none_or(|n| printed < n) {
        let ev = if follow {
            tokio::select! {
                ev = reader.next() => ev.map(Some),
                _ = &mut stop => break,
            }
        } else {
            reader.next_within(std::time::Duration::ZERO).await
        };
        let ev = match ev {
            Ok(Some(ev)) => ev,
            // --no-follow: the newest event was printed
            Ok(None) => break,
            Err(e @ Error::EventsTrimmed { .. }) => {
                eprintln!("echomq: {e}");
                continue;
            }
            Err(e) => return Err(ctx.err(e)),
        };
        let line = if json {
            event_json(&ev).to_string()
        } else {
            event_text(&ev)
        };
        let mut out = std::io::stdout().lock();
        // A closed pipe (`echomq watch | head`) ends the watch quietly.
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            break;
        }
        printed += 1;
    }
    Ok(Output::streamed())
}

/// One event as a JSON object (stable field names; absent fields are null).
fn event_json(ev: &QueueEvent) -> Value {
    json!({
        "id": ev.id,
        "at_ms": ev.at_ms,
        "event": ev.kind.as_str(),
        "job": ev.job_id,
        "attempt": ev.attempt,
        "token": ev.token,
        "lane": ev.lane,
        "kind": ev.job_kind,
        "error": ev.error,
        "due_ms": ev.due_ms,
        "progress": ev.progress,
    })
}

/// One event as a line: id, time, event, then the fields it has.
fn event_text(ev: &QueueEvent) -> String {
    let mut line = format!("{}  {}  {:<16}", ev.id, iso(ev.at_ms), ev.kind.as_str());
    let mut add = |name: &str, value: String| {
        line.push_str(&format!(" {name}={value}"));
    };
    if let Some(id) = &ev.job_id {
        add("job", crate::ctx::shell_quote(id));
    }
    if let Some(a) = ev.attempt {
        add("attempt", a.to_string());
    }
    if let Some(t) = ev.token {
        add("token", t.to_string());
    }
    if let Some(l) = &ev.lane {
        add("lane", crate::ctx::shell_quote(l));
    }
    if let Some(k) = &ev.job_kind {
        add("kind", crate::ctx::shell_quote(k));
    }
    if let Some(d) = ev.due_ms {
        add("due", iso(d));
    }
    if let Some(p) = &ev.progress {
        add("progress", crate::ctx::shell_quote(p));
    }
    if let Some(e) = &ev.error {
        add("error", crate::ctx::shell_quote(&crate::render::cut(e, 200)));
    }
    line.trim_end().to_owned()
}
