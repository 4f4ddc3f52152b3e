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

/// The delay before a failed job's next attempt: fixed, or exponential
/// with a cap, either of them optionally with jitter.
///
/// ```
/// use std::time::Duration;
/// use echomq::Backoff;
/// let b = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(60));
/// assert_eq!(b.delay(1), Duration::from_secs(1));
/// assert_eq!(b.delay(3), Duration::from_secs(4));
/// assert_eq!(b.delay(100), Duration::from_secs(60));
///
/// // The same delays, each drawn at random from [d/2, d].
/// let spread = b.jitter(0.5);
/// assert_eq!(spread.delay(3), Duration::from_secs(4)); // the upper bound
/// assert_eq!(spread.delay_range(3), (Duration::from_secs(2), Duration::from_secs(4)));
/// ```
///
/// A job's backoff is stored with it and applied by the server (jitter
/// included), so every consumer, a low-level
/// [`Queue::retry`](crate::Queue::retry) with no delay, and any process
/// agree on it. A [`Consumer`](crate::Consumer) may override it for the
/// retries its handler asks for (see
/// [`Worker::backoff`](crate::Worker::backoff)).
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
    /// A [`Fixed`](Self::Fixed) or [`Exponential`](Self::Exponential)
    /// backoff with jitter. Build it with [`Backoff::jitter`]; read it with
    /// [`Backoff::without_jitter`] and [`Backoff::jitter_fraction`].
    Jittered(Jittered),
}

/// A backoff with jitter, as [`Backoff::jitter`] builds it (its parts are
/// read through [`Backoff::without_jitter`] and
/// [`Backoff::jitter_fraction`]).
#[derive(Debug, Clone, Copy)]
pub struct Jittered {
    /// The un-jittered delays: `Fixed(base)` when `fixed`, else
    /// `Exponential { base, max }` (kept flat so `Backoff` stays `Copy`).
    fixed: bool,
    base: Duration,
    max: Duration,
    /// The fraction as given, rounded to thousandths when it is within
    /// 0.0..=1.0 (the server's unit); out of range or NaN it is kept as
    /// given, for [`Backoff::check`] to refuse by name.
    fraction: f64,
}

/// Equal when their delays and fractions are (a NaN fraction equals itself,
/// so `Backoff` can be `Eq`).
impl PartialEq for Jittered {
    fn eq(&self, other: &Self) -> bool {
        (self.fixed, self.base, self.max, self.fraction.to_bits())
            == (other.fixed, other.base, other.max, other.fraction.to_bits())
    }
}

impl Eq for Jittered {}

impl Backoff {
    /// [`Backoff::Fixed`]: the same delay every time.
    pub const fn fixed(delay: Duration) -> Backoff {
        Backoff::Fixed(delay)
    }

    /// [`Backoff::Exponential`]: `base * 2^(failures - 1)`, at most `max`.
    pub const fn exponential(base: Duration, max: Duration) -> Backoff {
        Backoff::Exponential { base, max }
    }

    /// The same backoff with jitter `fraction` (0.0 to 1.0, in thousandths:
    /// it is rounded to the nearest 0.001): each delay is drawn uniformly
    /// from `[d * (1 - fraction), d]`, `d` being the delay without jitter
    /// ([`delay`](Self::delay)). 1.0 is "full jitter" (anywhere from 0 to
    /// `d`); 0.0 gives the backoff back without jitter. On a backoff that
    /// has jitter, it replaces it.
    ///
    /// Jitter spreads the retries of jobs that failed together (an outage
    /// of what they call) so they do not all come back at once. The server
    /// draws it from the retry's fencing token and failure count, so each
    /// retry gets its own delay whichever process sends it.
    ///
    /// A fraction out of range (or NaN) is refused with
    /// [`Error::InvalidOption`] when the backoff is used: when the job is
    /// enqueued, the [`QueueOptions`](crate::QueueOptions) are applied, or
    /// the consumer starts.
    ///
    /// ```
    /// use std::time::Duration;
    /// use echomq::Backoff;
    /// let b = Backoff::fixed(Duration::from_secs(10)).jitter(0.2);
    /// assert_eq!(b.delay_range(1), (Duration::from_secs(8), Duration::from_secs(10)));
    /// assert_eq!(b.jitter_fraction(), 0.2);
    /// assert_eq!(b.without_jitter(), Backoff::Fixed(Duration::from_secs(10)));
    /// ```
    pub fn jitter(self, fraction: f64) -> Backoff {
        let (fixed, base, max) = match self {
            Backoff::Fixed(d) => (true, d, d),
            Backoff::Exponential { base, max } => (false, base, max),
            Backoff::Jittered(j) => (j.fixed, j.base, j.max),
        };
        let fraction = if (0.0..=1.0).contains(&fraction) {
            let per_mille = (fraction * 1000.0).round();
            if per_mille == 0.0 {
                return self.without_jitter();
            }
            per_mille / 1000.0
        } else {
            fraction
        };
        Backoff::Jittered(Jittered {
            fixed,
            base,
            max,
            fraction,
        })
    }

