//! The history: one JSON object per line, appended by every process of a
//! fault run (workers, reapers, producers, the driver) to its own file.
//!
//! Each event is serialised whole and written with a single `write` on a
//! file opened with `O_APPEND`, so a process killed at any instant leaves
//! only whole lines behind, and an event is on disk before the action it
//! announces starts (an `effect_begin` line precedes the effect's command).
//! Times: `t` is the writer's wall clock (ms), for reading order only;
//! every decision is checked on `server_ms`, the server clock the scripts
//! return.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// One line of a history file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Record {
    /// The writing process's name in this run (`w3`, `p1`, `r1`, `driver`).
    pub src: String,
    /// The writer's wall clock, ms since the Unix epoch (ordering only).
    pub t: u64,
    /// What happened.
    #[serde(flatten)]
    pub ev: Ev,
}

/// What happened. Server times (`server_ms`, `deadline_ms`) are on the
/// server's clock.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Ev {
    /// A process started, with the settings the checker needs.
    Start {
        /// "worker", "reaper", "producer" or "driver".
        role: String,
        /// Its process id.
        pid: u32,
        /// The lease a worker asks for (0 for other roles).
        #[serde(default)]
        lease_ms: u64,
        /// Whether a worker runs the guarded (effect-marker) effect.
        #[serde(default)]
        guarded: bool,
    },
    /// A process stopped gracefully.
    Stop {
        /// Why.
        reason: String,
    },
    /// An enqueue is about to be sent (job `id`, optional dedup id).
    EnqueueInvoke {
        /// The caller-chosen job id.
        id: String,
        /// The dedup id, if any.
        #[serde(default)]
        dedup: Option<String>,
    },
    /// The enqueue was acknowledged: `job` stands for it now.
    EnqueueOk {
        /// The caller-chosen job id.
        id: String,
        /// "created", "existing" or "deduplicated".
        status: String,
        /// The id of the job that holds it (differs when deduplicated).
        job: String,
        /// How long the call took.
        ms: u64,
    },
    /// The enqueue failed: `definite` when nothing can have been stored;
    /// otherwise its outcome is unknown and it is retried with the same id.
    EnqueueFail {
        /// The caller-chosen job id.
        id: String,
        /// The error.
        error: String,
        /// True when the job surely was not stored.
        definite: bool,
        /// How long the call took.
        ms: u64,
    },
    /// A producer asked to cancel job `id` (`Queue::cancel`): `answer` is
    /// "cancelled" (it was waiting: cancelled now), "requested" (it was
    /// running), "finished:STATE", "not_found", or "error: ..." (unknown
    /// whether it applied; asked again).
    CancelAsked {
        /// The job.
        id: String,
        /// What the call answered.
        answer: String,
        /// How long the call took.
        ms: u64,
    },
    /// A scheduler's pass took ticks of `schedule` (`Queue::run_schedules`):
    /// each `(tick ms, job id, created)`, created false when the tick's job
    /// was already there.
    Fired {
        /// The schedule.
        schedule: String,
        /// The server's clock when the ticks were taken.
        server_ms: u64,
        /// The jobs of the ticks taken.
        jobs: Vec<(u64, String, bool)>,
        /// The latest tick taken as missed, if any.
        missed_ms: Option<u64>,
    },
    /// A flow is about to be added (`Queue::add_flow`, with a caller-chosen
    /// id, so an unknown outcome is retried safely): each step's job id,
    /// with the job ids of the steps it waits on.
    FlowInvoke {
        /// The flow's id.
        flow: String,
        /// (job id, the job ids it waits on) of every step.
        steps: Vec<(String, Vec<String>)>,
    },
    /// The flow was added: `status` "created", or "existing" when a retry
    /// after an unknown outcome found it there.
    FlowOk {
        /// The flow's id.
        flow: String,
        /// "created" or "existing".
        status: String,
        /// How long the call took.
        ms: u64,
    },
    /// Adding the flow failed: `definite` when nothing can have been
    /// stored; otherwise it is retried with the same id.
    FlowFail {
        /// The flow's id.
        flow: String,
        /// The error.
        error: String,
        /// True when the flow surely was not stored.
        definite: bool,
        /// How long the call took.
        ms: u64,
    },
    /// A batch is about to be opened (`Queue::open_batch`, caller-chosen
    /// id), with the job ids its callbacks get. Its members are recorded
    /// as enqueues (`EnqueueInvoke`, `EnqueueOk`).
    BatchInvoke {
        /// The batch's id.
        batch: String,
        /// The job ids of its callbacks ("BID:success", "BID:complete").
        callbacks: Vec<String>,
    },
    /// The batch was closed (`Batch::close` answered, or a retry found it
    /// closed): these are all its members.
    BatchClosed {
        /// The batch's id.
        batch: String,
        /// The job ids of its members.
        members: Vec<String>,
        /// How long the call took.
        ms: u64,
    },
    /// A job was leased (the consumer's `Claimed` event).
    Claimed {
        /// The job.
        id: String,
        /// Its fencing token: minted from the queue-wide counter, so
        /// unique in the queue and higher for every later claim; not
        /// related to the delivery number.
        token: u64,
        /// The delivery number (1 on the first claim of the job); 0 when
        /// not recorded.
        #[serde(default)]
        attempt: u64,
        /// The lease deadline.
        deadline_ms: u64,
        /// When the claim ran.
        server_ms: u64,
        /// The job's lane, if it has one (its lease holds one of the
        /// lane's slots until it ends).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lane: Option<String>,
    },
    /// A heartbeat renewed the lease.
    Extended {
        /// The job.
        id: String,
        /// The token.
        token: u64,
        /// The new deadline.
        deadline_ms: u64,
    },
    /// The consumer gave the lease up (`confirmed`: the server said so).
    LeaseLost {
        /// The job.
        id: String,
        /// The token.
        token: u64,
        /// True when the server answered LeaseLost; false when renewal
        /// could not be confirmed in time.
        confirmed: bool,
    },
    /// The handler ended ("ok", "retry", "fail", "snooze", "panicked",
    /// "lease_lost", "stopped").
    HandlerDone {
        /// The job.
        id: String,
        /// The token.
        token: u64,
        /// How it ended.
        result: String,
    },
    /// A settlement was sent (complete, retry, fail, release, snooze).
    SettleSent {
        /// The job.
        id: String,
        /// The token.
        token: u64,
        /// The operation.
        op: String,
    },
    /// The server applied a settlement, or answered "already settled".
    Settled {
        /// The job.
        id: String,
        /// The token.
        token: u64,
        /// The operation.
        op: String,
        /// "completed", "retrying", "failed", "released", "snoozed",
        /// "already_settled".
        outcome: String,
        /// When the script ran.
        server_ms: u64,
    },
    /// A settlement was not applied: `lease_lost` (definite, nothing
    /// changed) or a transport failure (outcome unknown).
    SettleFailed {
        /// The job.
        id: String,
        /// The token.
        token: u64,
        /// The operation.
        op: String,
        /// The error.
        error: String,
        /// True for LeaseLost / JobNotFound: refused by the server.
        lease_lost: bool,
    },
    /// The handler starts its unguarded effect (HINCRBY of the job's counter).
    EffectBegin {
        /// The job.
        id: String,
        /// The attempt's fencing token.
        token: u64,
    },
    /// The unguarded effect was applied; `count` is the counter after it.
    EffectDone {
        /// The job.
        id: String,
        /// The attempt's fencing token.
        token: u64,
        /// The job's counter after this effect.
        count: i64,
    },
    /// The unguarded effect's command failed: applied or not, unknown.
    EffectUnknown {
        /// The job.
        id: String,
        /// The attempt's fencing token.
        token: u64,
        /// The error.
        error: String,
    },
    /// The guarded effect (behind an `EffectMarker`) ran, was skipped, or failed.
    Guarded {
        /// The job.
        id: String,
        /// The attempt's fencing token.
        token: u64,
        /// "ran", "skipped" (done by an earlier attempt), "orphan_found"
        /// (an earlier attempt's effect is visible, so not run again),
        /// "not_claimed" (stale attempt refused), "effect_failed",
        /// "unrecorded".
        result: String,
        /// Extra detail (the error, or the marker state).
        #[serde(default)]
        detail: String,
    },
    /// The process stopped at a kill point and waits to be killed or released.
    PausedAt {
        /// The job.
        id: String,
        /// The attempt's fencing token.
        token: u64,
        /// "before_effect", "after_effect_before_ack" or "after_ack".
        point: String,
    },
    /// A reaper pass.
    Reap {
        /// When the pass ran.
        server_ms: u64,
        /// Jobs returned to pending, with their stalls after the pass.
        requeued: Vec<(String, u64)>,
        /// Jobs failed as stalled, with their stalls.
        failed: Vec<(String, u64)>,
        /// Jobs with a cancel request whose lease lapsed: cancelled.
        #[serde(default)]
        cancelled: Vec<String>,
        /// How long the call took.
        ms: u64,
    },
    /// A reaper pass failed; whether it ran on the server is unknown.
    ReapFailed {
        /// The error.
        error: String,
        /// How long the call took.
        ms: u64,
    },
    /// A fault the driver injected: `kind` is one of kill_worker,
    /// kill_producer, stop_worker, cont_worker, term_worker, term_producer,
    /// term_scheduler, kill_server, restart_server, partition, heal,
    /// drop_connections, client_kill, script_flush, pause_server,
    /// resume_server, cut_ack, clock_step, migrate_slot.
    Fault {
        /// The kind.
        kind: String,
        /// The process or resource it hit.
        #[serde(default)]
        target: String,
        /// Free-form detail.
        #[serde(default)]
        detail: String,
    },
}

