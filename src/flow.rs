//! Flows: a graph of jobs in which a job (a parent) runs only after the
//! jobs it waits on (its children) have ended.
//!
//! A [`FlowSpec`] names its steps; a step waits on others with
//! [`Step::after`]. [`Queue::add_flow`] checks the graph (no cycle, every
//! edge between two of its steps) and adds it in one atomic call: the
//! steps that wait on nothing become pending jobs at once, the others wait
//! in the flow's record, which is no job yet. The script that ends a
//! parent's last child enqueues the parent in the same atomic call, so a
//! parent is enqueued once, never before all its children ended, and like
//! every job runs at least once. A parent may have many children and a
//! child many parents (a DAG, not only a tree); each step's job has the id
//! `FLOW_ID:STEP_NAME`. A parent's handler reads its children's ends,
//! typed, with [`Job::child_results`](crate::Job::child_results).
//!
//! What a child that does not complete (fails for good, is cancelled,
//! expires or is removed) does to a parent is its edge's
//! [`OnChildFailure`]: fail the parent (the default: it ends failed
//! without running, and its own parents learn of that along their edges),
//! run it and let it read the failure, or drop the edge.
//!
//! ```no_run
//! # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
//! use echomq::flow::{FlowSpec, Step};
//! use serde_json::json;
//!
//! let order = json!({"order": 42});
//! let flow = queue
//!     .add_flow(
//!         &FlowSpec::new()
//!             .id("order-42")
//!             .step(Step::new("charge", &order)?.kind("charge"))
//!             .step(Step::new("reserve", &order)?.kind("reserve"))
//!             .step(Step::new("email", &order)?.kind("email").after("charge").after("reserve"))
//!             .step(Step::new("ship", &order)?.kind("ship").after("email")),
//!     )
//!     .await?;
//! let status = flow.status().await?;
//! println!("{} of {} steps completed", status.count(echomq::flow::StepState::Completed), status.steps.len());
//! # Ok(()) }
//! ```
//!
//! The guide's [flows chapter](crate::guide::flows) has the worked example.
//! A flow's steps are on its queue unless [`Step::on`] puts one on another
//! queue (another hash slot, on a Cluster perhaps another master): the
//! queues then tell each other what happened by message, through each
//! queue's outbox and the relay, each message applied once
//! ([`Queue::add_flow`] says how). Every process that settles its jobs
//! must be of echomq 0.3 or later, as for batches.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::job::{EnqueueOptions, JobKind};
use crate::queue::Queue;
use crate::store;
use crate::store::flow_add::FlowNode;
use crate::validate;

/// The most steps one flow holds (so a parent has at most this many
/// children less one): one atomic call adds them all, and the server runs
/// nothing else meanwhile.
pub const MAX_STEPS: usize = 5_000;

/// How long a flow's record stays after every step ended unless
/// [`FlowSpec::keep`] says otherwise: a day.
pub const DEFAULT_KEEP: Duration = Duration::from_secs(86_400);

/// The longest [`FlowSpec::keep`]: a year.
pub const MAX_KEEP: Duration = Duration::from_secs(86_400 * 366);

/// What a child that does not complete (fails for good, is cancelled,
/// expires or is removed) does to a parent that waits on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnChildFailure {
    /// The parent ends failed without running (its error names the
    /// child), and its own parents learn of that along their edges.
    #[default]
    FailParent,
    /// The parent runs once all its children ended, and reads this one's
    /// failure in [`Job::child_results`](crate::Job::child_results).
    RunParent,
    /// The parent runs once all its children ended, as if this one were
    /// not its child: its child results leave it out.
    DropEdge,
}

impl OnChildFailure {
    fn letter(self) -> char {
        match self {
            OnChildFailure::FailParent => 'f',
            OnChildFailure::RunParent => 'r',
            OnChildFailure::DropEdge => 'd',
        }
    }
}

/// One step of a flow: a job, its name in the flow, and the steps it runs
/// after.
#[derive(Debug, Clone)]
pub struct Step {
    name: String,
    payload: serde_json::Value,
    options: EnqueueOptions,
    kind: Option<String>,
    after: Vec<(String, OnChildFailure)>,
    queue: Option<Queue>,
}

