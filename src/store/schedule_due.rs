//! `lua/schedule_due.lua`: reads the schedules whose look time has come.

use super::Spec;
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "schedule_due",
    include_str!("../../lua/schedule_due.lua"),
    &["schedules"],
    false,
    &["prefix", "limit"],
);

/// The look time of a schedule no tick follows (as schedule_fire.lua writes it).
pub(super) const NEVER: u64 = 9_007_199_254_740_991;

/// The schedules due, as read in one step.
pub(crate) struct Due {
    pub server_ms: u64,
    /// The earliest look time of the schedules not due (server ms), if any.
    pub next_look_ms: Option<u64>,
    /// Earliest first.
    pub schedules: Vec<DueSchedule>,
}

/// A schedule whose look time has come.
pub(crate) struct DueSchedule {
    pub name: String,
    pub cron: String,
    pub zone: String,
    /// The last tick done (server ms).
    pub last: u64,
    pub grace_ms: u64,
}

/// Reads up to `limit` due schedules.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, limit: usize) -> Result<Due> {
    let mut call = SPEC.call();
    call.key(&k.schedules).arg(&k.base).arg(limit);
    let mut r = call.run(conn).await?;
    let server_ms = r.uint()?;
    let later = r.int()?;
    let mut schedules = Vec::new();
    while r.remaining() > 0 {
        schedules.push(DueSchedule {
            name: r.string()?,
            cron: r.string()?,
            zone: r.string()?,
            last: r.uint()?,
            grace_ms: r.uint()?,
        });
    }
    Ok(Due {
        server_ms,
        next_look_ms: u64::try_from(later).ok().filter(|&t| t < NEVER),
        schedules,
    })
}
