//! Searching a state's jobs by kind, lane or error text
//! ([`Queue::search`]): the server keeps no index of those, so a search
//! reads the state's jobs in its listing order, a bounded number per call,
//! and goes on from a cursor, as [`Queue::list`] does.

use crate::error::{Error, Result};
use crate::job::{JobInfo, JobState};
use crate::queue::{MAX_BATCH, Queue};

use super::list::ListCursor;

/// Most jobs one [`Queue::search`] call reads.
pub const MAX_SEARCH_SCAN: usize = 10_000;
/// Longest error text a [`Filter`] looks for (bytes).
pub const MAX_SEARCH_TEXT: usize = 1_024;

/// What a [`Queue::search`] looks for: every condition set must hold. A
/// value with chained setters; the empty filter matches every job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    kind: Option<String>,
    lane: Option<String>,
    error: Option<String>,
}

impl Filter {
    /// Matches every job.
    pub fn new() -> Self {
        Self::default()
    }

    /// Jobs of kind `kind` ([`JobInfo::kind`], exactly).
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Jobs of lane `lane` ([`JobInfo::lane`], exactly).
    pub fn lane(mut self, lane: impl Into<String>) -> Self {
        self.lane = Some(lane.into());
        self
    }

    /// Jobs one of whose kept errors ([`JobInfo::last_error`],
    /// [`JobInfo::errors`]) holds `text`, ignoring case.
    pub fn error(mut self, text: impl Into<String>) -> Self {
        self.error = Some(text.into());
        self
    }

    /// Whether no condition is set.
    pub fn is_empty(&self) -> bool {
        self.kind.is_none() && self.lane.is_none() && self.error.is_none()
    }

    fn check(&self) -> Result<()> {
        if let Some(k) = &self.kind {
            crate::validate::id("kind", k)?;
        }
        if let Some(l) = &self.lane {
            crate::validate::id("lane", l)?;
        }
        if let Some(e) = &self.error
            && (e.is_empty() || e.len() > MAX_SEARCH_TEXT)
        {
            return Err(Error::InvalidOption {
                name: "search error text",
                reason: format!("1 to {MAX_SEARCH_TEXT} bytes, got {}", e.len()),
            });
        }
        Ok(())
    }

    fn matches(&self, job: &JobInfo, error_lower: Option<&str>) -> bool {
        let same = |want: &Option<String>, have: &Option<String>| want.is_none() || want == have;
        same(&self.kind, &job.kind)
            && same(&self.lane, &job.lane)
            && error_lower.is_none_or(|text| {
                let holds = |e: &str| e.to_lowercase().contains(text);
                job.last_error.as_deref().is_some_and(holds) || job.errors.iter().any(|e| holds(&e.message))
            })
    }
}

/// What one [`Queue::search`] call found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Found {
    /// The matching jobs, in the state's listing order.
    pub jobs: Vec<JobInfo>,
    /// How many jobs it read.
    pub scanned: usize,
    /// Where the next call goes on from; `None` once the state's end was
    /// reached.
    pub next: Option<ListCursor>,
}

impl Queue {
    /// Reads up to `scan` (1 to [`MAX_SEARCH_SCAN`]) jobs in `state`
    /// after `after` (or from the start), in [`list`](Self::list)'s
    /// order, and returns those matching `filter`, with the cursor to go
    /// on from. A search over a large state is a walk of such calls: each
    /// costs one listing round trip per [`MAX_BATCH`] jobs, whatever it
    /// finds, so the bound is on the work, not on the matches. A walk
    /// sees each job at most once as [`list`](Self::list) does.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use echomq::JobState;
    /// use echomq::admin::Filter;
    /// let filter = Filter::new().kind("email").error("timeout");
    /// let mut after = None;
    /// loop {
    ///     let found = queue.search(JobState::Failed, &filter, after.as_ref(), 1_000).await?;
    ///     for job in &found.jobs {
    ///         println!("{} {:?}", job.id, job.last_error);
    ///     }
    ///     match found.next { Some(c) => after = Some(c), None => break }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for `scan` out of range or an empty or
    /// too long error text, [`Error::InvalidId`] for a bad kind or lane;
    /// server errors.
    pub async fn search(
        &self,
        state: JobState,
        filter: &Filter,
        after: Option<&ListCursor>,
        scan: usize,
    ) -> Result<Found> {
        crate::validate::count("search scan", scan, 1, MAX_SEARCH_SCAN)?;
        filter.check()?;
        let error_lower = filter.error.as_deref().map(str::to_lowercase);
        let mut found = Found {
            jobs: Vec::new(),
            scanned: 0,
            next: after.cloned(),
        };
        while found.scanned < scan {
            let step = (scan - found.scanned).min(MAX_BATCH);
            let page = self.list(state, found.next.as_ref(), step).await?;
            // A full page read `step` jobs (some may have left the state
            // meanwhile); the last one, those it shows.
            found.scanned += if page.next.is_some() { step } else { page.jobs.len() };
            found.jobs.extend(
                page.jobs
                    .into_iter()
                    .filter(|j| filter.matches(j, error_lower.as_deref())),
            );
            found.next = page.next;
            if found.next.is_none() {
                break;
            }
        }
        Ok(found)
    }
}
