//! Adding a flow: [`Queue::add_flow`], and the nodes the scripts take.

use std::time::Duration;

use super::graph::{check_graph, check_options};
use super::{Flow, FlowSpec, MAX_KEEP, Step, check_id};
use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::store;
use crate::store::flow_add::FlowNode;
use crate::validate;

impl Queue {
    /// Adds the flow `spec` describes, in one atomic call: the steps that
    /// run after none become pending jobs now, the others when their
    /// children have ended.
    ///
    /// The flow's record is on this queue (its home). A step on another
    /// queue ([`Step::on`]) lives in another hash slot, which no script of
    /// this queue may touch: the call that makes it due (this one for a
    /// step that waits for none, else the one that ends its last child)
    /// leaves a message for its queue, and the call that ends its job one
    /// for the home, each in the same atomic call as the change it tells
    /// of. The relay carries them: this call at once, a worker's
    /// settlement that ends a step within
    /// [`RELAY_HOT_INTERVAL`](crate::maintenance::RELAY_HOT_INTERVAL), and
    /// the maintenance of any process with a worker on the queue that
    /// holds a message within its reap interval. Each message is delivered at
    /// least once and applied once (see the guide's flows chapter for the
    /// rule and its window). So a step on another queue is enqueued once,
    /// after all its children ended, as on one queue, but a little later:
    /// give the flow's queue, or the queue of each step's children, a
    /// worker (any process that maintains it) so its messages move.
    ///
    /// # Errors
    /// [`Error::InvalidFlow`] for a graph that cannot run (a cycle, an
    /// edge to a name not in the flow, two steps of one name, no steps,
    /// more than [`MAX_STEPS`](super::MAX_STEPS), an option a step cannot take, a step on a
    /// queue of another prefix or client),
    /// [`Error::InvalidId`] for a bad flow id, step name or kind,
    /// [`Error::InvalidOption`] for a keep time past [`MAX_KEEP`],
    /// [`Error::PayloadTooLarge`]; nothing is sent for any of those.
    /// [`Error::FlowExists`] when the flow's id or one of its job ids is
    /// taken (nothing written), [`Error::NotDurable`] when the flow added,
    /// or the one found under its id, is confirmed by fewer replicas than
    /// the queue's [`Durability`](crate::Durability) asks, or a server
    /// error; on a transient one
    /// ([`Error::is_transient`]) the flow may or may not have been added,
    /// and adding it again with its own id is safe.
    pub async fn add_flow(&self, spec: &FlowSpec) -> Result<Flow> {
        if let Some(id) = &spec.id {
            check_id(id)?;
        }
        let keep = validate::duration("FlowSpec::keep", spec.keep, Duration::ZERO, MAX_KEEP)?;
        // A minted id is a number (at most 20 digits), and for a flow with
        // steps on other queues "N@QUEUE" (':' and '%' escaped as %3A and
        // %25: a flow id holds no ':'), so that flows of two queues that
        // mint the same number do not take each other's job ids there.
        let spans = spec
            .steps
            .iter()
            .any(|s| s.queue.as_ref().is_some_and(|q| q.name() != self.name()));
        let minted_len = 20 + if spans { 1 + escaped_len(self.name()) } else { 0 };
        let edges = check_graph(spec.id.as_ref().map_or(minted_len, String::len), &spec.steps)?;
        for step in &spec.steps {
            check_options(step)?;
        }
        let nodes = self.flow_nodes(&spec.steps, edges)?;
        let keep_ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX);
        let durability = self.options().durability;
        let (id, sent, confirmed) = store::flow_add::run(
            &mut self.conn(),
            self.keys(),
            spec.id.as_deref(),
            keep_ms,
            &nodes,
            durability,
        )
        .await?;
        if sent > 0 {
            // The steps on other queues that run first: made there now
            // (or, when that fails, by a later relay of this queue).
            crate::relay::relay_or_log(self).await;
        }
        crate::durability::confirm(confirmed, &id)?;
        Ok(Flow {
            queue: self.clone(),
            id,
        })
    }

    /// The nodes the scripts take for `steps` with their `edges`
    /// ([`check_graph`]'s): each step's job prepared by its own queue.
    pub(super) fn flow_nodes(&self, steps: &[Step], edges: Vec<(String, String)>) -> Result<Vec<FlowNode>> {
        let mut nodes = Vec::with_capacity(steps.len());
        for (step, (children, parents)) in steps.iter().zip(edges) {
            let there = self.step_queue(step)?;
            let on = there.unwrap_or(self);
            let mut job = on
                .prepare(std::iter::once((&step.payload, &step.options)), None)?
                .pop()
                .ok_or_else(|| Error::InvalidFlow("a step's job could not be prepared".into()))?;
            if let Some(kind) = &step.kind {
                validate::kind(kind)?;
                job.kind = Some(kind.clone());
            }
            nodes.push(FlowNode {
                name: step.name.clone(),
                job,
                children,
                parents,
                queue: there.map(|q| q.name().to_owned()),
            });
        }
        Ok(nodes)
    }

    /// The queue of `step` when it is not this one; refuses a queue of
    /// another client or prefix.
    fn step_queue<'a>(&self, step: &'a Step) -> Result<Option<&'a Queue>> {
        let Some(q) = &step.queue else { return Ok(None) };
        if let Some(problem) = self.peer_problem(q) {
            return Err(Error::InvalidFlow(format!(
                "step {:?}: {problem}; a flow's queues share its client and prefix",
                step.name
            )));
        }
        Ok((q.name() != self.name()).then_some(q))
    }

    /// A handle on flow `id` of this queue (added here or by another
    /// process); no server call until it is used.
    ///
    /// # Errors
    /// [`Error::InvalidId`] for an id no flow can have.
    pub fn flow(&self, id: &str) -> Result<Flow> {
        check_id(id)?;
        Ok(Flow {
            queue: self.clone(),
            id: id.to_owned(),
        })
    }
}

/// The length of queue name `name` as a minted flow id holds it, with
/// `:` and `%` escaped (`lua/flow_add.lua`).
fn escaped_len(name: &str) -> usize {
    name.len() + 2 * name.bytes().filter(|b| matches!(b, b':' | b'%')).count()
}
