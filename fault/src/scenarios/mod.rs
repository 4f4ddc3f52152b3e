//! The fault scenarios, as functions that run one fault run end to end and
//! return the checker's verdict with the final state. They assert nothing
//! themselves: `tests/faults.rs` asserts that they pass, and
//! `tests/negative_controls.rs` that a build with a broken guarantee fails
//! them. Each waits for its steps with deadlines, never unbounded.
//!
//! One file per kind of fault: worker processes killed, paused or stopped
//! (`workers.rs`), lanes and limits under kills (`limits.rs`), the
//! network (acks cut, partitions, dropped connections: `network.rs`), and
//! the server (restarts, torn AOF tails, clock steps, script flushes:
//! `server.rs`), cancels and schedules (`operator.rs`), flows and batches
//! under kills and restarts (`groups.rs`), and all of them on a cluster
//! (`cluster.rs`). The helpers they share are here.

mod cluster;
mod groups;
mod limits;
mod network;
mod operator;
mod server;
mod workers;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use echomq::server::LocalServer;
use serde_json::Value;

use crate::harness::{Bins, Checked, ProducerOpts, Run};
use crate::history::Ev;
use crate::state::ServerState;
pub use cluster::{
    ClusterClock, ClusterOutcome, ClusterPlan, LOSS_WINDOW_MS, PAUSE_MS, cluster_faults, cluster_faults_on,
    fault_cluster,
};
pub use groups::{GroupsPlan, flows_and_batches};
pub use limits::{LimitsRun, lane_caps, limits};
pub use network::{AckLoss, Cut, ack_lost, connection_drops, partition};
pub use operator::cancels_and_schedules;
pub use server::{clock_steps, script_flush, server_restarts, torn_aof_tails};
pub use workers::{Stale, graceful_shutdown, kill_point, paused_alone, paused_takeover, racing_reapers, random_kills};

/// What every scenario needs: the binaries, and how to start the server.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The fault binaries (and their environment).
    pub bins: Bins,
    /// Environment of the server process (libfaketime, say).
    pub server_env: Vec<(String, String)>,
}

impl Ctx {
    /// A context running `bins` against a plain server.
    pub fn new(bins: Bins) -> Ctx {
        Ctx {
            bins,
            server_env: Vec::new(),
        }
    }

    /// Starts a private server (`aof`: append-only with `appendfsync always`).
    pub fn server(&self, aof: bool) -> LocalServer {
        let mut b = LocalServer::builder();
        if aof {
            b = b.aof(true).appendfsync("always");
        }
        for (k, v) in &self.server_env {
            b = b.env(k, v);
        }
        b.start()
            .expect("start a local server (run scripts/test, which installs one)")
    }
}

/// How a scenario ended.
#[derive(Debug)]
pub struct Outcome {
    /// The checker's verdict.
    pub check: Checked,
    /// Whether every job settled before the deadline.
    pub drained: bool,
    /// The final state of the queue.
    pub state: ServerState,
    /// Scenario-specific observations.
    pub notes: BTreeMap<String, Value>,
}

impl Outcome {
    /// A one-paragraph summary for test output.
    pub fn summary(&self) -> String {
        let r = &self.check.report;
        format!(
            "ok={} drained={} jobs={} completed={} kills={} pauses={} server_restarts={} torn_tails={} clock_steps={} partitions={} drops={} \
             flushes={} redeliveries={} stalls={} duplicate_effects={} explained={} guarded={} guarded_dups={} \
             stale_settles_rejected={} stale_heartbeats_rejected={} already_settled={} lost={} lost_unconfirmed={} notes={}",
            self.check.ok,
            self.drained,
            r["jobs"],
            r["completed"],
            r["worker_kills"],
            r["worker_pauses"],
            r["server_restarts"],
            r["torn_tails"],
            r["clock_steps"],
            r["partitions"],
            r["connection_drops"],
            r["script_flushes"],
            r["redeliveries"],
            r["stalls"],
            r["duplicate_effects"],
            r["duplicate_explained"],
            r["guarded_effects"],
            r["guarded_duplicates"],
            r["stale_settles_rejected"],
            r["stale_heartbeats_rejected"],
            r["already_settled"],
            r["lost"],
            r["lost_unconfirmed"],
            serde_json::to_string(&self.notes).unwrap_or_default()
        )
    }
}

fn finish(run: Run, drained: bool, notes: BTreeMap<String, Value>) -> Outcome {
    finish_with(run, drained, notes, &[])
}

/// [`finish`], with more arguments for the checker.
fn finish_with(mut run: Run, drained: bool, notes: BTreeMap<String, Value>, extra: &[&str]) -> Outcome {
    run.stop_all();
    let mut args = extra.to_vec();
    if !drained {
        args.push("--not-drained");
    }
    let check = run.check(&args);
    let state = run.state();
    // Keep a failed run for reading, unless a negative control made it fail on purpose.
    run.keep |= (!check.ok || !drained) && !run.negative_control();
    if run.keep {
        keep_groups(&run, &state);
    }
    Outcome {
        check,
        drained,
        state,
        notes,
    }
}

/// Writes the final records of a kept run's flows and batches, and of
/// their jobs (an id with a `:`), to `groups-state.txt` in its directory:
/// the server (a cluster, say) may be gone when the run is read.
fn keep_groups(run: &Run, state: &ServerState) {
    if state.flows.is_empty() && state.batches.is_empty() {
        return;
    }
    let jobs: BTreeMap<&String, &crate::state::JobRecord> =
        state.jobs.iter().filter(|(id, _)| id.contains(':')).collect();
    let text = format!(
        "flows: {:#?}\nbatches: {:#?}\noutbox: {}\njobs: {:#?}\n",
        state.flows, state.batches, state.outbox, jobs
    );
    if let Err(e) = std::fs::write(run.dir.join("groups-state.txt"), text) {
        eprintln!("could not keep the groups' state: {e}");
    }
}

fn addr(server: &LocalServer) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], server.port()))
}

/// Waits up to `limit` for `cond`.
fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// The job and token a worker paused on.
fn paused_on(run: &mut Run, src: &str) -> Option<(String, u64)> {
    run.events(src).into_iter().find_map(|r| match r.ev {
        Ev::PausedAt { id, token, .. } => Some((id, token)),
        _ => None,
    })
}

/// Enqueues `count` jobs and waits for the producer to finish.
fn enqueue(run: &mut Run, count: u64) {
    let p = run.producer(&ProducerOpts {
        count,
        ..ProducerOpts::default()
    });
    assert!(
        run.wait_exit(&p, Duration::from_secs(60)),
        "the producer did not finish"
    );
}
