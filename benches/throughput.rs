//! echomq's benchmark (issue 5): enqueue and processing throughput, end-to-end
//! latency, server cost per job, memory per pending job, and the redelivery
//! delay after a consumer is killed. It measures; it changes nothing.
//!
//! Run: `cargo bench --bench throughput --features local-server` starts a
//! private server (binary from `ECHOMQ_SERVER_BIN`, `.tools/valkey` or
//! `PATH`; see `echomq::server`). With `ECHOMQ_URL=redis://host:port/` it
//! uses that server instead, and then FLUSHDBs only when
//! `ECHOMQ_BENCH_FLUSH=1` (otherwise every figure uses a fresh queue name and
//! deletes its keys afterwards). Pick figures by name after `--`:
//!
//! ```text
//! cargo bench --bench throughput --features local-server -- process latency
//! ```
//!
//! Figures (default `all`): `enqueue_bulk`, `enqueue_add` (`enqueue` = both),
//! `process`, `latency`, `server_cost`, `memory`, `redelivery`, `lanes`,
//! `events` (what lifecycle events cost the server: events on vs off).
//!
//! Each figure is one JSON line on stdout (also appended to `$BENCH_OUT`),
//! with the field names of the BullMQ peer benchmark
//! (`/work/shared/bench/bullmq/bench.mjs`) where they mean the same thing;
//! throughput figures are also summarised as their median over `RUNS` in a
//! line with `"run": "median"`, and a readable table closes the run.
//! `scripts/bench-vs-bullmq` runs this and BullMQ's benchmark side by side
//! against one private server and prints the ratios.
//!
//! Sizes (environment):
//! - `N` (50000) jobs per throughput figure, `RUNS` (3), `CONCS` (1,16,64),
//!   `RETENTION` (`default,none`: `keep_completed` `Newest(1000)` or `None`),
//!   `PREFETCH` (`auto`, the default, or a number: the consumer's
//!   [`prefetch`](echomq::Worker::prefetch));
//! - `LAT_RATE` (1000 jobs/s), `LAT_N` (5000 jobs), `LAT_CONSUMERS` (2),
//!   `LAT_CONC` (16 per consumer);
//! - `COST_N` (20000) jobs per server-cost phase (and per case of `events`), `MEM_N` (20000) pending
//!   jobs for the memory figure;
//! - `REDELIVERY_RUNS` (3), `REDELIVERY_LEASE_MS` (2000);
//! - `LANES_CLAIMS` (5000) claims per phase of the lanes figure, `LANES_MANY`
//!   (100000) lanes in its many-lanes cases;
//! - `ECHOMQ_BENCH_THREADS` (the Tokio default) worker threads.

mod support;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use echomq::maintenance::reaper::DEFAULT_REAP_INTERVAL;
use echomq::server::LocalServer;
use echomq::{Client, Consumer, HandlerError, Job, Lease, Queue, QueueOptions, Retention, Settle};
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::timeout;

use support::{Delta, Emitter, SCRIPT_CMDS, Snap, env_list, env_or, median, parse_info, percentile, round};

/// Set (to the server URL) in the child process that the redelivery figure
/// starts and then kills; see [`victim`].
const VICTIM_ENV: &str = "ECHOMQ_BENCH_VICTIM_URL";
const VICTIM_QUEUE_ENV: &str = "ECHOMQ_BENCH_VICTIM_QUEUE";
const VICTIM_LEASE_ENV: &str = "ECHOMQ_BENCH_VICTIM_LEASE_MS";

/// Jobs per `enqueue_bulk` call, as BullMQ's `addBulk` chunks.
const CHUNK: usize = 1_000;
/// Enqueues in flight for `enqueue_add_64inflight`.
const IN_FLIGHT: usize = 64;
/// Jobs per claim in the server-cost phases (the consumer's largest batch).
const CLAIM_BATCH: usize = 64;
/// The payload size of the memory figure.
const MEM_PAYLOAD_BYTES: usize = 100;

const FIGURES: &[&str] = &[
    "enqueue_bulk",
    "enqueue_add",
    "process",
    "latency",
    "server_cost",
    "memory",
    "redelivery",
    "lanes",
    "events",
];

/// The payload of every job, the same as BullMQ's benchmark:
/// `{"i": n, "s": "xxxxxxxxxxxxxxxx"}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
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

/// A payload whose JSON is exactly [`MEM_PAYLOAD_BYTES`] long.
fn payload_100(i: usize) -> Payload {
    // {"i":N,"s":"…"} is 13 bytes plus the digits of N plus the string.
    let digits = i.to_string().len();
    Payload {
        i: i as u64,
        s: "x".repeat(MEM_PAYLOAD_BYTES - 13 - digits),
    }
}

/// Retention of completed jobs in the processing figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ret {
    /// The default, `Retention::Newest(1000)`.
    Default,
    /// `Retention::None`: the record is deleted at completion.
    None,
}

impl Ret {
    fn name(self) -> &'static str {
        match self {
            Ret::Default => "default",
            Ret::None => "none",
        }
    }
    fn detail(self) -> &'static str {
        match self {
            Ret::Default => "keep_completed(Newest(1000))",
            Ret::None => "keep_completed(None)",
        }
    }
    fn options(self) -> QueueOptions {
        match self {
            Ret::Default => QueueOptions::new(),
            Ret::None => QueueOptions::new().keep_completed(Retention::None),
        }
    }
}

impl std::str::FromStr for Ret {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "default" => Ok(Ret::Default),
            // BullMQ's name for the same choice.
            "none" | "removeOnComplete" => Ok(Ret::None),
            other => Err(format!("unknown retention {other:?} (default, none)")),
        }
    }
}

