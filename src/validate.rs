//! The one place for validation. Builders store what they are given; the
//! value is checked when the queue, client, worker or reaper is built (or
//! the call is made), against the rules below, and a value out of range is
//! a typed error naming what is wrong: [`Error::InvalidOption`] for a
//! setting and its range, [`Error::InvalidId`] or
//! [`Error::InvalidQueueName`] for a name. No silent clamps, no magic
//! zeros, and no arithmetic on a user's duration that can overflow
//! (deadlines are computed with checked or saturating operations, see
//! [`later`]). Each limit is defined here and shown where users meet it
//! ([`crate::keys`], [`crate::job`], [`crate::queue`], ...).

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result, excerpt};

/// Longest queue name accepted, in bytes.
pub const MAX_QUEUE_NAME_BYTES: usize = 200;
/// The largest payload limit accepted ([`QueueOptions::max_payload_bytes`](crate::QueueOptions::max_payload_bytes)),
/// and the most a compressed payload may hold once inflated: 64 MiB.
pub const MAX_PAYLOAD_LIMIT: usize = 64 * 1024 * 1024;
/// Longest caller-chosen job id or dedup id accepted, in bytes.
pub const MAX_ID_BYTES: usize = 256;
/// Longest job kind accepted ([`JobKind::KIND`](crate::JobKind::KIND)), in bytes.
pub const MAX_KIND_BYTES: usize = 128;
/// Longest holder name accepted ([`Queue::with_holder`](crate::Queue::with_holder),
/// [`Worker::name`](crate::Worker::name)), in bytes.
pub const MAX_HOLDER_BYTES: usize = 200;
/// Longest schedule name accepted, in bytes.
#[cfg(feature = "cron")]
pub const MAX_SCHEDULE_NAME_BYTES: usize = 200;
/// Longest effect name accepted ([`EffectMarker`](crate::EffectMarker)), in bytes.
pub const MAX_EFFECT_NAME_BYTES: usize = 64;

/// Checks a duration setting: within `min..=max`.
pub(crate) fn duration(name: &'static str, d: Duration, min: Duration, max: Duration) -> Result<Duration> {
    if d < min || d > max {
        return Err(Error::InvalidOption {
            name,
            reason: format!("{d:?} is not within {min:?}..={max:?}"),
        });
    }
    Ok(d)
}

/// Checks a count setting: within `min..=max`.
pub(crate) fn count(name: &'static str, n: usize, min: usize, max: usize) -> Result<usize> {
    if n < min || n > max {
        return Err(Error::InvalidOption {
            name,
            reason: format!("{n} is not within {min}..={max}"),
        });
    }
    Ok(n)
}

/// `at + d`, or far in the future when that does not fit an `Instant`.
pub(crate) fn later(at: Instant, d: Duration) -> Instant {
    at.checked_add(d)
        .unwrap_or_else(|| at + Duration::from_secs(86_400 * 365 * 30))
}

/// What breaks the rules every name and id keeps (not empty, at most `max`
/// bytes, no control characters), if anything; `too_long` says the limit.
fn text(value: &str, max: usize, too_long: &'static str) -> Option<&'static str> {
    if value.is_empty() {
        Some("must not be empty")
    } else if value.len() > max {
        Some(too_long)
    } else if value.chars().any(char::is_control) {
        Some("must not contain control characters")
    } else {
        None
    }
}

/// The error for an id-like `value` (`what` names it) that breaks `reason`.
fn bad_id(what: &'static str, value: &str, reason: &'static str) -> Error {
    Error::InvalidId {
        what,
        value: excerpt(value),
        reason,
    }
}

/// Checks a queue name: non-empty, at most [`MAX_QUEUE_NAME_BYTES`], no
/// braces (they would break the hash tag) and no control characters.
///
/// # Errors
/// [`Error::InvalidQueueName`] saying what is wrong.
pub fn queue_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "must not be empty"
    } else if name.len() > MAX_QUEUE_NAME_BYTES {
        "must be at most 200 bytes"
    } else if name.contains(['{', '}']) {
        "must not contain '{' or '}' (they delimit the hash tag)"
    } else if name.chars().any(char::is_control) {
        "must not contain control characters"
    } else {
        return Ok(());
    };
    Err(Error::InvalidQueueName {
        name: excerpt(name),
        reason,
    })
}

