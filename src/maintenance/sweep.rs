//! The consistency sweep: checks that each job's state
//! agrees with the set that holds it, and repairs what a torn write (Redis
//! 7.0 can apply part of a script after a torn AOF tail) or a lost key left
//! behind. It runs in bounded steps, so the maintenance task interleaves
//! it with reaping, and it never raises on malformed data.
//!
//! [`Queue::sweep`] walks the whole keyspace for the queue's job hashes and
//! dedup markers, so sweeping many queues that way walks it once per
//! queue. The maintenance task, and [`sweep_queues`], walk it once per key
//! prefix for all their queues instead (`SCAN MATCH` on the prefix, on
//! every master of a cluster), hand each queue the keys of its own that the
//! walk found, and sweep each queue's sets by themselves.

use std::collections::HashMap;
use std::sync::Arc;

use redis::Value;
use tracing::warn;

use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::store;
use crate::store::sweep::{PHASES, Swept};
use crate::validate;

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

/// The first and the last of the phases over the queue's own sets (its six
/// sets, the lanes' slots and their ring), which a walk of the keyspace
/// does not cover.
const FIRST_SET_PHASE: usize = 1;
const LAST_SET_PHASE: usize = 8;

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
    /// Index into the script's `PHASES` (`store/sweep.rs`); their number
    /// once the sweep is done.
    phase: usize,
    /// The server's SCAN/ZSCAN cursor in the phase; empty at its start (so
    /// the default cursor is the start of a sweep).
    cursor: String,
}

impl SweepCursor {
    /// True once every phase has been scanned to its end: the sweep is
    /// complete, and further steps with this cursor do nothing.
    pub fn is_done(&self) -> bool {
        self.phase >= PHASES.len()
    }

    /// The start of a sweep of the queue's sets alone (see [`Walk`]).
    pub(crate) fn sets() -> SweepCursor {
        SweepCursor {
            phase: FIRST_SET_PHASE,
            cursor: String::new(),
        }
    }

