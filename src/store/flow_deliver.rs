//! `lua/flow_deliver.lua`: applies a message from another queue's outbox.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use crate::conn::Conn;
use crate::durability::{Confirmed, Durability};
use crate::error::Result;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "flow_deliver",
    include_str!("../../lua/flow_deliver.lua"),
    &["pending", "delayed", "failed", "cancelled"],
    false,
    &["prefix", "keep_failed", "message"],
);

/// What delivering a message did.
pub(crate) struct Delivered {
    /// False when the queue did not know the message (a newer process
    /// wrote it, or it names another queue): nothing changed.
    pub known: bool,
    /// Messages now waiting on the target queue's own outbox.
    pub outbox: u64,
}

/// Delivers `message` (as it sits on an outbox) to the queue of `k`
/// (`keep_failed` as `Retention::arg` writes it), as durable as
/// `durability` asks.
///
/// # Errors
/// A server error.
pub(crate) async fn run(
    conn: &mut Conn,
    k: &Keys,
    keep_failed: &str,
    message: &[u8],
    durability: Durability,
) -> Result<(Delivered, Confirmed)> {
    let mut call = SPEC.call();
    call.key(&k.pending).key(&k.delayed).key(&k.failed).key(&k.cancelled);
    call.arg(&k.base).arg(keep_failed).arg(message);
    let (mut r, confirmed) = call.run_confirmed(conn, durability).await?;
    let _now = r.uint()?;
    let code = r.code()?;
    let outbox = r.uint()?;
    match code {
        Code::Ok => Ok((Delivered { known: true, outbox }, confirmed)),
        Code::Unknown => Ok((Delivered { known: false, outbox }, confirmed)),
        other => Err(unexpected("flow_deliver", other)),
    }
}
