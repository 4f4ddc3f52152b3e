//! Global concurrency and rate limits, stored in the server: at most N
//! active jobs of a queue across every consumer in every process, and at
//! most N claims per window of the queue and of each lane, counted on the
//! server's clock. The claim script enforces them in the step that leases
//! (the guide's [throttles](crate::guide::throttles) states the rules
//! exactly and what they cost).

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::store;
use crate::store::throttle::{Change, Rate};

/// The largest global cap ([`Queue::set_max_active`]).
pub const MAX_ACTIVE_CAP: u32 = 1_000_000;

/// The most claims a rate limit may allow per window: the server keeps one
/// log entry per claim of the window, so this bounds its size.
pub const MAX_RATE_JOBS: u32 = 100_000;

/// The longest window of a rate limit: a day.
pub const MAX_RATE_WINDOW: Duration = Duration::from_secs(86_400);

/// A rate limit: at most [`jobs`](Self::jobs) claims in every window of
/// length [`per`](Self::per) on the server's clock (a sliding window: for
/// every instant `t`, the claims in `[t, t + per)` number at most `jobs`).
/// A job leased ahead (prefetched) counts when it is claimed.
///
/// ```
/// use std::time::Duration;
/// use echomq::throttle::RateLimit;
///
/// let limit = RateLimit::new(100, Duration::from_secs(1))?;
/// assert_eq!((limit.jobs(), limit.per()), (100, Duration::from_secs(1)));
/// assert!(RateLimit::new(0, Duration::from_secs(1)).is_err());
/// # Ok::<(), echomq::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    jobs: u32,
    per_ms: u64,
}

impl RateLimit {
    /// At most `jobs` claims per window of length `per` (whole
    /// milliseconds).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for `jobs` outside 1..=[`MAX_RATE_JOBS`], or
    /// `per` under 1 ms or over [`MAX_RATE_WINDOW`].
    pub fn new(jobs: u32, per: Duration) -> Result<Self> {
        if jobs == 0 || jobs > MAX_RATE_JOBS {
            return Err(Error::InvalidOption {
                name: "rate limit jobs",
                reason: format!("{jobs} is outside 1 to {MAX_RATE_JOBS}"),
            });
        }
        if per < Duration::from_millis(1) || per > MAX_RATE_WINDOW {
            return Err(Error::InvalidOption {
                name: "rate limit window",
                reason: format!("{per:?} is outside 1 ms to {MAX_RATE_WINDOW:?}"),
            });
        }
        Ok(RateLimit {
            jobs,
            per_ms: per.as_millis() as u64,
        })
    }

    /// The most claims per window.
    pub fn jobs(&self) -> u32 {
        self.jobs
    }

    /// The window's length.
    pub fn per(&self) -> Duration {
        Duration::from_millis(self.per_ms)
    }

    /// As the store takes it.
    fn rate(limit: Option<RateLimit>) -> Option<Rate> {
        limit.map(|l| Rate {
            jobs: l.jobs,
            per_ms: l.per_ms,
        })
    }

    /// A stored setting; `None` for none, or one out of bounds.
    fn stored(rate: Option<Rate>) -> Option<RateLimit> {
        let r = rate?;
        RateLimit::new(r.jobs, Duration::from_millis(r.per_ms)).ok()
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} per {:?}", self.jobs, self.per())
    }
}

/// A queue's throttles on claims, as [`Queue::throttles`] reads them (in one step).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Throttles {
    /// The global cap: the most active jobs at once ([`None`]: no cap).
    pub max_active: Option<u32>,
    /// The queue's rate limit.
    pub rate: Option<RateLimit>,
    /// The rate limit of lanes without their own.
    pub lane_default_rate: Option<RateLimit>,
    /// Until when (server ms) a handler's
    /// [`rate_limited`](crate::HandlerError::rate_limited) holds the
    /// queue's claims; [`None`] when it does not.
    pub held_until_ms: Option<u64>,
}

/// A lane's rate limit, as [`Queue::lane_rate_limit`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LaneRate {
    /// The limit that applies: its own, else the default of lanes.
    pub rate: Option<RateLimit>,
    /// Its own ([`Queue::set_lane_rate_limit`]), if it has one.
    pub own: Option<RateLimit>,
    /// When (server ms) the lane gives jobs again, if its rate limit or a
    /// handler's [`rate_limited`](crate::HandlerError::rate_limited) has
    /// stopped it.
    pub reopens_ms: Option<u64>,
}

impl Queue {
    async fn set_throttle(&self, change: Change<'_>) -> Result<()> {
        store::throttle::set(&mut self.conn(), self.keys(), change).await
    }

    /// The queue's limits, and those of `lane`, read in one step.
    async fn read_throttles(&self, lane: Option<&str>) -> Result<(Throttles, LaneRate)> {
        let read = store::throttle::get(&mut self.conn(), self.keys(), lane).await?;
        let (own, lane_default_rate) = (
            RateLimit::stored(read.lane_rate),
            RateLimit::stored(read.lane_default_rate),
        );
        Ok((
            Throttles {
                max_active: read.max_active,
                rate: RateLimit::stored(read.rate),
                lane_default_rate,
                held_until_ms: read.held_until_ms,
            },
            LaneRate {
                rate: own.or(lane_default_rate),
                own,
                reopens_ms: read.reopens_ms,
            },
        ))
    }

