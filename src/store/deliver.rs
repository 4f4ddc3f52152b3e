//! `lua/deliver.lua`: applies messages from another queue's outbox.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use crate::conn::Conn;
use crate::durability::{Confirmed, Durability};
use crate::error::Result;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "deliver",
    include_str!("../../lua/deliver.lua"),
    &["pending", "delayed", "failed", "cancelled"],
    false,
    &["prefix", "keep_failed"],
);

/// What delivering messages did.
pub(crate) struct Delivered {
    /// How many of them, from the first, were applied.
    pub applied: usize,
    /// False when the queue did not know message `applied` (a newer
    /// process wrote it, or it names another queue): it and those after it
    /// changed nothing.
    pub known: bool,
    /// Messages now waiting on the target queue's own outbox.
    pub outbox: u64,
}

/// Delivers `messages` (as they sit on an outbox, oldest first) to the queue of `k`
/// (`keep_failed` as `Retention::arg` writes it), as durable as
/// `durability` asks.
///
/// # Errors
/// A server error.
pub(crate) async fn run(
    conn: &mut Conn,
    k: &Keys,
    keep_failed: &str,
    messages: &[&[u8]],
    durability: Durability,
) -> Result<(Delivered, Confirmed)> {
    let mut call = SPEC.call();
    call.key(&k.pending).key(&k.delayed).key(&k.failed).key(&k.cancelled);
    call.arg(&k.base).arg(keep_failed);
    for m in messages {
        call.arg(*m);
    }
    let (mut r, confirmed) = call.run_confirmed(conn, durability).await?;
    let _now = r.uint()?;
    let code = r.code()?;
    let applied = usize::try_from(r.uint()?).unwrap_or(usize::MAX).min(messages.len());
    let outbox = r.uint()?;
    let known = match code {
        Code::Ok => true,
        Code::Unknown => false,
        other => return Err(unexpected("deliver", other)),
    };
    Ok((Delivered { applied, known, outbox }, confirmed))
}
