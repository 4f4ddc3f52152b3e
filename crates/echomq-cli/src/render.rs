//! How values look: aligned tables, times in UTC ISO-8601 with how long
//! ago (on the server's clock), durations, and the JSON form of a job's
//! record and limits (the field names scripts rely on).

use std::fmt::Write as _;
use std::time::Duration;

use echomq::{Backoff, JobInfo, Limits};
use serde_json::{Value, json};

/// Columns of `rows` under `headers`, each as wide as its widest cell, two
/// spaces apart; the last column is not padded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            if i + 1 < widths.len() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                text.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// `ms` (ms since the Unix epoch) in UTC ISO-8601, to the second.
pub fn iso(ms: u64) -> String {
    match i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
    {
        Some(t) => t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => format!("{ms} ms"),
    }
}

/// How far `ms` is from `now` (both server ms): `3s ago`, `in 2m 5s`.
pub fn relative(ms: u64, now: u64) -> String {
    if ms <= now {
        format!("{} ago", span(Duration::from_millis(now - ms)))
    } else {
        format!("in {}", span(Duration::from_millis(ms - now)))
    }
}

/// `ms` as `ISO (relative)`, relative to the server's `now`.
pub fn when(ms: u64, now: u64) -> String {
    format!("{} ({})", iso(ms), relative(ms, now))
}

/// An optional time as [`when`], or `-`.
pub fn when_opt(ms: Option<u64>, now: u64) -> String {
    ms.map_or_else(|| "-".to_owned(), |ms| when(ms, now))
}

/// A span in its two largest units: `0s`, `45s`, `2m 5s`, `3h 10m`, `4d 2h`.
pub fn span(d: Duration) -> String {
    let s = d.as_secs();
    let (big, small) = match s {
        0..60 => return format!("{s}s"),
        60..3_600 => ((s / 60, "m"), (s % 60, "s")),
        3_600..86_400 => ((s / 3_600, "h"), (s % 3_600 / 60, "m")),
        _ => ((s / 86_400, "d"), (s % 86_400 / 3_600, "h")),
    };
    if small.0 == 0 {
        format!("{}{}", big.0, big.1)
    } else {
        format!("{}{} {}{}", big.0, big.1, small.0, small.1)
    }
}

/// A duration as a setting shows it: `250ms`, `1.5s`, `10s`, `2m`, `1h 30m`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 && !ms.is_multiple_of(1_000) {
        format!("{}s", ms as f64 / 1_000.0)
    } else {
        span(d)
    }
}

/// A backoff in words: `exponential 1s to 1h`, `fixed 10s, jitter 0.2`.
pub fn backoff(b: &Backoff) -> String {
    let plain = match b.without_jitter() {
        Backoff::Fixed(d) => format!("fixed {}", duration(d)),
        Backoff::Exponential { base, max } => format!("exponential {} to {}", duration(base), duration(max)),
        other => format!("{other:?}"),
    };
    match b.jitter_fraction() {
        f if f > 0.0 => format!("{plain}, jitter {f}"),
        _ => plain,
    }
}

/// A job's limits in words.
pub fn limits(l: &Limits) -> String {
    let timeout = l.timeout.map_or_else(|| "none".to_owned(), duration);
    format!(
        "max_attempts {}, max_stalls {}, backoff {}, timeout {timeout}",
        l.max_attempts,
        l.max_stalls,
        backoff(&l.backoff)
    )
}