    /// The jitter fraction (0.0 for a backoff without jitter).
    pub fn jitter_fraction(&self) -> f64 {
        match self {
            Backoff::Jittered(j) => j.fraction,
            _ => 0.0,
        }
    }

    /// The backoff without its jitter: a [`Fixed`](Self::Fixed) or an
    /// [`Exponential`](Self::Exponential).
    pub fn without_jitter(&self) -> Backoff {
        match *self {
            Backoff::Jittered(j) if j.fixed => Backoff::Fixed(j.base),
            Backoff::Jittered(j) => Backoff::Exponential {
                base: j.base,
                max: j.max,
            },
            plain => plain,
        }
    }

    /// The delay after the `failures`-th failure (1 for the first), in
    /// whole milliseconds as the server computes it, never above
    /// [`MAX_DELAY`]. With jitter this is the upper bound of the delays
    /// drawn (see [`delay_range`](Self::delay_range)).
    pub fn delay(&self, failures: u64) -> Duration {
        Duration::from_millis(self.upper_ms(failures))
    }

    /// The least and the greatest delay after the `failures`-th failure,
    /// in whole milliseconds as the server computes them: `d - floor(d *
    /// per_mille / 1000)` and `d`, where `d` is [`delay`](Self::delay) and
    /// `per_mille` the jitter in thousandths. Both are `d` without jitter.
    pub fn delay_range(&self, failures: u64) -> (Duration, Duration) {
        let d = self.upper_ms(failures);
        let span = d * self.per_mille() / 1000;
        (Duration::from_millis(d - span), Duration::from_millis(d))
    }

    /// The delay the server gives the retry by the claim with fencing
    /// token `token` that makes the job's `failures`-th failure: the same
    /// draw as `backoff_ms` in `lua/lib/budget.lua` (a unit test checks them
    /// against values the server computed).
    pub(crate) fn delay_for(&self, failures: u64, token: u64) -> Duration {
        let d = self.upper_ms(failures);
        let span = d * self.per_mille() / 1000;
        if span == 0 {
            return Duration::from_millis(d);
        }
        // floor(h * (span + 1) / 2^32): at most `span`, exactly as the
        // script computes it.
        let pick = ((u128::from(jitter_hash(token, failures)) * u128::from(span + 1)) >> 32) as u64;
        Duration::from_millis(d - span + pick)
    }

    /// The un-jittered delay in whole milliseconds (lua/lib/budget.lua
    /// `backoff_ms`).
    fn upper_ms(&self, failures: u64) -> u64 {
        let ms = match self.without_jitter() {
            Backoff::Fixed(d) => d.as_millis(),
            Backoff::Exponential { base, max } => {
                let shift = failures.saturating_sub(1).min(62) as u32;
                base.as_millis().saturating_mul(1 << shift).min(max.as_millis())
            }
            Backoff::Jittered(_) => unreachable!("without_jitter() has none"),
        };
        ms.min(MAX_DELAY.as_millis()) as u64
    }

