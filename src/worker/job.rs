//! [`Job`]: a claimed job as its handler sees it — the lease, the decoded
//! payload and the attempt's cancellation — and the one call a handler
//! makes on it besides settling (progress).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::job::{MAX_PROGRESS_BYTES, idempotency_key};
use crate::lease::Lease;
use crate::limits::Limits;
use crate::queue::Queue;
use crate::store;

/// A job handed to a [`Consumer`](crate::Consumer)'s handler.
#[derive(Debug)]
pub struct Job<T> {
    /// The queue's handle, for the calls a handler makes (progress, enqueue).
    handle: Queue,
    /// The claim this attempt runs under: the job's fields and its fencing
    /// token, shared with the task that settles it (one copy of each).
    lease: Arc<Lease>,
    payload: T,
    cancel: CancellationToken,
    /// Set when an operator asked to cancel the job (seen at a lease renewal).
    cancel_requested: Arc<AtomicBool>,
}

impl<T> Job<T> {
    /// The handler's view of `lease` (claimed through `queue`), with its
    /// decoded payload, the attempt's cancellation token and the flag a
    /// renewal sets on a cancel request.
    pub(crate) fn new(
        queue: Queue,
        lease: Arc<Lease>,
        payload: T,
        cancel: CancellationToken,
        cancel_requested: Arc<AtomicBool>,
    ) -> Job<T> {
        Job {
            handle: queue,
            lease,
            payload,
            cancel,
            cancel_requested,
        }
    }