    /// Sets the queue's global cap: at most `max` of its jobs are active
    /// (leased, jobs leased ahead included) at once, across every consumer
    /// in every process. The claim script compares it with the active set
    /// in the step that leases, on every claim path (a plain claim and the
    /// settle-and-claim of a consumer's settler), and every end of a lease
    /// (settlement, release, snooze, cancel, reap) frees its slot; a
    /// consumer that found the queue at its cap is woken when a slot frees.
    /// `None` removes the cap. A cap below the jobs already active leases
    /// nothing until enough of them end; running jobs are not stopped.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// queue.set_max_active(Some(20)).await?;
    /// assert_eq!(queue.throttles().await?.max_active, Some(20));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for 0 (pass `None` to remove the cap) or a
    /// cap over [`MAX_ACTIVE_CAP`]; server errors.
    pub async fn set_max_active(&self, max: Option<u32>) -> Result<()> {
        if let Some(m) = max
            && (m == 0 || m > MAX_ACTIVE_CAP)
        {
            return Err(Error::InvalidOption {
                name: "max active",
                reason: format!("{m} is outside 1 to {MAX_ACTIVE_CAP} (None removes the cap)"),
            });
        }
        self.set_throttle(Change::MaxActive(max)).await
    }

    /// Sets the queue's rate limit: at most `limit.jobs()` claims in every
    /// window of `limit.per()` on the server's clock, across every consumer
    /// in every process (see [`RateLimit`]). A consumer that the limit
    /// stops sleeps until the window reopens ([`Queue::claim_or_wait`]).
    /// `None` removes it.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use std::time::Duration;
    /// use echomq::throttle::RateLimit;
    /// queue.set_rate_limit(Some(RateLimit::new(50, Duration::from_secs(1))?)).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Server errors.
    pub async fn set_rate_limit(&self, limit: Option<RateLimit>) -> Result<()> {
        self.set_throttle(Change::Rate(RateLimit::rate(limit))).await
    }

    /// Sets the rate limit of `lane` (`None`: the default of lanes
    /// applies, [`set_lane_default_rate_limit`](Self::set_lane_default_rate_limit)).
    /// A lane its limit stops gives no job until its window reopens, and
    /// then takes its turn again; the other lanes and the jobs without a
    /// lane keep flowing meanwhile. A lane stopped under the old limit
    /// stays stopped until the time it was given.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use std::time::Duration;
    /// use echomq::throttle::RateLimit;
    /// queue.set_lane_rate_limit("customer-42", Some(RateLimit::new(10, Duration::from_secs(60))?)).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad lane name; server errors.
    pub async fn set_lane_rate_limit(&self, lane: &str, limit: Option<RateLimit>) -> Result<()> {
        crate::validate::id("lane", lane)?;
        self.set_throttle(Change::LaneRate {
            lane: Some(lane),
            rate: RateLimit::rate(limit),
        })
        .await
    }

    /// Sets the rate limit of every lane without its own (`None`: none).
    /// Each lane counts its own claims against it. The jobs without a lane
    /// are not under it (the queue's own limit covers them).
    ///
    /// # Errors
    /// Server errors.
    pub async fn set_lane_default_rate_limit(&self, limit: Option<RateLimit>) -> Result<()> {
        self.set_throttle(Change::LaneRate {
            lane: None,
            rate: RateLimit::rate(limit),
        })
        .await
    }

    /// Ends a handler's hold of the queue's claims
    /// ([`HandlerError::rate_limited`](crate::HandlerError::rate_limited)
    /// of a job without a lane) at once. A lane's hold ends by itself.
    ///
    /// # Errors
    /// Server errors.
    pub async fn clear_rate_hold(&self) -> Result<()> {
        self.set_throttle(Change::Unhold).await
    }

    /// The queue's limits on claims: its global cap, its rate limit, the
    /// default rate limit of lanes, and a handler's hold. (A job's own
    /// limits, attempts and backoff, are [`Limits`](crate::Limits).)
    ///
    /// # Errors
    /// Server errors.
    pub async fn throttles(&self) -> Result<Throttles> {
        let (limits, _) = self.read_throttles(None).await?;
        Ok(limits)
    }

    /// The rate limit of `lane` and whether it is stopped.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// let lane = queue.lane_rate_limit("customer-42").await?;
    /// if let Some(at) = lane.reopens_ms {
    ///     println!("limited to {:?}; gives jobs again at {at}", lane.rate);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad lane name; server errors.
    pub async fn lane_rate_limit(&self, lane: &str) -> Result<LaneRate> {
        crate::validate::id("lane", lane)?;
        Ok(self.read_throttles(Some(lane)).await?.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Rate limits are checked at build time and round-trip through their stored form.
    #[test]
    fn rate_limits_are_checked_and_stored() {
        assert!(RateLimit::new(0, Duration::from_secs(1)).is_err());
        assert!(RateLimit::new(MAX_RATE_JOBS + 1, Duration::from_secs(1)).is_err());
        assert!(RateLimit::new(1, Duration::from_micros(999)).is_err());
        assert!(RateLimit::new(1, MAX_RATE_WINDOW + Duration::from_millis(1)).is_err());
        let l = RateLimit::new(5, Duration::from_millis(250)).unwrap();
        let stored = Rate { jobs: 5, per_ms: 250 };
        assert_eq!(RateLimit::rate(Some(l)), Some(stored));
        assert_eq!(RateLimit::stored(Some(stored)), Some(l));
        assert_eq!(RateLimit::rate(None), None);
        assert_eq!(RateLimit::stored(None), None);
        assert_eq!(RateLimit::stored(Some(Rate { jobs: 0, per_ms: 1 })), None);
        assert_eq!(l.to_string(), "5 per 250ms");
    }
}
