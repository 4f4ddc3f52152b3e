//! bench-bullmq-rs: the peer benchmark for BullMQ's Rust port
//! (`bullmq-official` 1.4.4, library name `bullmq`), with the figures and
//! JSON fields of echomq's `benches/throughput.rs` (see README.md).
//!
//! It FLUSHDBs the server at `REDIS_URL` before every figure: point it only
//! at a throw-away server (`scripts/bench-vs-bullmq-rs` starts one).

// echomq's own bench helpers, compiled in here as well, so both suites count
// script calls, round trips and server CPU (`INFO cpu`) the same way.
#[path = "../../../support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bullmq::options::RedisConnectionOptions;
use bullmq::types::RemoveOnFinish;
use bullmq::worker::{CancellationToken, WorkerEvent};
use bullmq::{BulkJob, Job, JobOptions, Queue, QueueOptions, Worker, WorkerOptions};
use futures::StreamExt;
use redis::aio::MultiplexedConnection;
use serde::Serialize;
use serde_json::{Map, Value, json};
use support::{Delta, Emitter, Snap, env_list, env_or, parse_info, round};

/// The pinned version (Cargo.toml pins `=1.4.4`).
const BULLMQ_OFFICIAL: &str = "1.4.4";
/// The queue every figure uses (each figure starts from a FLUSHDB).
const QUEUE: &str = "bench";
/// Jobs per `add_bulk` call, as BullMQ's and echomq's benchmarks chunk.
const CHUNK: usize = 1_000;
/// Single adds in flight in `enqueue_add_64inflight`.
const IN_FLIGHT: usize = 64;

/// The payload of every job, as echomq's and BullMQ's benchmarks:
/// `{"i": n, "s": "xxxxxxxxxxxxxxxx"}`.
#[derive(Serialize)]
struct Payload {
    i: u64,
    s: String,
}

fn payload(i: usize) -> Payload {
    Payload {
        i: i as u64,
        s: "x".repeat(16),
    }
}

/// Completed-job retention of the processing figure, set per job at add
/// time (as BullMQ's Node benchmark does; job options win over the worker's).
#[derive(Clone, Copy, PartialEq)]
enum Ret {
    /// The port's default: every completed job is kept.
    Default,
    /// `removeOnComplete: true`: the job is deleted at completion (echomq's
    /// `Retention::None`).
    RemoveOnComplete,
}

impl std::str::FromStr for Ret {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "default" => Ok(Ret::Default),
            "removeOnComplete" | "none" => Ok(Ret::RemoveOnComplete),
            other => Err(format!("unknown retention {other:?} (default, removeOnComplete)")),
        }
    }
}

impl Ret {
    fn name(self) -> &'static str {
        match self {
            Ret::Default => "default",
            Ret::RemoveOnComplete => "removeOnComplete",
        }
    }
    fn job_options(self) -> JobOptions {
        match self {
            Ret::Default => JobOptions::default(),
            Ret::RemoveOnComplete => JobOptions::default().remove_on_complete(RemoveOnFinish::Bool(true)),
        }
    }
}

struct Bench {
    url: String,
    n: usize,
    runs: usize,
    concs: Vec<usize>,
    retentions: Vec<Ret>,
    timeout: Duration,
    /// FLUSHDB and INFO, on a connection of its own.
    admin: MultiplexedConnection,
    out: Emitter,
}

impl Bench {
    fn connection(&self) -> RedisConnectionOptions {
        RedisConnectionOptions::new().url(self.url.clone())
    }

    async fn queue(&self) -> Queue {
        Queue::with_options(QUEUE, QueueOptions::new().connection(self.connection()))
            .await
            .expect("a bullmq Queue")
    }

    fn worker_options(&self, conc: usize) -> WorkerOptions {
        WorkerOptions::new().connection(self.connection()).concurrency(conc)
    }

    async fn flushdb(&mut self) {
        let () = redis::cmd("FLUSHDB")
            .query_async(&mut self.admin)
            .await
            .expect("FLUSHDB");
    }