impl Step {
    /// A step named `name` (unique in its flow; its job's id is
    /// `FLOW_ID:NAME`) whose job has `payload` and default options.
    ///
    /// # Errors
    /// [`Error::Encode`] when the payload does not encode as JSON.
    pub fn new<T: Serialize + ?Sized>(name: impl Into<String>, payload: &T) -> Result<Step> {
        Ok(Step {
            name: name.into(),
            payload: serde_json::to_value(payload).map_err(Error::Encode)?,
            options: EnqueueOptions::default(),
            kind: None,
            after: Vec::new(),
            queue: None,
        })
    }

    /// A step whose job is `job`, of its kind `J::KIND`.
    ///
    /// # Errors
    /// As [`Step::new`].
    pub fn job<J: JobKind>(name: impl Into<String>, job: &J) -> Result<Step> {
        Ok(Step::new(name, job)?.kind(J::KIND))
    }

    /// Gives the step's job a kind, to route it to its handler.
    #[must_use]
    pub fn kind(mut self, kind: impl Into<String>) -> Step {
        self.kind = Some(kind.into());
        self
    }

    /// The step's job options: priority, lane, kind, attempts, backoff,
    /// timeout and traceparent apply. An id, a delay or run-at time, a
    /// dedup id, an expiry or a sequence key do not (a step's id is its flow's and its
    /// name; it runs when its children let it): [`Queue::add_flow`]
    /// refuses them.
    #[must_use]
    pub fn options(mut self, options: EnqueueOptions) -> Step {
        self.options = options;
        self
    }

    /// Runs after step `child` ended, and fails without running if that
    /// child does not complete ([`OnChildFailure::FailParent`]).
    #[must_use]
    pub fn after(self, child: impl Into<String>) -> Step {
        self.after_with(child, OnChildFailure::FailParent)
    }

    /// Runs after step `child` ended; `on_failure` says what a child that
    /// does not complete does to this step.
    #[must_use]
    pub fn after_with(mut self, child: impl Into<String>, on_failure: OnChildFailure) -> Step {
        self.after.push((child.into(), on_failure));
        self
    }

    /// Puts the step's job on `queue` instead of the flow's own: a handle
    /// of the same [`Client`](crate::Client) under the same prefix (another
    /// hash slot, on a Cluster perhaps another master). Its payload is
    /// encoded as `queue` encodes payloads, and its job's id there is
    /// `FLOW_ID:NAME` too. The flow's record stays on the flow's queue; the
    /// step is made on its queue, and its end comes back, by message
    /// (`Queue::add_flow` says how and when).
    #[must_use]
    pub fn on(mut self, queue: &Queue) -> Step {
        self.queue = Some(queue.clone());
        self
    }

    /// The step's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A flow to add: its id, how long its record stays, and its steps.
#[derive(Debug, Clone)]
pub struct FlowSpec {
    id: Option<String>,
    keep: Duration,
    steps: Vec<Step>,
}

impl Default for FlowSpec {
    fn default() -> Self {
        FlowSpec {
            id: None,
            keep: DEFAULT_KEEP,
            steps: Vec::new(),
        }
    }
}

impl FlowSpec {
    /// No id (the queue mints one), kept a day after its end, no steps.
    pub fn new() -> FlowSpec {
        FlowSpec::default()
    }

    /// The flow's id, instead of a minted one: a valid job id with no
    /// `:` (its steps' job ids are `ID:NAME`).
    #[must_use]
    pub fn id(mut self, id: impl Into<String>) -> FlowSpec {
        self.id = Some(id.into());
        self
    }

    /// How long the flow's record (its steps' states and the children's
    /// results their parents read) stays after every step ended:
    /// [`DEFAULT_KEEP`] unless set, at most [`MAX_KEEP`]; zero keeps it
    /// until the queue is obliterated.
    #[must_use]
    pub fn keep(mut self, keep: Duration) -> FlowSpec {
        self.keep = keep;
        self
    }

    /// Adds a step.
    #[must_use]
    pub fn step(mut self, step: Step) -> FlowSpec {
        self.steps.push(step);
        self
    }
}

/// Where a step of a flow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepState {
    /// Waiting for its children to end: no job yet.
    Waiting,
    /// Its job is pending.
    Pending,
    /// Its job waits for a retry's backoff.
    Delayed,
    /// Its job is leased to a worker.
    Active,
    /// Its job completed.
    Completed,
    /// Its job failed for good, or it failed without running because a
    /// child did not complete.
    Failed,
    /// Cancelled ([`Flow::cancel`], or its job by [`Queue::cancel`]).
    Cancelled,
    /// Its job expired before it started.
    Expired,
    /// Its job was removed ([`Queue::remove`](crate::Queue::remove)) before it ended.
    Removed,
    /// Its job is gone without an end (the queue was obliterated).
    Gone,
}

