//! Testing code that uses echomq: run a queue's jobs inline, to the end,
//! and look at what was enqueued, as Oban's `drain_queue` and River's
//! `rivertest` do. Point a [`Queue`] at a private server
//! (`echomq::server::LocalServer`, feature `local-server`)
//! and call your code; then:
//!
//! ```no_run
//! # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
//! use echomq::testing::{Drain, waiting};
//! use echomq::{HandlerError, Job};
//!
//! // ... code under test enqueues welcome mails ...
//! let mails: Vec<(String, String)> = waiting(&queue).await?;
//! assert_eq!(mails.len(), 1);
//!
//! let report = Drain::new(&queue)
//!     .with_scheduled(true)
//!     .run(|job: Job<String>| async move {
//!         assert!(job.payload().contains('@'));
//!         Ok::<_, HandlerError>(())
//!     })
//!     .await?;
//! assert_eq!(report.completed(), 1);
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::job::JobState;
use crate::queue::{Outcome, Queue, Settle};
use crate::worker::Handler;
use crate::worker::Job;
use crate::worker::backoff::RetryBackoff;
use crate::worker::job_task::{keepable, settlement};

/// The lease each drained job is claimed with: the handler runs inline,
/// without heartbeats, so it has this long.
pub const DRAIN_LEASE: Duration = Duration::from_secs(300);

/// Default most jobs one drain runs ([`Drain::max_jobs`]).
pub const DEFAULT_MAX_JOBS: usize = 10_000;

/// Runs a queue's jobs one at a time in the caller's task until none is
/// ready: each is claimed, handed to the handler, and settled as a
/// [`Consumer`](crate::Consumer) would (its result kept, its error retried,
/// failed or snoozed, a panic retried, its timeout enforced). Jobs the
/// handlers enqueue run too. A paused queue runs nothing.
#[derive(Debug)]
#[must_use = "a drain does nothing until run"]
pub struct Drain<'q> {
    queue: &'q Queue,
    with_scheduled: bool,
    max_jobs: usize,
}

/// One job's run in a [`Drain`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Run {
    /// The job.
    pub id: String,
    /// Its attempt number.
    pub attempt: u64,
    /// What the settlement did.
    pub outcome: Outcome,
    /// The handler's error, or why the attempt failed ("panicked", "timeout").
    pub error: Option<String>,
    /// The result kept with the job, when it completed with one.
    pub result: Option<serde_json::Value>,
}

/// What a [`Drain`] ran.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct DrainReport {
    /// Each run, in order.
    pub runs: Vec<Run>,
    /// True when it stopped at [`Drain::max_jobs`] with jobs still ready.
    pub hit_limit: bool,
}

impl DrainReport {
    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.runs.iter().filter(|r| f(&r.outcome)).count()
    }
    /// Runs that completed their job.
    pub fn completed(&self) -> usize {
        self.count(|o| *o == Outcome::Completed)
    }
    /// Runs that failed their job for good.
    pub fn failed(&self) -> usize {
        self.count(|o| *o == Outcome::Failed)
    }
    /// Runs that left their job to run again (retried or snoozed).
    pub fn retried(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Retrying { .. } | Outcome::Snoozed { .. }))
    }
}

impl<'q> Drain<'q> {
    /// A drain of `queue`: ready jobs only, at most [`DEFAULT_MAX_JOBS`].
    pub fn new(queue: &'q Queue) -> Self {
        Drain {
            queue,
            with_scheduled: false,
            max_jobs: DEFAULT_MAX_JOBS,
        }
    }

    /// Runs delayed jobs too, at once, whatever their due time (scheduled
    /// jobs, and retries waiting out their backoff, so a failing job runs
    /// until its `max_attempts`). Default off: delayed jobs stay delayed.
    pub fn with_scheduled(mut self, on: bool) -> Self {
        self.with_scheduled = on;
        self
    }

    /// Stops after `n` runs (a handler that always snoozes would otherwise
    /// run forever with scheduled jobs on); [`DrainReport::hit_limit`] says so.
    pub fn max_jobs(mut self, n: usize) -> Self {
        self.max_jobs = n;
        self
    }

