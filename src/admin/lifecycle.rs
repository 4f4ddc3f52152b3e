//! Moving jobs by hand: retry failed jobs, remove jobs, drain a queue.

use super::MAX_IDS;
use crate::error::{Error, Result};
use crate::job::JobState;
use crate::queue::{MAX_BATCH, Queue};
use crate::store;
use crate::store::obliterate::Obliterated;
use crate::store::to_pending::{PerId, Source, Step};

/// What [`Queue::retry_failed`] or [`Queue::remove`] did to one job.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Moved {
    /// Done.
    Done,
    /// No such job.
    NotFound,
    /// Not in a state this call moves (`retry_failed`: not failed;
    /// `promote`: not delayed).
    WrongState,
    /// `retry_failed`: the job's dedup id (one that stood until the job
    /// finished, [`EnqueueOptions::dedup`](crate::EnqueueOptions::dedup))
    /// is held by another job, enqueued after this one failed; the job
    /// stays failed, since two waiting jobs would share one dedup id.
    /// Retry it once that job has finished.
    DedupHeld,
}

/// The per-id answers of a step, as this module's [`Moved`].
fn per_id(step: Step) -> Vec<(String, Result<Moved>)> {
    step.ids
        .into_iter()
        .map(|(id, answer)| {
            let moved = answer.map(|a| match a {
                PerId::Done => Moved::Done,
                PerId::NotFound => Moved::NotFound,
                PerId::WrongState => Moved::WrongState,
                PerId::DedupHeld => Moved::DedupHeld,
            });
            (id, moved)
        })
        .collect()
}

/// Runs a bounded step until it moves nothing more or nothing is left;
/// returns how many moved in all.
async fn in_steps<F, Fut>(mut step: F) -> Result<u64>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Step>>,
{
    let mut total = 0;
    loop {
        let Step { moved, left, .. } = step().await?;
        total += moved;
        if moved == 0 || left == 0 {
            return Ok(total);
        }
    }
}

pub(super) fn check_ids(ids: &[&str]) -> Result<()> {
    crate::validate::ids(ids, MAX_IDS)
}

impl Queue {
    /// Moves failed jobs back to pending, to run again with their full
    /// `max_attempts`: failures and stalls start again from 0, while
    /// `attempts` (claims so far) and the last error are kept. A job
    /// enqueued with a dedup id that stood until it finished takes its
    /// marker again, so a new enqueue of that id is deduplicated against
    /// it as before it failed; if another job holds the marker now, the job
    /// stays failed ([`Moved::DedupHeld`]). Answers per id, in order; a job
    /// that is not failed is left alone ([`Moved::WrongState`]).
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// let moved = queue.retry_failed(&["order-17", "order-18"]).await?;
    /// let all = queue.retry_all_failed().await?;
    /// # let _ = (moved, all); Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidId`], [`Error::InvalidOption`] for no ids or more
    /// than [`MAX_IDS`]; server errors.
    pub async fn retry_failed(&self, ids: &[&str]) -> Result<Vec<(String, Moved)>> {
        check_ids(ids)?;
        per_id(self.retry_failed_call(ids).await?)
            .into_iter()
            .map(|(id, m)| m.map(|m| (id, m)))
            .collect()
    }

    /// Moves every failed job back to pending (as
    /// [`retry_failed`](Self::retry_failed)), a thousand per script call, so
    /// the server is never held for long. Returns how many moved. Jobs that
    /// fail while this runs may be moved too.
    ///
    /// # Errors
    /// Server errors (what moved before one stays moved).
    pub async fn retry_all_failed(&self) -> Result<u64> {
        in_steps(|| self.retry_failed_call(&[])).await
    }

    async fn retry_failed_call(&self, ids: &[&str]) -> Result<Step> {
        store::to_pending::run(&mut self.conn(), self.keys(), Source::Failed, MAX_BATCH, ids).await
    }

    /// Makes delayed jobs due now ("run now"): each moves to pending at its
    /// own place (priority, then enqueue order), as if its time had come;
    /// a job waiting out a retry backoff runs again now. Answers per id, in
    /// order; a job that is not delayed is left alone
    /// ([`Moved::WrongState`]).
    ///
    /// # Errors
    /// [`Error::InvalidId`], [`Error::InvalidOption`] for no ids or more
    /// than [`MAX_IDS`]; server errors.
    pub async fn promote(&self, ids: &[&str]) -> Result<Vec<(String, Moved)>> {
        check_ids(ids)?;
        per_id(self.promote_call(ids).await?)
            .into_iter()
            .map(|(id, m)| m.map(|m| (id, m)))
            .collect()
    }

    /// Makes every delayed job due now (as [`promote`](Self::promote)), a
    /// thousand per script call. Returns how many moved.
    ///
    /// # Errors
    /// Server errors (what moved before one stays moved).
    pub async fn promote_all(&self) -> Result<u64> {
        in_steps(|| self.promote_call(&[])).await
    }