impl StepState {
    fn parse(s: &str) -> StepState {
        match s {
            "waiting" => StepState::Waiting,
            "pending" => StepState::Pending,
            "delayed" => StepState::Delayed,
            "active" => StepState::Active,
            "completed" => StepState::Completed,
            "failed" => StepState::Failed,
            "cancelled" => StepState::Cancelled,
            "expired" => StepState::Expired,
            "removed" => StepState::Removed,
            _ => StepState::Gone,
        }
    }

    /// The state's name, as `Flow::status` reads it from the server
    /// (`"waiting"`, `"pending"`, …; `"gone"` for [`StepState::Gone`]).
    pub fn as_str(self) -> &'static str {
        match self {
            StepState::Waiting => "waiting",
            StepState::Pending => "pending",
            StepState::Delayed => "delayed",
            StepState::Active => "active",
            StepState::Completed => "completed",
            StepState::Failed => "failed",
            StepState::Cancelled => "cancelled",
            StepState::Expired => "expired",
            StepState::Removed => "removed",
            StepState::Gone => "gone",
        }
    }

    /// Whether the step has ended (it will not run, or run again).
    pub fn is_ended(self) -> bool {
        !matches!(
            self,
            StepState::Waiting | StepState::Pending | StepState::Delayed | StepState::Active
        )
    }
}

/// One step's state, read with the others at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepStatus {
    /// The step's name.
    pub name: String,
    /// Its job's id, `FLOW_ID:NAME`.
    pub job_id: String,
    /// The name of the queue its job is on ([`Step::on`], else the flow's).
    pub queue: String,
    /// Where it is.
    pub state: StepState,
    /// The steps it runs after (its children), in the order it named them.
    pub after: Vec<String>,
}

/// A flow's steps and their states, in the order they were added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowStatus {
    /// The flow.
    pub id: String,
    /// Every step.
    pub steps: Vec<StepStatus>,
}

impl FlowStatus {
    /// How many steps are in `state`.
    pub fn count(&self, state: StepState) -> usize {
        self.steps.iter().filter(|s| s.state == state).count()
    }

    /// Whether every step has ended.
    pub fn is_ended(&self) -> bool {
        self.steps.iter().all(|s| s.state.is_ended())
    }

    /// The state of step `name`, if the flow has one of that name.
    pub fn state(&self, name: &str) -> Option<StepState> {
        self.steps.iter().find(|s| s.name == name).map(|s| s.state)
    }
}

/// How a child of a step ended, as its parent reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildOutcome<R> {
    /// It completed with this result (the handler's return value; a
    /// handler that returned none reads as JSON `null`).
    Completed(R),
    /// It failed for good (or failed without running), with this error.
    Failed(String),
    /// It was cancelled.
    Cancelled,
    /// It expired before it started.
    Expired,
    /// It was removed before it ended.
    Removed,
    /// It has not ended (only seen when reading a step that waits).
    NotEnded,
}

/// One child of a step and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildResult<R> {
    /// The child's step name.
    pub name: String,
    /// Its job's id.
    pub job_id: String,
    /// How it ended.
    pub outcome: ChildOutcome<R>,
}

/// What [`Flow::cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowCancelled {
    /// Steps that ended cancelled now (waiting, pending or delayed ones).
    pub cancelled: u64,
    /// Running jobs asked to stop (they end cancelled on their next
    /// settlement but a completion, as [`Queue::cancel`] asks).
    pub requested: u64,
    /// Steps on other queues ([`Step::on`]) that had not ended: a cancel
    /// was sent to each one's queue, where it ends a pending or delayed
    /// job cancelled and asks a running one to stop when it arrives.
    pub sent: u64,
}

