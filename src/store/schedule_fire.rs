//! `lua/schedule_fire.lua`: takes a schedule's ticks and makes their jobs,
//! at most one per tick.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use super::schedule_due::NEVER;
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "schedule_fire",
    include_str!("../../lua/schedule_fire.lua"),
    &["schedules", "schedule", "seq", "pending", "wake"],
    false,
    &["prefix", "name", "cron", "tz", "next"],
);

/// The ticks offered for one schedule, planned from the timing it was read
/// with.
pub(crate) struct Offer<'a> {
    pub name: &'a str,
    pub cron: &'a str,
    pub zone: &'a str,
    /// Ascending (server ms).
    pub ticks: &'a [u64],
    /// The tick after the last one offered, if one follows.
    pub next: Option<u64>,
}

/// What an offer did.
pub(crate) enum Fire {
    Fired(Fired),
    /// The schedule's timing changed since it was read: nothing written.
    Stale,
    /// No such schedule.
    Gone,
}

/// The ticks taken.
pub(crate) struct Fired {
    pub server_ms: u64,
    /// The schedule's look time now, if a tick follows.
    pub look_ms: Option<u64>,
    /// The latest missed tick taken, if any.
    pub missed_ms: Option<u64>,
    /// The job of each tick taken, in tick order.
    pub jobs: Vec<TickJob>,
}

pub(crate) struct TickJob {
    pub tick_ms: u64,
    pub id: String,
    /// Made now; false when a job with its id was already there.
    pub created: bool,
}

pub(crate) async fn run(conn: &mut Conn, k: &Keys, offer: &Offer<'_>) -> Result<Fire> {
    let mut call = SPEC.call();
    call.key(&k.schedules)
        .key(k.schedule(offer.name))
        .key(&k.seq)
        .key(&k.pending)
        .key(&k.wake);
    call.arg(&k.base)
        .arg(offer.name)
        .arg(offer.cron)
        .arg(offer.zone)
        .arg(offer.next.map_or(-1, |t| t as i64));
    for t in offer.ticks {
        call.arg(*t);
    }
    let mut r = call.run(conn).await?;
    let code = r.code()?;
    let server_ms = r.uint()?;
    let _last = r.uint()?;
    let look = r.uint()?;
    let missed = r.uint()?;
    match code {
        Code::Ok => {}
        Code::Stale => return Ok(Fire::Stale),
        Code::NotFound => return Ok(Fire::Gone),
        other => return Err(unexpected("schedule_fire", other)),
    }
    let mut jobs = Vec::new();
    while r.remaining() > 0 {
        let tick_ms = r.uint()?;
        let created = r.code()? == Code::Ok;
        jobs.push(TickJob {
            tick_ms,
            id: r.string()?,
            created,
        });
    }
    Ok(Fire::Fired(Fired {
        server_ms,
        look_ms: Some(look).filter(|&l| l < NEVER),
        missed_ms: Some(missed).filter(|&m| m > 0),
        jobs,
    }))
}
