//! The JSON shape of the job types (`Serialize`), the one the CLI prints
//! and a web handler answers (`JobInfo`'s docs show it whole): the
//! payload as the JSON it holds, durations in milliseconds.

use std::time::Duration;

use crate::limits::{Backoff, Limits};

/// A payload as the JSON it holds (a string when it does not parse).
pub(super) fn payload_json<S: serde::Serializer>(payload: &[u8], s: S) -> std::result::Result<S::Ok, S::Error> {
    use serde::Serialize;
    match serde_json::from_slice::<&serde_json::value::RawValue>(payload) {
        Ok(raw) => raw.serialize(s),
        Err(_) => String::from_utf8_lossy(payload).serialize(s),
    }
}

/// Whole milliseconds, as the JSON forms carry durations.
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// In JSON: `{"kind": "fixed", "delay_ms": N, "jitter": F}` or
/// `{"kind": "exponential", "base_ms": N, "max_ms": N, "jitter": F}` (`F`
/// the jitter fraction, 0 for none), as the CLI prints it.
impl serde::Serialize for Backoff {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(4))?;
        match self.without_jitter() {
            Backoff::Exponential { base, max } => {
                m.serialize_entry("kind", "exponential")?;
                m.serialize_entry("base_ms", &ms(base))?;
                m.serialize_entry("max_ms", &ms(max))?;
            }
            Backoff::Fixed(d) => {
                m.serialize_entry("kind", "fixed")?;
                m.serialize_entry("delay_ms", &ms(d))?;
            }
            // without_jitter answers Fixed or Exponential only
            _ => m.serialize_entry("kind", "jittered")?,
        }
        m.serialize_entry("jitter", &self.jitter_fraction())?;
        m.end()
    }
}

/// In JSON: `{"max_attempts": N, "max_stalls": N, "backoff": {..},
/// "timeout_ms": N or null}`.
impl serde::Serialize for Limits {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("max_attempts", &self.max_attempts)?;
        m.serialize_entry("max_stalls", &self.max_stalls)?;
        m.serialize_entry("backoff", &self.backoff)?;
        m.serialize_entry("timeout_ms", &self.timeout.map(ms))?;
        m.end()
    }
}
