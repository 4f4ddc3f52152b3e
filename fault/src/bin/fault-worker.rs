//! A worker process of a fault run: an echomq `Consumer` whose observer
//! appends every step to a history, whose handler performs an unguarded
//! effect (HINCRBY of the job's counter in `fault:{Q}:fxu`) and, with
//! `--guarded`, a guarded one (the same behind an `EffectMarker`, in
//! `fault:{Q}:fxg`, applied only with a fencing token no older than any
//! seen for the job, kept in `fault:{Q}:fxg:fence`, as the effect module
//! recommends against paused attempts). With `--role=reaper` it runs reaper passes instead and
//! records what each reaped. Every event names the attempt by its fencing
//! token (`Job::token`), the key the checker joins events on; `Claimed`
//! also records the delivery number (`Job::attempt`).
//!
//! The consumer reaps nothing itself (`Worker::reaper(false)`: its
//! client's maintenance task leaves the queue alone), so every reap of a
//! run is a recorded reaper pass. The jobs' limits (attempts, stalls,
//! backoff) were fixed when the producer enqueued them.
//!
//! Kill points: `--pause-point=before_effect|after_effect_before_ack|after_ack`
//! with `--pause-prob=P` (default 1) and `--pause-max=N` (default 1) makes it
//! write a `paused_at` event (and the file `HISTORY.paused`) at that point
//! and wait there until the file `HISTORY.go` exists, so the driver can
//! SIGKILL it exactly there. A handler paused before or after its effect
//! keeps its lease alive with heartbeats and gives up if cancelled.
//! SIGTERM or Ctrl-C: graceful shutdown (`ConsumerHandle::shutdown`).
//!
//! `--role=scheduler --schedule=NAME --cron=EXPR` stores the schedule
//! (every job of it with 1,000 attempts and stalls, a whole payload) and
//! runs scheduling passes every `--interval-ms`, recording each schedule's
//! ticks taken (`fired`), until SIGTERM.
//!
//! `--role=raw --stale-op=extend|complete` is one attempt through the
//! low-level calls instead of a `Consumer`: it claims one job, performs the
//! unguarded effect, stops at the kill point `after_effect_before_ack`
//! until released, then sends `extend` or `complete` with its token
//! whatever the time. A `Consumer` fences itself: once its lease may have
//! lapsed (say after a SIGSTOP) it settles nothing, so it cannot show that
//! the *server* refuses a stale token. This is the client that paused
//! between its own check and the send, so the server's fence is exercised
//! every time.
//!
//! ```text
//! fault-worker --url=redis://127.0.0.1:6379/ --queue=q --history=w1.jsonl --src=w1 \
//!     [--role=worker|reaper] [--concurrency=8] [--prefetch=N] [--lease-ms=1000]
//!     [--heartbeat-ms=N | --no-heartbeats]
//!     [--work-ms=0] [--guarded] [--shutdown-timeout-ms=2000] [--response-timeout-ms=1000]
//!     [--pause-point=P --pause-prob=1 --pause-max=1 --pause-job=ID]
//!     reaper: [--interval-ms=100] [--batch=1000] [--until-empty]
//!     scheduler: --schedule=NAME --cron=EXPR [--interval-ms=100]
//!     raw: --stale-op=extend|complete [--lease-ms=1000]
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use echomq::{
    Consumer, EffectMarker, Error, HandlerError, Job, MarkerState, Once, OnceError, Outcome, Queue, Reaper, Schedule,
    SettleOp, WorkerEvent,
};
use echomq_fault::args::Args;
use echomq_fault::history::{Ev, History};
use echomq_fault::state::{effect_key, guarded_key, payload_for, payload_is_whole};
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use serde_json::Value;
use tokio::signal::unix::{SignalKind, signal};

struct Worker {
    hist: History,
    queue: Queue,
    /// Connection for the effects (outside echomq's own keys).
    fx: Fx,
    effect_key: String,
    guarded_key: String,
    guarded: bool,
    work_ms: u64,
    pause_point: Option<String>,
    pause_prob: f64,
    pause_left: AtomicU32,
    pause_job: Option<String>,
    go_file: PathBuf,
    /// Created at a kill point, so the driver notices without reading the history.
    paused_file: PathBuf,
}

