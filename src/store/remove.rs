//! `lua/remove.lua`: deletes jobs that are not active, or drains pending and
//! delayed jobs.

use super::Spec;
use super::to_pending::{Step, read_step};
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "remove",
    include_str!("../../lua/remove.lua"),
    &["pending", "delayed", "completed", "failed", "cancelled", "expired"],
    false,
    &["prefix", "limit"],
);

/// Removes `ids`, or with none drains up to `limit` pending and delayed
/// jobs.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, limit: usize, ids: &[&str]) -> Result<Step> {
    let mut call = SPEC.call();
    call.key(&k.pending)
        .key(&k.delayed)
        .key(&k.completed)
        .key(&k.failed)
        .key(&k.cancelled)
        .key(&k.expired);
    call.arg(&k.base).arg(limit);
    for id in ids {
        call.arg(*id);
    }
    read_step("remove", &mut call.run(conn).await?)
}