/// Text on one line, cut to `max` characters with `…`.
pub fn cut(text: &str, max: usize) -> String {
    let one_line: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut out: String = one_line.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Stored JSON bytes as a JSON value; bytes that are not JSON as a string.
pub fn stored_json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// A JSON value on one line (strings without quotes).
pub fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The JSON form of a job's whole record: the library's own (`JobInfo`'s
/// `Serialize`), the one shape the CLI and web handlers share.
pub fn job_json(j: &JobInfo) -> Value {
    serde_json::to_value(j).unwrap_or_else(|e| json!({"id": j.id, "error": e.to_string()}))
}

/// A job's whole record as lines of `name  value`, times relative to the
/// server's `now`.
pub fn job_text(queue: &str, j: &JobInfo, now: u64) -> String {
    let mut rows: Vec<(&str, String)> = vec![
        ("job", j.id.clone()),
        ("queue", queue.to_owned()),
        ("state", j.state.as_str().to_owned()),
        ("kind", j.kind.clone().unwrap_or_else(|| "-".to_owned())),
        (
            "attempts",
            format!(
                "{} (failures {} of {}, stalls {} of {}; token {})",
                j.attempts, j.failures, j.limits.max_attempts, j.stalls, j.limits.max_stalls, j.token
            ),
        ),
        ("created", when(j.created_ms, now)),
        ("started", when_opt(j.first_started_ms, now)),
        ("finished", when_opt(j.finished_ms, now)),
    ];
    match j.state {
        echomq::JobState::Active => rows.push(("deadline", when_opt(j.deadline_ms, now))),
        echomq::JobState::Delayed => rows.push(("due", when_opt(j.deadline_ms, now))),
        _ => {}
    }
    if let Some(at) = j.expires_at_ms {
        rows.push(("expires", when(at, now)));
    }
    rows.push(("holder", j.holder.clone().unwrap_or_else(|| "-".to_owned())));
    if let Some(at) = j.cancel_requested_ms {
        rows.push(("cancel", format!("requested {}", when(at, now))));
    }
    rows.push(("limits", limits(&j.limits)));
    rows.push(("progress", j.progress.as_ref().map_or_else(|| "-".to_owned(), compact)));
    if let Some(c) = &j.checkpoint {
        rows.push(("checkpoint", compact(c)));
    }
    rows.push(("result", j.result.as_ref().map_or_else(|| "-".to_owned(), compact)));
    match (&j.last_error, j.state) {
        // an attempt before the one that completed failed
        (Some(e), echomq::JobState::Completed) => rows.push(("earlier error", format!("{e} (before it completed)"))),
        (e, _) => rows.push(("last error", e.clone().unwrap_or_else(|| "-".to_owned()))),
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in &rows {
        let _ = writeln!(out, "{k:width$}  {v}");
    }
    if !j.errors.is_empty() {
        let _ = writeln!(out, "errors (newest first):");
        for e in &j.errors {
            let _ = writeln!(out, "  {}  {}", when(e.at_ms, now), e.message);
        }
    }
    let payload = stored_json(&j.payload);
    let pretty = serde_json::to_string_pretty(&payload).unwrap_or_else(|_| compact(&payload));
    let _ = writeln!(out, "payload:");
    for line in pretty.lines() {
        let _ = writeln!(out, "  {line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    // Tables align every column but the last, and count characters, not bytes.
    #[test]
    fn tables_align() {
        let t = table(
            &["ID", "STATE"],
            &[vec!["a".into(), "x".into()], vec!["ü-long".into(), "y".into()]],
        );
        assert_eq!(t, "ID      STATE\na       x\nü-long  y\n");
    }

    // Times read as people read them.
    #[test]
    fn times_and_spans() {
        assert_eq!(iso(1_774_746_000_123), "2026-03-29T01:00:00Z");
        assert_eq!(relative(1_000, 4_500), "3s ago");
        assert_eq!(relative(10_000, 4_000), "in 6s");
        assert_eq!(span(Duration::from_secs(125)), "2m 5s");
        assert_eq!(span(Duration::from_secs(7_200)), "2h");
        assert_eq!(span(Duration::from_secs(90_000)), "1d 1h");
        assert_eq!(duration(Duration::from_millis(250)), "250ms");
        assert_eq!(duration(Duration::from_millis(1_500)), "1.5s");
        assert_eq!(duration(Duration::from_secs(3_600)), "1h");
        assert_eq!(
            backoff(&Backoff::fixed(Duration::from_secs(10)).jitter(0.2)),
            "fixed 10s, jitter 0.2"
        );
        assert_eq!(cut("a\nbcdef", 4), "a b…");
    }
}
