//! `lua/cancel.lua`: cancels waiting jobs at once and asks running ones to
//! stop.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use crate::conn::Conn;
use crate::durability::{Confirmed, Durability};
use crate::error::{Error, Result};
use crate::job::JobState;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "cancel",
    include_str!("../../lua/cancel.lua"),
    &["pending", "delayed", "cancelled"],
    false,
    &["prefix", "keep_failed"],
);

/// What a cancel did to one job.
pub(crate) enum Cancelled {
    /// It was waiting: it is cancelled now.
    Now,
    /// It is running: the request is recorded for its holder.
    Requested,
    /// It had already finished in this state.
    Finished(JobState),
}

/// Cancels `ids`; `keep_failed` as `Retention::arg` writes it. One answer
/// per id, in order (a missing job is [`Error::JobNotFound`] in its place),
/// and whether the call is as durable as `durability` asks.
pub(crate) async fn run(
    conn: &mut Conn,
    k: &Keys,
    keep_failed: &str,
    ids: &[&str],
    durability: Durability,
) -> Result<(Vec<(String, Result<Cancelled>)>, Confirmed)> {
    let mut call = SPEC.call();
    call.key(&k.pending).key(&k.delayed).key(&k.cancelled);
    call.arg(&k.base).arg(keep_failed);
    for id in ids {
        call.arg(*id);
    }
    let (mut r, confirmed) = call.run_confirmed(conn, durability).await?;
    let _now = r.uint()?;
    let mut out = Vec::with_capacity(ids.len());
    while r.remaining() > 0 {
        let (id, code, state) = (r.string()?, r.code()?, r.string()?);
        let answer = match code {
            Code::Cancelled => Ok(Cancelled::Now),
            Code::Requested => Ok(Cancelled::Requested),
            Code::Finished => Ok(Cancelled::Finished(JobState::parse(&state).ok_or_else(|| {
                Error::Protocol {
                    script: "cancel",
                    detail: format!("unknown state {state:?}"),
                }
            })?)),
            Code::NotFound => Err(Error::JobNotFound(id.clone())),
            other => return Err(unexpected("cancel", other)),
        };
        out.push((id, answer));
    }
    Ok((out, confirmed))
}
