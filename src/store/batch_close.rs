//! `lua/batch_close.lua`: closes a batch, enqueueing its callbacks when
//! every member has ended.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use crate::conn::Conn;
use crate::durability::{Durability, confirm};
use crate::error::{Error, Result};
use crate::keys::Keys;

pub(super) static SPEC: Spec =
    Spec::new("batch_close", include_str!("../../lua/batch_close.lua"), &["batch"], false, &["prefix", "id"]);

/// Closes batch `id` of the queue of `k`, confirmed as `durability` asks
/// (a lost close would leave the batch open: its callbacks never fire).
///
/// # Errors
/// [`Error::BatchNotFound`], [`Error::BatchClosed`] (nothing changed),
/// [`Error::NotDurable`] (closed on the primary, confirmed by fewer), or a
/// server error.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, id: &str, durability: Durability) -> Result<()> {
    let mut call = SPEC.call();
    call.key(k.batch(id)).arg(&k.base).arg(id);
    let (mut r, confirmed) = call.run_confirmed(conn, durability).await?;
    let _now = r.uint()?;
    match r.code()? {
        Code::Ok => confirm(confirmed, id),
        // (the close found may not be on the replicas yet: a shortfall says so first)
        Code::Closed => confirm(confirmed, id).and(Err(Error::BatchClosed(id.to_owned()))),
        Code::NotFound => Err(Error::BatchNotFound(id.to_owned())),
        other => Err(unexpected("batch_close", other)),
    }
}
