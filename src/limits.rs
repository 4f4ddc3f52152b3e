//! A job's limits: how many failures and stalls it survives, and the
//! backoff between failed attempts. They are fixed when the job is enqueued
//! (from [`EnqueueOptions`](crate::EnqueueOptions), else the queue's
//! [`QueueOptions`](crate::QueueOptions)) and stored with it, so every
//! consumer and reaper agrees on a job's fate.

use std::time::Duration;

use crate::error::{Error, Result};

/// Default handler failures before a job fails for good.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Default expired leases a job survives before it fails as "stalled".
pub const DEFAULT_MAX_STALLS: u32 = 3;
/// Default backoff: exponential from 1 s, at most 10 minutes.
pub const DEFAULT_BACKOFF: Backoff = Backoff::Exponential {
    base: Duration::from_secs(1),
    max: Duration::from_secs(600),
};
/// The longest delay echomq schedules (365 days): a backoff saturates here,
/// and longer retry, snooze or enqueue delays are refused.
pub const MAX_DELAY: Duration = Duration::from_secs(365 * 86_400);
/// The most failures or stalls a job may be allowed.
pub const MAX_LIMIT: u32 = 1_000_000;

/// The delay before a failed job's next attempt.
///
/// ```
/// use std::time::Duration;
/// use echomq::Backoff;
/// let b = Backoff::Exponential { base: Duration::from_secs(1), max: Duration::from_secs(60) };
/// assert_eq!(b.delay(1), Duration::from_secs(1));
/// assert_eq!(b.delay(3), Duration::from_secs(4));
/// assert_eq!(b.delay(100), Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backoff {
    /// The same delay every time.
    Fixed(Duration),
    /// `base * 2^(failures - 1)`, at most `max`.
    Exponential {
        /// The first delay.
        base: Duration,
        /// The cap.
        max: Duration,
    },
}

impl Backoff {
    /// The delay after the `failures`-th failure (1 for the first), in
    /// whole milliseconds as the server computes it, never above
    /// [`MAX_DELAY`].
    pub fn delay(&self, failures: u64) -> Duration {
        // Whole milliseconds, as the server computes it (lua/common.lua).
        let ms = match *self {
            Backoff::Fixed(d) => d.as_millis(),
            Backoff::Exponential { base, max } => {
                let shift = failures.saturating_sub(1).min(62) as u32;
                base.as_millis().saturating_mul(1 << shift).min(max.as_millis())
            }
        };
        Duration::from_millis(ms.min(MAX_DELAY.as_millis()) as u64)
    }

    fn check(&self) -> Result<()> {
        let (a, b) = match *self {
            Backoff::Fixed(d) => (d, d),
            Backoff::Exponential { base, max } => (base, max),
        };
        for d in [a, b] {
            if d > MAX_DELAY {
                return Err(Error::InvalidOption {
                    name: "backoff",
                    reason: format!("{d:?} is longer than MAX_DELAY (365 days)"),
                });
            }
        }
        Ok(())
    }

    /// The server-side form (see `lua/common.lua`).
    fn encode(&self) -> String {
        match *self {
            Backoff::Fixed(d) => format!("f{}", d.as_millis()),
            Backoff::Exponential { base, max } => format!("e{}:{}", base.as_millis(), max.as_millis()),
        }
    }

    fn decode(s: &str) -> Option<Backoff> {
        if let Some(ms) = s.strip_prefix('f') {
            return Some(Backoff::Fixed(Duration::from_millis(ms.parse().ok()?)));
        }
        let (base, max) = s.strip_prefix('e')?.split_once(':')?;
        Some(Backoff::Exponential {
            base: Duration::from_millis(base.parse().ok()?),
            max: Duration::from_millis(max.parse().ok()?),
        })
    }
}

/// A job's limits, fixed at enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Handler failures before the job fails for good (at least 1).
    pub max_attempts: u32,
    /// Expired leases survived before the job fails as "stalled".
    pub max_stalls: u32,
    /// The delay before each retry.
    pub backoff: Backoff,
    /// The longest one attempt's handler may run: at the timeout it is
    /// cancelled and the attempt counts as a failure with error
    /// `"timeout"`. `None` (the default): no limit but the lease.
    pub timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            max_stalls: DEFAULT_MAX_STALLS,
            backoff: DEFAULT_BACKOFF,
            timeout: None,
        }
    }
}

impl Limits {
    pub(crate) fn check_attempts(n: u32) -> Result<u32> {
        if n == 0 || n > MAX_LIMIT {
            return Err(Error::InvalidOption {
                name: "max_attempts",
                reason: format!("{n} is not within 1..={MAX_LIMIT}"),
            });
        }
        Ok(n)
    }

