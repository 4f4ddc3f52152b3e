//! The fault scenarios, as functions that run one fault run end to end and
//! return the checker's verdict with the final state. They assert nothing
//! themselves: `tests/faults.rs` asserts that they pass, and
//! `tests/negative_controls.rs` that a build with a broken guarantee fails
//! them. Each waits for its steps with deadlines, never unbounded.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use echomq::server::LocalServer;
use serde_json::{Value, json};

use crate::harness::{Bins, Checked, ProducerOpts, Run, WorkerOpts};
use crate::history::Ev;
use crate::netns::NetNs;
use crate::proxy::Proxy;
use crate::state::ServerState;

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
             stale_settles_rejected={} stale_heartbeats_rejected={} already_settled={} lost={} notes={}",
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
    Outcome {
        check,
        drained,
        state,
        notes,
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

/// How [`ack_lost`] loses the acknowledgement of a `complete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckLoss {
    /// The server runs the complete; its reply dies with the connection.
    ReplyLost,
    /// The complete never reaches the server; the connection dies.
    RequestLost,
    /// The complete never arrives and the worker stays cut off past its lease.
    CutOffPastLease,
}

/// A worker's `complete` is cut in flight by a proxy (see [`AckLoss`]).
pub fn ack_lost(ctx: &Ctx, how: AckLoss) -> Outcome {
    let server = ctx.server(false);
    let proxy = Proxy::start(addr(&server)).expect("start the proxy");
    let mut run = Run::new(&ctx.bins, &server.url(), "acklost");
    run.reaper(100, 1000, false);
    let w1 = run.worker(&WorkerOpts {
        url: Some(proxy.url()),
        concurrency: 1,
        lease_ms: 1500,
        ..WorkerOpts::default()
    });
    // A first job loads the scripts, so the cut hits the complete itself
    // and not a missing-function answer that would be retried anyway.
    enqueue(&mut run, 1);
    let warm = run.wait_event(&w1, Duration::from_secs(10), |e| matches!(e, Ev::Settled { .. }));
    assert!(warm.is_some(), "the first job was not completed");
    let pattern = format!("{{{}}}:completed", run.queue);
    proxy.arm_cut(
        pattern.as_bytes(),
        how == AckLoss::ReplyLost,
        how == AckLoss::CutOffPastLease,
    );
    run.fault("cut_ack", "proxy", &format!("{how:?}"));
    run.producer(&ProducerOpts {
        from: 1,
        count: 1,
        ..ProducerOpts::default()
    });
    let mut notes = BTreeMap::new();
    if how == AckLoss::CutOffPastLease {
        // The worker's settle keeps failing; its lease lapses; another worker redoes the job.
        let gave_up = run.wait_event(&w1, Duration::from_secs(10), |e| matches!(e, Ev::SettleFailed { .. }));
        notes.insert("settle_failed".into(), json!(gave_up.is_some()));
        run.worker(&WorkerOpts::default());
        let drained = run.drive(Duration::from_secs(20), |_| {});
        proxy.blackhole(false);
        notes.insert("cuts".into(), json!(proxy.cuts_done()));
        return finish(run, drained, notes);
    }
    let settled = run.wait_event(
        &w1,
        Duration::from_secs(10),
        |e| matches!(e, Ev::Settled { id, .. } if id == "j1"),
    );
    notes.insert("cuts".into(), json!(proxy.cuts_done()));
    if let Some(Ev::Settled { outcome, .. }) = settled {
        notes.insert("outcome".into(), json!(outcome));
    }
    let drained = run.drive(Duration::from_secs(20), |_| {});
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

/// The server (append-only, `appendfsync always`) is SIGKILLed and
/// restarted `restarts` times while producers and workers run.
pub fn server_restarts(ctx: &Ctx, jobs: u64, restarts: usize, limit: Duration) -> Outcome {
    restarts_run(ctx, "restarts", jobs, restarts, false, limit)
}

/// [`server_restarts`], with a torn tail on the append-only file at every
/// kill: before each restart the newest incremental AOF gets the first
/// bytes of one of its own transactions (`aof::tear`), as a crash in the
/// middle of a write leaves it, so every restart loads a torn tail. The
/// producers use dedup ids, so dedup markers are among the writes torn.
/// On Redis 7.0 the cut falls inside the transaction's `MULTI`
/// (`aof::Cut::InMulti`): its loader applies a transaction torn later
/// than that in part (`ECHOMQ_FAULT_TORN_CUT=anywhere` cuts anywhere
/// there too). Notes: `cut`, `tears` (what was appended each time),
/// `tails_dropped` (times the server's log says it dropped a torn tail
/// while loading).
pub fn torn_aof_tails(ctx: &Ctx, jobs: u64, restarts: usize, limit: Duration) -> Outcome {
    restarts_run(ctx, "torn", jobs, restarts, true, limit)
}

fn restarts_run(ctx: &Ctx, label: &str, jobs: u64, restarts: usize, torn: bool, limit: Duration) -> Outcome {
    let mut server = ctx.server(true);
    let mut run = Run::new(&ctx.bins, &server.url(), label);
    run.reaper(100, 1000, false);
    run.producer(&ProducerOpts {
        count: jobs,
        concurrency: 8,
        dedup_every: 89,
        pace_ms: 3,
        ..ProducerOpts::default()
    });
    for _ in 0..3 {
        run.worker(&WorkerOpts {
            lease_ms: 2000,
            ..WorkerOpts::default()
        });
    }
    let mut done = 0;
    let mut next = Instant::now() + Duration::from_millis(300);
    let mut restart_error = None;
    let mut tears = Vec::new();
    // ECHOMQ_FAULT_TORN_CUT=anywhere cuts anywhere on Redis 7.0 too, to
    // show what its loader then applies.
    let anywhere = std::env::var("ECHOMQ_FAULT_TORN_CUT").is_ok_and(|v| v == "anywhere");
    let cut = if torn && !anywhere && redis_7_0(&mut run) {
        crate::aof::Cut::InMulti
    } else {
        crate::aof::Cut::Anywhere
    };
    let mut restart = |run: &mut Run| {
        run.fault("kill_server", "server", "SIGKILL");
        server.kill();
        if torn {
            match crate::aof::tear(server.dir(), cut) {
                Ok(t) => {
                    let detail = format!(
                        "{}: {} of {} bytes of a transaction, {} whole commands, {}",
                        t.file,
                        t.bytes,
                        t.of,
                        t.whole_commands,
                        if t.at_boundary {
                            "at a command boundary"
                        } else {
                            "inside a command"
                        }
                    );
                    run.fault("torn_aof_tail", "server", &detail);
                    tears.push(json!(detail));
                }
                Err(e) => tears.push(json!(format!("not torn: {e}"))),
            }
        }
        std::thread::sleep(Duration::from_millis(fastrand::u64(50..300)));
        if let Err(e) = server.restart() {
            restart_error = Some(e.to_string());
        }
        run.fault("restart_server", "server", "");
    };
    let mut under_load = 0;
    let mut drained = run.drive(limit, |run| {
        if done < restarts && Instant::now() >= next {
            if !run.live("producer").is_empty() {
                under_load += 1;
            }
            restart(run);
            done += 1;
            next = Instant::now() + Duration::from_millis(fastrand::u64(400..900));
        }
    });
    // Should the queue drain first (a fast machine), the rest still happen.
    while done < restarts {
        restart(&mut run);
        done += 1;
        drained = run.drive(limit, |_| {});
    }
    let mut notes = BTreeMap::new();
    notes.insert("restarts".into(), json!(done));
    notes.insert("restarts_while_producing".into(), json!(under_load));
    notes.insert("restart_error".into(), json!(restart_error));
    if torn {
        notes.insert("cut".into(), json!(format!("{cut:?}")));
        notes.insert("tears".into(), json!(tears));
        notes.insert("tails_dropped".into(), json!(crate::aof::tails_dropped(server.dir())));
    }
    finish(run, drained, notes)
}

/// Whether the server is Redis 7.0 (not Valkey), whose AOF loader can
/// apply part of a torn transaction (see `aof::Cut::InMulti`).
fn redis_7_0(run: &mut Run) -> bool {
    let info: String = run
        .conn()
        .and_then(|mut c| redis::cmd("INFO").arg("server").query(&mut c))
        .unwrap_or_default();
    !info.contains("valkey") && info.contains("redis_version:7.0.")
}

/// libfaketime's thread-safe build, to step a server's clock.
fn faketime_mt() -> Option<&'static str> {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
}

