//! Lanes: caps and weights stored in the server, and what each lane holds.
//!
//! A job's lane is set at enqueue ([`EnqueueOptions::lane`](crate::EnqueueOptions::lane));
//! claims take the lanes with pending jobs in turn, each lane giving up to
//! its weight in jobs per turn and never more active jobs than its cap.
//! Caps and weights live in the server, so every process agrees: the
//! claim script reads them at each turn.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::queue::{MAX_BATCH, Queue};
use crate::store;
use crate::store::lane_config::Setting;
use crate::store::lanes::{Lanes, Read, State};

/// The largest weight a lane may have: the most jobs one turn gives.
pub const MAX_LANE_WEIGHT: u32 = 1_000;

/// Lanes one step of a default-cap change settles (a ZSCAN COUNT hint).
const LANE_STEP: usize = 1_000;

/// Where a lane stands in the turn of lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LaneState {
    /// It has pending jobs and a free slot: it waits for its turn.
    Ready,
    /// It has pending jobs but its active jobs are at its cap: it takes
    /// turns again once one of them settles.
    Blocked,
    /// It has active jobs and none pending.
    Idle,
    /// It has no jobs (only settings, if any).
    Empty,
}

/// One lane, as [`Queue::lane`] and [`Queue::lanes`] read it (in one
/// atomic step per lane).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LaneInfo {
    /// The lane's name.
    pub name: String,
    /// Its pending jobs.
    pub pending: u64,
    /// Its active (leased) jobs: the slots it holds.
    pub active: u64,
    /// Its cap: its own, else the queue's default ([`None`]: no cap).
    pub cap: Option<u32>,
    /// Its weight: its own, else the queue's default (1 unless set).
    pub weight: u32,
    /// Its own cap ([`Queue::set_lane_cap`]), if it has one.
    pub own_cap: Option<u32>,
    /// Its own weight ([`Queue::set_lane_weight`]), if it has one.
    pub own_weight: Option<u32>,
    /// Where it stands in the turn of lanes.
    pub state: LaneState,
}

/// The queue-wide defaults for lanes without their own settings
/// ([`Queue::lane_defaults`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LaneDefaults {
    /// The default cap ([`None`]: lanes without their own cap have none).
    pub cap: Option<u32>,
    /// The default weight (1 unless set). The jobs without a lane take
    /// their turn with this weight too.
    pub weight: u32,
}

/// Where a walk of the lanes ([`Queue::lanes`]) goes on from. Opaque; its
/// text form (`Display`, `FromStr`) travels in URLs and command lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneCursor(String);

impl fmt::Display for LaneCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for LaneCursor {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 20 {
            return Err(Error::InvalidId {
                what: "lane cursor",
                value: crate::error::excerpt(s),
                reason: "is not a cursor a lane listing returned",
            });
        }
        Ok(LaneCursor(s.to_owned()))
    }
}

/// One page of lanes ([`Queue::lanes`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LanePage {
    /// The lanes of this page, in no particular order.
    pub lanes: Vec<LaneInfo>,
    /// The queue-wide defaults, read with the page.
    pub defaults: LaneDefaults,
    /// Where the next page starts; `None` once the walk is done.
    pub next: Option<LaneCursor>,
}

/// A cap or weight checked: at least 1 and at most `max` (`None` removes it).
fn setting(name: &'static str, value: Option<u32>, max: u32) -> Result<Option<u32>> {
    match value {
        Some(0) => Err(Error::InvalidOption {
            name,
            reason: "must be at least 1 (None removes it)".into(),
        }),
        Some(v) if v > max => Err(Error::InvalidOption {
            name,
            reason: format!("{v} is over the largest, {max}"),
        }),
        v => Ok(v),
    }
}

/// A page of lanes as the store read it, with the defaults applied.
fn lanes_of(read: Lanes) -> (Option<String>, LaneDefaults, Vec<LaneInfo>) {
    let defaults = LaneDefaults {
        cap: read.default_cap,
        weight: read.default_weight.unwrap_or(1),
    };
    let lanes = read
        .lanes
        .into_iter()
        .map(|l| LaneInfo {
            name: l.name,
            pending: l.pending,
            active: l.active,
            cap: l.cap.or(defaults.cap),
            weight: l.weight.unwrap_or(defaults.weight),
            own_cap: l.cap,
            own_weight: l.weight,
            state: match l.state {
                State::Ready => LaneState::Ready,
                State::Blocked => LaneState::Blocked,
                State::Idle => LaneState::Idle,
                State::Empty => LaneState::Empty,
            },
        })
        .collect();
    (read.next, defaults, lanes)
}

impl Queue {
    /// Sets the cap of `lane`: at most `cap` of its jobs are active at
    /// once, across every consumer in every process (the claim script
    /// checks it in the step that leases). `None` removes the lane's own
    /// cap, so the queue's default applies
    /// ([`set_lane_default_cap`](Self::set_lane_default_cap)). A lower cap
    /// than the lane's active jobs leases none of its jobs until enough of
    /// them settle; running jobs are not stopped. Every settlement, release,
    /// snooze, cancel and reap of one of its jobs gives its slot back,
    /// exactly once.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// queue.set_lane_cap("customer-42", Some(2)).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad lane name, [`Error::InvalidOption`]
    /// for a cap of 0 (pass `None` to remove it); server errors.
    pub async fn set_lane_cap(&self, lane: &str, cap: Option<u32>) -> Result<()> {
        crate::validate::id("lane", lane)?;
        let value = setting("lane cap", cap, u32::MAX)?;
        self.lane_config(Setting::Cap, Some(lane), value).await
    }

