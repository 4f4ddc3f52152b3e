//! `lua/flow_add.lua`: adds a flow in one atomic call.

use super::Spec;
use super::call::Call;
use super::call::unexpected;
use super::codes::Code;
use super::enqueue::NewJob;
use crate::conn::Conn;
use crate::durability::{Confirmed, Durability};
use crate::error::{Error, Result};
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "flow_add",
    include_str!("../../lua/flow_add.lua"),
    &["seq", "pending", "delayed", "wake", "meta"],
    false,
    &["prefix", "id", "keep", "nodes"],
);

/// One node of a flow, checked by the caller: its name, its job, and its
/// edges as the script takes them ("NAME\x1fPOLICY" joined by "\x1e").
pub(crate) struct FlowNode {
    pub name: String,
    pub job: NewJob,
    pub children: String,
    pub parents: String,
    /// The name of the node's queue when it is not the flow's.
    pub queue: Option<String>,
}

/// Appends `nodes` to `call`, 10 arguments each, as `lua/flow_add.lua`
/// takes them.
pub(super) fn node_args(call: &mut Call, nodes: &[FlowNode]) {
    for n in nodes {
        let j = &n.job;
        call.arg(&n.name)
            .arg(&j.payload)
            .arg(j.priority)
            .arg(j.limits.encode())
            .arg(j.lane.as_deref().unwrap_or_default())
            .arg(j.kind.as_deref().unwrap_or_default())
            .arg(j.traceparent.as_deref().unwrap_or_default())
            .arg(&n.children)
            .arg(&n.parents)
            .arg(n.queue.as_deref().unwrap_or_default());
    }
}

/// Adds flow `id` (`None` mints one) of `nodes` to the queue of `k`, its
/// hash kept `keep_ms` after every node ended; answers its id, how many
/// messages it pushed onto the queue's outbox (for nodes of other
/// queues), and whether the call is as durable as `durability` asks.
///
/// # Errors
/// [`Error::FlowExists`] when the flow's id or a node's job id is taken
/// (nothing written), or a server error.
pub(crate) async fn run(
    conn: &mut Conn,
    k: &Keys,
    id: Option<&str>,
    keep_ms: u64,
    nodes: &[FlowNode],
    durability: Durability,
) -> Result<(String, u64, Confirmed)> {
    let mut call = SPEC.call();
    call.key(&k.seq).key(&k.pending).key(&k.delayed).key(&k.wake).key(&k.meta);
    call.arg(&k.base).arg(id.unwrap_or_default()).arg(keep_ms).arg(nodes.len());
    node_args(&mut call, nodes);
    let (mut r, confirmed) = call.run_confirmed(conn, durability).await?;
    let _now = r.uint()?;
    let code = r.code()?;
    let id = r.string()?;
    let sent = r.uint()?;
    match code {
        Code::Ok => Ok((id, sent, confirmed)),
        // (the flow found may not be on the replicas yet: a shortfall says so first)
        Code::Exists => crate::durability::confirm(confirmed, &id).and(Err(Error::FlowExists(id))),
        other => Err(unexpected("flow_add", other)),
    }
}