    pub(crate) fn check_stalls(n: u32) -> Result<u32> {
        if n > MAX_LIMIT {
            return Err(Error::InvalidOption {
                name: "max_stalls",
                reason: format!("{n} is not within 0..={MAX_LIMIT}"),
            });
        }
        Ok(n)
    }

    pub(crate) fn check(&self) -> Result<()> {
        Self::check_attempts(self.max_attempts)?;
        Self::check_stalls(self.max_stalls)?;
        if let Some(t) = self.timeout {
            crate::settings::duration("timeout", t, Duration::from_millis(1), MAX_DELAY)?;
        }
        self.backoff.check()
    }

    /// The job hash's `lm` field, `MAX_ATTEMPTS:MAX_STALLS:BACKOFF[;tMS]`:
    /// empty for the defaults, which the scripts know, so most jobs store
    /// nothing extra. (The scripts do not read the timeout; the consumer
    /// enforces it.)
    pub(crate) fn encode(&self) -> String {
        if *self == Limits::default() {
            return String::new();
        }
        let mut s = format!("{}:{}:{}", self.max_attempts, self.max_stalls, self.backoff.encode());
        if let Some(t) = self.timeout {
            s.push_str(&format!(";t{}", t.as_millis()));
        }
        s
    }

    pub(crate) fn decode(s: &[u8]) -> Limits {
        let parsed = std::str::from_utf8(s).ok().and_then(|s| {
            let (limits, timeout) = match s.split_once(";t") {
                Some((l, t)) => (l, Some(Duration::from_millis(t.parse().ok()?))),
                None => (s, None),
            };
            let mut parts = limits.splitn(3, ':');
            Some(Limits {
                max_attempts: parts.next()?.parse().ok()?,
                max_stalls: parts.next()?.parse().ok()?,
                backoff: Backoff::decode(parts.next()?)?,
                timeout,
            })
        });
        parsed.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Limits survive the round trip through the job hash; the defaults store nothing.
    #[test]
    fn limits_round_trip() {
        assert_eq!(Limits::default().encode(), "");
        assert_eq!(Limits::decode(b""), Limits::default());
        let l = Limits {
            max_attempts: 7,
            max_stalls: 0,
            backoff: Backoff::Fixed(Duration::from_millis(250)),
            timeout: None,
        };
        assert_eq!(Limits::decode(l.encode().as_bytes()), l);
        let e = Limits {
            backoff: Backoff::Exponential {
                base: Duration::from_millis(10),
                max: Duration::from_secs(5),
            },
            ..Limits::default()
        };
        assert_eq!(e.encode(), "3:3:e10:5000");
        assert_eq!(Limits::decode(e.encode().as_bytes()), e);
        let t = Limits {
            timeout: Some(Duration::from_secs(2)),
            ..Limits::default()
        };
        assert_eq!(t.encode(), "3:3:e1000:600000;t2000");
        assert_eq!(Limits::decode(t.encode().as_bytes()), t);
    }

    // The Lua defaults agree with these constants.
    #[test]
    fn lua_defaults_agree() {
        let lua = include_str!("../lua/common.lua");
        assert!(lua.contains(&format!("local DEFAULT_MAX_ATTEMPTS = {DEFAULT_MAX_ATTEMPTS}\n")));
        assert!(lua.contains(&format!("local DEFAULT_MAX_STALLS = {DEFAULT_MAX_STALLS}\n")));
        assert!(lua.contains(&format!("local DEFAULT_BACKOFF = '{}'\n", DEFAULT_BACKOFF.encode())));
        assert!(lua.contains(&format!("local MAX_DELAY_MS = {}\n", MAX_DELAY.as_millis())));
    }

    // Backoff saturates instead of overflowing, at the cap and at MAX_DELAY.
    #[test]
    fn backoff_saturates() {
        let huge = Backoff::Exponential {
            base: Duration::from_secs(1),
            max: Duration::MAX,
        };
        assert_eq!(huge.delay(u64::MAX), MAX_DELAY);
        assert_eq!(Backoff::Fixed(Duration::MAX).delay(1), MAX_DELAY);
        assert!(Backoff::Fixed(Duration::MAX).check().is_err());
        assert_eq!(DEFAULT_BACKOFF.delay(0), Duration::from_secs(1));
        assert_eq!(DEFAULT_BACKOFF.delay(11), Duration::from_secs(600));
        // Past 2^32 and with sub-millisecond bases, as the server counts.
        let fine = Backoff::Exponential {
            base: Duration::from_micros(1500),
            max: MAX_DELAY,
        };
        assert_eq!(fine.delay(3), Duration::from_millis(4));
        assert_eq!(fine.delay(34), Duration::from_millis(1 << 33));
    }
}
