//! `lua/batch_close.lua`: closes a batch, enqueueing its callbacks when
//! every member has ended.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::Keys;

pub(super) static SPEC: Spec =
    Spec::new("batch_close", include_str!("../../lua/batch_close.lua"), &["batch"], false, &["prefix", "id"]);

/// Closes batch `id` of the queue of `k`.
///
/// # Errors
/// [`Error::BatchNotFound`], [`Error::BatchClosed`] (nothing changed), or a
/// server error.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, id: &str) -> Result<()> {
    let mut call = SPEC.call();
    call.key(k.batch(id)).arg(&k.base).arg(id);
    let mut r = call.run(conn).await?;
    let _now = r.uint()?;
    match r.code()? {
        Code::Ok => Ok(()),
        Code::Closed => Err(Error::BatchClosed(id.to_owned())),
        Code::NotFound => Err(Error::BatchNotFound(id.to_owned())),
        other => Err(unexpected("batch_close", other)),
    }
}
