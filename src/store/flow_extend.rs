//! `lua/flow_extend.lua`: adds children to a waiting step of a flow.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use super::flow_add::{FlowNode, node_args};
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "flow_extend",
    include_str!("../../lua/flow_extend.lua"),
    &["seq", "pending", "delayed", "wake"],
    false,
    &["prefix", "id", "parent", "children", "nodes"],
);

/// Adds `nodes` to flow `id` of the queue of `k`, the ones named in
/// `children` (edges, as the script takes them) as children of the
/// waiting step `parent`; answers how many messages went onto the outbox.
///
/// # Errors
/// [`Error::FlowNotFound`]; [`Error::InvalidFlow`] when the flow has no
/// step `parent` or it no longer waits; [`Error::FlowExists`] when a new
/// step's name or job id is taken (nothing written for any of those); or a
/// server error.
pub(crate) async fn run(
    conn: &mut Conn,
    k: &Keys,
    id: &str,
    parent: &str,
    children: &str,
    nodes: &[FlowNode],
) -> Result<u64> {
    let mut call = SPEC.call();
    call.key(&k.seq).key(&k.pending).key(&k.delayed).key(&k.wake);
    call.arg(&k.base).arg(id).arg(parent).arg(children).arg(nodes.len());
    node_args(&mut call, nodes);
    let mut r = call.run(conn).await?;
    let _now = r.uint()?;
    let code = r.code()?;
    let which = r.string()?;
    let sent = r.uint()?;
    match code {
        Code::Ok => Ok(sent),
        Code::NotFound if which.is_empty() => Err(Error::FlowNotFound(id.to_owned())),
        Code::NotFound => Err(Error::InvalidFlow(format!("flow {id:?} has no step {which:?}"))),
        Code::Finished => Err(Error::InvalidFlow(format!(
            "step {which:?} of flow {id:?} no longer waits for children (its job was made, or it ended)"
        ))),
        Code::Exists => Err(Error::FlowExists(which)),
        other => Err(unexpected("flow_extend", other)),
    }
}