/// The server's clock (libfaketime, offset read from a file at every
/// call; its monotonic clock left alone) steps forward `steps` times by
/// 3–30 s, past every lease, under load. Forward only: the checker's I6
/// compares server times across attempts, which a backward step would
/// reorder by design (`tests/clock.rs` covers backward steps). Handlers
/// take up to 200 ms, so every step finds leases held, and the recording
/// reaper runs single passes, which do not hold reaping after a step
/// (only `Reaper::run` and the maintenance task do): it reaps the held
/// leases its next pass finds before their workers renew them, the most
/// stalls and lost leases a step can cause. `Err` says why it cannot run
/// (no libfaketime, or a server that does not start under it: Debian's
/// jemalloc-linked Redis 7.0).
pub fn clock_steps(ctx: &Ctx, jobs: u64, steps: usize) -> Result<Outcome, String> {
    let lib = faketime_mt().ok_or("libfaketime is missing (libfaketimeMT.so.1)")?;
    let file = std::env::temp_dir().join(format!(
        "echomq-fault-clock-{}-{}.faketime",
        std::process::id(),
        fastrand::u64(..)
    ));
    let set = |offset_s: u64| std::fs::write(&file, format!("+{offset_s}\n"));
    set(0).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut b = LocalServer::builder()
        .env("LD_PRELOAD", lib)
        .env("FAKETIME_TIMESTAMP_FILE", &file.display().to_string())
        .env("FAKETIME_NO_CACHE", "1")
        .env("DONT_FAKE_MONOTONIC", "1");
    for (k, v) in &ctx.server_env {
        b = b.env(k, v);
    }
    let server = b
        .start()
        .map_err(|e| format!("this server binary does not start under libfaketime: {e}"))?;
    let mut run = Run::new(&ctx.bins, &server.url(), "clock");
    run.reaper(100, 1000, false);
    run.producer(&ProducerOpts {
        count: jobs,
        concurrency: 4,
        dedup_every: 97,
        pace_ms: 3,
        ..ProducerOpts::default()
    });
    for _ in 0..3 {
        run.worker(&WorkerOpts {
            lease_ms: 1000,
            work_ms: 200,
            ..WorkerOpts::default()
        });
    }
    let (mut done, mut offset) = (0, 0u64);
    let mut errors = Vec::new();
    let mut next = Instant::now() + Duration::from_millis(1000);
    let drained = run.drive(Duration::from_secs(120 + 5 * steps as u64), |run| {
        if done < steps && Instant::now() >= next {
            let by = fastrand::u64(3..=30);
            offset += by;
            match set(offset) {
                Ok(()) => run.fault("clock_step", "server", &format!("+{by} s")),
                Err(e) => errors.push(e.to_string()),
            }
            done += 1;
            next = Instant::now() + Duration::from_millis(fastrand::u64(1000..2000));
        }
    });
    // How far the server's clock is ahead of ours: the steps took hold.
    let ahead_s = run
        .conn()
        .and_then(|mut c| redis::cmd("TIME").query::<(u64, u64)>(&mut c))
        .ok()
        .and_then(|(s, _)| {
            let ours = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?;
            Some(s as i64 - ours.as_secs() as i64)
        });
    let mut notes = BTreeMap::new();
    notes.insert("steps".into(), json!(done));
    notes.insert("offset_s".into(), json!(offset));
    notes.insert("server_ahead_s".into(), json!(ahead_s));
    notes.insert("errors".into(), json!(errors));
    let out = finish(run, drained, notes);
    drop(server);
    let _ = std::fs::remove_file(&file);
    Ok(out)
}

