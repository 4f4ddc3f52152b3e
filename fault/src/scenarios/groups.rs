//! Flows and batches (`crate::groups`) under faults: workers SIGKILLed
//! at random while they hold steps and members, and the server SIGKILLed
//! and restarted from its append-only file, with torn tails if asked.
//! The checker's F1–F3 and B1–B2 decide, beside every other invariant.
//! With [`GroupsPlan::spread`] the flows and batches span a second queue
//! of the same server, worked by its own workers: steps and members made
//! there, and their ends told home, go through the outboxes' messages,
//! which the relays carry through the kills and restarts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use super::server::Restarter;
use super::{Ctx, Outcome, finish};
use crate::harness::{ProducerOpts, ReaperOpts, Run, WorkerOpts};

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
    /// Put two steps of every flow and half the members of every batch on
    /// a second queue (`Run::spread`), with two workers and a reaper of
    /// its own.
    pub spread: bool,
}

/// One producer adds the plan's flows, batches and jobs while three
/// workers (1 s leases, handlers up to 40 ms) run them (and two more the
/// second queue's, when spread); one worker is
/// SIGKILLed at random about every `kill_every_ms` and replaced, and the
/// server is SIGKILLed and restarted `restarts` times, 0.7–1.5 s apart,
/// from the first while the producer is still adding. Notes:
/// `worker_kills`, `restarts`, `restarts_while_producing`, `far_jobs`
/// (job records on the second queue), and the restarter's (`restart_error`, and with torn tails `cut`, `tears`,
/// `tails_dropped`).
pub fn flows_and_batches(ctx: &Ctx, plan: &GroupsPlan) -> Outcome {
    let mut server = ctx.server(true);
    let mut run = Run::new(
        &ctx.bins,
        &server.url(),
        match (plan.torn, plan.spread) {
            (false, false) => "groups",
            (true, false) => "groups-torn",
            (false, true) => "spread",
            (true, true) => "spread-torn",
        },
    );
    let far = plan.spread.then(|| run.spread());
    run.reaper(100, 1000, false);
    if let Some(far) = &far {
        run.reaper_with(&ReaperOpts {
            queue: Some(far.clone()),
            ..ReaperOpts::default()
        });
    }
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
    let far_opts = WorkerOpts {
        queue: far.clone(),
        ..opts.clone()
    };
    // worker → the options it was started with, to start its like after a kill
    let mut workers = BTreeMap::new();
    for o in [&opts, &opts, &opts] {
        workers.insert(run.worker(o), o.clone());
    }
    if far.is_some() {
        for o in [&far_opts, &far_opts] {
            workers.insert(run.worker(o), o.clone());
        }
    }
    let mut restarter = Restarter::new(&mut run, plan.torn);
    let (mut kills, mut restarts, mut under_load) = (0u64, 0usize, 0usize);
    let mut next_kill = Instant::now() + Duration::from_millis(plan.kill_every_ms);
    let mut next_restart = Instant::now() + Duration::from_millis(500);
    let mut drained = run.drive(plan.limit, |run| {
        if Instant::now() >= next_kill {
            let live = run.live("worker");
            if !live.is_empty() {
                let victim = &live[fastrand::usize(0..live.len())];
                run.kill(victim);
                let o = workers[victim].clone();
                workers.insert(run.worker(&o), o);
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
    notes.insert(
        "far_jobs".into(),
        json!(far.as_deref().map_or(Some(0), |f| job_records(&run, f))),
    );
    finish(run, drained, notes)
}

/// How many job records `queue` holds (`None`: it could not be read).
pub(super) fn job_records(run: &Run, queue: &str) -> Option<u64> {
    let mut c = run.conn_of(queue).ok()?;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("emq:{{{queue}}}:job:*"))
        .query(&mut c)
        .ok()?;
    Some(keys.len() as u64)
}
