//! `lua/flow_read.lua`: a flow's node states, or one node's children's ends.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::Keys;

pub(super) static SPEC: Spec =
    Spec::new("flow_read", include_str!("../../lua/flow_read.lua"), &["flow"], false, &["prefix", "id", "node"]);

/// One group of the reply: a node's (or child's) name, its state ("" for
/// none) and its detail (a result or an error).
pub(crate) struct Row {
    pub name: String,
    pub state: String,
    pub detail: Vec<u8>,
}

/// Reads flow `id` of the queue of `k`: with `node` `None` every node's
/// state, else the ends of that node's children.
///
/// # Errors
/// [`Error::FlowNotFound`] when there is no such flow or node, or a server error.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, id: &str, node: Option<&str>) -> Result<Vec<Row>> {
    let mut call = SPEC.call();
    call.key(k.flow(id)).arg(&k.base).arg(id).arg(node.unwrap_or_default());
    let mut r = call.run(conn).await?;
    let _now = r.uint()?;
    match r.code()? {
        Code::Ok => {}
        Code::NotFound => return Err(Error::FlowNotFound(id.to_owned())),
        other => return Err(unexpected("flow_read", other)),
    }
    let mut out = Vec::with_capacity(r.remaining() / 3);
    while r.remaining() > 0 {
        out.push(Row {
            name: r.string()?,
            state: r.string()?,
            detail: r.bytes()?,
        });
    }
    Ok(out)
}
