//! `lua/schedule_pause.lua`: pauses or resumes a cron schedule.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "schedule_pause",
    include_str!("../../lua/schedule_pause.lua"),
    &["schedules", "schedule"],
    false,
    &["name", "paused"],
);

/// Pauses (or resumes) schedule `name`: `None` when there is no such
/// schedule, else whether it changed.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, name: &str, paused: bool) -> Result<Option<bool>> {
    let mut call = SPEC.call();
    call.key(&k.schedules)
        .key(k.schedule(name))
        .arg(name)
        .arg(if paused { "1" } else { "0" });
    let mut r = call.run(conn).await?;
    match r.code()? {
        Code::Ok => {
            let _now = r.uint()?;
            Ok(Some(r.uint()? == 1))
        }
        Code::NotFound => Ok(None),
        other => Err(unexpected("schedule_pause", other)),
    }
}