    async fn promote_call(&self, ids: &[&str]) -> Result<Step> {
        store::to_pending::run(&mut self.conn(), self.keys(), Source::Delayed, MAX_BATCH, ids).await
    }

    /// Removes jobs that are not active (pending, delayed, completed,
    /// failed or cancelled), with their records and dedup markers. Answers per id, in
    /// order. An active job is leased to a worker and is left alone: its
    /// entry is [`Error::JobActive`].
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// for (id, r) in queue.remove(&["order-17"]).await? {
    ///     println!("{id}: {r:?}");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// The outer error: [`Error::InvalidId`], [`Error::InvalidOption`] for
    /// no ids or more than [`MAX_IDS`], server errors.
    pub async fn remove(&self, ids: &[&str]) -> Result<Vec<(String, Result<Moved>)>> {
        check_ids(ids)?;
        Ok(per_id(self.remove_call(ids).await?))
    }

    /// Removes every pending and delayed job (drains the queue), a
    /// thousand per script call. Active jobs run on; finished records
    /// stay. Returns how many were removed. Jobs enqueued while this runs
    /// may be removed too.
    ///
    /// # Errors
    /// Server errors (what was removed before one stays removed).
    pub async fn drain(&self) -> Result<u64> {
        in_steps(|| self.remove_call(&[])).await
    }

    async fn remove_call(&self, ids: &[&str]) -> Result<Step> {
        store::remove::run(&mut self.conn(), self.keys(), MAX_BATCH, ids).await
    }
}

/// Records one obliterate step fences, or keys it looks at (a SCAN COUNT hint).
const OBLITERATE_STEP: usize = 1_000;

impl Queue {
    /// Deletes every key of the queue (jobs, sets, markers, counters,
    /// user keys under `PREFIX:{QUEUE}:`), in bounded steps. The first step
    /// pauses the queue, so consumers lease nothing more; it refuses while
    /// jobs are leased to workers unless `force`. Forced, it first deletes
    /// the leased jobs' records, so their workers' settlements, renewals
    /// and effects answer [`Error::JobNotFound`] and write nothing; the
    /// queue's sets and counters go in the last step, so what still runs
    /// meanwhile (a reaper promoting due jobs, another operator call)
    /// leaves no key behind. Stop producers first: a job enqueued while
    /// this runs may survive it. Returns how many keys were deleted. The
    /// queue can be used again afterwards, as new.
    ///
    /// The queue's jobs that are steps or members of another queue's
    /// flows and batches and have not ended end "removed" at their homes
    /// (as [`remove`](Self::remove) would end them): their ends are
    /// relayed home before the queue's outbox goes, so no parent or batch
    /// there waits for good. Steps and members of the queue's own flows and
    /// batches not yet made on other queues are not made.
    ///
    /// # Errors
    /// [`Error::QueueActive`] (nothing deleted); server errors, or
    /// [`Error::NotDurable`] when the ends relayed home are not confirmed
    /// as the queue's durability asks (run it again to finish: ends told
    /// twice count once).
    pub async fn obliterate(&self, force: bool) -> Result<u64> {
        let mut cursor = "0".to_owned();
        let mut deleted = 0;
        loop {
            let (next, n) = self.obliterate_step(&cursor, OBLITERATE_STEP, force).await?;
            deleted += n;
            if next == "0" {
                return Ok(deleted);
            }
            if next == "s0" {
                // The ends the fence and the homes phase told are on the
                // outbox, which the scan's last step deletes.
                crate::relay::relay(self).await?;
            }
            cursor = next;
        }
    }

    /// One obliterate step from `cursor` ("0" to start) fencing `count`
    /// records or scanning about `count` keys: the next cursor ("0" once
    /// done) and how many keys it deleted.
    async fn obliterate_step(&self, cursor: &str, count: usize, force: bool) -> Result<(String, u64)> {
        match store::obliterate::run(&mut self.conn(), self.keys(), cursor, count, force).await? {
            Obliterated::Step { next, deleted } => Ok((next, deleted)),
            Obliterated::Busy { active } => Err(Error::QueueActive {
                queue: self.name().to_owned(),
                active,
            }),
        }
    }
}

#[cfg(all(test, feature = "local-server"))]
mod tests {
    use std::time::Duration;

    use crate::server::LocalServer;
    use crate::{Error, Queue, QueueOptions};

