//! Faults of worker processes: SIGKILL at kill points and at random,
//! SIGSTOP past a lease (with and without a taker), reapers racing over
//! a killed worker's leases, and SIGTERM.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Ctx, Outcome, enqueue, finish, paused_on, wait_until};
use crate::harness::{ProducerOpts, Run, WorkerOpts};
use crate::history::Ev;

/// A worker stops at kill point `point` on its first job and is SIGKILLed
/// exactly there; another worker finishes the queue.
pub fn kill_point(ctx: &Ctx, point: &str) -> Outcome {
    let server = ctx.server(false);
    let mut run = Run::new(&ctx.bins, &server.url(), "killpoint");
    enqueue(&mut run, 20);
    run.reaper(100, 1000, false);
    let w1 = run.worker(&WorkerOpts {
        concurrency: 4,
        pause: Some((point.into(), 1.0, 1)),
        ..WorkerOpts::default()
    });
    let mut notes = BTreeMap::new();
    let paused = wait_until(Duration::from_secs(20), || run.paused_at_point(&w1));
    let target = paused_on(&mut run, &w1);
    notes.insert("paused".into(), json!(paused));
    notes.insert("paused_job".into(), json!(target));
    run.kill(&w1);
    run.worker(&WorkerOpts::default());
    let drained = run.drive(Duration::from_secs(60), |_| {});
    finish(run, drained, notes)
}

/// Workers are SIGKILLed at random times and at random kill points while
/// `jobs` jobs flow; each killed worker is replaced at once. Workers lease
/// ahead automatically (the default), a fixed 8, or not at all, so kills
/// also catch leases held ahead of handlers.
pub fn random_kills(ctx: &Ctx, jobs: u64, workers: usize, kill_every_ms: u64, limit: Duration) -> Outcome {
    let server = ctx.server(false);
    let mut run = Run::new(&ctx.bins, &server.url(), "random");
    run.reaper(100, 1000, false);
    run.producer(&ProducerOpts {
        count: jobs,
        concurrency: 4,
        dedup_every: 97,
        ..ProducerOpts::default()
    });
    let points = ["before_effect", "after_effect_before_ack", "after_ack"];
    let opts = || WorkerOpts {
        concurrency: 8,
        prefetch: [None, Some(8), Some(0)][fastrand::usize(0..3)],
        lease_ms: 1000,
        work_ms: 2,
        pause: Some((points[fastrand::usize(0..3)].into(), 0.002, 1)),
        ..WorkerOpts::default()
    };
    for _ in 0..workers {
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
    finish(run, drained, notes)
}

/// Which stale call the paused worker of [`paused_takeover`] sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stale {
    /// A heartbeat (`extend`).
    Heartbeat,
    /// Its settlement (`complete`).
    Settle,
}