    /// The job id.
    pub fn id(&self) -> &str {
        self.lease.id()
    }
    /// The queue name.
    pub fn queue(&self) -> &str {
        self.handle.name()
    }
    /// The handle of the job's queue, for follow-up work from the handler
    /// (enqueue the next step, read a record).
    pub fn handle(&self) -> &Queue {
        &self.handle
    }
    /// The lease this attempt runs under (the low-level API's handle of the
    /// claim; a [`Consumer`](crate::Consumer) settles it for the handler).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }
    /// This delivery's number: 1 on the first, one more on each later
    /// delivery (after a failure, a crash, a release or a snooze).
    pub fn attempt(&self) -> u64 {
        self.lease.attempt()
    }
    /// This delivery's fencing token, minted by its claim: unique within
    /// the queue, so it tells this attempt from every other attempt of any
    /// job of the queue (effect markers are fenced by it).
    pub fn token(&self) -> u64 {
        self.lease.token()
    }
    /// Handler failures before this attempt.
    pub fn failures(&self) -> u64 {
        self.lease.failures()
    }
    /// The job's limits, fixed when it was enqueued.
    pub fn limits(&self) -> &Limits {
        self.lease.limits()
    }
    /// The job's lane ([`EnqueueOptions::lane`](crate::EnqueueOptions::lane)), if it has one.
    pub fn lane(&self) -> Option<&str> {
        self.lease.lane()
    }
    /// The job's kind ([`JobKind::KIND`](crate::JobKind::KIND),
    /// [`EnqueueOptions::kind`](crate::EnqueueOptions::kind)), if it has one.
    pub fn kind(&self) -> Option<&str> {
        self.lease.kind()
    }
    /// The W3C `traceparent` of the span that enqueued the job
    /// ([`EnqueueOptions::traceparent`](crate::EnqueueOptions::traceparent),
    /// or with feature `otel` the enqueuing span's own), if it has one. The
    /// job's span records it as its field `traceparent`, and with feature
    /// `otel` is already its child; a handler that wants a link instead can
    /// parse it.
    pub fn traceparent(&self) -> Option<&str> {
        self.lease.traceparent()
    }
    /// This job with its payload changed by `f` (a router hands the
    /// decoded payload on this way).
    pub(crate) fn map_payload<U>(self, f: impl FnOnce(T) -> U) -> Job<U> {
        Job {
            handle: self.handle,
            lease: self.lease,
            payload: f(self.payload),
            cancel: self.cancel,
            cancel_requested: self.cancel_requested,
        }
    }
    /// True when a failure of this attempt fails the job for good (its
    /// failures would reach `max_attempts`).
    pub fn is_last_attempt(&self) -> bool {
        self.failures() + 1 >= u64::from(self.limits().max_attempts)
    }
    /// The decoded payload.
    pub fn payload(&self) -> &T {
        &self.payload
    }
    /// Takes the payload out.
    pub fn into_payload(self) -> T {
        self.payload
    }
    /// A key that is the same on every delivery of this job and differs
    /// between the jobs of all queues under one key prefix: `{QUEUE}:ID`
    /// (queue names cannot hold braces, so no two queue/id pairs give the
    /// same key).
    ///
    /// Pass it to external APIs that take an idempotency key (payments,
    /// webhooks, a unique column) so that the *external system* recognises
    /// a redelivery and applies the effect once: delivery is at-least-once,
    /// and this is how the effect becomes exactly-once. Namespace it if
    /// several deployments share the external account; see
    /// [`crate::effect`] for this and the other tools (effect markers,
    /// atomic completion).
    ///
    /// The exact rule: the key names the *id*, so every job ever stored
    /// under one id of one queue has it. That is what a caller-chosen id
    /// means (one piece of work: enqueued again after its record was
    /// deleted, it is recognised as done). But a minted id (all digits) is
    /// minted again when the queue's counter goes back: its keys deleted,
    /// or acknowledged writes lost to a torn append-only file or a failover
    /// to a replica that lagged. A new job then shares the key of a job
    /// that may have applied its effect, and the external system would
    /// skip the new job's effect. Where that matters, use
    /// [`incarnation_key`](Self::incarnation_key).
    ///
    /// ```
    /// # fn demo(job: &echomq::Job<()>) {
    /// let key = job.idempotency_key(); // e.g. "{payments}:42"
    /// # let _ = key; }
    /// ```
    pub fn idempotency_key(&self) -> String {
        idempotency_key(self.queue(), self.id())
    }
    /// A key that is the same on every delivery of this job and differs for
    /// every other job ever stored, even under the same id:
    /// `{QUEUE}:ID@CREATED_MS`, with the server time at which the record was
    /// created. A job stored again under an id (a caller id enqueued again
    /// after its record was deleted, a minted id minted again after lost
    /// writes rolled the counter back) gets another key, since its record is
    /// created later on the server's clock. (Two records of one id created
    /// in the same millisecond would share it: an id must be deleted and
    /// stored again within that millisecond.)
    ///
    /// ```
    /// # fn demo(job: &echomq::Job<()>) {
    /// let key = job.incarnation_key(); // e.g. "{payments}:42@1796147134748"
    /// # let _ = key; }
    /// ```
    pub fn incarnation_key(&self) -> String {
        self.lease.incarnation_key()
    }
    /// When the job was stored (server ms since the Unix epoch): the same
    /// on every delivery.
    pub fn created_ms(&self) -> u64 {
        self.lease.created_ms()
    }
    /// Cancelled when this attempt must stop: its lease was lost or could
    /// not be renewed in time, the consumer is shutting down past its
    /// grace period, or an operator cancelled the job
    /// ([`Queue::cancel`](crate::Queue::cancel);
    /// [`cancel_requested`](Self::cancel_requested) tells this case). After
    /// a cancel request, whatever the handler returns but `Ok` ends the job
    /// cancelled; `Ok` completes it (the work was done).
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }
    /// True once an operator has asked to cancel this job and the consumer
    /// has seen the request (at a lease renewal, so within one heartbeat
    /// interval).
    pub fn cancel_requested(&self) -> bool {
        self.cancel_requested.load(Ordering::Relaxed)
    }
    /// True once [`cancellation`](Self::cancellation) has fired.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
    /// Records this attempt's progress (any JSON value, at most
    /// [`MAX_PROGRESS_BYTES`] encoded), shown by
    /// [`Queue::job`](crate::Queue::job) as
    /// [`JobInfo::progress`](crate::JobInfo::progress) until the next
    /// report, also after the job finishes. Fenced like a settlement: an
    /// attempt that lost its lease records nothing.
    ///
    /// ```
    /// # async fn demo(job: echomq::Job<()>) -> echomq::Result<()> {
    /// job.progress(&serde_json::json!({"done": 40, "of": 100})).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::LeaseLost`], [`Error::JobNotFound`],
    /// [`Error::PayloadTooLarge`], [`Error::Encode`], server errors.
    pub async fn progress<P: serde::Serialize + ?Sized>(&self, value: &P) -> Result<()> {
        let bytes = serde_json::to_vec(value).map_err(Error::Encode)?;
        if bytes.len() > MAX_PROGRESS_BYTES {
            return Err(Error::PayloadTooLarge {
                size: bytes.len(),
                limit: MAX_PROGRESS_BYTES,
            });
        }
        let q = &self.handle;
        store::progress::run(
            &mut q.conn(),
            q.keys(),
            self.id(),
            self.token(),
            store::progress::Field::Progress,
            &bytes,
        )
        .await
    }

    /// The children of this job's flow step and how each ended (see
    /// [`crate::flow`]): a parent runs once they all have, and reads their
    /// results here, each decoded into `R`. Empty for a job that is no
    /// step of a flow, or a step with no children.
    ///
    /// ```no_run
    /// # async fn demo(job: echomq::Job<serde_json::Value>) -> echomq::Result<()> {
    /// use echomq::flow::ChildOutcome;
    /// for child in job.child_results::<serde_json::Value>().await? {
    ///     if let ChildOutcome::Completed(receipt) = child.outcome {
    ///         println!("{} gave {receipt}", child.name);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Decode`] when a result does not decode into `R`, or a
    /// server error.
    pub async fn child_results<R: serde::de::DeserializeOwned>(&self) -> Result<Vec<crate::flow::ChildResult<R>>> {
        // The job's flow (`fl`; a step's id is FLOW_ID:NAME), and for a step
        // on another queue than its flow's, the flow's queue (`fh`: the
        // queue, "\x1f", the flow's creation time).
        let (flow, home): (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(self.handle.keys().job(self.id()))
            .arg("fl")
            .arg("fh")
            .query_async(&mut self.handle.conn())
            .await
            .map_err(Error::from_redis)?;
        let Some(flow) = flow else {
            return Ok(Vec::new());
        };
        let Some(name) = self.id().strip_prefix(flow.as_str()).and_then(|n| n.strip_prefix(':')) else {
            return Ok(Vec::new());
        };
        let flow = flow.as_str();
        let home = home.as_deref().and_then(|h| h.split('\x1f').next());
        let q = &self.handle;
        let read = crate::flow::child_results_at(q, &q.options().prefix, home.unwrap_or(q.name()), flow, name).await;
        match read {
            Err(Error::FlowNotFound(_)) => Ok(Vec::new()),
            other => other,
        }
    }
}
