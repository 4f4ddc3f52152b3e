//! The settings of the worker, reaper and producer processes a run spawns.

/// Settings of one worker process (see `fault-worker`).
#[derive(Debug, Clone)]
pub struct WorkerOpts {
    /// Handlers at once.
    pub concurrency: usize,
    /// Jobs leased ahead of free handlers (`Worker::prefetch`; `None`:
    /// the consumer's default, automatic prefetch).
    pub prefetch: Option<usize>,
    /// Lease length.
    pub lease_ms: u64,
    /// Heartbeat interval (default a third of the lease; must be shorter
    /// than the lease).
    pub heartbeat_ms: Option<u64>,
    /// No heartbeats at all (`Worker::without_heartbeats`): the lease
    /// runs out `lease_ms` after the claim whatever the handler does.
    pub without_heartbeats: bool,
    /// Simulated work per job: a random sleep up to this.
    pub work_ms: u64,
    /// Run the guarded (effect-marker) effect too.
    pub guarded: bool,
    /// Graceful shutdown's grace period.
    pub shutdown_timeout_ms: u64,
    /// Response and connection timeout of its connections.
    pub response_timeout_ms: u64,
    /// Kill point, probability per job, most pauses.
    pub pause: Option<(String, f64, u32)>,
    /// Pause only on this job.
    pub pause_job: Option<String>,
    /// Connect here instead of the run's URL (a proxy, say).
    pub url: Option<String>,
    /// Work this queue instead of the run's (its second queue, `Run::far`).
    pub queue: Option<String>,
    /// Run one raw attempt instead of a consumer (`fault-worker
    /// --role=raw`): claim, effect, stop at `after_effect_before_ack`
    /// until released, then send this call ("extend" or "complete") with
    /// its token whatever the time.
    pub stale_op: Option<&'static str>,
    /// Settlements wait for this many replicas (`--wait-replicas`; 0: no `WAIT`).
    pub wait_replicas: u32,
}

impl Default for WorkerOpts {
    fn default() -> Self {
        WorkerOpts {
            concurrency: 8,
            prefetch: None,
            lease_ms: 1000,
            heartbeat_ms: None,
            without_heartbeats: false,
            work_ms: 0,
            guarded: true,
            shutdown_timeout_ms: 2000,
            response_timeout_ms: 1000,
            pause: None,
            pause_job: None,
            url: None,
            queue: None,
            stale_op: None,
            wait_replicas: 0,
        }
    }
}

/// Settings of one reaper process (`fault-worker --role=reaper`).
#[derive(Debug, Clone)]
pub struct ReaperOpts {
    /// Reap this queue instead of the run's (its second queue, `Run::far`).
    pub queue: Option<String>,
    /// Pause between two passes that found less than a batch.
    pub interval_ms: u64,
    /// Most leases reaped per pass.
    pub batch: usize,
    /// Exit after a pass that reaps nothing.
    pub until_empty: bool,
    /// Reaps, and the deliveries of the relay each pass runs, wait for
    /// this many replicas (`--wait-replicas`; 0: no `WAIT`): a delivery
    /// is taken off the outbox only once its target's replicas hold it.
    pub wait_replicas: u32,
}

impl Default for ReaperOpts {
    fn default() -> Self {
        ReaperOpts {
            queue: None,
            interval_ms: 100,
            batch: 1000,
            until_empty: false,
            wait_replicas: 0,
        }
    }
}

/// Settings of one producer process (see `fault-producer`).
#[derive(Debug, Clone)]
pub struct ProducerOpts {
    /// First job number.
    pub from: u64,
    /// Jobs to enqueue.
    pub count: u64,
    /// Enqueues in flight.
    pub concurrency: usize,
    /// Every n-th job gets a dedup id (0: none).
    pub dedup_every: u64,
    /// Pause between enqueues of one task.
    pub pace_ms: u64,
    /// Connect here instead of the run's URL.
    pub url: Option<String>,
    /// Spread the jobs over this many lanes, `l0`.. (0: no lanes).
    pub lanes: u64,
    /// The cap to set on each of those lanes first.
    pub lane_cap: Option<u32>,
    /// The queue's global cap to set first.
    pub max_active: Option<u32>,
    /// The queue's rate limit to set first: (claims, window ms).
    pub rate: Option<(u32, u64)>,
    /// The default rate limit of lanes to set first: (claims, window ms).
    pub lane_rate: Option<(u32, u64)>,
    /// Enqueues wait for this many replicas (`--wait-replicas`; 0: no
    /// `WAIT`); one short of them is retried with its id.
    pub wait_replicas: u32,
    /// Every n-th job created is asked to be cancelled, at a random moment
    /// up to `cancel_within_ms` after its enqueue (0: none).
    pub cancel_every: u64,
    /// See `cancel_every`.
    pub cancel_within_ms: u64,
    /// Flows to add beside the jobs (`echomq_fault::groups`).
    pub flows: u64,
    /// Batches to add beside the jobs, each of `members` members.
    pub batches: u64,
    /// See `batches`.
    pub members: u64,
}

impl Default for ProducerOpts {
    fn default() -> Self {
        ProducerOpts {
            from: 0,
            count: 100,
            concurrency: 8,
            dedup_every: 0,
            pace_ms: 0,
            url: None,
            lanes: 0,
            lane_cap: None,
            max_active: None,
            rate: None,
            lane_rate: None,
            wait_replicas: 0,
            cancel_every: 0,
            cancel_within_ms: 50,
            flows: 0,
            batches: 0,
            members: 8,
        }
    }
}
