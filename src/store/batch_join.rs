//! `lua/batch_join.lua`: joins jobs of another queue to a batch.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use super::enqueue::NewJob;
use crate::conn::Conn;
use crate::durability::{Confirmed, Durability};
use crate::error::{Error, Result};
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "batch_join",
    include_str!("../../lua/batch_join.lua"),
    &["batch", "seq"],
    false,
    &["prefix", "id", "queue", "jobs"],
);

/// What a join answered: the batch's creation time, and each member's id
/// and number, in order; a member's record on its queue holds
/// `HOME\x1fCT\x1fNUMBER` in `bh`.
pub(crate) struct Joined {
    pub ct: u64,
    pub members: Vec<(String, u64)>,
}

/// Counts `jobs` (checked by the caller: no dedup, expiry or sequence)
/// into open batch `id` of the queue of `k` as members on queue `queue`,
/// and leaves the messages that make them there; answers what it joined
/// and whether the call is as durable as `durability` asks.
///
/// # Errors
/// [`Error::BatchNotFound`] or [`Error::BatchClosed`] (nothing written),
/// or a server error.
pub(crate) async fn run(
    conn: &mut Conn,
    k: &Keys,
    id: &str,
    queue: &str,
    jobs: &[NewJob],
    durability: Durability,
) -> Result<(Joined, Confirmed)> {
    let mut call = SPEC.call();
    call.key(k.batch(id)).key(&k.seq);
    call.arg(&k.base).arg(id).arg(queue).arg(jobs.len());
    for j in jobs {
        call.arg(j.id.as_deref().unwrap_or_default())
            .arg(&j.payload)
            .arg(j.priority)
            .arg(&j.when)
            .arg(j.limits.encode())
            .arg(j.lane.as_deref().unwrap_or_default())
            .arg(j.kind.as_deref().unwrap_or_default())
            .arg(j.traceparent.as_deref().unwrap_or_default());
    }
    let (mut r, confirmed) = call.run_confirmed(conn, durability).await?;
    let _now = r.uint()?;
    match r.code()? {
        Code::Ok => {}
        // (the close found may not be on the replicas yet: a shortfall says so first)
        Code::Closed => return crate::durability::confirm(confirmed, id).and(Err(Error::BatchClosed(id.to_owned()))),
        Code::NotFound => return Err(Error::BatchNotFound(id.to_owned())),
        other => return Err(unexpected("batch_join", other)),
    }
    let ct = r.uint()?;
    let mut members = Vec::with_capacity(jobs.len());
    while r.remaining() > 0 {
        members.push((r.string()?, r.uint()?));
    }
    Ok((Joined { ct, members }, confirmed))
}