impl Worker {
    /// Whether this job stops at `point` (and uses up one pause).
    fn pauses_at(&self, id: &str, point: &str) -> bool {
        if self.pause_point.as_deref() != Some(point) {
            return false;
        }
        if self.pause_job.as_deref().is_some_and(|j| j != id) {
            return false;
        }
        if fastrand::f64() >= self.pause_prob {
            return false;
        }
        self.pause_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Stops at a kill point in the handler until released or cancelled.
    async fn pause(&self, id: &str, token: u64, point: &str, job: &Job<Value>) -> Result<(), String> {
        if !self.pauses_at(id, point) {
            return Ok(());
        }
        self.hist.write(Ev::PausedAt {
            id: id.to_owned(),
            token,
            point: point.to_owned(),
        });
        let _ = std::fs::write(&self.paused_file, point);
        while !self.go_file.exists() {
            if job.is_cancelled() {
                return Err(format!("cancelled while paused at {point}"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    async fn handle(&self, job: Job<Value>) -> Result<(), String> {
        let (id, token) = (job.id().to_owned(), job.token());
        // A payload that does not read back whole fails the job for good
        // (retries read the same record), so the run cannot pass.
        if !payload_is_whole(job.payload()) {
            return Err(format!("payload of {id} did not read back whole: {}", job.payload()));
        }
        if self.work_ms > 0 {
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..=self.work_ms))).await;
        }
        self.pause(&id, token, "before_effect", &job).await?;
        if job.is_cancelled() {
            return Err("cancelled before the effect".into());
        }
        self.hist.write(Ev::EffectBegin { id: id.clone(), token });
        match self.fx.hincr(&self.effect_key, &id, 1).await {
            Ok(count) => self.hist.write(Ev::EffectDone {
                id: id.clone(),
                token,
                count,
            }),
            Err(e) => {
                self.hist.write(Ev::EffectUnknown {
                    id: id.clone(),
                    token,
                    error: e.to_string(),
                });
                return Err(format!("effect failed: {e}"));
            }
        }
        if self.guarded {
            self.guarded_effect(&job).await?;
        }
        self.pause(&id, token, "after_effect_before_ack", &job).await?;
        Ok(())
    }

    /// The guarded effect: HINCRBY behind an effect marker. An orphaned
    /// marker (an earlier attempt died inside the effect) is resolved by
    /// reading the counter, the "external system's own record".
    async fn guarded_effect(&self, job: &Job<Value>) -> Result<(), String> {
        let (id, token) = (job.id().to_owned(), job.token());
        let marker = EffectMarker::for_job(&self.queue, job, "fault").map_err(|e| e.to_string())?;
        let fx = self.fx.clone();
        let key = self.guarded_key.clone();
        let fence = format!("{key}:fence");
        let field = id.clone();
        let mine = token.to_string();
        let done = marker
            .once(|state| async move {
                if let MarkerState::Orphaned { token } = state {
                    // Fence first, then read: the attempt that held the
                    // marker may only be paused, and must not land its
                    // effect after this one decided.
                    fx.eval(RAISE_FENCE, &[&fence], &[&field, &mine])
                        .await
                        .map_err(|e| e.to_string())?;
                    let seen = fx.hget(&key, &field).await.map_err(|e| e.to_string())?;
                    if seen.unwrap_or(0) >= 1 {
                        return Ok(format!("orphan_found (token {token})"));
                    }
                }
                let n = fx
                    .eval(FENCED_APPLY, &[&fence, &key], &[&field, &mine])
                    .await
                    .map_err(|e| e.to_string())?;
                if n < 0 {
                    return Err(format!("fenced out: a newer attempt than {mine} holds job {field}"));
                }
                Ok::<_, String>(format!("ran (count {n}, state {state:?})"))
            })
            .await;
        let (result, detail, ok) = match done {
            Ok(Once::Ran(what)) => {
                let r = if what.starts_with("ran") { "ran" } else { "orphan_found" };
                (r, what, true)
            }
            Ok(Once::Skipped { token }) => ("skipped", format!("done by token {token}"), true),
            Ok(_) => ("other", String::new(), true),
            Err(OnceError::Claim(e)) => ("not_claimed", e.to_string(), false),
            Err(OnceError::Effect(e)) => ("effect_failed", e, false),
            Err(OnceError::Unrecorded(e)) => ("unrecorded", e.to_string(), false),
            Err(e) => ("error", e.to_string(), false),
        };
        self.hist.write(Ev::Guarded {
            id,
            token,
            result: result.into(),
            detail: detail.clone(),
        });
        if ok {
            Ok(())
        } else {
            Err(format!("guarded effect: {result}: {detail}"))
        }
    }

    fn observe(&self, e: &WorkerEvent<'_>) {
        let ev = match *e {
            WorkerEvent::Claimed {
                id,
                token,
                attempt,
                deadline_ms,
                server_ms,
                lane,
                ..
            } => Ev::Claimed {
                id: id.into(),
                token,
                attempt,
                deadline_ms,
                server_ms,
                lane: lane.map(Into::into),
            },
            WorkerEvent::Extended {
                id, token, deadline_ms, ..
            } => Ev::Extended {
                id: id.into(),
                token,
                deadline_ms,
            },
            WorkerEvent::LeaseLost {
                id, token, confirmed, ..
            } => Ev::LeaseLost {
                id: id.into(),
                token,
                confirmed,
            },
            WorkerEvent::HandlerDone { id, token, result, .. } => Ev::HandlerDone {
                id: id.into(),
                token,
                result: result.as_str().into(),
            },
            WorkerEvent::SettleSent { id, token, op, .. } => Ev::SettleSent {
                id: id.into(),
                token,
                op: op.as_str().into(),
            },
            WorkerEvent::Settled {
                id,
                token,
                op,
                outcome,
                server_ms,
                ..
            } => {
                self.hist.write(Ev::Settled {
                    id: id.into(),
                    token,
                    op: op.as_str().into(),
                    outcome: outcome_name(outcome).into(),
                    server_ms,
                });
                if op == SettleOp::Complete && outcome == Outcome::Completed && self.pauses_at(id, "after_ack") {
                    self.hist.write(Ev::PausedAt {
                        id: id.into(),
                        token,
                        point: "after_ack".into(),
                    });
                    let _ = std::fs::write(&self.paused_file, "after_ack");
                    // Block this job's task (the observer runs inline) until released.
                    while !self.go_file.exists() {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                return;
            }
            WorkerEvent::SettleFailed {
                id, token, op, error, ..
            } => Ev::SettleFailed {
                id: id.into(),
                token,
                op: op.as_str().into(),
                error: error.to_string(),
                lease_lost: matches!(error, Error::LeaseLost { .. } | Error::JobNotFound(_)),
            },
            _ => return,
        };
        self.hist.write(ev);
    }
}

fn outcome_name(o: Outcome) -> &'static str {
    match o {
        Outcome::Completed => "completed",
        Outcome::Retrying { .. } => "retrying",
        Outcome::Failed => "failed",
        Outcome::Released => "released",
        Outcome::Snoozed { .. } => "snoozed",
        Outcome::AlreadySettled => "already_settled",
        _ => "other",
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn terminated() {
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// The effects' connection: to the server, or (a comma-separated `--url`)
/// a cluster connection that follows the slot of `fault:{Q}:*` through
/// failovers and slot moves.
#[derive(Clone)]
enum Fx {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Fx {
    async fn hincr(&self, key: &str, field: &str, by: i64) -> redis::RedisResult<i64> {
        match self.clone() {
            Fx::Single(mut c) => c.hincr(key, field, by).await,
            Fx::Cluster(mut c) => c.hincr(key, field, by).await,
        }
    }

    async fn hget(&self, key: &str, field: &str) -> redis::RedisResult<Option<i64>> {
        match self.clone() {
            Fx::Single(mut c) => c.hget(key, field).await,
            Fx::Cluster(mut c) => c.hget(key, field).await,
        }
    }

    /// Runs `script` (EVAL) on `keys` (one slot) with `args`.
    async fn eval(&self, script: &str, keys: &[&str], args: &[&str]) -> redis::RedisResult<i64> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script).arg(keys.len()).arg(keys).arg(args);
        match self.clone() {
            Fx::Single(mut c) => cmd.query_async(&mut c).await,
            Fx::Cluster(mut c) => cmd.query_async(&mut c).await,
        }
    }
}

/// The guarded effect's "external system" accepts a fencing token, as the
/// effect module recommends against attempts that are paused or cut off:
/// `KEYS[1]` holds the highest token seen per job (`ARGV[1]`); an apply
/// with an older token (`ARGV[2]`) is refused (-1), otherwise it raises
/// the fence and increments the job's counter in `KEYS[2]` (its new value).
const FENCED_APPLY: &str = r"
local fence = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local token = tonumber(ARGV[2])
if token < fence then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
";

/// Raises the fence of job `ARGV[1]` in `KEYS[1]` to token `ARGV[2]`: from
/// now on no older attempt's apply lands.
const RAISE_FENCE: &str = r"
local fence = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) > fence then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 1
";

async fn effect_connection(url: &str, timeout: Duration) -> Fx {
    let until = Instant::now() + Duration::from_secs(60);
    let seeds = echomq_fault::state::seeds(url);
    loop {
        let res = if seeds.len() > 1 {
            // A bound per call and none per attempt, as echomq's own
            // cluster connection: with both, a worker resumed after a
            // SIGSTOP had its timed-out HINCRBY sent again and applied twice.
            redis::cluster::ClusterClient::builder(seeds.clone())
                .overall_response_timeout(Some(timeout))
                .connection_timeout(timeout)
                .build()
                .expect("cluster seeds")
                .get_async_connection()
                .await
                .map(Fx::Cluster)
        } else {
            let client = redis::Client::open(url).expect("server url");
            let config = redis::aio::ConnectionManagerConfig::new()
                .set_response_timeout(Some(timeout))
                .set_connection_timeout(Some(timeout))
                .set_number_of_retries(1);
            ConnectionManager::new_with_config(client, config).await.map(Fx::Single)
        };
        match res {
            Ok(c) => return c,
            Err(e) if Instant::now() < until => {
                eprintln!("effect connection: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("cannot connect to {url}: {e}"),
        }
    }
}

async fn run_scheduler(a: &Args, hist: History, queue: Queue) {
    let interval = Duration::from_millis(a.get("interval-ms", 100u64));
    let schedule = Schedule::new(a.req("schedule"), a.req("cron"))
        .max_attempts(1000)
        .max_stalls(1000);
    let give_up = Instant::now() + Duration::from_secs(60);
    // Stored again by every scheduler (unchanged after the first); retried
    // while the cluster fails over.
    while let Err(e) = queue.upsert_schedule(&schedule, &payload_for(0)).await {
        assert!(e.is_transient() && Instant::now() < give_up, "store the schedule: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stop = terminated();
    tokio::pin!(stop);
    loop {
        if let Ok(rep) = queue.run_schedules().await {
            for f in &rep.fired {
                hist.write(Ev::Fired {
                    schedule: f.schedule.clone(),
                    server_ms: f.server_ms,
                    jobs: f.jobs.iter().map(|j| (j.tick_ms, j.id.clone(), j.created)).collect(),
                    missed_ms: f.missed_ms,
                });
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = &mut stop => break,
        }
    }
    hist.write(Ev::Stop {
        reason: "signal".into(),
    });
}

async fn run_reaper(a: &Args, hist: History, queue: Queue) {
    let interval = Duration::from_millis(a.get("interval-ms", 100u64));
    let batch: usize = a.get("batch", 1000);
    let until_empty = a.get("until-empty", false);
    // Stalls are limited per job (fixed at enqueue); the reaper only reaps.
    let reaper = Reaper::new(queue).interval(interval).batch(batch);
    let stop = terminated();
    tokio::pin!(stop);
    loop {
        let t0 = Instant::now();
        let full = match reaper.run_once().await {
            Ok(rep) => {
                let n = rep.requeued.len() + rep.failed.len();
                if n + rep.cancelled.len() > 0 {
                    hist.write(Ev::Reap {
                        server_ms: rep.server_ms,
                        requeued: rep.requeued.clone(),
                        failed: rep.failed.clone(),
                        cancelled: rep.cancelled.clone(),
                        ms: t0.elapsed().as_millis() as u64,
                    });
                }
                if until_empty && n == 0 {
                    break;
                }
                n >= batch
            }
            Err(e) => {
                hist.write(Ev::ReapFailed {
                    error: e.to_string(),
                    ms: t0.elapsed().as_millis() as u64,
                });
                false
            }
        };
        if !full {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = &mut stop => break,
            }
        }
    }
    hist.write(Ev::Stop {
        reason: if until_empty { "nothing left to reap" } else { "signal" }.into(),
    });
}

/// `--role=raw`: one attempt without self-fencing (see the file's docs).
async fn run_raw(a: &Args, w: &Worker, lease: Duration) {
    let op = a.req("stale-op");
    assert!(op == "extend" || op == "complete", "--stale-op=extend|complete");
    let mut lease = loop {
        match w.queue.claim(1, lease).await {
            Ok(mut ls) if !ls.is_empty() => break ls.remove(0),
            Ok(_) => {}
            Err(e) => eprintln!("claim: {e}; retrying"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (id, token) = (lease.id().to_owned(), lease.token());
    w.hist.write(Ev::Claimed {
        id: id.clone(),
        token,
        attempt: lease.attempt(),
        deadline_ms: lease.deadline_ms(),
        server_ms: lease.claimed_ms(),
        lane: lease.lane().map(Into::into),
    });
    w.hist.write(Ev::EffectBegin { id: id.clone(), token });
    let count = w.fx.hincr(&w.effect_key, &id, 1).await.expect("the effect");
    w.hist.write(Ev::EffectDone {
        id: id.clone(),
        token,
        count,
    });
    let point = "after_effect_before_ack";
    w.hist.write(Ev::PausedAt {
        id: id.clone(),
        token,
        point: point.into(),
    });
    let _ = std::fs::write(&w.paused_file, point);
    while !w.go_file.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if op == "extend" {
        match w
            .queue
            .extend(&mut lease, Duration::from_millis(a.get("lease-ms", 1000)))
            .await
        {
            Ok(deadline_ms) => w.hist.write(Ev::Extended { id, token, deadline_ms }),
            Err(Error::LeaseLost { .. } | Error::JobNotFound(_)) => w.hist.write(Ev::LeaseLost {
                id,
                token,
                confirmed: true,
            }),
            Err(e) => eprintln!("extend: {e}"),
        }
        return;
    }
    w.hist.write(Ev::SettleSent {
        id: id.clone(),
        token,
        op: "complete".into(),
    });
    match w.queue.complete(&lease).await {
        Ok(done) => w.hist.write(Ev::Settled {
            id,
            token,
            op: "complete".into(),
            outcome: outcome_name(done.outcome).into(),
            server_ms: done.server_ms,
        }),
        Err(e) => w.hist.write(Ev::SettleFailed {
            id,
            token,
            op: "complete".into(),
            error: e.to_string(),
            lease_lost: matches!(e, Error::LeaseLost { .. } | Error::JobNotFound(_)),
        }),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = Args::from_env();
    let url = a.req("url");
    let qname = a.req("queue");
    let history = PathBuf::from(a.req("history"));
    let hist = History::open(&history, &a.req("src")).expect("open the history");
    let role = a.get("role", "worker".to_string());
    let lease_ms: u64 = a.get("lease-ms", 1000);
    let guarded = a.get("guarded", false);
    let timeout = a.response_timeout();
    let queue = a.connect(&url).await;
    hist.write(Ev::Start {
        role: role.clone(),
        pid: std::process::id(),
        lease_ms: if role == "reaper" || role == "scheduler" {
            0
        } else {
            lease_ms
        },
        guarded: guarded && role == "worker",
    });
    if role == "reaper" {
        run_reaper(&a, hist, queue).await;
        return;
    }
    if role == "scheduler" {
        run_scheduler(&a, hist, queue).await;
        return;
    }

    let worker = Arc::new(Worker {
        hist,
        queue: queue.clone(),
        fx: effect_connection(&url, timeout).await,
        effect_key: effect_key(&qname),
        guarded_key: guarded_key(&qname),
        guarded,
        work_ms: a.get("work-ms", 0),
        pause_point: a.opt("pause-point"),
        pause_prob: a.get("pause-prob", 1.0),
        pause_left: AtomicU32::new(a.get("pause-max", 1)),
        pause_job: a.opt("pause-job"),
        go_file: PathBuf::from(format!("{}.go", history.display())),
        paused_file: PathBuf::from(format!("{}.paused", history.display())),
    });
    if role == "raw" {
        tokio::select! {
            _ = run_raw(&a, &worker, Duration::from_millis(lease_ms)) => {}
            _ = terminated() => {}
        }
        terminated().await;
        worker.hist.write(Ev::Stop {
            reason: "signal".into(),
        });
        return;
    }
    let (w1, w2) = (worker.clone(), worker.clone());
    let mut consumer = Consumer::new(queue, move |job: Job<Value>| {
        let w = w1.clone();
        async move { w.handle(job).await.map_err(HandlerError::from) }
    })
    .observer(move |e| w2.observe(e))
    .concurrency(a.get("concurrency", 8))
    .lease(Duration::from_millis(lease_ms))
    .shutdown_timeout(Duration::from_millis(a.get("shutdown-timeout-ms", 2000)))
    .poll_interval(Duration::from_millis(200))
    .reaper(false);
    if let Some(hb) = a.opt("heartbeat-ms") {
        consumer = consumer.heartbeat(Duration::from_millis(hb.parse().expect("--heartbeat-ms")));
    }
    if a.get("no-heartbeats", false) {
        consumer = consumer.without_heartbeats();
    }
    if let Some(n) = a.opt("prefetch") {
        consumer = consumer.prefetch(n.parse().expect("--prefetch"));
    }
    let handle = consumer.spawn().expect("valid consumer settings");
    terminated().await;
    let t0 = Instant::now();
    let res = handle.shutdown().await;
    worker.hist.write(Ev::Stop {
        reason: match res {
            Ok(()) => format!("signal; shutdown took {} ms", t0.elapsed().as_millis()),
            Err(e) => format!("signal; shutdown took {} ms and failed: {e}", t0.elapsed().as_millis()),
        },
    });
}
