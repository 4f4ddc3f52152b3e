//! `lua/schedule_upsert.lua`: creates or updates a cron schedule.

use super::Spec;
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::Keys;
use crate::limits::Limits;

pub(super) static SPEC: Spec = Spec::new(
    "schedule_upsert",
    include_str!("../../lua/schedule_upsert.lua"),
    &["schedules", "schedule"],
    false,
    &[
        "name", "cron", "tz", "payload", "priority", "limits", "missed", "grace", "kind",
    ],
);

/// A schedule to store, checked by the caller (its expression parsed, its
/// zone looked up).
pub(crate) struct Upsert<'a> {
    pub name: &'a str,
    pub cron: &'a str,
    pub zone: &'a str,
    /// The JSON each job carries.
    pub payload: &'a [u8],
    pub priority: i8,
    pub limits: &'a Limits,
    /// The missed-tick policy as stored (`Missed::as_str`).
    pub missed: &'a str,
    pub grace_ms: u64,
    pub kind: Option<&'a str>,
}

/// What an upsert did.
pub(crate) enum Upserted {
    Created,
    Updated,
    /// Every field was already as given: nothing written.
    Unchanged,
}

pub(crate) async fn run(conn: &mut Conn, k: &Keys, s: &Upsert<'_>) -> Result<Upserted> {
    let mut call = SPEC.call();
    call.key(&k.schedules).key(k.schedule(s.name));
    call.arg(s.name)
        .arg(s.cron)
        .arg(s.zone)
        .arg(s.payload)
        .arg(s.priority)
        .arg(s.limits.encode())
        .arg(s.missed)
        .arg(s.grace_ms)
        .arg(s.kind.unwrap_or_default());
    let mut r = call.run(conn).await?;
    let _now = r.uint()?;
    match r.string()?.as_str() {
        "created" => Ok(Upserted::Created),
        "updated" => Ok(Upserted::Updated),
        "unchanged" => Ok(Upserted::Unchanged),
        other => Err(Error::Protocol {
            script: "schedule_upsert",
            detail: format!("unknown status {other:?}"),
        }),
    }
}
