//! Jobs someone other than their producer and worker acts on: cancel
//! requests racing the workers (C1, C2), and a schedule's ticks raced by
//! two schedulers (K1), under worker SIGKILLs, on one server.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Ctx, Outcome, finish};
use crate::harness::{ProducerOpts, Run, WorkerOpts};

/// `jobs` jobs (about 180 a second, worked off at about 120: a backlog
/// builds), every 5th asked to
/// be cancelled within 30 ms of its
/// enqueue (most while waiting, some while running, a few when done), and
/// a schedule ticking every second raced by two schedulers while the
/// producer runs; a worker SIGKILLed every 0.3–0.9 s. The schedulers stop
/// when the producer is done, before the drain is awaited.
pub fn cancels_and_schedules(ctx: &Ctx, jobs: u64) -> Outcome {
    let server = ctx.server(false);
    let mut run = Run::new(&ctx.bins, &server.url(), "operator");
    run.reaper(100, 1000, false);
    run.producer(&ProducerOpts {
        count: jobs,
        concurrency: 2,
        pace_ms: 10,
        cancel_every: 5,
        cancel_within_ms: 30,
        ..ProducerOpts::default()
    });
    run.scheduler("tick", "* * * * * *");
    run.scheduler("tick", "* * * * * *");
    // Slower than the producer, so jobs wait and cancels find them waiting.
    let worker = || WorkerOpts {
        concurrency: 2,
        // No prefetch: a job waits on the server, not leased in a buffer.
        prefetch: Some(0),
        lease_ms: 1000,
        work_ms: 100,
        ..WorkerOpts::default()
    };
    for _ in 0..3 {
        run.worker(&worker());
    }
    let until = Instant::now() + Duration::from_secs(60 + jobs / 50);
    let mut next_kill = Instant::now() + Duration::from_millis(600);
    let (mut kills, mut schedulers_stopped) = (0u64, false);
    let drained = loop {
        if !schedulers_stopped && run.live("producer").is_empty() {
            run.term_all("scheduler", Duration::from_secs(5));
            schedulers_stopped = true;
        }
        if schedulers_stopped && run.drained() {
            break true;
        }
        if Instant::now() > until {
            break false;
        }
        if Instant::now() >= next_kill {
            let live = run.live("worker");
            if !live.is_empty() {
                let w = live[fastrand::usize(0..live.len())].clone();
                run.kill(&w);
                run.worker(&worker());
                kills += 1;
            }
            next_kill = Instant::now() + Duration::from_millis(fastrand::u64(300..=900));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut notes = BTreeMap::new();
    notes.insert("kills".into(), json!(kills));
    finish(run, drained, notes)
}