/// An append-only history file of one process.
#[derive(Debug)]
pub struct History {
    file: File,
    src: String,
}

impl History {
    /// Opens (creating) `path` for appending, as process `src`.
    pub fn open(path: &Path, src: &str) -> io::Result<History> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(History {
            file,
            src: src.to_owned(),
        })
    }

    /// The process name.
    pub fn src(&self) -> &str {
        &self.src
    }

    /// Appends one event with one `write`. A history that cannot be
    /// written makes the run worthless, so failure panics.
    pub fn write(&self, ev: Ev) {
        let rec = Record {
            src: self.src.clone(),
            t: now_ms(),
            ev,
        };
        let mut line = serde_json::to_vec(&rec).expect("history events serialise");
        line.push(b'\n');
        let n = (&self.file).write(&line).expect("append to the history");
        assert_eq!(n, line.len(), "short write to the history");
    }
}

/// The local wall clock in ms.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Reads every `*.jsonl` file in `dir`. A torn last line (impossible with
/// single writes, but cheap to tolerate) is skipped and counted.
pub fn read_dir(dir: &Path) -> io::Result<(Vec<Record>, usize)> {
    let mut names: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    names.sort();
    let mut out = Vec::new();
    let mut torn = 0;
    for path in names {
        let (mut recs, bad) = read_file(&path)?;
        out.append(&mut recs);
        torn += bad;
    }
    Ok((out, torn))
}

