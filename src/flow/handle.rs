//! A flow once added: [`Flow`]'s reads, cancel, remove and added children.

use serde::de::DeserializeOwned;

use super::graph::{check_graph, check_options};
use super::{
    ChildOutcome, ChildResult, Flow, FlowCancelled, FlowRemoved, FlowStatus, OnChildFailure, Step, StepState,
    StepStatus,
};
use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::store;
use crate::validate;

impl Flow {
    /// The flow's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The queue it belongs to.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// The job id of step `name`: `FLOW_ID:NAME`.
    pub fn job_id(&self, name: &str) -> String {
        format!("{}:{name}", self.id)
    }

    /// Every step's state now. A step on another queue that has not
    /// ended is read there (pending while the message that makes it is on
    /// its way).
    ///
    /// # Errors
    /// [`Error::FlowNotFound`] when no such flow exists (never added, or
    /// its record expired after its end), or a server error.
    pub async fn status(&self) -> Result<FlowStatus> {
        let rows = store::flow_read::run(&mut self.queue.conn(), self.queue.keys(), &self.id, None).await?;
        let mut steps = Vec::with_capacity(rows.len());
        for r in rows {
            let (state, queue) = match r.state.split_once('@') {
                Some((st, q)) => (st.to_owned(), q.to_owned()),
                None => (r.state, self.queue.name().to_owned()),
            };
            let job_id = self.job_id(&r.name);
            let state = if state.is_empty() && queue != self.queue.name() {
                self.remote_state(&queue, &job_id).await?
            } else {
                StepState::parse(&state)
            };
            steps.push(StepStatus {
                job_id,
                queue,
                state,
                after: String::from_utf8_lossy(&r.detail)
                    .split('\x1f')
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect(),
                name: r.name,
            });
        }
        Ok(FlowStatus {
            id: self.id.clone(),
            steps,
        })
    }

    /// The state of job `job_id` on queue `queue` (of this flow's prefix),
    /// pending when it is not there yet.
    async fn remote_state(&self, queue: &str, job_id: &str) -> Result<StepState> {
        let keys = crate::keys::Keys::new(&self.queue.options().prefix, queue)?;
        let mut conn = self.queue.link().conn().homed(&keys.base);
        let st: Option<String> = redis::cmd("HGET")
            .arg(keys.job(job_id))
            .arg("st")
            .query_async(&mut conn)
            .await
            .map_err(Error::from_redis)?;
        Ok(st.map_or(StepState::Pending, |s| StepState::parse(&s)))
    }

    /// The children of step `name` and how each ended, in the order the
    /// step named them; a child on a [`OnChildFailure::DropEdge`] edge
    /// that did not complete is left out. A child's result decodes into `R`.
    ///
    /// # Errors
    /// [`Error::FlowNotFound`] when there is no such flow or step,
    /// [`Error::Decode`] when a result does not decode into `R`, or a
    /// server error.
    pub async fn child_results<R: DeserializeOwned>(&self, name: &str) -> Result<Vec<ChildResult<R>>> {
        let q = &self.queue;
        child_results_at(q, &q.options().prefix, q.name(), &self.id, name).await
    }

    /// Adds `steps` to the flow as children of step `parent`, which must
    /// still wait for its own children: it then waits for these too (the
    /// ones no other of `steps` runs after; the others run after those
    /// they name, as in [`FlowSpec`](super::FlowSpec)). A child that does not complete
    /// fails `parent` ([`OnChildFailure::FailParent`]); see
    /// [`add_children_with`](Self::add_children_with). One atomic call, as
    /// [`Queue::add_flow`]; at most [`MAX_STEPS`](super::MAX_STEPS) steps a call.
    ///
    /// # Errors
    /// As [`Queue::add_flow`] for the new steps (an edge to a step not
    /// among them is [`Error::InvalidFlow`]); [`Error::FlowNotFound`];
    /// [`Error::InvalidFlow`] when the flow has no step `parent`, or it no
    /// longer waits (its job was made, or it ended), or for a step on
    /// another queue when the flow's id is a number its queue minted (such
    /// an id names no queue, so its steps' job ids there could be another
    /// flow's: give such a flow an id); [`Error::FlowExists`]
    /// when a new step's name is the flow's already or its job id is
    /// taken. Nothing is written for any of those.
    pub async fn add_children(&self, parent: &str, steps: &[Step]) -> Result<()> {
        self.add_children_with(parent, OnChildFailure::FailParent, steps).await
    }

