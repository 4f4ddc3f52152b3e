//! Listing a state's jobs, page by page.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::job::{JobInfo, JobState};
use crate::queue::inspect::{HashFields, job_info};
use crate::queue::{MAX_BATCH, Queue};
use crate::store;
use crate::store::list::Order;

/// Where a listing goes on from: the last job shown and its place in the
/// state's order. Opaque; its text form (`Display`, `FromStr`) travels in
/// URLs and command lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    score: String,
    id: String,
}

impl fmt::Display for ListCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.score, self.id)
    }
}

impl FromStr for ListCursor {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::InvalidId {
            what: "list cursor",
            value: crate::error::excerpt(s),
            reason: "is not a cursor a listing returned",
        };
        let (score, id) = s.split_once(':').ok_or_else(bad)?;
        if score.parse::<f64>().is_err() || id.is_empty() {
            return Err(bad());
        }
        Ok(ListCursor {
            score: score.to_owned(),
            id: id.to_owned(),
        })
    }
}

/// One page of a listing ([`Queue::list`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Page {
    /// The jobs, in the state's order.
    pub jobs: Vec<JobInfo>,
    /// Where the next page starts; `None` at the end.
    pub next: Option<ListCursor>,
}

impl Queue {
    /// One page of the jobs in `state`, after `after` (or from the start),
    /// at most `limit` (1 to [`MAX_BATCH`]): pending jobs in the order they
    /// will be claimed, delayed ones by due time, active ones by lease
    /// deadline (with `deadline_ms` set for both), completed and failed
    /// ones newest first (cancelled ones too). Pending jobs with a lane
    /// come after those without, ordered by id (lanes take turns, so no one
    /// order says when they run); [`list_lane`](Self::list_lane) shows a
    /// lane's in the order it will be claimed.
    ///
    /// While jobs move, a walk of pending, completed or failed jobs shows
    /// each job at most once (its place in the order is fixed while it
    /// stays in the state) and shows every job that stayed in the state
    /// for the whole walk. Delayed and active jobs are ordered by a time
    /// that moves (a retry's due time, a renewed deadline), so one that
    /// moves past the cursor can show again. A job that leaves the state
    /// between the page's two reads is left out.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use echomq::JobState;
    /// let mut after = None;
    /// loop {
    ///     let page = queue.list(JobState::Failed, after.as_ref(), 100).await?;
    ///     for job in &page.jobs {
    ///         println!("{} {:?}", job.id, job.last_error);
    ///     }
    ///     match page.next { Some(c) => after = Some(c), None => break }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for `limit` out of range; server errors.
    pub async fn list(&self, state: JobState, after: Option<&ListCursor>, limit: usize) -> Result<Page> {
        let k = self.keys();
        let (set, order) = match state {
            JobState::Pending => (&k.pending, Order::Asc),
            JobState::Delayed => (&k.delayed, Order::Asc),
            JobState::Active => (&k.active, Order::Asc),
            JobState::Completed => (&k.completed, Order::Desc),
            JobState::Failed => (&k.failed, Order::Desc),
            JobState::Cancelled => (&k.cancelled, Order::Desc),
            JobState::Expired => (&k.expired, Order::Desc),
        };
        self.list_set(set, order, state, after, limit).await
    }

    /// One page of the pending jobs of `lane`, in the order the lane gives
    /// them out (priority, then enqueue order), after `after` (or from the
    /// start), at most `limit` (1 to [`MAX_BATCH`]). A walk shows each job
    /// at most once, as [`list`](Self::list) does for pending jobs.
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad lane name, [`Error::InvalidOption`]
    /// for `limit` out of range; server errors.
    pub async fn list_lane(&self, lane: &str, after: Option<&ListCursor>, limit: usize) -> Result<Page> {
        crate::validate::id("lane", lane)?;
        let key = self.keys().lane(lane);
        self.list_set(&key, Order::Asc, JobState::Pending, after, limit).await
    }

    async fn list_set(
        &self,
        set: &str,
        order: Order,
        state: JobState,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Page> {
        crate::validate::count("list limit", limit, 1, MAX_BATCH)?;
        let k = self.keys();
        let after = after.map(|c| (c.score.as_str(), c.id.as_str()));
        let listed = store::list::run(&mut self.conn(), set, order, limit, after).await?;
        let mut pipe = redis::pipe();
        for (id, _) in &listed {
            pipe.hgetall(k.job(id));
        }
        let records: Vec<HashFields> = if listed.is_empty() {
            Vec::new()
        } else {
            pipe.query_async(&mut self.conn()).await.map_err(Error::from_redis)?
        };
        let timed = matches!(state, JobState::Delayed | JobState::Active);
        let mut jobs = Vec::with_capacity(listed.len());
        for ((id, score), fields) in listed.iter().zip(records) {
            if fields.is_empty() {
                continue;
            }
            let deadline = timed.then(|| score.parse::<f64>().map_or(0, |s| s as u64));
            let info = job_info(id, fields, deadline)?;
            if info.state == state {
                jobs.push(info);
            }
        }
        let next = (listed.len() == limit)
            .then(|| listed.last())
            .flatten()
            .map(|(id, score)| ListCursor {
                score: score.clone(),
                id: id.clone(),
            });
        Ok(Page { jobs, next })
    }
}