/// How [`partition`] cuts the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// iptables DROP in a network namespace holding the server.
    Namespace,
    /// The loopback proxy stops moving bytes.
    Proxy,
}

/// Blackholes the server `rounds` times for `hold_ms` (longer than the
/// lease) under load. `Err` says why a namespace could not be had.
pub fn partition(ctx: &Ctx, how: Cut, jobs: u64, rounds: usize, hold_ms: u64) -> Result<Outcome, String> {
    let mut ns = None;
    let mut proxy = None;
    let mut local = None;
    let (url, client_url) = match how {
        Cut::Namespace => {
            let mut n = NetNs::create()?;
            let bin = echomq::server::find_server_binary().map_err(|e| e.to_string())?;
            let env: Vec<&str> = Vec::new();
            n.start_server(&bin, &env)?;
            let u = n.url();
            ns = Some(n);
            (u.clone(), u)
        }
        Cut::Proxy => {
            let s = ctx.server(false);
            let p = Proxy::start(addr(&s)).map_err(|e| e.to_string())?;
            let urls = (s.url(), p.url());
            local = Some(s);
            proxy = Some(p);
            urls
        }
    };
    let mut run = Run::new(&ctx.bins, &url, "partition");
    run.client_url = client_url;
    run.reaper(100, 1000, false);
    run.producer(&ProducerOpts {
        count: jobs,
        concurrency: 4,
        pace_ms: 5,
        ..ProducerOpts::default()
    });
    for _ in 0..3 {
        run.worker(&WorkerOpts {
            lease_ms: 1000,
            response_timeout_ms: 500,
            ..WorkerOpts::default()
        });
    }
    let mut done = 0;
    let mut next = Instant::now() + Duration::from_millis(1000);
    let mut errors = Vec::new();
    let drained = run.drive(Duration::from_secs(60 + 10 * rounds as u64), |run| {
        if done < rounds && Instant::now() >= next {
            run.fault("partition", &format!("{how:?}"), &format!("{hold_ms} ms"));
            match (&mut ns, &proxy) {
                (Some(n), _) => {
                    if let Err(e) = n.partition() {
                        errors.push(e);
                    }
                }
                (None, Some(p)) => p.blackhole(true),
                _ => {}
            }
            std::thread::sleep(Duration::from_millis(hold_ms));
            match (&mut ns, &proxy) {
                (Some(n), _) => {
                    if let Err(e) = n.heal() {
                        errors.push(e);
                    }
                }
                (None, Some(p)) => p.blackhole(false),
                _ => {}
            }
            run.fault("heal", &format!("{how:?}"), "");
            done += 1;
            next = Instant::now() + Duration::from_millis(1500);
        }
    });
    let mut notes = BTreeMap::new();
    notes.insert("rounds".into(), json!(done));
    notes.insert("errors".into(), json!(errors));
    let out = finish(run, drained, notes);
    drop(local);
    Ok(out)
}

