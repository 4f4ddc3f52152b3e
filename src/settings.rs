//! The one convention for settings: builders store what they are given;
//! the value is checked when the queue, client, consumer or reaper is built,
//! and a value out of range is [`Error::InvalidOption`] naming the setting
//! and its range. No silent clamps, no magic zeros, and no arithmetic on a
//! user's duration that can overflow (deadlines are computed with checked
//! or saturating operations).

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};

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
