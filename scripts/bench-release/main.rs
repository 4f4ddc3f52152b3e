//! The program `scripts/bench-vs-release` builds twice, against a release of
//! echomq and against the working tree, so that both builds run the same
//! source and only the library differs. It runs one figure per process and
//! prints one JSON line.
//!
//! It uses only what the README shows a user, with default options: connect,
//! a queue handle, `enqueue`, `enqueue_bulk`, and a `Consumer` with a no-op
//! handler at a concurrency, then `shutdown`. What differs between releases
//! is kept in the `api` module, one variant per API (chosen by a Cargo
//! feature of the manifest the script writes); everything else is shared.
//!
//! Figures (the first argument):
//! - `process`: a backlog of `N` jobs enqueued in bulk, untimed; then a
//!   consumer at concurrency `CONC`. Timed from the first handler call until
//!   `shutdown` returns after the `N`-th handler call (shutdown returns once
//!   every running job's settlement is answered, so the end can only be
//!   late, never early).
//! - `enqueue_add`: `N` single `enqueue` calls, 64 in flight on one handle.
//! - `enqueue_bulk`: `N` jobs by `enqueue_bulk`, 1,000 per call, one call at
//!   a time.
//!
//! Around each timed part the server's `INFO cpu` and `INFO commandstats`
//! are read, so the line carries server CPU per job and server commands per
//! job, in all and per command (commands run inside scripts count under
//! their own names; the program's own `INFO` calls are left out), and this
//! process's own CPU per job (the client library's work). The
//! window holds whatever the client does in the background meanwhile
//! (maintenance, reaping): a user's process pays for that too.
//!
//! Environment: `ECHOMQ_URL` (required: a server whose database is empty,
//! which the script starts and flushes), `N` (20000), `CONC` (64),
//! `BENCH_BUILD`, `BENCH_REV` and `BENCH_RUN` (copied into the line).
//!
//! When the working tree's API changes so that this no longer compiles
//! against it: the default `api` module follows the working tree, and the
//! API it had becomes a new variant behind a feature (`api-0-2`, ...; the
//! default module's `cfg` then excludes every such feature), which the
//! script declares (`api_features`) and picks by the release's version
//! (`api_feature`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use echomq::Queue;
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::Notify;
use tokio::task::JoinSet;

/// Jobs per `enqueue_bulk` call, as in `benches/throughput.rs`.
const CHUNK: usize = 1_000;
/// Enqueue calls in flight in the `enqueue_add` figure.
const IN_FLIGHT: usize = 64;

/// Every job's payload, as in `benches/throughput.rs` and BullMQ's
/// benchmark: `{"i":N,"s":"xxxxxxxxxxxxxxxx"}`.
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

/// The API of echomq 0.2 (and of the working tree while it keeps it).
#[cfg(not(feature = "api-0-1"))]
mod api {
    use std::sync::Arc;

    use echomq::{Client, Consumer, HandlerError, Job, Queue};

    use super::Payload;

    /// One client per process, one handle per queue (the README's shape).
    pub struct Session(Client);

    impl Session {
        pub async fn open(url: &str) -> Session {
            Session(Client::connect(url).await.expect("connect a client"))
        }

        pub async fn queue(&self, name: &str) -> Queue {
            self.0.queue(name).await.expect("a queue handle")
        }
    }

    /// Runs a consumer at `conc` whose handler calls `on_job` and succeeds,
    /// until `done` resolves; then shuts it down.
    pub async fn consume_until(
        queue: Queue,
        conc: usize,
        on_job: Arc<dyn Fn() + Send + Sync>,
        done: impl Future<Output = ()>,
    ) {
        let consumer = Consumer::new(queue, move |_job: Job<Payload>| {
            on_job();
            async { Ok::<(), HandlerError>(()) }
        })
        .concurrency(conc)
        .spawn()
        .expect("spawn a consumer");
        done.await;
        consumer.shutdown().await.expect("a clean shutdown");
    }
}

/// The API of echomq 0.1: a queue handle connects by itself, a handler's
/// error is any `Display`, and spawning and shutdown cannot fail.
#[cfg(feature = "api-0-1")]
mod api {
    use std::sync::Arc;

    use echomq::{Consumer, Job, Queue};

    use super::Payload;

    pub struct Session(String);

    impl Session {
        pub async fn open(url: &str) -> Session {
            Session(url.to_owned())
        }

        pub async fn queue(&self, name: &str) -> Queue {
            Queue::connect(&self.0, name).await.expect("a queue handle")
        }
    }

    pub async fn consume_until(
        queue: Queue,
        conc: usize,
        on_job: Arc<dyn Fn() + Send + Sync>,
        done: impl Future<Output = ()>,
    ) {
        let consumer = Consumer::new(queue, move |_job: Job<Payload>| {
            on_job();
            async { Ok::<(), String>(()) }
        })
        .concurrency(conc)
        .spawn();
        done.await;
        consumer.shutdown().await;
    }
}