/// Connections are dropped under load: the proxy closes every connection
/// every 0.5–1.5 s, and `CLIENT KILL TYPE normal` runs on the server every
/// 2 s. (Much more often and a loaded 2-core machine spends its time
/// reconnecting: progress stalls, which says nothing about safety.)
pub fn connection_drops(ctx: &Ctx, jobs: u64) -> Outcome {
    let server = ctx.server(false);
    let proxy = Proxy::start(addr(&server)).expect("start the proxy");
    let mut run = Run::new(&ctx.bins, &server.url(), "drops");
    run.client_url = proxy.url();
    run.reaper(100, 1000, false);
    run.producer(&ProducerOpts {
        count: jobs,
        concurrency: 4,
        pace_ms: 3,
        ..ProducerOpts::default()
    });
    for _ in 0..3 {
        run.worker(&WorkerOpts::default());
    }
    let (mut drops, mut kills) = (0, 0);
    let mut next_drop = Instant::now() + Duration::from_millis(500);
    let mut next_kill = Instant::now() + Duration::from_millis(2000);
    let drained = run.drive(Duration::from_secs(90), |run| {
        if Instant::now() >= next_drop {
            proxy.drop_connections();
            run.fault("drop_connections", "proxy", "");
            drops += 1;
            next_drop = Instant::now() + Duration::from_millis(fastrand::u64(500..1500));
        }
        if Instant::now() >= next_kill {
            if let Ok(mut c) = run.conn() {
                let _: redis::RedisResult<i64> =
                    redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal").query(&mut c);
                run.fault("client_kill", "server", "CLIENT KILL TYPE normal");
                kills += 1;
            }
            next_kill = Instant::now() + Duration::from_millis(2000);
        }
    });
    let mut notes = BTreeMap::new();
    notes.insert("proxy_drops".into(), json!(drops));
    notes.insert("client_kills".into(), json!(kills));
    finish(run, drained, notes)
}

/// `FUNCTION FLUSH` every 100 ms under load: the scripts' function
/// library reloads when a call finds it missing.
pub fn script_flush(ctx: &Ctx, jobs: u64) -> Outcome {
    let server = ctx.server(false);
    let mut run = Run::new(&ctx.bins, &server.url(), "flush");
    run.reaper(100, 1000, false);
    run.producer(&ProducerOpts {
        count: jobs,
        concurrency: 4,
        pace_ms: 2,
        ..ProducerOpts::default()
    });
    for _ in 0..2 {
        run.worker(&WorkerOpts::default());
    }
    let mut next = Instant::now();
    let mut flushes = 0;
    let drained = run.drive(Duration::from_secs(90), |run| {
        if Instant::now() >= next {
            if let Ok(mut c) = run.conn() {
                let _: redis::RedisResult<()> = redis::cmd("FUNCTION").arg("FLUSH").query(&mut c);
                run.fault("script_flush", "server", "");
                flushes += 1;
            }
            next = Instant::now() + Duration::from_millis(100);
        }
    });
    let mut notes = BTreeMap::new();
    notes.insert("flushes".into(), json!(flushes));
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