/// What [`Flow::remove`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowRemoved {
    /// Steps removed: waiting ones, and pending or delayed jobs (deleted
    /// as [`Queue::remove`](crate::Queue::remove) deletes them).
    pub removed: u64,
    /// Running jobs left to finish (their ends reach no flow).
    pub running: u64,
    /// Steps on other queues that had not ended: a remove was sent to
    /// each one's queue, where it deletes the job if it has not started.
    pub sent: u64,
}

/// A flow of a queue: read its steps' states, cancel it. Cheap to clone;
/// [`Queue::flow`] makes one for a flow another process added.
#[derive(Debug, Clone)]
pub struct Flow {
    queue: Queue,
    id: String,
}

/// Checks a flow id: a valid id with no `:`.
fn check_id(id: &str) -> Result<()> {
    validate::id("flow id", id)?;
    if id.contains(':') {
        return Err(Error::InvalidId {
            what: "flow id",
            value: id.chars().take(64).collect(),
            reason: "must not contain ':' (its steps' job ids are FLOW_ID:NAME)",
        });
    }
    Ok(())
}

/// The flow id and step name of a flow step's job id.
pub(crate) fn split_job_id(job_id: &str) -> Option<(&str, &str)> {
    job_id.split_once(':').filter(|(f, n)| !f.is_empty() && !n.is_empty())
}

/// Checks a flow's graph: step names valid and unique, every edge to a
/// step of the flow and at most once per pair, no cycle. Answers, per step
/// in order, its children's and its parents' edges as the script takes them.
fn check_graph(id: Option<&str>, steps: &[Step]) -> Result<Vec<(String, String)>> {
    let bad = |s: String| Err(Error::InvalidFlow(s));
    if steps.is_empty() {
        return bad("a flow needs at least one step".into());
    }
    if steps.len() > MAX_STEPS {
        return bad(format!(
            "{} steps; a flow holds at most {MAX_STEPS} (flow::MAX_STEPS)",
            steps.len()
        ));
    }
    // A minted flow id is a number: leave room for a long one.
    let id_len = id.map_or(20, str::len);
    let mut at: HashMap<&str, usize> = HashMap::with_capacity(steps.len());
    for (i, s) in steps.iter().enumerate() {
        validate::id("flow step name", &s.name)?;
        if id_len + 1 + s.name.len() > validate::MAX_ID_BYTES {
            return Err(Error::InvalidId {
                what: "flow step name",
                value: s.name.chars().take(64).collect(),
                reason: "with its flow's id and ':' makes a job id longer than 256 bytes",
            });
        }
        if at.insert(&s.name, i).is_some() {
            return bad(format!("two steps are named {:?}", s.name));
        }
    }
    let mut children: Vec<Vec<String>> = vec![Vec::new(); steps.len()];
    let mut parents: Vec<Vec<String>> = vec![Vec::new(); steps.len()];
    // Kahn's order: a step is placed once every step it runs after is.
    let mut waits = vec![0usize; steps.len()];
    let mut after_me: Vec<Vec<usize>> = vec![Vec::new(); steps.len()];
    for (p, s) in steps.iter().enumerate() {
        let mut seen = std::collections::HashSet::new();
        for (child, policy) in &s.after {
            let Some(&c) = at.get(child.as_str()) else {
                return bad(format!(
                    "step {:?} runs after {child:?}, which is not a step of the flow",
                    s.name
                ));
            };
            if !seen.insert(c) {
                return bad(format!("step {:?} runs after {child:?} twice", s.name));
            }
            children[p].push(format!("{child}\x1f{}", policy.letter()));
            parents[c].push(format!("{}\x1f{}", s.name, policy.letter()));
            waits[p] += 1;
            after_me[c].push(p);
        }
    }
    let mut ready: VecDeque<usize> = (0..steps.len()).filter(|&i| waits[i] == 0).collect();
    let mut placed = 0;
    while let Some(i) = ready.pop_front() {
        placed += 1;
        for &p in &after_me[i] {
            waits[p] -= 1;
            if waits[p] == 0 {
                ready.push_back(p);
            }
        }
    }
    if placed < steps.len() {
        let stuck: Vec<&str> = (0..steps.len())
            .filter(|&i| waits[i] > 0)
            .take(8)
            .map(|i| steps[i].name.as_str())
            .collect();
        return bad(format!("the steps run after each other in a cycle (among {stuck:?})"));
    }
    Ok(children
        .into_iter()
        .zip(parents)
        .map(|(c, p)| (c.join("\x1e"), p.join("\x1e")))
        .collect())
}