    /// Runs the jobs with `handler`.
    ///
    /// # Errors
    /// Server errors; a settlement refused by the server (another worker
    /// took the job: drain a queue no consumer serves).
    pub async fn run<T, H>(self, handler: H) -> Result<DrainReport>
    where
        T: DeserializeOwned + Send + 'static,
        H: Handler<T>,
    {
        let q = self.queue;
        let handler = Arc::new(handler);
        let mut report = DrainReport::default();
        loop {
            let Some(lease) = q.claim(1, DRAIN_LEASE).await?.pop() else {
                if self.with_scheduled && q.promote_all().await? > 0 {
                    continue;
                }
                return Ok(report);
            };
            if report.runs.len() >= self.max_jobs {
                q.release(&lease).await?;
                report.hit_limit = true;
                return Ok(report);
            }
            let (op, error) = match lease.decode_payload::<T>() {
                Err(e) => {
                    let reason = format!("undecodable payload: {e}");
                    (Settle::Fail { reason: reason.clone() }, Some(reason))
                }
                Ok(payload) => {
                    let job = Job::new(
                        q.clone(),
                        Arc::new(lease.clone()),
                        payload,
                        CancellationToken::new(),
                        Arc::default(),
                    );
                    let h = handler.clone();
                    let mut task = tokio::spawn(async move { h.call(job).await.map(|v| keepable(&v)) });
                    let ended = match lease.limits.timeout {
                        Some(t) => tokio::time::timeout(t, &mut task).await.ok(),
                        None => Some((&mut task).await),
                    };
                    match ended {
                        Some(Ok(Ok(None))) => (Settle::Complete, None),
                        Some(Ok(Ok(Some(result)))) => (Settle::Return { result }, None),
                        Some(Ok(Err(e))) => {
                            let text = e.to_string();
                            (settlement(e, &RetryBackoff::Job, &lease), Some(text))
                        }
                        Some(Err(_)) => retry("panicked"),
                        None => {
                            task.abort();
                            retry("timeout")
                        }
                    }
                }
            };
            let settled = q.settle_many(&[(&lease, &op)]).await?.pop();
            let outcome = settled
                .ok_or_else(|| crate::Error::Protocol {
                    script: "settle",
                    detail: "no answer for the item".into(),
                })??
                .outcome;
            let result = match &op {
                Settle::Return { result } => serde_json::from_str(result).ok(),
                _ => None,
            };
            report.runs.push(Run {
                id: lease.id.clone(),
                attempt: lease.attempt,
                outcome,
                error,
                result,
            });
        }
    }
}

fn retry(why: &str) -> (Settle, Option<String>) {
    (
        Settle::Retry {
            delay: None,
            error: why.to_owned(),
        },
        Some(why.to_owned()),
    )
}

/// Runs `queue`'s ready jobs with `handler` until none is left: a
/// [`Drain`] with its defaults.
///
/// # Errors
/// As [`Drain::run`].
pub async fn drain<T, H>(queue: &Queue, handler: H) -> Result<DrainReport>
where
    T: DeserializeOwned + Send + 'static,
    H: Handler<T>,
{
    Drain::new(queue).run(handler).await
}

/// The jobs waiting in `queue` (pending in claim order, then delayed by
/// due time) as `(id, payload)`: what the code under test enqueued.
///
/// # Errors
/// [`Error::Decode`](crate::Error::Decode) for a payload that is not a
/// `T`; server errors.
pub async fn waiting<T: DeserializeOwned>(queue: &Queue) -> Result<Vec<(String, T)>> {
    let mut out = Vec::new();
    for state in [JobState::Pending, JobState::Delayed] {
        let mut after = None;
        loop {
            let page = queue.list(state, after.as_ref(), crate::queue::MAX_BATCH).await?;
            for job in &page.jobs {
                out.push((job.id.clone(), job.decode()?));
            }
            match page.next {
                Some(c) => after = Some(c),
                None => break,
            }
        }
    }
    Ok(out)
}
