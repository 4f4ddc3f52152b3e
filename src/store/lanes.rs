//! `lua/lanes.lua`: reads lanes (named ones, or a step of the ring) with the
//! queue-wide defaults.

use super::Spec;
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "lanes",
    include_str!("../../lua/lanes.lua"),
    &["ring", "held", "caps", "weights"],
    false,
    &["prefix", "cursor", "count"],
);

/// Which lanes to read.
pub(crate) enum Read<'a> {
    /// These (none: only the defaults).
    Named(&'a [&'a str]),
    /// One step of the ring of lanes with jobs, from `cursor` (`None`: the
    /// start), about `count` lanes.
    Ring { cursor: Option<&'a str>, count: usize },
}

/// Lanes as read in one step.
pub(crate) struct Lanes {
    /// Where a walk of the ring goes on from; `None` once it is done.
    pub next: Option<String>,
    /// The default cap and weight, if set.
    pub default_cap: Option<u32>,
    pub default_weight: Option<u32>,
    pub lanes: Vec<Lane>,
}

/// One lane, with its own settings (if any).
pub(crate) struct Lane {
    pub name: String,
    pub pending: u64,
    pub active: u64,
    pub cap: Option<u32>,
    pub weight: Option<u32>,
    pub state: State,
}

/// Where a lane stands in the ring.
pub(crate) enum State {
    Ready,
    Blocked,
    Idle,
    /// Not in the ring: no jobs.
    Empty,
}

/// A stored cap or weight: `None` for "" (unset) or a value that does not parse.
fn stored(s: &str) -> Option<u32> {
    s.parse().ok().filter(|v| *v > 0)
}

pub(crate) async fn run(conn: &mut Conn, k: &Keys, read: Read<'_>) -> Result<Lanes> {
    let mut call = SPEC.call();
    call.key(&k.lane_ring)
        .key(&k.lane_held)
        .key(&k.lane_caps)
        .key(&k.lane_weights);
    call.arg(&k.base);
    match read {
        Read::Named(names) => {
            call.arg("").arg(1);
            for n in names {
                call.arg(*n);
            }
        }
        Read::Ring { cursor, count } => {
            call.arg(cursor.unwrap_or("0")).arg(count);
        }
    }
    let mut r = call.run(conn).await?;
    let next = r.string()?;
    let mut lanes = Lanes {
        next: (next != "0").then_some(next),
        default_cap: stored(&r.string()?),
        default_weight: stored(&r.string()?),
        lanes: Vec::new(),
    };
    while r.remaining() > 0 {
        let name = r.string()?;
        let (pending, active) = (r.uint()?, r.uint()?);
        let (cap, weight) = (stored(&r.string()?), stored(&r.string()?));
        let state = match r.string()?.as_str() {
            "ready" => State::Ready,
            "blocked" => State::Blocked,
            "idle" => State::Idle,
            _ => State::Empty,
        };
        lanes.lanes.push(Lane {
            name,
            pending,
            active,
            cap,
            weight,
            state,
        });
    }
    Ok(lanes)
}