/// Refuses the options a step cannot take.
fn check_options(step: &Step) -> Result<()> {
    let o = &step.options;
    let refused = if o.id.is_some() {
        Some("an id (its job id is FLOW_ID:NAME)")
    } else if o.when()? != "0" {
        Some("a delay or run-at time")
    } else if o.dedup.is_some() {
        Some("a dedup id")
    } else if !o.expires()?.is_empty() {
        Some("an expiry")
    } else if o.sequence.is_some() {
        Some("a sequence key")
    } else {
        None
    };
    match refused {
        Some(what) => Err(Error::InvalidFlow(format!(
            "step {:?} has {what}, which a flow step cannot take",
            step.name
        ))),
        None => Ok(()),
    }
}

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
    /// of. The relay carries them: this call at once, and then the
    /// maintenance of any process with a worker on the queue that holds
    /// the message: within its reap interval, and within
    /// [`RELAY_HOT_INTERVAL`](crate::maintenance::RELAY_HOT_INTERVAL) while
    /// the flow runs. Each message is delivered at
    /// least once and applied once (see the guide's flows chapter for the
    /// rule and its window). So a step on another queue is enqueued once,
    /// after all its children ended, as on one queue, but a little later:
    /// give the flow's queue, or the queue of each step's children, a
    /// worker (any process that maintains it) so its messages move.
    ///
    /// # Errors
    /// [`Error::InvalidFlow`] for a graph that cannot run (a cycle, an
    /// edge to a name not in the flow, two steps of one name, no steps,
    /// more than [`MAX_STEPS`], an option a step cannot take, a step on a
    /// queue of another prefix or client),
    /// [`Error::InvalidId`] for a bad flow id, step name or kind,
    /// [`Error::InvalidOption`] for a keep time past [`MAX_KEEP`],
    /// [`Error::PayloadTooLarge`]; nothing is sent for any of those.
    /// [`Error::FlowExists`] when the flow's id or one of its job ids is
    /// taken (nothing written), or a server error; on a transient one
    /// ([`Error::is_transient`]) the flow may or may not have been added,
    /// and adding it again with its own id is safe.
    pub async fn add_flow(&self, spec: &FlowSpec) -> Result<Flow> {
        if let Some(id) = &spec.id {
            check_id(id)?;
        }
        let keep = validate::duration("FlowSpec::keep", spec.keep, Duration::ZERO, MAX_KEEP)?;
        let edges = check_graph(spec.id.as_deref(), &spec.steps)?;
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
        if let Some(s) = confirmed? {
            return Err(Error::NotDurable {
                ids: vec![id],
                acked: s.acked,
                wanted: s.wanted,
            });
        }
        Ok(Flow {
            queue: self.clone(),
            id,
        })
    }

    /// The nodes the scripts take for `steps` with their `edges`
    /// ([`check_graph`]'s): each step's job prepared by its own queue.
    fn flow_nodes(&self, steps: &[Step], edges: Vec<(String, String)>) -> Result<Vec<FlowNode>> {
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
        if q.options().prefix != self.options().prefix {
            return Err(Error::InvalidFlow(format!(
                "step {:?} is on queue {:?} under prefix {:?}; the flow's queue is under {:?}",
                step.name,
                q.name(),
                q.options().prefix,
                self.options().prefix
            )));
        }
        if !q.link().same(self.link()) {
            return Err(Error::InvalidFlow(format!(
                "step {:?} is on queue {:?} of another client; a flow's queues share its client",
                step.name,
                q.name()
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
    /// they name, as in [`FlowSpec`]). A child that does not complete
    /// fails `parent` ([`OnChildFailure::FailParent`]); see
    /// [`add_children_with`](Self::add_children_with). One atomic call, as
    /// [`Queue::add_flow`]; at most [`MAX_STEPS`] steps a call.
    ///
    /// # Errors
    /// As [`Queue::add_flow`] for the new steps (an edge to a step not
    /// among them is [`Error::InvalidFlow`]); [`Error::FlowNotFound`];
    /// [`Error::InvalidFlow`] when the flow has no step `parent`, or it no
    /// longer waits (its job was made, or it ended); [`Error::FlowExists`]
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
        let mut edges = check_graph(Some(&self.id), steps)?;
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
