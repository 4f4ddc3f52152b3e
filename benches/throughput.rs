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
//!
//! This file holds the run (settings, the server, the queue handles); each
//! figure is a file of its own under `throughput/`, and `report.rs` the
//! closing table.

#[path = "throughput/cost.rs"]
mod cost;
#[path = "throughput/lanes.rs"]
mod lanes;
#[path = "throughput/latency.rs"]
mod latency;
#[path = "throughput/memory.rs"]
mod memory;
#[path = "throughput/process.rs"]
mod process;
#[path = "throughput/redelivery.rs"]
mod redelivery;
#[path = "throughput/report.rs"]
mod report;
mod support;

use report::{field, median_line};

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
