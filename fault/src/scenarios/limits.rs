//! Lane caps, the global cap and rate limits holding while workers are
//! SIGKILLed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Ctx, Outcome, finish_with};
use crate::harness::{ProducerOpts, Run, WorkerOpts};

/// Jobs spread over `lanes` lanes, each capped at `cap` (set in the server
/// by the producer), flow through workers with more handlers than the caps
/// allow, while workers are SIGKILLed at random times and kill points (the
/// killed leases are reaped and given back) and replaced at once. The
/// checker checks the usual invariants plus L1 (never more than `cap`
/// jobs of a lane surely active at once) and L2 (no slot held after the
/// drain). Notes: `lane_max_active`, kills.
pub fn lane_caps(ctx: &Ctx, jobs: u64, lanes: u64, cap: u32, kill_every_ms: u64, limit: Duration) -> Outcome {
    let server = ctx.server(false);
    let mut run = Run::new(&ctx.bins, &server.url(), "lanes");
    run.reaper(100, 1000, false);
    run.producer(&ProducerOpts {
        count: jobs,
        concurrency: 4,
        lanes,
        lane_cap: Some(cap),
        ..ProducerOpts::default()
    });
    let points = ["before_effect", "after_effect_before_ack", "after_ack"];
    let opts = || WorkerOpts {
        concurrency: 8,
        prefetch: [None, Some(8), Some(0)][fastrand::usize(0..3)],
        lease_ms: 1000,
        work_ms: 4,
        pause: Some((points[fastrand::usize(0..3)].into(), 0.004, 1)),
        ..WorkerOpts::default()
    };
    for _ in 0..3 {
        run.worker(&opts());
    }
    let mut next_kill = Instant::now() + Duration::from_millis(kill_every_ms);
    let (mut random, mut at_points) = (0u64, 0u64);
    let drained = run.drive(limit, |run| {
        for w in run.live("worker") {
            if run.paused_at_point(&w) {
                run.kill(&w);
                run.worker(&opts());
                at_points += 1;
            }
        }
        if Instant::now() >= next_kill {
            let live = run.live("worker");
            if !live.is_empty() {
                let w = &live[fastrand::usize(0..live.len())];
                run.kill(w);
                run.worker(&opts());
                random += 1;
            }
            next_kill =
                Instant::now() + Duration::from_millis(fastrand::u64(kill_every_ms / 2..=kill_every_ms * 3 / 2));
        }
    });
    let mut notes = BTreeMap::new();
    notes.insert("kills_at_random_times".into(), json!(random));
    notes.insert("kills_at_kill_points".into(), json!(at_points));
    let cap_arg = format!("--lane-cap={cap}");
    let mut out = finish_with(run, drained, notes, &[&cap_arg]);
    out.notes
        .insert("lane_max_active".into(), out.check.report["lane_max_active"].clone());
    out
}

/// The limits of a [`limits`] run.
#[derive(Debug, Clone, Copy)]
pub struct LimitsRun {
    /// Jobs, spread over `lanes` lanes (`l0`..).
    pub jobs: u64,
    /// Lanes.
    pub lanes: u64,
    /// The queue's global cap.
    pub global_cap: u32,
    /// Every lane's cap.
    pub lane_cap: u32,
    /// The queue's rate limit: (claims, window ms).
    pub rate: (u32, u64),
    /// The default rate limit of lanes: (claims, window ms).
    pub lane_rate: (u32, u64),
    /// Mean time between SIGKILLs of a random worker.
    pub kill_every_ms: u64,
}

impl LimitsRun {
    /// A short run (a few seconds) in which every limit binds: 3 lanes
    /// capped at 3 under a global cap of 6 (the workers have 24 handlers),
    /// 30 claims per 300 ms for the queue (100 a second; the cap lets
    /// through hundreds, so each window opens with a burst) and 5 per
    /// 100 ms for each lane (150 a second together, and a burst of the
    /// queue's 30 would give a lane 10).
    pub fn short() -> Self {
        LimitsRun {
            jobs: 300,
            lanes: 3,
            global_cap: 6,
            lane_cap: 3,
            rate: (30, 300),
            lane_rate: (5, 100),
            kill_every_ms: 400,
        }
    }
}

/// Jobs on lanes under a global cap, lane caps, a queue rate limit and a
/// rate limit per lane (all set in the server by the producer) flow
/// through workers with more handlers than the caps allow, while workers
/// are SIGKILLed at random times and kill points and replaced at once. The
/// checker checks the usual invariants plus G1 (never more than the global
/// cap surely active at once), L1 (a lane's cap), L2 (no slot held after
/// the drain), R1 (never more claims than the queue's limit in any window,
/// on the server clock) and R2 (the same per lane). Notes: `max_active`,
/// `max_claims_per_window`, `lane_max_claims_per_window`, kills.
pub fn limits(ctx: &Ctx, o: LimitsRun, limit: Duration) -> Outcome {
    let server = ctx.server(false);
    let mut run = Run::new(&ctx.bins, &server.url(), "limits");
    run.reaper(100, 1000, false);
    run.producer(&ProducerOpts {
        count: o.jobs,
        concurrency: 4,
        lanes: o.lanes,
        lane_cap: Some(o.lane_cap),
        max_active: Some(o.global_cap),
        rate: Some(o.rate),
        lane_rate: Some(o.lane_rate),
        ..ProducerOpts::default()
    });
    let points = ["before_effect", "after_effect_before_ack", "after_ack"];
    let opts = || WorkerOpts {
        concurrency: 8,
        prefetch: [None, Some(8), Some(0)][fastrand::usize(0..3)],
        lease_ms: 1000,
        work_ms: 4,
        pause: Some((points[fastrand::usize(0..3)].into(), 0.004, 1)),
        ..WorkerOpts::default()
    };
    for _ in 0..3 {
        run.worker(&opts());
    }
    let mut next_kill = Instant::now() + Duration::from_millis(o.kill_every_ms);
    let (mut random, mut at_points) = (0u64, 0u64);
    let drained = run.drive(limit, |run| {
        for w in run.live("worker") {
            if run.paused_at_point(&w) {
                run.kill(&w);
                run.worker(&opts());
                at_points += 1;
            }
        }
        if Instant::now() >= next_kill {
            let live = run.live("worker");
            if !live.is_empty() {
                let w = &live[fastrand::usize(0..live.len())];
                run.kill(w);
                run.worker(&opts());
                random += 1;
            }
            next_kill =
                Instant::now() + Duration::from_millis(fastrand::u64(o.kill_every_ms / 2..=o.kill_every_ms * 3 / 2));
        }
    });
    let mut notes = BTreeMap::new();
    notes.insert("kills_at_random_times".into(), json!(random));
    notes.insert("kills_at_kill_points".into(), json!(at_points));
    let args = [
        format!("--lane-cap={}", o.lane_cap),
        format!("--global-cap={}", o.global_cap),
        format!("--rate={}:{}", o.rate.0, o.rate.1),
        format!("--lane-rate={}:{}", o.lane_rate.0, o.lane_rate.1),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut out = finish_with(run, drained, notes, &args);
    for k in [
        "max_active",
        "max_claims_per_window",
        "lane_max_claims_per_window",
        "lane_max_active",
    ] {
        out.notes.insert(k.into(), out.check.report[k].clone());
    }
    out
}
