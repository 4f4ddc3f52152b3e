//! `lua/flow_remove.lua`: removes a flow and its steps that have not started.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "flow_remove",
    include_str!("../../lua/flow_remove.lua"),
    &["pending", "delayed"],
    false,
    &["prefix", "id"],
);

/// Removes flow `id` of the queue of `k`: answers how many steps were
/// removed, how many running jobs were left to finish, and how many remove
/// messages went onto the outbox for steps of other queues.
///
/// # Errors
/// [`Error::FlowNotFound`], or a server error.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, id: &str) -> Result<(u64, u64, u64)> {
    let mut call = SPEC.call();
    call.key(&k.pending).key(&k.delayed);
    call.arg(&k.base).arg(id);
    let mut r = call.run(conn).await?;
    let _now = r.uint()?;
    let code = r.code()?;
    let (removed, running, sent) = (r.uint()?, r.uint()?, r.uint()?);
    match code {
        Code::Ok => Ok((removed, running, sent)),
        Code::NotFound => Err(Error::FlowNotFound(id.to_owned())),
        other => Err(unexpected("flow_remove", other)),
    }
}
