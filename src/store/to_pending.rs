//! `lua/to_pending.lua`: moves failed jobs (a retry by hand) or delayed ones
//! (run now) back to pending. Its reply shape, shared with remove.lua, is
//! read here.

use super::Spec;
use super::call::{Reply, unexpected};
use super::codes::Code;
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "to_pending",
    include_str!("../../lua/to_pending.lua"),
    &["from", "pending", "wake"],
    false,
    &["prefix", "limit", "state"],
);

/// The state whose jobs go back to pending.
#[derive(Clone, Copy)]
pub(crate) enum Source {
    /// A retry by hand.
    Failed,
    /// Run now.
    Delayed,
}

/// What one step of moving (or removing) jobs did.
pub(crate) struct Step {
    /// How many jobs it moved (or removed).
    pub moved: u64,
    /// How many are left in the set it takes from.
    pub left: u64,
    /// One answer per id given, in order.
    pub ids: Vec<(String, Result<PerId>)>,
}

/// What happened to one job given by id.
pub(crate) enum PerId {
    Done,
    NotFound,
    /// Not in the state the call moves.
    WrongState,
    /// A failed job whose dedup id another job holds now.
    DedupHeld,
}

/// Moves `ids` of state `from` back to pending, or with none the first
/// `limit` jobs of it.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, from: Source, limit: usize, ids: &[&str]) -> Result<Step> {
    let (set, state) = match from {
        Source::Failed => (&k.failed, "failed"),
        Source::Delayed => (&k.delayed, "delayed"),
    };
    let mut call = SPEC.call();
    call.key(set).key(&k.pending).key(&k.wake);
    call.arg(&k.base).arg(limit).arg(state);
    for id in ids {
        call.arg(*id);
    }
    read_step("to_pending", &mut call.run(conn).await?)
}

/// Reads `{now, moved, left, id_1, code_1, ...}`; an active job is
/// [`Error::JobActive`] in its place.
pub(super) fn read_step(script: &'static str, r: &mut Reply) -> Result<Step> {
    let (_now, moved, left) = (r.uint()?, r.uint()?, r.uint()?);
    let mut ids = Vec::new();
    while r.remaining() > 0 {
        let id = r.string()?;
        let answer = match r.code()? {
            Code::Ok => Ok(PerId::Done),
            Code::NotFound => Ok(PerId::NotFound),
            Code::Refused => Ok(PerId::WrongState),
            Code::Deduped => Ok(PerId::DedupHeld),
            Code::Busy => Err(Error::JobActive(id.clone())),
            other => return Err(unexpected(script, other)),
        };
        ids.push((id, answer));
    }
    Ok(Step { moved, left, ids })
}