/// Settings read from the environment.
struct Cfg {
    url: String,
    /// FLUSHDB before each figure (our own server, or `ECHOMQ_BENCH_FLUSH=1`).
    flush: bool,
    n: usize,
    runs: usize,
    concs: Vec<usize>,
    retentions: Vec<Ret>,
    /// `None`: the consumer's default (automatic prefetch).
    prefetch: Option<usize>,
    lat_rate: f64,
    lat_n: usize,
    lat_consumers: usize,
    lat_conc: usize,
    cost_n: usize,
    mem_n: usize,
    redelivery_runs: usize,
    redelivery_lease: Duration,
    lanes_claims: usize,
    lanes_many: usize,
}

fn main() {
    if let Ok(url) = std::env::var(VICTIM_ENV) {
        victim(&url);
        return;
    }
    let figures = selected_figures();
    let threads: usize = env_or("ECHOMQ_BENCH_THREADS", 0);
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if threads > 0 {
        rt.worker_threads(threads);
    }
    let rt = rt.build().expect("tokio runtime");

    // Keep the server (if we start one) alive until the end of main; it is
    // killed on drop, also when a figure panics.
    let (url, server) = match std::env::var("ECHOMQ_URL") {
        Ok(url) if !url.is_empty() => (url, None),
        _ => {
            let server = LocalServer::start().expect("start a private server (scripts/find-server installs one)");
            eprintln!(
                "bench: private server {} on {}",
                server.binary().display(),
                server.url()
            );
            (server.url(), Some(server))
        }
    };
    let cfg = Cfg {
        url,
        flush: server.is_some() || env_or("ECHOMQ_BENCH_FLUSH", 0u8) == 1,
        n: env_or("N", 50_000),
        runs: env_or("RUNS", 3),
        concs: env_list("CONCS", "1,16,64"),
        retentions: env_list("RETENTION", "default,none"),
        prefetch: match std::env::var("PREFETCH") {
            Ok(v) if !v.trim().is_empty() && v.trim() != "auto" => {
                Some(v.trim().parse().expect("PREFETCH: a number, or auto"))
            }
            _ => None,
        },
        lat_rate: env_or("LAT_RATE", 1_000.0),
        lat_n: env_or("LAT_N", 5_000),
        lat_consumers: env_or("LAT_CONSUMERS", 2),
        lat_conc: env_or("LAT_CONC", 16),
        cost_n: env_or("COST_N", 20_000),
        mem_n: env_or("MEM_N", 20_000),
        redelivery_runs: env_or("REDELIVERY_RUNS", 3),
        redelivery_lease: Duration::from_millis(env_or("REDELIVERY_LEASE_MS", 2_000)),
        lanes_claims: env_or("LANES_CLAIMS", 5_000),
        lanes_many: env_or("LANES_MANY", 100_000),
    };
    assert!(cfg.n > 0 && cfg.runs > 0, "N and RUNS must be positive");
    rt.block_on(async move {
        let mut bench = Bench::new(cfg, threads).await;
        bench.run(&figures).await;
        bench.table();
    });
    drop(server);
}

/// Figure names from the command line (`cargo bench` adds `--bench`).
fn selected_figures() -> Vec<&'static str> {
    let mut out = Vec::new();
    for arg in std::env::args().skip(1).filter(|a| !a.starts_with('-')) {
        match arg.as_str() {
            "all" => out.extend(FIGURES),
            "enqueue" => out.extend(["enqueue_bulk", "enqueue_add"]),
            name => match FIGURES.iter().find(|f| **f == name) {
                Some(f) => out.push(*f),
                None => panic!("unknown figure {name:?}; known: all, enqueue, {}", FIGURES.join(", ")),
            },
        }
    }
    if out.is_empty() {
        out.extend(FIGURES);
    }
    out.dedup();
    out
}

struct Bench {
    cfg: Cfg,
    /// Every queue of the run comes from this one client (one shared
    /// connection; its maintenance task reaps the queues consumers serve).
    client: Client,
    /// For FLUSHDB, INFO and key clean-up; no response timeout (a FLUSHDB
    /// of a large database may take a while).
    admin: MultiplexedConnection,
    out: Emitter,
    seq: u64,
}

impl Bench {
    async fn new(cfg: Cfg, threads: usize) -> Bench {
        let client = redis::Client::open(cfg.url.as_str()).expect("ECHOMQ_URL");
        let config = AsyncConnectionConfig::new().set_response_timeout(None);
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
        common.insert("echomq".into(), env!("CARGO_PKG_VERSION").into());
        common.insert("server".into(), server.into());
        let threads = if threads > 0 {
            threads
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        };
        common.insert("tokio_threads".into(), threads.into());
        let out = Emitter::new(common, std::env::var_os("BENCH_OUT").map(Into::into));
        let client = Client::connect(&cfg.url).await.expect("connect an echomq client");
        Bench {
            cfg,
            client,
            admin,
            out,
            seq: 0,
        }
    }

    async fn run(&mut self, figures: &[&str]) {
        for figure in figures {
            match *figure {
                "enqueue_bulk" => self.repeat_enqueue(true).await,
                "enqueue_add" => self.repeat_enqueue(false).await,
                "process" => {
                    for ret in self.cfg.retentions.clone() {
                        for conc in self.cfg.concs.clone() {
                            self.repeat_process(conc, ret).await;
                        }
                    }
                }
                "latency" => self.latency().await,
                "server_cost" => self.server_cost().await,
                "memory" => self.memory().await,
                "redelivery" => self.redelivery().await,
                "lanes" => self.lanes().await,
                "events" => self.events_cost().await,
                other => unreachable!("figure {other}"),
            }
        }
        if self.cfg.flush {
            self.flushdb().await;
        }
    }

    // ---- server helpers ----------------------------------------------------

    async fn flushdb(&mut self) {
        let () = redis::cmd("FLUSHDB").query_async(&mut self.admin).await.unwrap();
    }

    /// A fresh queue name; FLUSHDB first when allowed.
    async fn fresh(&mut self, label: &str) -> String {
        if self.cfg.flush {
            self.flushdb().await;
        }
        self.seq += 1;
        format!("bench-{label}-{}-{}", std::process::id(), self.seq)
    }

