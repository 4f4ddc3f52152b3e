//! `lua/flow_cancel.lua`: cancels the nodes of a flow that have not ended.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "flow_cancel",
    include_str!("../../lua/flow_cancel.lua"),
    &["pending", "delayed", "cancelled"],
    false,
    &["prefix", "id", "keep_failed"],
);

/// Cancels flow `id` of the queue of `k` (`keep_failed` as
/// `Retention::arg` writes it): answers how many nodes ended cancelled, how
/// many running jobs were asked to stop, and how many cancel messages went
/// onto the outbox for nodes of other queues.
///
/// # Errors
/// [`Error::FlowNotFound`], or a server error.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, id: &str, keep_failed: &str) -> Result<(u64, u64, u64)> {
    let mut call = SPEC.call();
    call.key(&k.pending).key(&k.delayed).key(&k.cancelled);
    call.arg(&k.base).arg(id).arg(keep_failed);
    let mut r = call.run(conn).await?;
    let _now = r.uint()?;
    let code = r.code()?;
    let (cancelled, requested, sent) = (r.uint()?, r.uint()?, r.uint()?);
    match code {
        Code::Ok => Ok((cancelled, requested, sent)),
        Code::NotFound => Err(Error::FlowNotFound(id.to_owned())),
        other => Err(unexpected("flow_cancel", other)),
    }
}