    /// The jitter in thousandths, as the server takes it (0 to 1,000).
    fn per_mille(&self) -> u64 {
        // NaN (refused by `check`) casts to 0.
        (self.jitter_fraction() * 1000.0).round().clamp(0.0, 1000.0) as u64
    }

    /// Refuses delays over [`MAX_DELAY`] and a jitter out of 0.0..=1.0.
    pub(crate) fn check(&self) -> Result<()> {
        let (a, b) = match self.without_jitter() {
            Backoff::Fixed(d) => (d, d),
            Backoff::Exponential { base, max } => (base, max),
            Backoff::Jittered(_) => unreachable!("without_jitter() has none"),
        };
        for d in [a, b] {
            if d > MAX_DELAY {
                return Err(Error::InvalidOption {
                    name: "backoff",
                    reason: format!("{d:?} is longer than MAX_DELAY (365 days)"),
                });
            }
        }
        let j = self.jitter_fraction();
        if !(0.0..=1.0).contains(&j) {
            return Err(Error::InvalidOption {
                name: "backoff jitter",
                reason: format!("{j} is not a fraction within 0.0..=1.0"),
            });
        }
        Ok(())
    }

    /// The server-side form (see `lua/lib/budget.lua`): `fMS` or
    /// `eBASE_MS:MAX_MS`, and the jitter in thousandths (0: none), which
    /// [`Limits::encode`] stores in a section of its own.
    fn encode(&self) -> (String, u64) {
        let bo = match self.without_jitter() {
            Backoff::Fixed(d) => format!("f{}", d.as_millis()),
            Backoff::Exponential { base, max } => format!("e{}:{}", base.as_millis(), max.as_millis()),
            Backoff::Jittered(_) => unreachable!("without_jitter() has none"),
        };
        (bo, self.per_mille())
    }

    /// The backoff from its server-side form and the jitter in thousandths.
    fn decode(s: &str, per_mille: u64) -> Option<Backoff> {
        let plain = if let Some(ms) = s.strip_prefix('f') {
            Backoff::Fixed(Duration::from_millis(ms.parse().ok()?))
        } else {
            let (base, max) = s.strip_prefix('e')?.split_once(':')?;
            Backoff::Exponential {
                base: Duration::from_millis(base.parse().ok()?),
                max: Duration::from_millis(max.parse().ok()?),
            }
        };
        if per_mille > 1000 {
            return None;
        }
        Some(plain.jitter(per_mille as f64 / 1000.0))
    }
}