    /// Deletes a queue's keys when we may not FLUSHDB (the next `fresh`
    /// flushes otherwise).
    async fn cleanup(&mut self, queue: &str) {
        if self.cfg.flush {
            return;
        }
        let pattern = format!("{}:{{{queue}}}:*", echomq::keys::DEFAULT_PREFIX);
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut self.admin)
                .await
                .unwrap();
            if !keys.is_empty() {
                let () = redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async(&mut self.admin)
                    .await
                    .unwrap();
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }

    async fn info(&mut self, section: &str) -> String {
        redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.admin)
            .await
            .unwrap()
    }

    async fn snap(&mut self) -> Snap {
        let cmds = self.info("commandstats").await;
        let cpu = self.info("cpu").await;
        Snap::parse(&cmds, &cpu)
    }

    async fn used_memory(&mut self) -> i64 {
        let info = parse_info(&self.info("memory").await);
        info["used_memory"].parse().unwrap()
    }

    async fn connect(&self, name: &str, ret: Ret) -> Queue {
        self.client
            .queue_with(name, ret.options())
            .await
            .expect("connect a queue")
    }

    // ---- enqueue -----------------------------------------------------------

    async fn repeat_enqueue(&mut self, bulk: bool) {
        let (op, conc) = if bulk {
            ("enqueue_bulk_chunk1000", 1)
        } else {
            ("enqueue_add_64inflight", IN_FLIGHT)
        };
        let mut rates = Vec::new();
        let mut lines = Vec::new();
        for run in 1..=self.cfg.runs {
            let n = self.cfg.n;
            let name = self.fresh("enqueue").await;
            let q = self.connect(&name, Ret::Default).await;
            let before = self.snap().await;
            let t0 = Instant::now();
            if bulk {
                fill(&q, n, payload).await;
            } else {
                add_in_flight(&q, n, IN_FLIGHT).await;
            }
            let s = t0.elapsed().as_secs_f64();
            let d = self.snap().await.since(&before);
            let waiting = q.counts().await.unwrap().pending;
            drop(q);
            self.cleanup(&name).await;
            rates.push(n as f64 / s);
            let mut line = json!({
                "op": op, "n": n, "conc": conc, "run": run, "seconds": round(s, 4),
                "jobs_per_s": round(n as f64 / s, 1), "check_waiting": waiting,
            });
            cost_fields(&mut line, &d, n);
            lines.push(line.clone());
            self.out.emit(line);
        }
        self.out.emit(median_line(op, &lines, json!({ "conc": conc })));
    }

    // ---- process -----------------------------------------------------------

    async fn repeat_process(&mut self, conc: usize, ret: Ret) {
        let mut lines = Vec::new();
        for run in 1..=self.cfg.runs {
            let line = self.process_once(run, conc, ret).await;
            lines.push(line.clone());
            self.out.emit(line);
        }
        let extra = json!({ "conc": conc, "retention": ret.name(), "retention_detail": ret.detail() });
        self.out.emit(median_line("process_noop", &lines, extra));
    }

    /// A backlog of N no-op jobs, pre-filled untimed; one consumer at
    /// `conc`. Timed from the first handler start to the moment every job
    /// is settled on the server: when the N-th handler has started, the
    /// consumer is shut down gracefully, which returns once every running
    /// job's settlement has been answered (no job is left active or
    /// pending, as the checks confirm). The end time is taken when `shutdown`
    /// returns, so it can only overstate the time, never understate it.
    async fn process_once(&mut self, run: usize, conc: usize, ret: Ret) -> Value {
        let n = self.cfg.n;
        let name = self.fresh("process").await;
        let q = self.connect(&name, ret).await;
        fill(&q, n, payload).await;

        let started = Arc::new(AtomicUsize::new(0));
        let first: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
        let all_started = Arc::new(Notify::new());
        let handler = {
            let (started, first, all_started) = (started.clone(), first.clone(), all_started.clone());
            move |_job: Job<Payload>| {
                let (started, first, all_started) = (started.clone(), first.clone(), all_started.clone());
                async move {
                    first.get_or_init(Instant::now);
                    if started.fetch_add(1, Ordering::Relaxed) + 1 == n {
                        all_started.notify_one();
                    }
                    Ok::<(), HandlerError>(())
                }
            }
        };
        let before = self.snap().await;
        let spawned = Instant::now();
        let mut consumer = Consumer::new(q.clone(), handler).concurrency(conc);
        if let Some(n) = self.cfg.prefetch {
            consumer = consumer.prefetch(n);
        }
        let consumer = consumer.spawn().expect("spawn the consumer");
        let prefetch = self.cfg.prefetch.map_or(json!("auto"), |n| json!(n));
        let limit = Duration::from_secs(120 + (n / 200) as u64);
        if timeout(limit, all_started.notified()).await.is_err() {
            panic!(
                "process_noop conc {conc}: only {} of {n} jobs started within {limit:?}",
                started.load(Ordering::Relaxed)
            );
        }
        consumer.shutdown().await.expect("a clean shutdown");
        let end = Instant::now();
        let d = self.snap().await.since(&before);
        let counts = q.counts().await.unwrap();
        let handled = started.load(Ordering::Relaxed);
        drop(q);
        self.cleanup(&name).await;

        let first = *first.get().expect("a handler ran");
        let s = end.duration_since(first).as_secs_f64();
        let mut line = json!({
            "op": "process_noop", "retention": ret.name(), "retention_detail": ret.detail(),
            "n": n, "conc": conc, "prefetch": prefetch, "run": run, "seconds": round(s, 4), "jobs_per_s": round(n as f64 / s, 1),
            "startup_s": round(first.duration_since(spawned).as_secs_f64(), 4),
            "check_completed_kept": counts.completed, "check_failed": counts.failed,
            "check_left": counts.pending + counts.active + counts.delayed, "check_handler_calls": handled,
        });
        cost_fields(&mut line, &d, n);
        // Claim and settle calls, worked out from the scripts' own commands
        // (tied to today's scripts): each plain claim runs ZRANGEBYSCORE
        // once (its promote step), each reap pass twice and ZRANGE once,
        // each consistency sweep step one SCAN or ZSCAN, settling (with or
        // without a claim folded in) none of these. So reaps = ZRANGE calls,
        // claims = z - 2 reaps, and settle calls = script calls - claims -
        // reaps - sweep steps.
        let e = d.calls(SCRIPT_CMDS) as i64;
        let z = d.calls(&["zrangebyscore"]) as i64;
        let reaps = d.calls(&["zrange"]) as i64;
        let sweeps = d.calls(&["scan", "zscan"]) as i64;
        let claims = z - 2 * reaps;
        let settles = e - claims - reaps - sweeps;
        if claims > 0 && settles > 0 {
            let m = line.as_object_mut().unwrap();
            m.insert("est_claim_calls".into(), claims.into());
            m.insert("est_jobs_per_claim".into(), round(n as f64 / claims as f64, 2).into());
            m.insert("est_settle_calls".into(), settles.into());
            m.insert("est_jobs_per_settle".into(), round(n as f64 / settles as f64, 2).into());
        }
        line
    }

    // ---- latency -----------------------------------------------------------

    /// Enqueue → handler start at a steady rate, with idle consumers
    /// waiting. Timed from just before `enqueue` is called (so it includes
    /// the enqueue's own round trip) to the first line of the handler.
    async fn latency(&mut self) {
        let (n, rate) = (self.cfg.lat_n, self.cfg.lat_rate);
        let name = self.fresh("latency").await;
        let q = self.connect(&name, Ret::Default).await;
        let base = Instant::now();
        let ns = move |t: Instant| t.duration_since(base).as_nanos() as u64;
        let sent: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
        let acked: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
        let began: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
        let count = Arc::new(AtomicUsize::new(0));
        let all = Arc::new(Notify::new());
        let mut consumers = Vec::new();
        for _ in 0..self.cfg.lat_consumers.max(1) {
            let (began, count, all) = (began.clone(), count.clone(), all.clone());
            let handler = move |job: Job<Payload>| {
                let at = ns(Instant::now());
                let i = job.payload().i as usize;
                began[i].store(at, Ordering::Relaxed);
                if count.fetch_add(1, Ordering::Relaxed) + 1 == n {
                    all.notify_one();
                }
                async { Ok::<(), HandlerError>(()) }
            };
            let consumer = Consumer::new(q.clone(), handler).concurrency(self.cfg.lat_conc);
            consumers.push(consumer.spawn().expect("spawn a consumer"));
        }
        // Let the consumers find the queue empty and block on their wake-ups.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = self.snap().await;
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
        let mut producers = JoinSet::new();
        let t0 = Instant::now();
        for i in 0..n {
            tick.tick().await;
            let (q, sent, acked) = (q.clone(), sent.clone(), acked.clone());
            producers.spawn(async move {
                sent[i].store(ns(Instant::now()), Ordering::Relaxed);
                q.enqueue(&payload(i)).await.unwrap();
                acked[i].store(ns(Instant::now()), Ordering::Relaxed);
            });
        }
        let offered = t0.elapsed().as_secs_f64();
        while let Some(r) = producers.join_next().await {
            r.unwrap();
        }
        if timeout(Duration::from_secs(60), all.notified()).await.is_err() {
            panic!("latency: only {} of {n} jobs started", count.load(Ordering::Relaxed));
        }
        let d = self.snap().await.since(&before);
        for c in consumers {
            c.shutdown().await.expect("a clean shutdown");
        }
        drop(q);
        self.cleanup(&name).await;

        let ms =
            |a: &AtomicU64, b: &AtomicU64| (a.load(Ordering::Relaxed) as f64 - b.load(Ordering::Relaxed) as f64) / 1e6;
        let mut lat: Vec<f64> = (0..n).map(|i| ms(&began[i], &sent[i])).collect();
        let mut ack: Vec<f64> = (0..n).map(|i| ms(&acked[i], &sent[i])).collect();
        lat.sort_by(f64::total_cmp);
        ack.sort_by(f64::total_cmp);
        let mut line = json!({
            "op": "latency_enqueue_to_start", "n": n, "rate_per_s": rate,
            "achieved_rate_per_s": round(n as f64 / offered, 1),
            "consumers": self.cfg.lat_consumers.max(1), "conc": self.cfg.lat_conc,
            "p50_ms": round(percentile(&lat, 50.0), 3), "p90_ms": round(percentile(&lat, 90.0), 3),
            "p99_ms": round(percentile(&lat, 99.0), 3), "max_ms": round(lat[n - 1], 3),
            "mean_ms": round(lat.iter().sum::<f64>() / n as f64, 3),
            "enqueue_ack_p50_ms": round(percentile(&ack, 50.0), 3),
            "enqueue_ack_p99_ms": round(percentile(&ack, 99.0), 3),
        });
        cost_fields(&mut line, &d, n);
        self.out.emit(line);
    }

    // ---- server cost -------------------------------------------------------

    /// The server time of each script, measured alone through the low-level
    /// API (one phase per script, `INFO commandstats` deltas around it):
    /// `enqueue` (one job per call, 64 in flight, and 1,000 jobs per call),
    /// `claim` (64 per call), `complete` (one job per call, 64 in flight)
    /// and `settle_many` (64 per call), with each retention; then claim 64 →
    /// settle those 64 (64 concurrent `complete`s, or one `settle_many`),
    /// in lock step: what a consumer at concurrency 64 could reach without
    /// its own overhead. The consumer's own cost per job is in the
    /// `process_noop` lines (repeated here as phase `consumer`).
    async fn server_cost(&mut self) {
        let n = self.cfg.cost_n;
        let lease = Duration::from_secs(600);
        for ret in self.cfg.retentions.clone() {
            let name = self.fresh("cost").await;
            let q = self.connect(&name, ret).await;
            if ret == Ret::Default {
                let before = self.snap().await;
                add_in_flight(&q, n, IN_FLIGHT).await;
                let d = self.snap().await.since(&before);
                self.cost_line("enqueue", "enqueue_1_per_call_64inflight", ret, n, &d);
                let before = self.snap().await;
                fill(&q, n, payload).await;
                let d = self.snap().await.since(&before);
                self.cost_line("enqueue", "enqueue_1000_per_call", ret, n, &d);
            } else {
                fill(&q, 2 * n, payload).await;
            }
            let total = 2 * n;
            let before = self.snap().await;
            let mut leases = Vec::with_capacity(total);
            loop {
                let got = q.claim(CLAIM_BATCH, lease).await.unwrap();
                if got.is_empty() {
                    break;
                }
                leases.extend(got);
            }
            let d = self.snap().await.since(&before);
            assert_eq!(leases.len(), total, "claimed every job");
            self.cost_line("claim", "claim_64_per_call", ret, total, &d);
            // Half the leases one by one, the other half in batches.
            let batched = leases.split_off(n);
            let before = self.snap().await;
            complete_in_flight(&q, leases, IN_FLIGHT).await;
            let d = self.snap().await.since(&before);
            self.cost_line("complete", "complete_64inflight", ret, n, &d);
            let before = self.snap().await;
            for chunk in batched.chunks(CLAIM_BATCH) {
                settle_all(&q, chunk).await;
            }
            let d = self.snap().await.since(&before);
            self.cost_line("settle", "settle_many_64_per_call", ret, n, &d);

            // Lock step: claim 64, settle them (64 concurrent `complete`s, or
            // one `settle_many`), repeat.
            for many in [false, true] {
                fill(&q, n, payload).await;
                let before = self.snap().await;
                loop {
                    let got = q.claim(CLAIM_BATCH, lease).await.unwrap();
                    if got.is_empty() {
                        break;
                    }
                    if many {
                        settle_all(&q, &got).await;
                    } else {
                        let k = got.len();
                        complete_in_flight(&q, got, k).await;
                    }
                }
                let d = self.snap().await.since(&before);
                if many {
                    self.cost_line("claim+settle", "lockstep_claim64_settle_many64", ret, n, &d);
                } else {
                    self.cost_line("claim+complete", "lockstep_claim64_complete64", ret, n, &d);
                }
            }
            drop(q);
            self.cleanup(&name).await;
        }
        // The consumer's figures, from the process_noop medians.
        let medians: Vec<Map<String, Value>> = self
            .out
            .lines
            .iter()
            .filter(|l| field(l, "op") == "process_noop" && field(l, "run") == "median")
            .cloned()
            .collect();
        for m in medians {
            let mut line = json!({ "op": "server_cost", "phase": "consumer", "script": "all" });
            let obj = line.as_object_mut().unwrap();
            for k in [
                "conc",
                "retention",
                "n",
                "jobs_per_s",
                "script_calls_per_job",
                "round_trips_per_job",
                "blocking_calls_per_job",
                "server_cmds_per_job",
                "server_usec_per_job",
                "server_cpu_us_per_job",
                "client_cpu_us_per_job",
                "est_jobs_per_claim",
                "est_jobs_per_settle",
            ] {
                if let Some(v) = m.get(k) {
                    obj.insert(k.into(), v.clone());
                }
            }
            self.out.emit(line);
        }
    }

    /// What lifecycle events cost the server: a job's life through the
    /// low-level API (enqueue 1,000 per call, claim 64 per call, settle 64
    /// per call: three events per job) with the queue's events on and off
    /// (`Queue::set_events`), `COST_N` jobs each; server µs per job over
    /// the three scripts, and their difference.
    async fn events_cost(&mut self) {
        let n = self.cfg.cost_n;
        let lease = Duration::from_secs(600);
        let mut per_job = Vec::new();
        for on in [true, false] {
            let name = self.fresh("events").await;
            let q = self.connect(&name, Ret::Default).await;
            q.set_events(&echomq::EventSettings::default().enabled(on))
                .await
                .unwrap();
            let before = self.snap().await;
            fill(&q, n, payload).await;
            loop {
                let got = q.claim(CLAIM_BATCH, lease).await.unwrap();
                if got.is_empty() {
                    break;
                }
                settle_all(&q, &got).await;
            }
            let d = self.snap().await.since(&before);
            let usec = d.usec(SCRIPT_CMDS) as f64 / n as f64;
            per_job.push(usec);
            let mut line = json!({
                "op": "events_cost", "events": if on { "on" } else { "off" }, "jobs": n,
                "usec_per_job": round(usec, 2),
                "server_cmds_per_job": round((d.all_calls() - d.calls(SCRIPT_CMDS)) as f64 / n as f64, 2),
                "wall_s": round(d.wall, 4),
            });
            cost_fields(&mut line, &d, n);
            self.out.emit(line);
            drop(q);
            self.cleanup(&name).await;
        }
        self.out.emit(json!({
            "op": "events_cost", "events": "on_minus_off",
            "usec_per_job": round(per_job[0] - per_job[1], 2),
        }));
    }

    fn cost_line(&mut self, script: &str, phase: &str, ret: Ret, jobs: usize, d: &Delta) {
        let calls = d.calls(SCRIPT_CMDS);
        let usec = d.usec(SCRIPT_CMDS) as f64;
        let mut line = json!({
            "op": "server_cost", "phase": phase, "script": script, "retention": ret.name(),
            "jobs": jobs, "calls": calls,
            "usec_per_call": round(usec / calls.max(1) as f64, 2),
            "usec_per_job": round(usec / jobs as f64, 2),
            "server_cmds_per_call": round((d.all_calls() - calls) as f64 / calls.max(1) as f64, 2),
            "wall_s": round(d.wall, 4), "jobs_per_s": round(jobs as f64 / d.wall, 1),
            "server_busy": round(d.server_cpu / d.wall, 3),
            "top": d.top(8),
        });
        cost_fields(&mut line, d, jobs);
        self.out.emit(line);
    }

    // ---- lanes -------------------------------------------------------------

    /// What a claim costs while lanes are in use: server µs per script call
    /// and server commands per call, for `LANES_CLAIMS` claims of one job
    /// (`claim_1`) and as many calls of the consumer's hot path (one
    /// `settle_and_claim` that completes one job and leases the next:
    /// `settle1_claim1`), with no lanes, 10 lanes, `LANES_MANY` lanes, and
    /// `LANES_MANY` lanes under a default cap (which adds the cap's reads).
    /// The claim looks at a bounded number of lanes, so the cost should not
    /// grow with the number of lanes. Jobs go in with `enqueue_bulk_with`
    /// (at least two per lane); that cost is reported too (`enqueue_1000`).
    async fn lanes(&mut self) {
        let claims = self.cfg.lanes_claims;
        let many = self.cfg.lanes_many;
        let lease = Duration::from_secs(600);
        let cases: [(&str, usize, Option<u32>); 4] = [
            ("none", 0, None),
            ("10", 10, None),
            ("many", many, None),
            ("many_capped", many, Some(1_000)),
        ];
        for (label, lanes, cap) in cases {
            let name = self.fresh("lanes").await;
            let q = self.connect(&name, Ret::Default).await;
            if let Some(cap) = cap {
                q.set_lane_default_cap(Some(cap)).await.unwrap();
            }
            let jobs = (2 * claims + 1).max(2 * lanes);
            let before = self.snap().await;
            for start in (0..jobs).step_by(CHUNK) {
                let batch: Vec<(Payload, echomq::EnqueueOptions)> = (start..(start + CHUNK).min(jobs))
                    .map(|i| {
                        let opts = echomq::EnqueueOptions::new();
                        let opts = if lanes > 0 {
                            opts.lane(format!("l{}", i % lanes))
                        } else {
                            opts
                        };
                        (payload(i), opts)
                    })
                    .collect();
                q.enqueue_bulk_with(&batch).await.unwrap();
            }
            let d = self.snap().await.since(&before);
            self.lanes_line(label, lanes, "enqueue_1000", jobs, &d);

            let before = self.snap().await;
            let mut held = Vec::with_capacity(claims);
            for _ in 0..claims {
                held.extend(q.claim(1, lease).await.unwrap());
            }
            let d = self.snap().await.since(&before);
            assert_eq!(held.len(), claims, "claimed one job per call");
            self.lanes_line(label, lanes, "claim_1", claims, &d);

            let before = self.snap().await;
            let complete = Settle::Complete;
            for l in &mut held {
                let (done, mut next) = q.settle_and_claim(&[(&*l, &complete)], 1, lease).await.unwrap();
                done.into_iter().for_each(|r| {
                    r.unwrap();
                });
                *l = next.pop().expect("a job leased in the settle call");
            }
            let d = self.snap().await.since(&before);
            self.lanes_line(label, lanes, "settle1_claim1", claims, &d);
            drop(q);
            self.cleanup(&name).await;
        }
    }

    fn lanes_line(&mut self, label: &str, lanes: usize, phase: &str, calls_made: usize, d: &Delta) {
        let calls = d.calls(SCRIPT_CMDS);
        let usec = d.usec(SCRIPT_CMDS) as f64;
        self.out.emit(json!({
            "op": "lanes", "lanes": label, "lane_count": lanes, "phase": phase,
            "items": calls_made, "calls": calls,
            "usec_per_call": round(usec / calls.max(1) as f64, 2),
            "server_us_per_item": round(usec / calls_made.max(1) as f64, 2),
            "server_cmds_per_call": round((d.all_calls() - calls) as f64 / calls.max(1) as f64, 2),
            "wall_us_per_item": round(d.wall * 1e6 / calls_made.max(1) as f64, 1),
            "server_busy": round(d.server_cpu / d.wall, 3),
        }));
    }

    // ---- memory ------------------------------------------------------------

    /// `used_memory` growth per pending job with a 100-byte JSON payload.
    async fn memory(&mut self) {
        let n = self.cfg.mem_n;
        // Load the scripts first so the script cache is not counted.
        let warm = self.fresh("memwarm").await;
        let q = self.connect(&warm, Ret::Default).await;
        q.enqueue(&payload_100(0)).await.unwrap();
        drop(q);
        self.cleanup(&warm).await;
        let name = self.fresh("memory").await;
        let before = self.used_memory().await;
        let q = self.connect(&name, Ret::Default).await;
        fill(&q, n, payload_100).await;
        let after = self.used_memory().await;
        let job_key = format!("{}:{{{name}}}:job:1", echomq::keys::DEFAULT_PREFIX);
        let encoding: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(&job_key)
            .query_async(&mut self.admin)
            .await
            .unwrap_or_default();
        let pending = q.counts().await.unwrap().pending;
        drop(q);
        self.cleanup(&name).await;
        self.out.emit(json!({
            "op": "memory_per_pending_job", "n": n, "payload_bytes": MEM_PAYLOAD_BYTES,
            "bytes_per_job": round((after - before) as f64 / n as f64, 1),
            "used_memory_delta": after - before, "job_hash_encoding": encoding, "check_waiting": pending,
        }));
    }

    // ---- redelivery --------------------------------------------------------

    /// A child process (this binary, see [`victim`]) claims a job and hangs
    /// in its handler; it is SIGKILLed, and a consumer here (default reap
    /// interval, same lease) runs the job again. Timed from the kill to the
    /// second handler start. The lease left at the kill is read from the
    /// job's deadline and the server clock just before it.
    ///
    /// The surviving consumer starts (idle, long before the deadline) at a
    /// different phase of its reap interval in each run, spread evenly over
    /// the interval: the client's maintenance task reaps the queue when the
    /// consumer starts and then every interval (the queue holds a lease), so with a lease that is a multiple of the interval and a
    /// fixed start, every run would land on the same, lucky, phase.
    async fn redelivery(&mut self) {
        let lease = self.cfg.redelivery_lease;
        let reap = DEFAULT_REAP_INTERVAL;
        let mut delays = Vec::new();
        let mut after = Vec::new();
        for run in 1..=self.cfg.redelivery_runs {
            let name = self.fresh("redelivery").await;
            let q = self.connect(&name, Ret::Default).await;
            let id = q.enqueue(&payload(0)).await.unwrap();
            let exe = std::env::current_exe().expect("the bench binary");
            let mut child = tokio::process::Command::new(exe)
                .env(VICTIM_ENV, &self.cfg.url)
                .env(VICTIM_QUEUE_ENV, &name)
                .env(VICTIM_LEASE_ENV, lease.as_millis().to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("start the victim");
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let line = timeout(Duration::from_secs(30), lines.next_line())
                .await
                .expect("the victim starts the job within 30 s")
                .unwrap()
                .expect("a line from the victim");
            assert!(line.starts_with("started"), "victim said {line:?}");

            let deadline_ms = q.job(&id).await.unwrap().deadline_ms.expect("the job is active");
            let now_ms = q.server_time_ms().await.unwrap();
            child.start_kill().expect("SIGKILL the victim");
            let killed = Instant::now();
            child.wait().await.expect("reap the victim");
            let lease_left = (deadline_ms as f64 - now_ms as f64) / 1000.0;

            // A surviving consumer, idle and waiting well before the deadline,
            // started at an evenly spread phase of its reap interval.
            let phase = reap.mul_f64((run as f64 - 0.5) / self.cfg.redelivery_runs as f64);
            tokio::time::sleep(phase).await;
            let began: Arc<OnceLock<(Instant, u64)>> = Arc::new(OnceLock::new());
            let again = Arc::new(Notify::new());
            let handler = {
                let (began, again) = (began.clone(), again.clone());
                move |job: Job<Payload>| {
                    let _ = began.set((Instant::now(), job.attempt()));
                    again.notify_one();
                    async { Ok::<(), HandlerError>(()) }
                }
            };
            let survivor = Consumer::new(q.clone(), handler)
                .lease(lease)
                .spawn()
                .expect("spawn the survivor");

            let limit = lease + reap * 4 + Duration::from_secs(10);
            if timeout(limit, again.notified()).await.is_err() {
                panic!("redelivery: the job did not run again within {limit:?} of the kill");
            }
            let (at, attempt) = *began.get().unwrap();
            survivor.shutdown().await.expect("a clean shutdown");
            drop(q);
            self.cleanup(&name).await;
            let delay = at.duration_since(killed).as_secs_f64();
            delays.push(delay);
            self.out.emit(json!({
                "op": "redelivery_after_kill", "run": run, "seconds": round(delay, 4),
                "lease_s": lease.as_secs_f64(), "reap_interval_s": reap.as_secs_f64(),
                "lease_left_at_kill_s": round(lease_left, 4),
                "after_deadline_s": round(delay - lease_left, 4),
                "bound_s": round(lease_left + reap.as_secs_f64(), 4), "attempt": attempt,
                "survivor_start_after_kill_s": round(phase.as_secs_f64(), 4),
            }));
            after.push(delay - lease_left);
        }
        self.out.emit(json!({
            "op": "redelivery_after_kill", "run": "median", "runs": delays.len(),
            "seconds": round(median(&delays), 4), "lease_s": lease.as_secs_f64(),
            "reap_interval_s": reap.as_secs_f64(),
            "after_deadline_s": round(median(&after), 4),
            "after_deadline_mean_s": round(after.iter().sum::<f64>() / after.len().max(1) as f64, 4),
            "after_deadline_max_s": round(after.iter().copied().fold(f64::MIN, f64::max), 4),
        }));
    }

    // ---- the table ---------------------------------------------------------

    fn table(&self) {
        let lines = &self.out.lines;
        let f = |l: &Map<String, Value>, k: &str| l.get(k).and_then(Value::as_f64);
        let show = |v: Option<f64>, digits: usize| v.map_or("-".to_owned(), |x| format!("{x:.digits$}"));
        println!();
        println!(
            "echomq benchmark ({}; medians of RUNS={})",
            self.out_server(),
            self.cfg.runs
        );
        println!(
            "{:<26} {:>5} {:<9} {:>11} {:>9} {:>12} {:>12} {:>11}",
            "figure", "conc", "retention", "jobs/s", "seconds", "scripts/job", "trips/job", "server µs/job"
        );
        for l in lines
            .iter()
            .filter(|l| field(l, "run") == "median" && l.contains_key("jobs_per_s"))
        {
            println!(
                "{:<26} {:>5} {:<9} {:>11} {:>9} {:>12} {:>12} {:>11}",
                field(l, "op").as_str().unwrap_or("?"),
                show(f(l, "conc"), 0),
                l.get("retention").and_then(Value::as_str).unwrap_or("-"),
                show(f(l, "jobs_per_s"), 0),
                show(f(l, "seconds"), 3),
                show(f(l, "script_calls_per_job"), 3),
                show(f(l, "round_trips_per_job"), 3),
                show(f(l, "server_usec_per_job"), 1),
            );
        }
        for l in lines.iter().filter(|l| field(l, "op") == "latency_enqueue_to_start") {
            println!(
                "latency enqueue→start at {}/s: p50 {} ms, p99 {} ms, max {} ms (enqueue ack p50 {} ms)",
                show(f(l, "rate_per_s"), 0),
                show(f(l, "p50_ms"), 3),
                show(f(l, "p99_ms"), 3),
                show(f(l, "max_ms"), 3),
                show(f(l, "enqueue_ack_p50_ms"), 3),
            );
        }
        for l in lines
            .iter()
            .filter(|l| field(l, "op") == "server_cost" && field(l, "phase") != "consumer")
        {
            println!(
                "server cost {:<30} {:<8} {:>8} µs/call {:>7} µs/job {:>6} cmds/call",
                l.get("phase").and_then(Value::as_str).unwrap_or("?"),
                l.get("retention").and_then(Value::as_str).unwrap_or("-"),
                show(f(l, "usec_per_call"), 1),
                show(f(l, "usec_per_job"), 2),
                show(f(l, "server_cmds_per_call"), 1),
            );
        }
        for l in lines.iter().filter(|l| field(l, "op") == "memory_per_pending_job") {
            println!(
                "memory per pending job ({}-byte payload): {} bytes (job hash encoding {})",
                show(f(l, "payload_bytes"), 0),
                show(f(l, "bytes_per_job"), 0),
                l.get("job_hash_encoding").and_then(Value::as_str).unwrap_or("?"),
            );
        }
        let kills: BTreeMap<String, &Map<String, Value>> = lines
            .iter()
            .filter(|l| field(l, "op") == "redelivery_after_kill")
            .map(|l| match field(l, "run") {
                Value::String(s) => (s.clone(), l),
                other => (other.to_string(), l),
            })
            .collect();
        for (run, l) in kills {
            println!(
                "redelivery after SIGKILL (run {run}): {} s (lease {} s, left at kill {} s, {} s after the deadline; reaper every {} s)",
                show(f(l, "seconds"), 3),
                show(f(l, "lease_s"), 1),
                show(f(l, "lease_left_at_kill_s"), 3),
                show(f(l, "after_deadline_s"), 3),
                show(f(l, "reap_interval_s"), 1),
            );
        }
    }

    fn out_server(&self) -> String {
        self.out
            .lines
            .first()
            .and_then(|l| l.get("server"))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned()
    }
}