    /// [`add_children`](Self::add_children), with what a new child that
    /// does not complete does to `parent`.
    ///
    /// # Errors
    /// As [`add_children`](Self::add_children).
    pub async fn add_children_with(&self, parent: &str, on_failure: OnChildFailure, steps: &[Step]) -> Result<()> {
        validate::id("flow step name", parent)?;
        let mut edges = check_graph(self.id.len(), steps)?;
        for step in steps {
            check_options(step)?;
        }
        let mut children = Vec::new();
        for (step, (_, parents)) in steps.iter().zip(edges.iter_mut()) {
            if parents.is_empty() {
                *parents = format!("{parent}\x1f{}", on_failure.letter());
                children.push(format!("{}\x1f{}", step.name, on_failure.letter()));
            }
        }
        let nodes = self.queue.flow_nodes(steps, edges)?;
        // A plain minted id (a number) names no queue: its steps on another
        // queue could take the job ids of a flow another queue minted.
        if self.id.bytes().all(|b| b.is_ascii_digit()) && nodes.iter().any(|n| n.queue.is_some()) {
            return Err(Error::InvalidFlow(format!(
                "flow {} has an id its queue minted, which names no queue, so it takes no step on another \
                 queue (give it an id of its own, or a step on another queue when it is added)",
                self.id
            )));
        }
        let sent = store::flow_extend::run(
            &mut self.queue.conn(),
            self.queue.keys(),
            &self.id,
            parent,
            &children.join("\x1e"),
            &nodes,
        )
        .await?;
        if sent > 0 {
            crate::relay::relay_or_log(&self.queue).await;
        }
        Ok(())
    }

    /// Cancels every step that has not ended: waiting, pending and
    /// delayed ones end cancelled now (a waiting one never runs), running
    /// ones are asked to stop, as [`Queue::cancel`] asks.
    ///
    /// # Errors
    /// [`Error::FlowNotFound`], or a server error.
    pub async fn cancel(&self) -> Result<FlowCancelled> {
        let keep_failed = self.queue.options().keep_failed.arg();
        let (cancelled, requested, sent) =
            store::flow_cancel::run(&mut self.queue.conn(), self.queue.keys(), &self.id, &keep_failed).await?;
        if sent > 0 {
            crate::relay::relay_or_log(&self.queue).await;
        }
        Ok(FlowCancelled {
            cancelled,
            requested,
            sent,
        })
    }
}

impl Flow {
    /// Removes the flow: its record, and every step that has not started
    /// (waiting steps, pending and delayed jobs; on other queues by
    /// message). Running jobs are left to finish, and ended steps' records
    /// stay in their sets as their retention says. Afterwards
    /// [`status`](Self::status) answers [`Error::FlowNotFound`], and the
    /// flow's id may be used again.
    ///
    /// # Errors
    /// [`Error::FlowNotFound`], or a server error.
    pub async fn remove(&self) -> Result<FlowRemoved> {
        let (removed, running, sent) =
            store::flow_remove::run(&mut self.queue.conn(), self.queue.keys(), &self.id).await?;
        if sent > 0 {
            crate::relay::relay_or_log(&self.queue).await;
        }
        Ok(FlowRemoved { removed, running, sent })
    }
}

/// The children of step `name` of flow `id` and how each ended, as
/// [`Flow::child_results`] reads them, from the flow's record on queue
/// `home_name` under `prefix`, through `via`'s link.
pub(crate) async fn child_results_at<R: DeserializeOwned>(
    via: &Queue,
    prefix: &str,
    home_name: &str,
    id: &str,
    name: &str,
) -> Result<Vec<ChildResult<R>>> {
    let keys = crate::keys::Keys::new(prefix, home_name)?;
    let mut conn = via.link().conn().homed(&keys.base);
    let rows = store::flow_read::run(&mut conn, &keys, id, Some(name)).await?;
    rows.into_iter()
        .map(|r| {
            let job_id = format!("{id}:{}", r.name);
            let text = || String::from_utf8_lossy(&r.detail).into_owned();
            let outcome = match r.state.as_str() {
                "completed" => {
                    let bytes: &[u8] = if r.detail.is_empty() { b"null" } else { &r.detail };
                    ChildOutcome::Completed(serde_json::from_slice(bytes).map_err(|source| Error::Decode {
                        id: job_id.clone(),
                        source,
                    })?)
                }
                "failed" => ChildOutcome::Failed(text()),
                "cancelled" => ChildOutcome::Cancelled,
                "expired" => ChildOutcome::Expired,
                "removed" => ChildOutcome::Removed,
                _ => ChildOutcome::NotEnded,
            };
            Ok(ChildResult {
                name: r.name,
                job_id,
                outcome,
            })
        })
        .collect()
}