/// murmur3's 32-bit finalizer: every input bit moves every output bit.
fn mix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The jitter's random number, 0 to 2^32 - 1, from a retry's fencing token
/// (unique per claim in the queue, below 2^53) and failure count: the same
/// as `jitter_hash` in `lua/lib/budget.lua`, which computes it exactly in
/// doubles. Not a secret, only spread.
fn jitter_hash(token: u64, failures: u64) -> u32 {
    let h = mix32(failures as u32);
    let h = mix32(h.wrapping_add((token >> 32) as u32));
    mix32(h.wrapping_add(token as u32))
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
            crate::validate::duration("timeout", t, Duration::from_millis(1), MAX_DELAY)?;
        }
        self.backoff.check()
    }

    /// The job hash's `lm` field, `MAX_ATTEMPTS:MAX_STALLS:BACKOFF[;jPER_MILLE][;tMS]`
    /// (`BACKOFF` is `fMS` or `eBASE_MS:MAX_MS`; `;j` the backoff's
    /// jitter, `;t` the timeout): empty for the defaults, which the scripts
    /// know, so most jobs store nothing extra. (The scripts do not read the
    /// timeout; the consumer enforces it.) The jitter is a section of its
    /// own so that a script that predates it still reads the backoff.
    pub(crate) fn encode(&self) -> String {
        if *self == Limits::default() {
            return String::new();
        }
        let (bo, per_mille) = self.backoff.encode();
        let mut s = format!("{}:{}:{bo}", self.max_attempts, self.max_stalls);
        if per_mille > 0 {
            s.push_str(&format!(";j{per_mille}"));
        }
        if let Some(t) = self.timeout {
            s.push_str(&format!(";t{}", t.as_millis()));
        }
        s
    }

    /// The limits an `lm` field holds; the defaults for an empty or
    /// unreadable one. Sections it does not know (from a later version)
    /// are skipped.
    pub(crate) fn decode(s: &[u8]) -> Limits {
        let parsed = std::str::from_utf8(s).ok().and_then(|s| {
            let mut sections = s.split(';');
            let mut parts = sections.next()?.splitn(3, ':');
            let (max_attempts, max_stalls, bo) = (parts.next()?, parts.next()?, parts.next()?);
            let (mut per_mille, mut timeout) = (0, None);
            for section in sections {
                if let Some(j) = section.strip_prefix('j') {
                    per_mille = j.parse().ok()?;
                } else if let Some(t) = section.strip_prefix('t') {
                    timeout = Some(Duration::from_millis(t.parse().ok()?));
                }
            }
            Some(Limits {
                max_attempts: max_attempts.parse().ok()?,
                max_stalls: max_stalls.parse().ok()?,
                backoff: Backoff::decode(bo, per_mille)?,
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

    // Jitter is stored in thousandths in a `;j` section; encodings without one (all
    // before jitter) decode as before; unknown sections are skipped.
    #[test]
    fn jitter_round_trip() {
        let ms = Duration::from_millis;
        let j = Limits {
            backoff: Backoff::exponential(ms(1000), ms(60_000)).jitter(0.5),
            ..Limits::default()
        };
        assert_eq!(j.encode(), "3:3:e1000:60000;j500");
        assert_eq!(Limits::decode(j.encode().as_bytes()), j);
        let f = Limits {
            backoff: Backoff::fixed(ms(250)).jitter(1.0),
            timeout: Some(ms(2000)),
            ..Limits::default()
        };
        assert_eq!(f.encode(), "3:3:f250;j1000;t2000");
        assert_eq!(Limits::decode(f.encode().as_bytes()), f);
        assert_eq!(Limits::decode(b"3:3:f250;t2000;j1000"), f);
        // The default backoff with jitter is not the default: it is stored.
        let d = Limits {
            backoff: DEFAULT_BACKOFF.jitter(0.1),
            ..Limits::default()
        };
        assert_eq!(d.encode(), "3:3:e1000:600000;j100");
        assert_eq!(Limits::decode(d.encode().as_bytes()), d);
        // Old encodings, byte for byte as 0.2 wrote them.
        let old = |s: &str, backoff: Backoff, timeout: Option<Duration>| {
            let l = Limits::decode(s.as_bytes());
            assert_eq!((l.backoff, l.timeout), (backoff, timeout), "{s}");
            assert_eq!(l.encode(), s);
        };
        old("7:0:f250", Backoff::Fixed(ms(250)), None);
        old("3:3:e10:5000", Backoff::exponential(ms(10), ms(5000)), None);
        old("3:3:e1000:600000;t2000", DEFAULT_BACKOFF, Some(ms(2000)));
        old("5:1:f0;t1", Backoff::Fixed(Duration::ZERO), Some(ms(1)));
        // A later version's section is skipped; a malformed one gives the defaults.
        assert_eq!(Limits::decode(b"3:3:f250;x9;j1000;t2000"), f);
        assert_eq!(Limits::decode(b"3:3:f250;jx"), Limits::default());
        assert_eq!(Limits::decode(b"3:3:f250;j1001"), Limits::default());
    }

    // jitter() rounds to thousandths (0 gives the plain backoff back), replaces an
    // earlier jitter, and keeps a bad fraction for check() to refuse by name.
    #[test]
    fn jitter_values() {
        let b = Backoff::fixed(Duration::from_secs(10));
        assert_eq!(b.jitter(0.0), b);
        assert_eq!(b.jitter(0.0004), b);
        assert_eq!(b.jitter(0.5).jitter(0.0), b);
        assert_eq!(b.jitter(0.5).without_jitter(), b);
        assert_eq!(b.jitter(0.33333).jitter_fraction(), 0.333);
        assert_eq!(b.jitter(0.9).jitter(0.25), b.jitter(0.25));
        assert_eq!(b.jitter(1.0).delay(1), Duration::from_secs(10));
        assert!(b.jitter(1.0).check().is_ok());
        for bad in [-0.1, 1.0001, f64::NAN, f64::INFINITY, -0.0004] {
            match b.jitter(bad).check() {
                Err(Error::InvalidOption { name, .. }) => assert_eq!(name, "backoff jitter", "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert!(b.jitter(f64::NAN).check().unwrap_err().to_string().contains("NaN"));
        assert_eq!(b.jitter(f64::NAN), b.jitter(f64::NAN));
        let e = Backoff::exponential(Duration::from_secs(1), Duration::MAX).jitter(0.5);
        assert!(matches!(e.check(), Err(Error::InvalidOption { name: "backoff", .. })));
        assert_eq!(b.jitter_fraction(), 0.0);
    }

    // The jitter draw agrees with lua/lib/budget.lua: these values were computed by
    // the server (jitter_hash and backoff_ms evaluated in a script).
    #[test]
    fn jitter_matches_the_server() {
        let cases = [
            ((0, 1), 1_461_123_477),
            ((1, 1), 1_276_260_988),
            ((1_750_000_000_000_123, 1), 130_274_820),
            ((1_750_000_000_000_123, 2), 445_249_810),
            ((1_750_000_000_000_124, 1), 97_679_080),
            ((9_007_199_254_740_991, 1_000_000), 531_714_635),
            ((4_294_967_296, 7), 92_292_155),
        ];
        for ((token, failures), h) in cases {
            assert_eq!(jitter_hash(token, failures), h, "{token} {failures}");
        }
        let ms = Duration::from_millis;
        let t = 1_750_000_000_000_123;
        assert_eq!(Backoff::fixed(ms(10_000)).jitter(0.2).delay_for(1, t), ms(8060));
        let e = Backoff::exponential(ms(1000), ms(600_000));
        assert_eq!(e.jitter(1.0).delay_for(5, t), ms(4487));
        assert_eq!(e.delay_for(5, t), ms(16_000));
        let year = Backoff::fixed(MAX_DELAY).jitter(1.0);
        assert_eq!(year.delay_for(3, 1_750_000_000_000_999), ms(22_875_453_687));
        assert_eq!(year.delay_for(3, 1_750_000_000_000_998), ms(30_810_452_611));
        assert_eq!(Backoff::fixed(ms(1)).jitter(0.5).delay_for(1, t), ms(1));
    }

    // Every draw lies in delay_range, and consecutive tokens spread over it.
    #[test]
    fn jitter_draws_within_the_range() {
        let b = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(60)).jitter(0.5);
        for failures in 1..12 {
            let (lo, hi) = b.delay_range(failures);
            assert_eq!(hi, b.delay(failures));
            let draws: Vec<_> = (0..500)
                .map(|i| b.delay_for(failures, 1_750_000_000_000_000 + i))
                .collect();
            assert!(draws.iter().all(|d| (lo..=hi).contains(d)), "{failures}");
            let (min, max) = (draws.iter().min().unwrap(), draws.iter().max().unwrap());
            // Within 2% of each end of the window.
            let slack = (hi - lo) / 50;
            assert!(*min <= lo + slack && *max + slack >= hi, "{failures}: {min:?}..{max:?}");
        }
        assert_eq!(
            Backoff::fixed(Duration::from_secs(3)).delay_range(9),
            (Duration::from_secs(3), Duration::from_secs(3))
        );
    }

    // The Lua defaults agree with these constants.
    #[test]
    fn lua_defaults_agree() {
        let lua = include_str!("../lua/lib/defaults.lua");
        assert!(lua.contains(&format!("local DEFAULT_MAX_ATTEMPTS = {DEFAULT_MAX_ATTEMPTS}\n")));
        assert!(lua.contains(&format!("local DEFAULT_MAX_STALLS = {DEFAULT_MAX_STALLS}\n")));
        assert!(lua.contains(&format!("local DEFAULT_BACKOFF = '{}'\n", DEFAULT_BACKOFF.encode().0)));
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