/// A field of an emitted line, `null` when absent.
fn field<'a>(line: &'a Map<String, Value>, key: &str) -> &'a Value {
    line.get(key).unwrap_or(&Value::Null)
}

/// Adds the server-cost fields of a measured window, per job.
fn cost_fields(line: &mut Value, d: &Delta, jobs: usize) {
    let per = |x: f64| round(x / jobs as f64, 3);
    let m = line.as_object_mut().unwrap();
    m.insert("script_calls_per_job".into(), per(d.calls(SCRIPT_CMDS) as f64).into());
    m.insert("round_trips_per_job".into(), per(d.round_trips() as f64).into());
    m.insert(
        "blocking_calls_per_job".into(),
        per(d.calls(support::BLOCKING_CMDS) as f64).into(),
    );
    m.insert("server_cmds_per_job".into(), per(d.all_calls() as f64).into());
    m.insert(
        "server_usec_per_job".into(),
        per(d.usec(SCRIPT_CMDS) as f64 + d.usec(support::BLOCKING_CMDS) as f64).into(),
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

/// The median line of a throughput figure: numeric fields are medians over
/// the runs; `extra` names the figure.
fn median_line(op: &str, runs: &[Value], extra: Value) -> Value {
    let mut line = json!({ "op": op, "run": "median", "runs": runs.len() });
    let m = line.as_object_mut().unwrap();
    if let Value::Object(e) = extra {
        m.extend(e);
    }
    m.insert("n".into(), runs[0]["n"].clone());
    for key in [
        "seconds",
        "jobs_per_s",
        "script_calls_per_job",
        "round_trips_per_job",
        "blocking_calls_per_job",
        "server_cmds_per_job",
        "server_usec_per_job",
        "server_cpu_us_per_job",
        "client_cpu_us_per_job",
        "server_busy",
        "est_jobs_per_claim",
        "est_jobs_per_settle",
        "startup_s",
    ] {
        let v: Vec<f64> = runs.iter().filter_map(|r| r.get(key).and_then(Value::as_f64)).collect();
        if v.len() == runs.len() {
            m.insert(key.into(), round(median(&v), 4).into());
        }
    }
    line
}

/// Enqueues `n` jobs with `enqueue_bulk`, [`CHUNK`] per call, one call at a time.
async fn fill(q: &Queue, n: usize, make: fn(usize) -> Payload) {
    for start in (0..n).step_by(CHUNK) {
        let batch: Vec<Payload> = (start..(start + CHUNK).min(n)).map(make).collect();
        q.enqueue_bulk(&batch).await.unwrap();
    }
}

/// Enqueues `n` jobs one per call, `lanes` calls in flight on the queue's
/// shared connection.
async fn add_in_flight(q: &Queue, n: usize, lanes: usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let mut set = JoinSet::new();
    for _ in 0..lanes {
        let (q, next) = (q.clone(), next.clone());
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                q.enqueue(&payload(i)).await.unwrap();
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
}

/// Completes `leases` in one `settle_many` call.
async fn settle_all(q: &Queue, leases: &[Lease]) {
    let complete = Settle::Complete;
    let items: Vec<(&Lease, &Settle)> = leases.iter().map(|l| (l, &complete)).collect();
    for r in q.settle_many(&items).await.unwrap() {
        r.unwrap();
    }
}

/// Completes every lease, `lanes` calls in flight.
async fn complete_in_flight(q: &Queue, leases: Vec<Lease>, lanes: usize) {
    let work = Arc::new(std::sync::Mutex::new(leases));
    let mut set = JoinSet::new();
    for _ in 0..lanes.max(1) {
        let (q, work) = (q.clone(), work.clone());
        set.spawn(async move {
            loop {
                let next = work.lock().unwrap().pop();
                let Some(lease) = next else { break };
                q.complete(&lease).await.unwrap();
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
}

/// The process the redelivery figure kills: it claims the job, says
/// `started ID ATTEMPT` on stdout and hangs in the handler until SIGKILL
/// (or gives up after two minutes, should its parent be gone).
fn victim(url: &str) {
    let name = std::env::var(VICTIM_QUEUE_ENV).expect("victim queue");
    let lease: u64 = env_or(VICTIM_LEASE_ENV, 2_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let q = Queue::connect(url, &name).await.expect("victim connects");
        let _consumer = Consumer::new(q, |job: Job<Payload>| async move {
            println!("started {} {}", job.id(), job.attempt());
            tokio::time::sleep(Duration::from_secs(3_600)).await;
            Ok::<(), HandlerError>(())
        })
        .concurrency(1)
        .lease(Duration::from_millis(lease))
        .spawn()
        .expect("spawn the victim's consumer");
        tokio::time::sleep(Duration::from_secs(120)).await;
    });
}
