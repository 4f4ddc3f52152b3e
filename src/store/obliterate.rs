//! `lua/obliterate.lua`: one bounded step of deleting every key of a queue.

use super::Spec;
use super::codes::Code;
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "obliterate",
    include_str!("../../lua/obliterate.lua"),
    &["active", "meta"],
    true,
    &["prefix", "cursor", "count", "force"],
);

/// What one obliterate step did.
pub(crate) enum Obliterated {
    /// It deleted `deleted` keys; go on from `next` ("0" once done).
    Step { next: String, deleted: u64 },
    /// Jobs are leased to workers and the step was not forced: nothing
    /// deleted.
    Busy { active: u64 },
}

/// One step from `cursor` ("0" to start) fencing `count` records or
/// scanning about `count` keys; `force` deletes leased jobs too.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, cursor: &str, count: usize, force: bool) -> Result<Obliterated> {
    let mut call = SPEC.call();
    call.key(&k.active).key(&k.meta);
    for key in k.own() {
        if key != &k.active && key != &k.meta {
            call.key(key);
        }
    }
    call.arg(&k.base)
        .arg(cursor)
        .arg(count)
        .arg(if force { "1" } else { "0" });
    let mut r = call.run(conn).await?;
    let code = r.code()?;
    let next = r.string()?;
    let (deleted, active) = (r.uint()?, r.uint()?);
    Ok(if code == Code::Busy {
        Obliterated::Busy { active }
    } else {
        Obliterated::Step { next, deleted }
    })
}