/// Worker A, paused by SIGSTOP after its effect past its lease, loses the
/// job to worker B; resumed, A's heartbeat or settlement is refused and
/// changes nothing. A is a raw attempt (`WorkerOpts::stale_op`), not a
/// consumer: a consumer resumed past its lease gives up without sending
/// anything, which is right but leaves the server's fence untested. Notes:
/// `unchanged` (the queue's keys are identical before A resumes and after
/// it gave up), `a_event`, `a_token` (A's fencing token).
pub fn paused_takeover(ctx: &Ctx, what: Stale) -> Outcome {
    let server = ctx.server(false);
    let mut run = Run::new(&ctx.bins, &server.url(), "takeover");
    enqueue(&mut run, 1);
    run.reaper(100, 1000, false);
    let a = run.worker(&WorkerOpts {
        concurrency: 1,
        lease_ms: 1000,
        guarded: false,
        stale_op: Some(match what {
            Stale::Heartbeat => "extend",
            Stale::Settle => "complete",
        }),
        ..WorkerOpts::default()
    });
    let mut notes = BTreeMap::new();
    assert!(
        wait_until(Duration::from_secs(20), || run.paused_at_point(&a)),
        "A never reached its kill point"
    );
    notes.insert("a_token".into(), json!(paused_on(&mut run, &a).map(|(_, t)| t)));
    run.pause(&a);
    // B takes the job once the reaper returns it, and holds it (its lease is long).
    let b = run.worker(&WorkerOpts {
        concurrency: 1,
        lease_ms: 60_000,
        pause: Some(("before_effect".into(), 1.0, 1)),
        ..WorkerOpts::default()
    });
    let b_holds = wait_until(Duration::from_secs(20), || run.paused_at_point(&b));
    notes.insert("b_holds".into(), json!(b_holds));
    let before = run.snapshot();
    // Released while stopped, A sends its stale call as soon as it runs again.
    run.release(&a);
    run.resume(&a);
    let a_event = run.wait_event(&a, Duration::from_secs(10), |e| match what {
        Stale::Heartbeat => matches!(e, Ev::LeaseLost { .. } | Ev::Extended { .. }),
        Stale::Settle => matches!(e, Ev::SettleFailed { .. } | Ev::Settled { .. }),
    });
    // Whatever else A would do after that, give it the time to.
    std::thread::sleep(Duration::from_millis(500));
    let after = run.snapshot();
    notes.insert("unchanged".into(), json!(before == after));
    notes.insert("a_event".into(), json!(format!("{a_event:?}")));
    run.release(&b);
    let drained = run.drive(Duration::from_secs(30), |_| {});
    finish(run, drained, notes)
}

/// A lone worker, paused by SIGSTOP before its effect past its lease, with
/// nobody taking the job meanwhile. With `reaper`, a reaper returns the
/// job to pending during the pause; without, the job stays active until a
/// reaper is started after the worker resumed. Either way the resumed
/// worker drops its stale attempt unsettled and then runs the job anew.
/// Notes: `state_while_paused`, `reap_after_deadline_ms`.
pub fn paused_alone(ctx: &Ctx, reaper: bool) -> Outcome {
    let server = ctx.server(false);
    let mut run = Run::new(&ctx.bins, &server.url(), "alone");
    enqueue(&mut run, 1);
    if reaper {
        run.reaper(100, 1000, false);
    }
    let a = run.worker(&WorkerOpts {
        concurrency: 1,
        lease_ms: 1000,
        pause: Some(("before_effect".into(), 1.0, 1)),
        ..WorkerOpts::default()
    });
    assert!(
        wait_until(Duration::from_secs(20), || run.paused_at_point(&a)),
        "the worker never reached its kill point"
    );
    run.pause(&a);
    std::thread::sleep(Duration::from_millis(2500));
    let mut notes = BTreeMap::new();
    let st = run.state();
    let job = st.jobs.values().next().cloned().unwrap_or_default();
    notes.insert("state_while_paused".into(), json!(job.state));
    run.resume(&a);
    let lost = run.wait_event(&a, Duration::from_secs(10), |e| matches!(e, Ev::LeaseLost { .. }));
    notes.insert("lease_lost".into(), json!(format!("{lost:?}")));
    run.release(&a);
    if !reaper {
        std::thread::sleep(Duration::from_millis(300));
        let st = run.state();
        notes.insert(
            "state_before_reaper".into(),
            json!(st.jobs.values().next().map(|j| j.state.clone())),
        );
        run.reaper(100, 1000, false);
    }
    let drained = run.drive(Duration::from_secs(30), |_| {});
    // The gap between the paused attempt's last deadline and its reap.
    // The paused attempt is the first delivery; its token is whatever the
    // queue's counter minted for it.
    let mut deadline = 0;
    let mut reaped = 0;
    let (records, _) = crate::history::read_dir(&run.dir).unwrap_or_default();
    let first = records.iter().find_map(|r| match r.ev {
        Ev::Claimed { token, attempt: 1, .. } => Some(token),
        _ => None,
    });
    notes.insert("first_token".into(), json!(first));
    for r in records {
        match r.ev {
            Ev::Claimed { token, deadline_ms, .. } if Some(token) == first => deadline = deadline.max(deadline_ms),
            Ev::Extended { token, deadline_ms, .. } if Some(token) == first => deadline = deadline.max(deadline_ms),
            Ev::Reap { server_ms, .. } if reaped == 0 => reaped = server_ms,
            _ => {}
        }
    }
    notes.insert("reap_after_deadline_ms".into(), json!(reaped as i64 - deadline as i64));
    finish(run, drained, notes)
}

