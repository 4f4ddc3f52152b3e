//! The consistency sweep: checks that each job's state
//! agrees with the set that holds it, and repairs what a torn write (Redis
//! 7.0 can apply part of a script after a torn AOF tail) or a lost key left
//! behind. It runs in bounded steps, so the maintenance task interleaves
//! it with reaping, and it never raises on malformed data.

use tracing::warn;

use crate::error::Result;
use crate::queue::Queue;
use crate::scripts::SCRIPTS;

/// What a consistency sweep found, from [`Queue::sweep`] (the whole sweep)
/// or [`Queue::sweep_step`] (one step).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepReport {
    /// Job hashes and set members looked at.
    pub checked: u64,
    /// Repairs made (a job put back into the set its state names, removed
    /// from another set, given a fresh score or a known state, or a
    /// dangling member or hash removed; a laned job put on or taken off its
    /// lane, a lane slot held by a job that is not active given back, or a
    /// lane put back where its counts say in the turn of lanes; a dedup
    /// marker held by no waiting or running job deleted).
    pub repaired: u64,
    /// Keys left alone because they cannot be read as echomq wrote them: a
    /// key under the queue's job pattern that is not a hash, or a job whose
    /// set (or the queue's mint counter) holds another type. Never deleted,
    /// since they may be someone's data; an operator should look at them.
    pub skipped: u64,
}

impl SweepReport {
    fn add(&mut self, other: SweepReport) {
        self.checked += other.checked;
        self.repaired += other.repaired;
        self.skipped += other.skipped;
    }
}

/// The phases of a sweep, as `lua/sweep.lua` takes them: the job hashes,
/// then each set (by its index in the script's KEYS), then the lanes' slots
/// (`held`), the ring of lanes (`ring`) and the dedup markers (`markers`).
const SWEEP_PHASES: [&str; 10] = ["jobs", "1", "2", "3", "4", "5", "6", "held", "ring", "markers"];

/// Where a consistency sweep stands between two [`Queue::sweep_step`]
/// calls: the phase (the job hashes, then each of the six sets, then the
/// lanes' slots and their ring, then the dedup markers) and the server's
/// scan cursor within it.
///
/// `SweepCursor::default()` is the start of a sweep. A cursor is only
/// meaningful for the queue that returned it; a sweep resumed after a long
/// pause still checks every key that existed throughout (SCAN's guarantee).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepCursor {
    /// Index into `SWEEP_PHASES`; its length once the sweep is done.
    phase: usize,
    /// The server's SCAN/ZSCAN cursor in the phase; empty at its start (so
    /// the default cursor is the start of a sweep).
    cursor: String,
}

impl SweepCursor {
    /// True once every phase has been scanned to its end: the sweep is
    /// complete, and further steps with this cursor do nothing.
    pub fn is_done(&self) -> bool {
        self.phase >= SWEEP_PHASES.len()
    }

    /// True at the start of a phase.
    pub(crate) fn is_phase_start(&self) -> bool {
        self.cursor.is_empty()
    }
}

impl Queue {
    /// One bounded step of the consistency sweep: one script call that
    /// looks at about `batch` keys from `cursor` on. Returns where to go on
    /// from and what this step found; start with `SweepCursor::default()`
    /// and call again with the returned cursor until it
    /// [`is_done`](SweepCursor::is_done) (a done cursor does nothing).
    /// Steps may be spread out over time and interleaved with other work;
    /// [`Queue::sweep`] is the loop over them.
    ///
    /// # Errors
    /// Server errors ([`Error::NoPermission`](crate::Error::NoPermission) for an ACL refusal); the same
    /// step can simply be run again.
    pub async fn sweep_step(&self, cursor: &SweepCursor, batch: usize) -> Result<(SweepCursor, SweepReport)> {
        let Some(phase) = SWEEP_PHASES.get(cursor.phase) else {
            return Ok((cursor.clone(), SweepReport::default()));
        };
        let k = self.keys();
        let mut call = SCRIPTS.sweep.call();
        call.key(&k.pending)
            .key(&k.active)
            .key(&k.delayed)
            .key(&k.completed)
            .key(&k.failed)
            .key(&k.cancelled)
            .key(&k.seq)
            .arg(&k.base)
            .arg(*phase)
            .arg(if cursor.cursor.is_empty() { "0" } else { &cursor.cursor })
            .arg(batch.max(1));
        let mut r = call.run(&mut self.conn()).await?;
        let next = r.string()?;
        let report = SweepReport {
            checked: r.uint()?,
            repaired: r.uint()?,
            skipped: r.uint()?,
        };
        if report.repaired > 0 {
            warn!(
                queue = self.name(),
                repaired = report.repaired,
                "consistency sweep repaired the queue"
            );
        }
        if report.skipped > 0 {
            warn!(
                queue = self.name(),
                skipped = report.skipped,
                "consistency sweep skipped keys that are not what echomq wrote (a key under the \
                 queue's job pattern that is not a hash, or a queue key of another type); left as they are"
            );
        }
        let next = if next == "0" {
            SweepCursor {
                phase: cursor.phase + 1,
                cursor: String::new(),
            }
        } else {
            SweepCursor {
                phase: cursor.phase,
                cursor: next,
            }
        };
        Ok((next, report))
    }

    /// Runs a full consistency sweep in bounded steps of about `batch` keys
    /// each ([`Queue::sweep_step`] until done): every job hash is checked
    /// against the set its state names (and put back where a torn write
    /// left it out), and every set member against its hash. Lanes too: a
    /// laned job is on its lane exactly while pending and holds a slot
    /// exactly while active, every slot held belongs to an active job of
    /// its lane, and every lane stands where its counts say (a lane with
    /// pending jobs and a free slot takes turns again; one without jobs
    /// leaves the ring). Dedup markers too: a marker without a TTL whose job
    /// is gone, finished, or does not name it (a torn write's leftover,
    /// which would answer "deduplicated" forever) is deleted. Safe to run
    /// beside live traffic; each step is one script. The maintenance task of
    /// a [`Client`](crate::Client) sweeps the queues its consumers serve.
    ///
    /// # Errors
    /// Server errors (the sweep can simply be run again).
    pub async fn sweep(&self, batch: usize) -> Result<SweepReport> {
        let mut cursor = SweepCursor::default();
        let mut report = SweepReport::default();
        while !cursor.is_done() {
            let (next, step) = self.sweep_step(&cursor, batch).await?;
            report.add(step);
            cursor = next;
        }
        Ok(report)
    }
}
