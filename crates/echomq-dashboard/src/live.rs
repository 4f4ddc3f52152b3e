//! The live stream: a server-sent event with every queue's counts and
//! throughput (and, on a queue's page, its latest events; on a job's page,
//! the job's state) each sample period.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::{Interval, MissedTickBehavior};

use crate::Shared;
use crate::pages::STATES;

/// Samples between two walks for new queues (with [`crate::Source::discover`]).
const NAMES_EVERY: u32 = 5;

/// What the page follows.
#[derive(Deserialize)]
pub(crate) struct Follow {
    /// One queue only (a queue's or a job's page).
    queue: Option<String>,
    /// And this job of it.
    job: Option<String>,
}

/// One connection's sampler.
struct Sampler {
    shared: Arc<Shared>,
    follow: Follow,
    tick: Interval,
    names: Vec<String>,
    // Samples since the names were read.
    names_age: u32,
    // Each queue's last completed count and when it was read: the rate's
    // estimate when the queue's events are off.
    last: HashMap<String, (Instant, u64)>,
    // The newest event this stream sent of the followed queue's feed.
    sent: String,
}

impl Sampler {
    async fn sample(&mut self) -> echomq::Result<Value> {
        if let Some(q) = &self.follow.queue {
            self.names = vec![q.clone()];
        } else if self.names_age == 0 || self.names_age >= NAMES_EVERY {
            self.names = self.shared.names().await?;
            self.names_age = 0;
        }
        self.names_age += 1;
        let mut queues = Vec::with_capacity(self.names.len());
        let mut job = Value::Null;
        for name in &self.names {
            let Some(queue) = self.shared.queue(name).await? else {
                continue;
            };
            let c = queue.counts().await?;
            // Without readable events (an ACL without stream reads, say)
            // the counts still come, with the estimate.
            let snap = match self.shared.feeds.snapshot(&queue, self.shared.opts.sample_every).await {
                Ok(snap) => Some(snap),
                Err(e) => {
                    tracing::debug!(queue = %name, error = %e, "dashboard could not read the queue's events");
                    None
                }
            };
            let now = Instant::now();
            let estimate = self.last.get(name).map(|(at, n)| {
                let secs = now.duration_since(*at).as_secs_f64().max(1e-3);
                // Retention trims the count: a drop is not negative work.
                c.completed.saturating_sub(*n) as f64 / secs
            });
            self.last.insert(name.clone(), (now, c.completed));
            let throughput = if let Some(t) = snap.as_ref().map(|s| &s.throughput).filter(|t| t.events_on) {
                json!({
                    "rate": t.completed_rate,
                    "failed_rate": t.failed_rate,
                    "series": t.completed,
                    "failed_series": t.failed,
                    "partial": t.partial,
                })
            } else {
                json!({"rate": estimate, "estimated": true})
            };
            let counts: serde_json::Map<String, Value> = STATES
                .iter()
                .map(|s| (s.as_str().to_owned(), json!(c.of(*s))))
                .collect();
            let mut q = json!({"name": name, "paused": c.paused, "counts": counts, "throughput": throughput});
            if let Some(snap) =
                snap.filter(|s| self.follow.queue.is_some() && self.follow.job.is_none() && s.newest != self.sent)
            {
                q["feed"] = snap.latest.iter().map(crate::feed::FeedEvent::json).collect();
                self.sent = snap.newest;
            }
            queues.push(q);
            if let Some(id) = &self.follow.job {
                job = match queue.job(id).await {
                    Ok(j) => json!({"id": id, "state": j.state.as_str(), "attempts": j.attempts}),
                    Err(echomq::Error::JobNotFound(_)) => json!({"id": id, "state": "gone"}),
                    Err(e) => return Err(e),
                };
            }
        }
        Ok(json!({"queues": queues, "job": job}))
    }
}

/// `GET /events?queue=&job=`: a `counts` event each sample period; an
/// `error` event (and the stream goes on) when a sample fails; the stream
/// ends when the dashboard's [`Shutdown`](crate::Shutdown) is triggered.
pub(crate) async fn events(
    State(shared): State<Arc<Shared>>,
    Query(follow): Query<Follow>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut tick = tokio::time::interval(shared.opts.sample_every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let sampler = Sampler {
        shared,
        follow,
        tick,
        names: Vec::new(),
        names_age: 0,
        last: HashMap::new(),
        sent: String::new(),
    };
    let stream = futures_util::stream::unfold(sampler, |mut s| async move {
        // The app is shutting down (DashboardOptions::shutdown): the
        // stream ends, so a graceful shutdown does not wait for the page.
        let stop = s.shared.opts.shutdown.clone();
        if stop.is_triggered() {
            return None;
        }
        tokio::select! {
            _ = s.tick.tick() => {}
            () = stop.triggered() => return None,
        }
        let event = match s.sample().await {
            Ok(v) => Event::default().event("counts").data(v.to_string()),
            Err(e) => {
                tracing::debug!(error = %e, "dashboard sample failed");
                Event::default().event("error").data(e.to_string())
            }
        };
        Some((Ok(event), s))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