    // Writes that land between the steps of a forced obliterate leave no
    // key behind: its first step fences every lease (a settlement answers
    // JobNotFound and writes nothing), and the queue's own sets go last (an
    // operator's retry between steps writes pending and the wake list). It
    // used to delete keys as the scan met them, so a completion between
    // two steps could make the completed set again after the scan had
    // passed it, left holding ids without records.
    #[tokio::test]
    async fn writes_between_obliterate_steps_leave_nothing() {
        let server = LocalServer::start().unwrap();
        let q = Queue::connect_with(&server.url(), "ob-steps", QueueOptions::new().max_attempts(1))
            .await
            .unwrap();
        // Half the jobs in lanes, so lane keys are written while the steps run.
        let jobs: Vec<(u32, crate::EnqueueOptions)> = (0..300u32)
            .map(|i| {
                let o = crate::EnqueueOptions::new();
                (i, if i % 2 == 0 { o.lane(format!("l{}", i % 6)) } else { o })
            })
            .collect();
        q.enqueue_bulk_with(&jobs).await.unwrap();
        // Delayed jobs that fall due while the steps run, laned and not.
        let soon = crate::EnqueueOptions::new().delay(Duration::from_millis(1));
        q.enqueue_with(&1u32, &soon).await.unwrap();
        q.enqueue_with(&2u32, &soon.clone().lane("late")).await.unwrap();
        let mut held = q.claim(30, Duration::from_secs(60)).await.unwrap();
        let mut failed = Vec::new();
        for l in held.drain(..20) {
            q.fail(&l, "no").await.unwrap();
            failed.push(l.id().to_owned());
        }
        let (mut cursor, _) = q.obliterate_step("0", 10, true).await.unwrap();
        let mut steps = 1;
        while cursor != "0" {
            for l in &held {
                let r = q.complete(l).await;
                assert!(matches!(r, Err(Error::JobNotFound(_))), "step {steps}: {r:?}");
            }
            // A hand retry, a reaper's promotion and a sweep step between
            // the steps write nothing while the queue goes.
            for id in &failed {
                for (_, m) in q.retry_failed(&[id]).await.unwrap() {
                    assert_ne!(m, crate::admin::Moved::Done, "step {steps}: {id} retried");
                }
            }
            assert_eq!(q.reap(100).await.unwrap().promoted, 0, "step {steps}");
            q.sweep_step(&crate::SweepCursor::default(), 100).await.unwrap();
            cursor = q.obliterate_step(&cursor, 10, true).await.unwrap().0;
            steps += 1;
        }
        let mut c = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let left: Vec<String> = redis::cmd("KEYS")
            .arg("emq:{ob-steps}:*")
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(left.is_empty(), "after {steps} steps: {left:?}");
        assert!(steps > 10, "{steps} steps");
        // The queue works again as new.
        q.enqueue_with(&3u32, &crate::EnqueueOptions::new().lane("l0"))
            .await
            .unwrap();
        assert_eq!(q.claim(10, Duration::from_secs(60)).await.unwrap().len(), 1);
    }
}

impl Queue {
    /// Removes the finished jobs of `state` (completed, failed or
    /// cancelled) that finished more than `older_than` ago on the server's
    /// clock, with their records, a thousand per call, at most `limit` in
    /// all; answers how many it removed. Retention does this as jobs
    /// finish ([`QueueOptions::keep_completed`](crate::QueueOptions::keep_completed));
    /// this is for a one-off clean-up (`echomq clean`).
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use std::time::Duration;
    /// let gone = queue.clean(echomq::JobState::Completed, Duration::from_secs(7 * 86_400), 100_000).await?;
    /// # let _ = gone; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a state that is not finished or a
    /// `limit` of 0; server errors (what was removed stays removed).
    pub async fn clean(&self, state: JobState, older_than: std::time::Duration, limit: u64) -> Result<u64> {
        let k = self.keys();
        let set = match state {
            JobState::Completed => &k.completed,
            JobState::Failed => &k.failed,
            JobState::Cancelled => &k.cancelled,
            JobState::Expired => &k.expired,
            other => {
                return Err(Error::InvalidOption {
                    name: "clean state",
                    reason: format!(
                        "{} jobs are not finished: only completed, failed, cancelled or expired",
                        other.as_str()
                    ),
                });
            }
        };
        if limit == 0 {
            return Err(Error::InvalidOption {
                name: "clean limit",
                reason: "at least 1".into(),
            });
        }
        let age = u64::try_from(older_than.as_millis()).unwrap_or(u64::MAX);
        let mut removed = 0u64;
        while removed < limit {
            let now = self.server_time_ms().await?;
            let Some(before) = now.checked_sub(age) else { break };
            let take = (limit - removed).min(MAX_IDS as u64);
            // finished sets are scored by finish time (server ms)
            let ids: Vec<String> = redis::cmd("ZRANGEBYSCORE")
                .arg(set)
                .arg("-inf")
                .arg(format!("({before}"))
                .arg("LIMIT")
                .arg(0)
                .arg(take)
                .query_async(&mut self.conn())
                .await
                .map_err(Error::from_redis)?;
            if ids.is_empty() {
                break;
            }
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            let done = per_id(self.remove_call(&refs).await?)
                .iter()
                .filter(|(_, r)| matches!(r, Ok(Moved::Done)))
                .count() as u64;
            removed += done;
            if done == 0 {
                break;
            }
        }
        Ok(removed)
    }
}