    /// Sets the cap of every lane that has no cap of its own (`None`: no
    /// cap). Lanes are settled in bounded steps (a thousand per script
    /// call); meanwhile a claim that finds a lane over its new cap skips
    /// and blocks it.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a cap of 0; server errors (run it again
    /// to finish: the setting is written by the first step).
    pub async fn set_lane_default_cap(&self, cap: Option<u32>) -> Result<()> {
        let value = setting("lane default cap", cap, u32::MAX)?;
        self.lane_config(Setting::Cap, None, value).await
    }

    /// Sets the weight of `lane`: the most jobs it gives per turn (1 to
    /// [`MAX_LANE_WEIGHT`]), so while lanes are backlogged one of weight 3
    /// gets three times the claims of one of weight 1. `None` removes the
    /// lane's own weight, so the queue's default applies. Takes effect at
    /// the lane's next turn.
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad lane name, [`Error::InvalidOption`]
    /// for a weight of 0 or over [`MAX_LANE_WEIGHT`]; server errors.
    pub async fn set_lane_weight(&self, lane: &str, weight: Option<u32>) -> Result<()> {
        crate::validate::id("lane", lane)?;
        let value = setting("lane weight", weight, MAX_LANE_WEIGHT)?;
        self.lane_config(Setting::Weight, Some(lane), value).await
    }

    /// Sets the weight of every lane that has no weight of its own, and of
    /// the jobs without a lane, which take their turn as one more lane
    /// (`None`: 1).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a weight of 0 or over
    /// [`MAX_LANE_WEIGHT`]; server errors.
    pub async fn set_lane_default_weight(&self, weight: Option<u32>) -> Result<()> {
        let value = setting("lane default weight", weight, MAX_LANE_WEIGHT)?;
        self.lane_config(Setting::Weight, None, value).await
    }

    /// Sets `setting` of `lane` (`None`: the default of lanes), settling
    /// the lanes it changes a step at a time.
    async fn lane_config(&self, setting: Setting, lane: Option<&str>, value: Option<u32>) -> Result<()> {
        let (conn, k) = (&mut self.conn(), self.keys());
        let mut cursor = None;
        loop {
            cursor = store::lane_config::run(conn, k, setting, lane, value, cursor.as_deref(), LANE_STEP).await?;
            if cursor.is_none() {
                return Ok(());
            }
        }
    }

    async fn read_lanes(&self, read: Read<'_>) -> Result<(Option<String>, LaneDefaults, Vec<LaneInfo>)> {
        Ok(lanes_of(store::lanes::run(&mut self.conn(), self.keys(), read).await?))
    }

    /// Reads one lane: its pending and active jobs, its cap and weight,
    /// and where it stands in the turn of lanes. A lane nobody used reads
    /// as empty (with the defaults).
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// let lane = queue.lane("customer-42").await?;
    /// println!("{} pending, {} of {:?} slots taken", lane.pending, lane.active, lane.cap);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad lane name; server errors.
    pub async fn lane(&self, lane: &str) -> Result<LaneInfo> {
        crate::validate::id("lane", lane)?;
        let (_, _, mut lanes) = self.read_lanes(Read::Named(&[lane])).await?;
        lanes.pop().ok_or_else(|| Error::Protocol {
            script: "lanes",
            detail: "no answer for the lane".into(),
        })
    }

    /// The queue-wide defaults for lanes without their own cap or weight.
    ///
    /// # Errors
    /// Server errors.
    pub async fn lane_defaults(&self) -> Result<LaneDefaults> {
        Ok(self.read_lanes(Read::Named(&[])).await?.1)
    }

    /// One page of the lanes that have pending or active jobs, about
    /// `limit` (1 to [`MAX_BATCH`]) at a time, after `after` (or from the
    /// start). A walk to the end shows every lane that had jobs
    /// throughout; one whose jobs came or went meanwhile may show twice or
    /// not at all (the server's ZSCAN guarantee). A page may hold more or
    /// fewer lanes than `limit`, or none before the walk ends.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// let mut after = None;
    /// loop {
    ///     let page = queue.lanes(after.as_ref(), 100).await?;
    ///     for lane in &page.lanes {
    ///         println!("{}: {} pending, {} active", lane.name, lane.pending, lane.active);
    ///     }
    ///     match page.next { Some(c) => after = Some(c), None => break }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for `limit` out of range; server errors.
    pub async fn lanes(&self, after: Option<&LaneCursor>, limit: usize) -> Result<LanePage> {
        crate::validate::count("lane list limit", limit, 1, MAX_BATCH)?;
        let read = Read::Ring {
            cursor: after.map(|c| c.0.as_str()),
            count: limit,
        };
        let (next, defaults, lanes) = self.read_lanes(read).await?;
        Ok(LanePage {
            lanes,
            defaults,
            next: next.map(LaneCursor),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Caps and weights of 0, or weights over the largest, are refused; None clears.
    #[test]
    fn settings_are_checked() {
        assert!(matches!(
            setting("lane cap", Some(0), u32::MAX),
            Err(Error::InvalidOption { .. })
        ));
        assert!(matches!(
            setting("lane weight", Some(MAX_LANE_WEIGHT + 1), MAX_LANE_WEIGHT),
            Err(Error::InvalidOption { .. })
        ));
        assert_eq!(setting("lane cap", None, u32::MAX).unwrap(), None);
        assert_eq!(setting("lane cap", Some(7), u32::MAX).unwrap(), Some(7));
    }

    // A lane cursor's text form round-trips; other text is refused.
    #[test]
    fn lane_cursor_text() {
        let c: LaneCursor = "1234".parse().unwrap();
        assert_eq!(c.to_string(), "1234");
        assert!("x1".parse::<LaneCursor>().is_err());
        assert!("".parse::<LaneCursor>().is_err());
    }
}