    async fn snap(&mut self) -> Snap {
        let cmds: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.admin)
            .await
            .unwrap();
        let cpu: String = redis::cmd("INFO")
            .arg("cpu")
            .query_async(&mut self.admin)
            .await
            .unwrap();
        Snap::parse(&cmds, &cpu)
    }

    /// Loads the port's scripts into the server's script cache. Its script
    /// calls are EVALSHA and fall back to a full EVAL on NOSCRIPT, so the
    /// first timed figure would otherwise pay for many EVALs (echomq loads its
    /// scripts before its first call). Nothing of it is left: FLUSHDB keeps
    /// the script cache and drops the keys.
    async fn warm_up(&mut self) {
        self.flushdb().await;
        let q = self.queue().await;
        q.add("j", payload(0)).await.expect("warm-up add");
        q.add_bulk(vec![BulkJob::new("j", payload(1))])
            .await
            .expect("warm-up add_bulk");
        let mut done = 0;
        let worker = Worker::with_options(
            QUEUE,
            |_job: Job, _token: CancellationToken| async move { Ok(Value::Null) },
            self.worker_options(1),
        )
        .await
        .expect("warm-up worker");
        let until = Instant::now() + self.timeout;
        while done < 2 && Instant::now() < until {
            match tokio::time::timeout(Duration::from_secs(1), worker.next_event()).await {
                Ok(Some(WorkerEvent::Completed { .. })) => done += 1,
                Ok(None) => break,
                _ => {}
            }
        }
        worker.close(1_000).await.expect("close the warm-up worker");
        assert_eq!(done, 2, "the warm-up jobs did not complete");
        self.flushdb().await;
    }

    /// Adds `n` jobs with `add_bulk`, [`CHUNK`] per call, one call at a time.
    async fn fill(q: &Queue, n: usize, opts: &JobOptions) {
        let mut i = 0;
        while i < n {
            let end = (i + CHUNK).min(n);
            let jobs = (i..end)
                .map(|k| BulkJob::with_options("j", payload(k), opts.clone()))
                .collect();
            q.add_bulk(jobs).await.expect("add_bulk");
            i = end;
        }
    }

    async fn enqueue(&mut self, bulk: bool) {
        let (op, conc) = if bulk {
            ("enqueue_addBulk_chunk1000", 1)
        } else {
            ("enqueue_add_64inflight", IN_FLIGHT)
        };
        for run in 1..=self.runs {
            let n = self.n;
            self.flushdb().await;
            let q = self.queue().await;
            let before = self.snap().await;
            let t0 = Instant::now();
            if bulk {
                Self::fill(&q, n, &JobOptions::default()).await;
            } else {
                let q = &q;
                futures::stream::iter(0..n)
                    .map(|i| async move { q.add("j", payload(i)).await.expect("add") })
                    .buffer_unordered(IN_FLIGHT)
                    .for_each(|_| async {})
                    .await;
            }
            let s = t0.elapsed().as_secs_f64();
            let d = self.snap().await.since(&before);
            let waiting = q.get_waiting_count().await.expect("waiting count");
            let mut line = json!({
                "op": op, "n": n, "conc": conc, "run": run, "seconds": round(s, 4),
                "jobs_per_s": round(n as f64 / s, 1), "check_waiting": waiting,
            });
            cost_fields(&mut line, &d, n);
            self.out.emit(line);
        }
    }

    async fn process(&mut self) {
        for ret in self.retentions.clone() {
            for conc in self.concs.clone() {
                for run in 1..=self.runs {
                    let line = self.process_once(run, conc, ret).await;
                    self.out.emit(line);
                }
            }
        }
    }

    /// A backlog of N no-op jobs, added untimed; one worker at `conc`, the
    /// port's defaults otherwise. Timed from the first handler call to the
    /// N-th `WorkerEvent::Completed`, which the port sends once its
    /// `moveToFinished` call has been answered: every job is then completed
    /// on the server (BullMQ's Node benchmark counts its `completed` events
    /// the same way). The server counters are read at that moment, before
    /// the worker is closed.
    async fn process_once(&mut self, run: usize, conc: usize, ret: Ret) -> Value {
        let n = self.n;
        self.flushdb().await;
        let q = self.queue().await;
        Self::fill(&q, n, &ret.job_options()).await;

        let calls = Arc::new(AtomicUsize::new(0));
        let first: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
        let handler = {
            let (calls, first) = (calls.clone(), first.clone());
            move |_job: Job, _token: CancellationToken| {
                let (calls, first) = (calls.clone(), first.clone());
                async move {
                    first.get_or_init(Instant::now);
                    calls.fetch_add(1, Ordering::Relaxed);
                    Ok(Value::Null)
                }
            }
        };
        let before = self.snap().await;
        let spawned = Instant::now();
        // autorun is on by default: the worker starts fetching here.
        let worker = Worker::with_options(QUEUE, handler, self.worker_options(conc))
            .await
            .expect("a bullmq Worker");
        let (mut completed, mut failed, mut errors) = (0usize, 0usize, Vec::<String>::new());
        let waited = tokio::time::timeout(self.timeout, async {
            while completed < n {
                match worker.next_event().await {
                    Some(WorkerEvent::Completed { .. }) => completed += 1,
                    Some(WorkerEvent::Failed { error, .. }) => {
                        failed += 1;
                        if errors.len() < 3 {
                            errors.push(error);
                        }
                    }
                    Some(WorkerEvent::Error(e)) if errors.len() < 3 => errors.push(e),
                    Some(_) => {}
                    None => break,
                }
            }
        })
        .await;
        let end = Instant::now();
        let d = self.snap().await.since(&before);
        // Not timed: the port's close polls every 100 ms and waits for its
        // fetch loop, which may be parked in BZPOPMIN (drain delay 5 s); past
        // the timeout it aborts that loop, harmless once all N completed.
        worker.close(1_000).await.expect("close the worker");
        drop(worker);
        let kept = q.get_completed_count().await.expect("completed count");
        let failed_kept = q.get_failed_count().await.expect("failed count");
        let left = q.get_waiting_count().await.unwrap()
            + q.get_active_count().await.unwrap()
            + q.get_delayed_count().await.unwrap()
            + q.get_prioritized_count().await.unwrap();

        let mut line = json!({
            "op": "process_noop", "retention": ret.name(), "n": n, "conc": conc, "run": run,
            "check_completed_events": completed, "check_failed_events": failed,
            "check_handler_calls": calls.load(Ordering::Relaxed),
            "check_completed_kept": kept, "check_failed": failed_kept, "check_left": left,
        });
        let m = line.as_object_mut().unwrap();
        if !errors.is_empty() {
            m.insert("worker_errors".into(), json!(errors));
        }
        match (waited, first.get()) {
            (Ok(()), Some(&first)) if completed == n => {
                let s = end.duration_since(first).as_secs_f64();
                m.insert("seconds".into(), round(s, 4).into());
                m.insert("jobs_per_s".into(), round(n as f64 / s, 1).into());
                m.insert(
                    "startup_s".into(),
                    round(first.duration_since(spawned).as_secs_f64(), 4).into(),
                );
                cost_fields(&mut line, &d, n);
            }
            (Err(_), _) => {
                m.insert(
                    "error".into(),
                    format!("timeout after {:?}: {completed} of {n} completed", self.timeout).into(),
                );
            }
            _ => {
                m.insert(
                    "error".into(),
                    format!("the worker's events ended: {completed} of {n} completed").into(),
                );
            }
        }
        line
    }
}

