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

// `graph` checks a flow before anything is sent, `add` adds one
// (`Queue::add_flow`), `handle` is what a `Flow` does once added.
mod add;
mod graph;
mod handle;

use std::time::Duration;

use serde::Serialize;

pub(crate) use self::handle::child_results_at;
use crate::error::{Error, Result};
use crate::job::{EnqueueOptions, JobKind};
use crate::queue::Queue;
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
    /// No id (the queue mints one: a number, or `N@QUEUE` for a flow with
    /// steps on other queues, so that flows of two queues never mint the
    /// same job ids on a third), kept a day after its end, no steps.
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