/// A worker claims `jobs` jobs and is SIGKILLed; once their leases have
/// all expired, `reapers` reaper processes race over them (small batches),
/// then workers drain the queue.
pub fn racing_reapers(ctx: &Ctx, jobs: u64, reapers: usize) -> Outcome {
    let server = ctx.server(false);
    let mut run = Run::new(&ctx.bins, &server.url(), "reapers");
    enqueue(&mut run, jobs);
    let w = run.worker(&WorkerOpts {
        concurrency: jobs as usize,
        lease_ms: 1000,
        without_heartbeats: true,
        pause: Some(("before_effect".into(), 1.0, jobs as u32)),
        ..WorkerOpts::default()
    });
    let all = wait_until(Duration::from_secs(60), || run.counts().is_some_and(|c| c[1] == jobs));
    let mut notes = BTreeMap::new();
    notes.insert("all_leased".into(), json!(all));
    run.kill(&w);
    std::thread::sleep(Duration::from_millis(1300));
    let rs: Vec<String> = (0..reapers).map(|_| run.reaper(1, 50, true)).collect();
    for r in &rs {
        run.wait_exit(r, Duration::from_secs(60));
    }
    run.worker(&WorkerOpts::default());
    run.worker(&WorkerOpts::default());
    let drained = run.drive(Duration::from_secs(120), |_| {});
    finish(run, drained, notes)
}

/// Workers get SIGTERM under load: a quick worker (handlers finish within
/// the grace period) and a slow one (handlers outlast it and are released).
/// Fresh workers then drain the queue. Notes: `exit_ms` per worker, `grace_ms`.
pub fn graceful_shutdown(ctx: &Ctx, jobs: u64) -> Outcome {
    let server = ctx.server(false);
    let mut run = Run::new(&ctx.bins, &server.url(), "shutdown");
    run.reaper(100, 1000, false);
    enqueue(&mut run, jobs);
    let quick = run.worker(&WorkerOpts {
        work_ms: 200,
        shutdown_timeout_ms: 2000,
        ..WorkerOpts::default()
    });
    // It prefetches too: its waiting jobs are handed back unstarted.
    let slow = run.worker(&WorkerOpts {
        work_ms: 5000,
        shutdown_timeout_ms: 500,
        prefetch: Some(4),
        ..WorkerOpts::default()
    });
    let busy = wait_until(Duration::from_secs(20), || {
        run.counts().is_some_and(|c| c[3] >= 10 && c[1] >= 8)
    });
    let mut notes = BTreeMap::new();
    notes.insert("busy_before_stop".into(), json!(busy));
    let mut exits = BTreeMap::new();
    for (w, grace) in [(&quick, 2000u64), (&slow, 500)] {
        let took = run.term(w, Duration::from_millis(grace + 5000));
        exits.insert(w.clone(), json!(took.map(|d| d.as_millis() as u64)));
    }
    notes.insert("exit_ms".into(), json!(exits));
    notes.insert("grace_ms".into(), json!({ quick.clone(): 2000, slow.clone(): 500 }));
    let released = run
        .events(&slow)
        .iter()
        .filter(|r| matches!(&r.ev, Ev::Settled { outcome, .. } if outcome == "released"))
        .count();
    notes.insert("released_by_slow".into(), json!(released));
    run.worker(&WorkerOpts::default());
    run.worker(&WorkerOpts::default());
    let drained = run.drive(Duration::from_secs(60), |_| {});
    finish(run, drained, notes)
}