/// Reads `name` from the environment, or `default` when unset or empty; a
/// value that does not parse is an error, not the default.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} does not parse")),
        _ => default,
    }
}

/// The server's counters at one moment, and this process's CPU time.
struct Snap {
    /// `used_cpu_sys + used_cpu_user`, seconds.
    cpu: f64,
    /// Calls per command (`INFO commandstats`), `info` left out.
    calls: BTreeMap<String, u64>,
    /// This process's CPU seconds (see [`client_cpu`]).
    client_cpu: f64,
}

/// CPU seconds of this process: each thread's time on CPU from
/// `/proc/self/task/*/schedstat` (nanoseconds), 0 where that is missing.
/// CPU time, unlike wall time, is not stretched by other processes waiting
/// for the same cores, so on a shared machine it is the steadier measure
/// of the client's own work per job. Threads that exited are not counted
/// (the runtime's workers live for the whole run).
fn client_cpu() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()))
        .sum();
    ns as f64 / 1e9
}

async fn info(admin: &mut MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO").arg(section).query_async(admin).await.expect("INFO")
}

/// `INFO` text as `field -> value`.
fn fields(text: &str) -> BTreeMap<&str, &str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.trim().split_once(':'))
        .collect()
}

async fn snap(admin: &mut MultiplexedConnection) -> Snap {
    let cpu_text = info(admin, "cpu").await;
    let cpu = fields(&cpu_text);
    let num = |k: &str| cpu.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let cmd_text = info(admin, "commandstats").await;
    let mut calls = BTreeMap::new();
    for (name, stats) in fields(&cmd_text) {
        let Some(name) = name.strip_prefix("cmdstat_") else {
            continue;
        };
        if name == "info" {
            continue;
        }
        let n = stats
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        calls.insert(name.to_owned(), n);
    }
    Snap {
        cpu: num("used_cpu_sys") + num("used_cpu_user"),
        calls,
        client_cpu: client_cpu(),
    }
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// The server-cost fields of a window of `jobs` jobs.
fn cost(before: &Snap, after: &Snap, jobs: usize) -> Map<String, Value> {
    let per = |x: f64| round(x / jobs as f64, 4);
    let mut cmds = Map::new();
    let mut total = 0;
    for (name, &n) in &after.calls {
        let d = n.saturating_sub(before.calls.get(name).copied().unwrap_or(0));
        if d > 0 {
            total += d;
            cmds.insert(name.clone(), per(d as f64).into());
        }
    }
    let cpu = after.cpu - before.cpu;
    let mut m = Map::new();
    m.insert("server_cpu_s".into(), round(cpu, 6).into());
    m.insert("server_cpu_us_per_job".into(), round(cpu * 1e6 / jobs as f64, 3).into());
    let client = after.client_cpu - before.client_cpu;
    m.insert(
        "client_cpu_us_per_job".into(),
        round(client * 1e6 / jobs as f64, 3).into(),
    );
    m.insert("server_cmds_per_job".into(), per(total as f64).into());
    m.insert("cmds_per_job".into(), Value::Object(cmds));
    m
}

/// Enqueues `n` jobs, [`CHUNK`] per `enqueue_bulk` call.
async fn fill(q: &Queue, n: usize) {
    for start in (0..n).step_by(CHUNK) {
        let batch: Vec<Payload> = (start..(start + CHUNK).min(n)).map(payload).collect();
        q.enqueue_bulk(&batch).await.expect("enqueue_bulk");
    }
}

/// Enqueues `n` jobs one per call, [`IN_FLIGHT`] calls at a time.
async fn add_in_flight(q: &Queue, n: usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let mut set = JoinSet::new();
    for _ in 0..IN_FLIGHT {
        let (q, next) = (q.clone(), next.clone());
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                q.enqueue(&payload(i)).await.expect("enqueue");
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("an enqueue task");
    }
}

/// One timed part: what the line reports of it.
struct Measured {
    op: &'static str,
    conc: usize,
    seconds: f64,
    before: Snap,
    after: Snap,
    /// Handler calls, for the process figure (`N` unless a job ran twice).
    handled: Option<usize>,
}

/// A backlog of `n` jobs, untimed; then a consumer at `conc`, timed from its
/// first handler call until its shutdown after the `n`-th returns.
async fn process(q: &Queue, n: usize, conc: usize, admin: &mut MultiplexedConnection) -> Measured {
    fill(q, n).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let first: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
    let all = Arc::new(Notify::new());
    let on_job = {
        let (calls, first, all) = (calls.clone(), first.clone(), all.clone());
        Arc::new(move || {
            first.get_or_init(Instant::now);
            if calls.fetch_add(1, Ordering::Relaxed) + 1 == n {
                all.notify_one();
            }
        })
    };
    let limit = Duration::from_secs(120 + (n / 200) as u64);
    let done = {
        let calls = calls.clone();
        async move {
            if tokio::time::timeout(limit, all.notified()).await.is_err() {
                let started = calls.load(Ordering::Relaxed);
                panic!("only {started} of {n} jobs started within {limit:?}");
            }
        }
    };
    let before = snap(admin).await;
    api::consume_until(q.clone(), conc, on_job, done).await;
    let end = Instant::now();
    let after = snap(admin).await;
    let first = *first.get().expect("a handler ran");
    Measured {
        op: "process_noop",
        conc,
        seconds: end.duration_since(first).as_secs_f64(),
        before,
        after,
        handled: Some(calls.load(Ordering::Relaxed)),
    }
}

/// `n` jobs enqueued one per call (`bulk` false) or 1,000 per call.
async fn enqueue(q: &Queue, n: usize, bulk: bool, admin: &mut MultiplexedConnection) -> Measured {
    let before = snap(admin).await;
    let t0 = Instant::now();
    if bulk {
        fill(q, n).await;
    } else {
        add_in_flight(q, n).await;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let after = snap(admin).await;
    let (op, conc) = if bulk {
        ("enqueue_bulk_chunk1000", 1)
    } else {
        ("enqueue_add_64inflight", IN_FLIGHT)
    };
    Measured {
        op,
        conc,
        seconds,
        before,
        after,
        handled: None,
    }
}

/// Runs the figure `name` on a fresh queue; returns its line's own fields.
async fn figure(name: &str, url: &str, n: usize, conc: usize, admin: &mut MultiplexedConnection) -> Map<String, Value> {
    let session = api::Session::open(url).await;
    let q = session.queue("bench").await;
    let m = match name {
        "process" => process(&q, n, conc, admin).await,
        "enqueue_add" => enqueue(&q, n, false, admin).await,
        "enqueue_bulk" => enqueue(&q, n, true, admin).await,
        other => panic!("unknown figure {other:?} (process, enqueue_add, enqueue_bulk)"),
    };
    let mut line = Map::new();
    line.insert("op".into(), m.op.into());
    line.insert("n".into(), n.into());
    line.insert("conc".into(), m.conc.into());
    line.insert("seconds".into(), round(m.seconds, 4).into());
    line.insert("jobs_per_s".into(), round(n as f64 / m.seconds, 1).into());
    if let Some(h) = m.handled {
        line.insert("check_handler_calls".into(), h.into());
    }
    line.extend(cost(&m.before, &m.after, n));
    line
}

fn main() {
    let name = std::env::args().nth(1).unwrap_or_else(|| "process".into());
    let url = std::env::var("ECHOMQ_URL").expect("ECHOMQ_URL (scripts/bench-vs-release sets it)");
    let n: usize = env_or("N", 20_000);
    let conc: usize = env_or("CONC", 64);
    assert!(n > 0 && conc > 0, "N and CONC must be positive");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let line = rt.block_on(async {
        let client = redis::Client::open(url.as_str()).expect("ECHOMQ_URL");
        // No response timeout: a FLUSHDB or a busy server must not fail a run.
        let config = AsyncConnectionConfig::new().set_response_timeout(None);
        let mut admin = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("connect to the server");
        // The figure's counters would be wrong on a database in use, and
        // this program must never be what empties someone's database.
        let keys: u64 = redis::cmd("DBSIZE").query_async(&mut admin).await.expect("DBSIZE");
        assert_eq!(keys, 0, "the database at ECHOMQ_URL is not empty");
        let server_info = info(&mut admin, "server").await;
        let server = {
            let f = fields(&server_info);
            match (f.get("server_name"), f.get("valkey_version")) {
                (Some(name), Some(v)) => format!("{name} {v}"),
                _ => format!("redis {}", f.get("redis_version").unwrap_or(&"?")),
            }
        };
        let mut line = Map::new();
        line.insert("suite".into(), "echomq-vs-release".into());
        for (key, var) in [("build", "BENCH_BUILD"), ("rev", "BENCH_REV"), ("run", "BENCH_RUN")] {
            if let Ok(v) = std::env::var(var) {
                let v = v.parse::<u64>().map_or_else(|_| Value::from(v), Value::from);
                line.insert(key.into(), v);
            }
        }
        line.insert("server".into(), server.into());
        line.extend(figure(&name, &url, n, conc, &mut admin).await);
        if let Some(load) = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()))
        {
            line.insert("loadavg_1m".into(), load.into());
        }
        line
    });
    println!("{}", Value::Object(line));
}