    /// True once the phases over the queue's sets are done.
    pub(crate) fn sets_done(&self) -> bool {
        self.phase > LAST_SET_PHASE
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
    /// [`Error::InvalidOption`] for a `batch` outside 1..=[`MAX_SWEEP_BATCH`];
    /// server errors ([`Error::NoPermission`] for an ACL refusal); the same
    /// step can simply be run again.
    pub async fn sweep_step(&self, cursor: &SweepCursor, batch: usize) -> Result<(SweepCursor, SweepReport)> {
        validate::count("sweep batch", batch, 1, MAX_SWEEP_BATCH)?;
        self.sweep_call(cursor, batch, false).await
    }

    /// One step over the queue's own sets from `cursor` (a phase of
    /// [`SweepCursor::sets`] on): one script call that goes on into the
    /// next set phase while fewer than `batch` members were checked, so a
    /// small queue's sets take one call. Returns the cursor to go on from
    /// ([`SweepCursor::sets_done`] once the last set phase is done).
    pub(crate) async fn sweep_sets_step(
        &self,
        cursor: &SweepCursor,
        batch: usize,
    ) -> Result<(SweepCursor, SweepReport)> {
        if cursor.sets_done() {
            return Ok((cursor.clone(), SweepReport::default()));
        }
        self.sweep_call(cursor, batch, true).await
    }

    /// Logs what a sweep call found and reports it.
    fn swept(&self, swept: &Swept) -> SweepReport {
        let report = SweepReport {
            checked: swept.checked,
            repaired: swept.repaired,
            skipped: swept.skipped,
        };
        self.log_sweep(&report);
        report
    }

    async fn sweep_call(&self, cursor: &SweepCursor, batch: usize, chain: bool) -> Result<(SweepCursor, SweepReport)> {
        if cursor.is_done() {
            return Ok((cursor.clone(), SweepReport::default()));
        }
        let (swept, at) = store::sweep::phase(
            &mut self.conn(),
            self.keys(),
            cursor.phase,
            &cursor.cursor,
            batch.max(1),
            chain,
        )
        .await?;
        let report = self.swept(&swept);
        let next = match swept.next {
            None => SweepCursor {
                phase: at + 1,
                cursor: String::new(),
            },
            Some(next) => SweepCursor {
                phase: at,
                cursor: next,
            },
        };
        Ok((next, report))
    }

    /// Checks the job hashes and dedup markers `keys` (all of this queue,
    /// as a walk of the keyspace found them), at most [`MAX_SWEEP_KEYS`]
    /// per script call: the job phase and the marker phase of a sweep, for
    /// these keys. A key gone since the walk saw it is passed over.
    pub(crate) async fn sweep_keys(&self, keys: &[String]) -> Result<SweepReport> {
        let mut report = SweepReport::default();
        for chunk in keys.chunks(MAX_SWEEP_KEYS) {
            let swept = store::sweep::keys(&mut self.conn(), self.keys(), chunk).await?;
            report.add(self.swept(&swept));
        }
        Ok(report)
    }

    fn log_sweep(&self, report: &SweepReport) {
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
    /// [`Error::InvalidOption`] for a `batch` outside 1..=[`MAX_SWEEP_BATCH`];
    /// server errors (the sweep can simply be run again).
    pub async fn sweep(&self, batch: usize) -> Result<SweepReport> {
        validate::count("sweep batch", batch, 1, MAX_SWEEP_BATCH)?;
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

/// The largest step a caller may ask of a sweep ([`Queue::sweep_step`],
/// [`Queue::sweep`], [`sweep_queues`]), in keys or set members: a step is
/// one script call, which must stay short.
pub const MAX_SWEEP_BATCH: usize = 100_000;

/// The most keys one `sweep` script call checks in phase "keys" (a walk
/// step finds about [`SWEEP_STEP`](super::SWEEP_STEP) keys in all).
pub(crate) const MAX_SWEEP_KEYS: usize = 500;

/// A walk of the keyspace for the job hashes and dedup markers of many
/// queues: one `SCAN MATCH PREFIX:{*}:...` per key prefix (on each master
/// of a cluster), instead of one SCAN of the whole database per queue. The
/// keys found are grouped by queue, and each queue the walk serves checks
/// its own with one script call ([`Queue::sweep_keys`]); keys of other
/// queues are passed over (their own processes sweep them).
///
/// Like a SCAN, a walk sees every key that exists from its start to its
/// end, and may see one twice (checked twice: harmless).
#[derive(Debug, Clone, Default)]
pub(crate) struct Walk {
    /// Prefixes (`"emq:"`) still to walk; the first is under way.
    prefixes: Vec<String>,
    /// The walk of the first prefix: each node's address and SCAN cursor
    /// (`"0"` once that node is done); `None` before its first step.
    nodes: Option<Vec<(String, String)>>,
}

/// The key prefix of `queue` with its trailing colon (`"emq:"`): its base
/// (`"emq:{Q}:"`) without the hash tag.
fn prefix_of(queue: &Queue) -> &str {
    let base: &str = queue.base();
    let tag = queue.name().len() + 3;
    &base[..base.len().saturating_sub(tag)]
}

/// The base (`"emq:{Q}:"`) of the queue a job hash, dedup marker,
/// sequence line or flow `key` found under `prefix` belongs to; `None`
/// for any other key.
fn owner<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('{')?;
    // Queue names hold no '}', so the first one closes the hash tag.
    let close = rest.find('}')?;
    let after = rest[close + 1..].strip_prefix(':')?;
    if !["job:", "de:", "sequence:", "flow:"]
        .iter()
        .any(|p| after.starts_with(p))
    {
        return None;
    }
    Some(&key[..prefix.len() + 1 + close + 2])
}

/// A SCAN reply: the next cursor and the keys (those that are not UTF-8
/// are none of ours).
fn scan_reply(v: Value) -> Result<(String, Vec<String>)> {
    let (cursor, keys): (String, Vec<Vec<u8>>) = redis::from_redis_value(v).map_err(|e| Error::from_redis(e.into()))?;
    Ok((
        cursor,
        keys.into_iter().filter_map(|k| String::from_utf8(k).ok()).collect(),
    ))
}

impl Walk {
    /// A walk over the prefixes of `queues`.
    pub(crate) fn new<'a>(queues: impl IntoIterator<Item = &'a Queue>) -> Walk {
        let mut prefixes: Vec<String> = queues.into_iter().map(|q| prefix_of(q).to_owned()).collect();
        prefixes.sort();
        prefixes.dedup();
        Walk { prefixes, nodes: None }
    }

    /// True once every prefix has been walked to its end.
    pub(crate) fn is_done(&self) -> bool {
        self.prefixes.is_empty()
    }

    /// True when the walk will see every key of `queue`: its prefix is
    /// still to be walked, and that walk has not begun (keys behind its
    /// cursor would be missed).
    pub(crate) fn covers(&self, queue: &Queue) -> bool {
        let prefix = prefix_of(queue);
        match self.prefixes.iter().position(|p| p == prefix) {
            Some(0) => self.nodes.is_none(),
            Some(_) => true,
            None => false,
        }
    }

    /// One step: one SCAN of about `count` keys on one node (on the first
    /// step of a prefix, one on each node), then the check of the keys it
    /// found, one script call per queue that holds some. `find` names the
    /// queue of a base (`"emq:{Q}:"`) if the walk serves it; `via` is the
    /// connection to walk with. An error leaves the walk where it was, so
    /// the same step can be run again.
    pub(crate) async fn step(
        &mut self,
        via: &Queue,
        count: usize,
        find: impl Fn(&str) -> Option<Queue>,
    ) -> Result<SweepReport> {
        let Some(prefix) = self.prefixes.first().cloned() else {
            return Ok(SweepReport::default());
        };
        // job:, de:, sequence: and flow: keys (and a few others, which `owner` drops)
        let pattern = format!("{}{{*}}:[jdsf][oel]*", crate::keys::glob_escape(&prefix));
        let scan = |cursor: &str| {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(count.max(1));
            cmd
        };
        let conn = via.conn();
        let mut found = Vec::new();
        let mut nodes = match self.nodes.take() {
            None => {
                let mut nodes = Vec::new();
                for (addr, v) in conn.each_node(&scan("0")).await.map_err(Error::from_redis)? {
                    let (next, keys) = scan_reply(v)?;
                    found.extend(keys);
                    nodes.push((addr, next));
                }
                nodes
            }
            Some(mut nodes) => {
                if let Some((addr, cursor)) = nodes.iter_mut().find(|(_, c)| c != "0") {
                    let v = match conn.at_node(&scan(cursor), addr).await {
                        Ok(v) => v,
                        Err(e) => {
                            self.nodes = Some(nodes);
                            return Err(Error::from_redis(e));
                        }
                    };
                    let (next, keys) = match scan_reply(v) {
                        Ok(r) => r,
                        Err(e) => {
                            self.nodes = Some(nodes);
                            return Err(e);
                        }
                    };
                    found.extend(keys);
                    *cursor = next;
                }
                nodes
            }
        };
        // Found keys are checked even if a check below fails: the walk
        // moves on (a failed queue's keys are checked again next sweep).
        if nodes.iter().all(|(_, c)| c == "0") {
            self.prefixes.remove(0);
            nodes.clear();
            self.nodes = None;
        } else {
            self.nodes = Some(std::mem::take(&mut nodes));
        }
        let mut by_queue: HashMap<&str, Vec<String>> = HashMap::new();
        for key in &found {
            if let Some(base) = owner(&prefix, key) {
                by_queue.entry(base).or_default().push(key.clone());
            }
        }
        let mut report = SweepReport::default();
        for (base, keys) in by_queue {
            let Some(queue) = find(base) else { continue };
            match queue.sweep_keys(&keys).await {
                Ok(r) => report.add(r),
                Err(e) => {
                    warn!(queue = queue.name(), error = %e, "consistency sweep of the keys a walk found failed");
                }
            }
        }
        Ok(report)
    }
}

/// One consistency sweep of `queues`, as the maintenance task of a
/// [`Client`](crate::Client) runs it, but without its pacing: each queue's
/// own sets in steps of about `batch` members, then one walk of the
/// keyspace per key prefix (SCAN, about `batch` keys a step, on every
/// master of a cluster) whose job hashes and dedup markers are checked by
/// the queue they belong to. It checks what [`Queue::sweep`] of each queue
/// checks, but walks the keyspace once for all of them rather than once per
/// queue: with many queues, it is the way to sweep them all.
///
/// ```no_run
/// # async fn demo(client: echomq::Client) -> echomq::Result<()> {
/// let queues = vec![client.queue("emails").await?, client.queue("reports").await?];
/// let report = echomq::maintenance::sweep_queues(&queues, 500).await?;
/// println!("{} checked, {} repaired", report.checked, report.repaired);
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::InvalidOption`] for a `batch`
/// outside 1..=[`MAX_SWEEP_BATCH`]; server errors (the sweep can simply be
/// run again). A failed check of one queue's keys found by the walk is
/// logged, not returned, so one queue does not stop the sweep of the others.
pub async fn sweep_queues(queues: &[Queue], batch: usize) -> Result<SweepReport> {
    validate::count("sweep batch", batch, 1, MAX_SWEEP_BATCH)?;
    let mut report = SweepReport::default();
    // Queues of different clients may be on different servers: one walk
    // per client.
    let mut groups: Vec<Vec<&Queue>> = Vec::new();
    for q in queues {
        match groups.iter_mut().find(|g| g[0].link().same_as(q.link())) {
            Some(g) => g.push(q),
            None => groups.push(vec![q]),
        }
    }
    for group in groups {
        let by_base: HashMap<Arc<str>, Queue> = group.iter().map(|q| (q.base().clone(), (*q).clone())).collect();
        for q in &group {
            let mut cursor = SweepCursor::sets();
            while !cursor.sets_done() {
                let (next, r) = q.sweep_sets_step(&cursor, batch).await?;
                report.add(r);
                cursor = next;
            }
        }
        let mut walk = Walk::new(group.iter().copied());
        while !walk.is_done() {
            report.add(walk.step(group[0], batch, |b| by_base.get(b).cloned()).await?);
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Keys found by a walk belong to the queue whose hash tag they carry, and only job hashes and dedup markers count.
    #[test]
    fn walk_keys_are_told_by_queue() {
        assert_eq!(owner("emq:", "emq:{mail}:job:42"), Some("emq:{mail}:"));
        assert_eq!(owner("emq:", "emq:{mail}:de:x}y"), Some("emq:{mail}:"));
        assert_eq!(owner("emq:", "emq:{mail}:sequence:k"), Some("emq:{mail}:"));
        assert_eq!(owner("emq:", "emq:{mail}:flow:f"), Some("emq:{mail}:"));
        assert_eq!(owner("emq:", "emq:{mail}:failed"), None);
        assert_eq!(owner("emq:", "emq:{a*b}:job:}:job:1"), Some("emq:{a*b}:"));
        assert_eq!(owner("emq:", "emq:{mail}:pending"), None);
        assert_eq!(owner("emq:", "emq:{mail}:done"), None);
        assert_eq!(owner("emq:", "other:{mail}:job:1"), None);
        assert_eq!(owner("emq:", "emq:mail:job:1"), None);
        assert_eq!(crate::keys::glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
