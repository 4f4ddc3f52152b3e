//! `lua/throttle.lua`: reads or sets the queue's global cap and the rate limits
//! of the queue and its lanes.

use super::Spec;
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "throttle",
    include_str!("../../lua/throttle.lua"),
    &["limits", "rates", "pending", "wake", "meta"],
    false,
    &["prefix", "what", "lane", "value"],
);

/// A rate limit as stored: at most `jobs` claims per `per_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rate {
    pub jobs: u32,
    pub per_ms: u64,
}

impl Rate {
    /// As the script takes it: "N:W_MS", "" for none.
    fn arg(rate: Option<Rate>) -> String {
        rate.map_or_else(String::new, |r| format!("{}:{}", r.jobs, r.per_ms))
    }

    /// A stored setting; `None` for "" or a value that does not parse.
    fn stored(s: &str) -> Option<Rate> {
        let (n, w) = s.split_once(':')?;
        Some(Rate {
            jobs: n.parse().ok()?,
            per_ms: w.parse().ok()?,
        })
    }
}

/// A change of the queue's limits (each `None` removes the setting; the
/// caller checked the values).
pub(crate) enum Change<'a> {
    /// The global cap.
    MaxActive(Option<u32>),
    /// The queue's rate limit.
    Rate(Option<Rate>),
    /// The rate limit of a lane (`None`: the default of lanes).
    LaneRate { lane: Option<&'a str>, rate: Option<Rate> },
    /// Ends a handler's hold of the queue's claims.
    Unhold,
}

/// The queue's limits, and one lane's, as read in one step.
pub(crate) struct Read {
    pub max_active: Option<u32>,
    pub rate: Option<Rate>,
    /// Until when (server ms) a handler holds the queue's claims.
    pub held_until_ms: Option<u64>,
    /// The lane's own rate limit.
    pub lane_rate: Option<Rate>,
    pub lane_default_rate: Option<Rate>,
    /// When (server ms) the lane gives jobs again, if it is stopped.
    pub reopens_ms: Option<u64>,
}

async fn call(conn: &mut Conn, k: &Keys, what: &str, lane: &str, value: &str) -> Result<super::call::Reply> {
    let mut call = SPEC.call();
    call.key(&k.limits).key(&k.lane_rates).key(&k.pending).key(&k.wake).key(&k.meta);
    call.arg(&k.base).arg(what).arg(lane).arg(value);
    call.run(conn).await
}

/// Applies `change`.
pub(crate) async fn set(conn: &mut Conn, k: &Keys, change: Change<'_>) -> Result<()> {
    let (what, lane, value) = match change {
        Change::MaxActive(max) => ("max", "", max.map_or_else(String::new, |m| m.to_string())),
        Change::Rate(rate) => ("rate", "", Rate::arg(rate)),
        Change::LaneRate { lane, rate } => ("lane_rate", lane.unwrap_or_default(), Rate::arg(rate)),
        Change::Unhold => ("unhold", "", String::new()),
    };
    call(conn, k, what, lane, &value).await.map(drop)
}

/// Reads the queue's limits and those of `lane` (`None`: of no lane).
pub(crate) async fn get(conn: &mut Conn, k: &Keys, lane: Option<&str>) -> Result<Read> {
    let mut r = call(conn, k, "get", lane.unwrap_or_default(), "").await?;
    let _now = r.uint()?;
    Ok(Read {
        max_active: r.string()?.parse().ok().filter(|m| *m > 0),
        rate: Rate::stored(&r.string()?),
        held_until_ms: r.string()?.parse().ok(),
        lane_rate: Rate::stored(&r.string()?),
        lane_default_rate: Rate::stored(&r.string()?),
        reopens_ms: r.string()?.parse().ok(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Rate limits round-trip through their stored form; other text reads as none.
    #[test]
    fn rates_as_the_script_stores_them() {
        let r = Rate { jobs: 5, per_ms: 250 };
        assert_eq!(Rate::arg(Some(r)), "5:250");
        assert_eq!(Rate::stored("5:250"), Some(r));
        assert_eq!(Rate::arg(None), "");
        assert_eq!(Rate::stored(""), None);
        assert_eq!(Rate::stored("x:1"), None);
    }
}