/// The cost fields of echomq's `benches/throughput.rs`, computed the same
/// way from the same counters.
fn cost_fields(line: &mut Value, d: &Delta, jobs: usize) {
    let per = |x: f64| round(x / jobs as f64, 3);
    let m = line.as_object_mut().unwrap();
    m.insert(
        "script_calls_per_job".into(),
        per(d.calls(support::SCRIPT_CMDS) as f64).into(),
    );
    m.insert("round_trips_per_job".into(), per(d.round_trips() as f64).into());
    m.insert(
        "blocking_calls_per_job".into(),
        per(d.calls(support::BLOCKING_CMDS) as f64).into(),
    );
    m.insert("server_cmds_per_job".into(), per(d.all_calls() as f64).into());
    m.insert(
        "server_usec_per_job".into(),
        per(d.usec(support::SCRIPT_CMDS) as f64 + d.usec(support::BLOCKING_CMDS) as f64).into(),
    );
    m.insert(
        "server_cpu_us_per_job".into(),
        round(d.server_cpu * 1e6 / jobs as f64, 2).into(),
    );
    m.insert(
        "client_cpu_us_per_job".into(),
        round(d.client_cpu * 1e6 / jobs as f64, 2).into(),
    );
    m.insert("server_busy".into(), round(d.server_cpu / d.wall, 3).into());
}

#[tokio::main]
async fn main() {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL must be set (this tool FLUSHDBs it)");
    let mut figures: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    if figures.is_empty() {
        figures = vec!["enqueue_bulk".into(), "enqueue_add".into(), "process".into()];
    }
    let client = redis::Client::open(url.as_str()).expect("REDIS_URL");
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut admin = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("connect to the server");
    let info: String = redis::cmd("INFO").arg("server").query_async(&mut admin).await.unwrap();
    let info = parse_info(&info);
    let server = match (info.get("server_name"), info.get("valkey_version")) {
        (Some(name), Some(v)) => format!("{name} {v}"),
        _ => format!("redis {}", info.get("redis_version").map_or("?", |s| s.as_str())),
    };
    let mut common = Map::new();
    common.insert("suite".into(), "bullmq-rs".into());
    common.insert("bullmq_official".into(), BULLMQ_OFFICIAL.into());
    common.insert("server".into(), server.into());
    let out = Emitter::new(
        common,
        std::env::var_os("BENCH_OUT").filter(|v| !v.is_empty()).map(Into::into),
    );
    let mut bench = Bench {
        url,
        n: env_or("N", 5_000),
        runs: env_or("RUNS", 1),
        concs: env_list("CONCS", "1,16,64"),
        retentions: env_list("RETENTION", "removeOnComplete"),
        timeout: Duration::from_secs(env_or("TIMEOUT_S", 300)),
        admin,
        out,
    };
    assert!(bench.n > 0 && bench.runs > 0, "N and RUNS must be positive");
    bench.warm_up().await;
    for f in &figures {
        match f.as_str() {
            "enqueue_bulk" => bench.enqueue(true).await,
            "enqueue_add" => bench.enqueue(false).await,
            "enqueue" => {
                bench.enqueue(true).await;
                bench.enqueue(false).await;
            }
            "process" => bench.process().await,
            other => panic!("unknown figure {other:?} (enqueue_bulk, enqueue_add, enqueue, process)"),
        }
    }
    bench.flushdb().await;
}