/// Checks a caller-chosen id (`what` names it: a job id, a dedup id, a key
/// prefix...): non-empty, at most [`MAX_ID_BYTES`], no control characters.
pub(crate) fn id(what: &'static str, value: &str) -> Result<()> {
    match text(value, MAX_ID_BYTES, "must be at most 256 bytes") {
        Some(reason) => Err(bad_id(what, value, reason)),
        None => Ok(()),
    }
}

/// Checks the job ids of one operator call: 1 to `max` of them, each a valid id.
pub(crate) fn ids(ids: &[&str], max: usize) -> Result<()> {
    count("ids per call", ids.len(), 1, max)?;
    ids.iter().try_for_each(|i| id("job id", i))
}

/// Checks a job kind: 1 to [`MAX_KIND_BYTES`] bytes, no control characters.
pub(crate) fn kind(kind: &str) -> Result<()> {
    match text(kind, MAX_KIND_BYTES, "must be at most 128 bytes (MAX_KIND_BYTES)") {
        Some(reason) => Err(bad_id("job kind", kind, reason)),
        None => Ok(()),
    }
}

/// Checks a schedule name: 1 to [`MAX_SCHEDULE_NAME_BYTES`] bytes, no
/// control characters.
#[cfg(feature = "cron")]
pub(crate) fn schedule_name(name: &str) -> Result<()> {
    match text(name, MAX_SCHEDULE_NAME_BYTES, "must be at most 200 bytes") {
        Some(reason) => Err(bad_id("schedule name", name, reason)),
        None => Ok(()),
    }
}

/// Checks an effect name: 1 to [`MAX_EFFECT_NAME_BYTES`] ASCII letters,
/// digits, `-`, `_`, `.` (no `:`, so marker keys and idempotency keys stay
/// unambiguous).
pub(crate) fn effect_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "must not be empty"
    } else if name.len() > MAX_EFFECT_NAME_BYTES {
        "must be at most 64 bytes"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        "may hold only ASCII letters, digits, '-', '_' and '.'"
    } else {
        return Ok(());
    };
    Err(bad_id("effect name", name, reason))
}

/// Checks a holder name (`name` is the setting's): 1 to
/// [`MAX_HOLDER_BYTES`] bytes, no control characters.
pub(crate) fn holder(name: &'static str, value: &str) -> Result<()> {
    let reason = if value.is_empty() {
        "must not be empty".to_owned()
    } else if value.len() > MAX_HOLDER_BYTES {
        format!("is {} bytes; at most {MAX_HOLDER_BYTES}", value.len())
    } else if value.chars().any(char::is_control) {
        "must not contain control characters".to_owned()
    } else {
        return Ok(());
    };
    Err(Error::InvalidOption { name, reason })
}

/// Checks a W3C traceparent: version `00`, a trace id and a parent id that
/// are not all zeros, and flags, in lowercase hex.
pub(crate) fn traceparent(tp: &str) -> Result<()> {
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let parts: Vec<&str> = tp.split('-').collect();
    let ok = matches!(parts.as_slice(), [v, t, p, f]
        if *v == "00" && hex(t, 32) && hex(p, 16) && hex(f, 2)
            && t.bytes().any(|b| b != b'0') && p.bytes().any(|b| b != b'0'));
    if ok {
        return Ok(());
    }
    Err(bad_id(
        "traceparent",
        tp,
        "must be a W3C traceparent: 00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zeros",
    ))
}