/// Reads one history file.
pub fn read_file(path: &Path) -> io::Result<(Vec<Record>, usize)> {
    let mut out = Vec::new();
    let mut bad = 0;
    for line in BufReader::new(File::open(path)?).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(&line) {
            Ok(r) => out.push(r),
            Err(_) => bad += 1,
        }
    }
    Ok((out, bad))
}

#[cfg(test)]
mod tests {
    use super::*;

    // An event survives the round trip through a history file as one line.
    #[test]
    fn events_round_trip_as_lines() {
        let dir = std::env::temp_dir().join(format!("emq-hist-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w1.jsonl");
        let _ = std::fs::remove_file(&path);
        let h = History::open(&path, "w1").unwrap();
        h.write(Ev::Claimed {
            id: "j1".into(),
            token: 1_764_590_000_000_002,
            attempt: 1,
            deadline_ms: 1500,
            server_ms: 500,
            lane: Some("l0".into()),
        });
        h.write(Ev::Reap {
            server_ms: 9,
            requeued: vec![("j1".into(), 1)],
            failed: vec![],
            cancelled: vec![],
            ms: 3,
        });
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.starts_with(r#"{"src":"w1","t":"#), "{text}");
        assert!(text.contains(r#""ev":"claimed""#), "{text}");
        let (recs, torn) = read_dir(&dir).unwrap();
        assert_eq!(torn, 0);
        assert_eq!(recs.len(), 2);
        assert_eq!(
            recs[0].ev,
            Ev::Claimed {
                id: "j1".into(),
                token: 1_764_590_000_000_002,
                attempt: 1,
                deadline_ms: 1500,
                server_ms: 500,
                lane: Some("l0".into()),
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
