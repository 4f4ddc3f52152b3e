//! Flows and batches (`crate::groups`) under faults: workers SIGKILLed
//! at random while they hold steps and members, and the server SIGKILLed
//! and restarted from its append-only file, with torn tails if asked.
//! The checker's F1–F3 and B1–B2 decide, beside every other invariant.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use super::server::Restarter;
use super::{Ctx, Outcome, finish};
use crate::harness::{ProducerOpts, Run, WorkerOpts};

/// What a run of [`flows_and_batches`] does.
#[derive(Debug, Clone)]
pub struct GroupsPlan {
    /// Flows of six steps to add.
    pub flows: u64,
    /// Batches of eight members to add.
    pub batches: u64,
    /// Plain jobs enqueued beside them.
    pub jobs: u64,
    /// A worker is SIGKILLed about this often (and another started).
    pub kill_every_ms: u64,
    /// Server SIGKILLs and restarts.
    pub restarts: usize,
    /// A torn tail on the append-only file before every restart.
    pub torn: bool,
    /// How long the run may take.
    pub limit: Duration,
}

/// One producer adds the plan's flows, batches and jobs while three
/// workers (1 s leases, handlers up to 40 ms) run them; one worker is
/// SIGKILLed at random about every `kill_every_ms` and replaced, and the
/// server is SIGKILLed and restarted `restarts` times, 0.7–1.5 s apart,
/// from the first while the producer is still adding. Notes:
/// `worker_kills`, `restarts`, `restarts_while_producing`, and the
/// restarter's (`restart_error`, and with torn tails `cut`, `tears`,
/// `tails_dropped`).
pub fn flows_and_batches(ctx: &Ctx, plan: &GroupsPlan) -> Outcome {
    let mut server = ctx.server(true);
    let mut run = Run::new(
        &ctx.bins,
        &server.url(),
        if plan.torn { "groups-torn" } else { "groups" },
    );
    run.reaper(100, 1000, false);
    run.producer(&ProducerOpts {
        count: plan.jobs,
        concurrency: 4,
        pace_ms: 5,
        flows: plan.flows,
        batches: plan.batches,
        members: 8,
        ..ProducerOpts::default()
    });
    let opts = WorkerOpts {
        concurrency: 8,
        lease_ms: 1000,
        work_ms: 40,
        ..WorkerOpts::default()
    };
    for _ in 0..3 {
        run.worker(&opts);
    }
    let mut restarter = Restarter::new(&mut run, plan.torn);
    let (mut kills, mut restarts, mut under_load) = (0u64, 0usize, 0usize);
    let mut next_kill = Instant::now() + Duration::from_millis(plan.kill_every_ms);
    let mut next_restart = Instant::now() + Duration::from_millis(500);
    let mut drained = run.drive(plan.limit, |run| {
        if Instant::now() >= next_kill {
            let live = run.live("worker");
            if !live.is_empty() {
                run.kill(&live[fastrand::usize(0..live.len())]);
                run.worker(&opts);
                kills += 1;
            }
            next_kill = Instant::now()
                + Duration::from_millis(fastrand::u64(plan.kill_every_ms / 2..=plan.kill_every_ms * 3 / 2));
        }
        if restarts < plan.restarts && Instant::now() >= next_restart {
            if !run.live("producer").is_empty() {
                under_load += 1;
            }
            restarter.restart(run, &mut server);
            restarts += 1;
            next_restart = Instant::now() + Duration::from_millis(fastrand::u64(700..1500));
        }
    });
    // Should the queue drain first (a fast machine), the rest still happen.
    while restarts < plan.restarts {
        restarter.restart(&mut run, &mut server);
        restarts += 1;
        drained = run.drive(plan.limit, |_| {});
    }
    let mut notes = BTreeMap::new();
    notes.insert("worker_kills".into(), json!(kills));
    notes.insert("restarts".into(), json!(restarts));
    notes.insert("restarts_while_producing".into(), json!(under_load));
    restarter.notes(&server, &mut notes);
    finish(run, drained, notes)
}
