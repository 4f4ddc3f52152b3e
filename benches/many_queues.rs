//! Many queues in one process (issues 12 and 15): `Worker`s over `QUEUES`
//! queues (one per [`MAX_QUEUES`](echomq::worker::MAX_QUEUES), all on one
//! `Client`, so one maintenance task keeps them all) against `QUEUES`
//! `Consumer`s side by side, on one private server. For each it reports
//! the connections it opened, what it costs the server while idle (script
//! calls and commands a second, from `INFO commandstats`; the server's CPU,
//! `used_cpu_user + used_cpu_sys`), the process's idle CPU, and the
//! enqueue→start latency of jobs each enqueued on a random queue while the
//! rest are idle. The worker setup also reports memory per queue (the
//! server's `used_memory` grown by making the queues, each with one
//! finished and one pending job) and what one consistency sweep of every
//! queue costs, each queue walking the keyspace (`Queue::sweep`) and one
//! walk for all (`maintenance::sweep_queues`, as the maintenance task
//! sweeps). It measures; it changes nothing.
//!
//! Run: `cargo bench --bench many_queues --features local-server` (server
//! binary from `ECHOMQ_SERVER_BIN`, `.tools/valkey` or `PATH`; see
//! `echomq::server`).
//!
//! 10,000 idle queues: `QUEUES=10000 SETUPS=worker LAT_N=100` (10,000
//! consumers would open 10,000 connections).
//!
//! Sizes (environment): `QUEUES` (50), `SETUPS` (`worker,consumers`),
//! `WARMUP_SECS` (20) seconds before
//! the idle figures (start-up sweeps finish there), `IDLE_SECS` (10) seconds of idle
//! measurement, `LAT_N` (500) jobs for the latency figure, `POLL_MS` (the
//! default poll interval, 5000). Maintenance (reaping) is on, as it is by
//! default; it is the same task either way, and its calls are counted.
//! `SWEEP_SAMPLE` (200): how many queues the per-queue sweep is timed over
//! (each walks the whole database, so its cost scales to all queues by
//! `QUEUES / SWEEP_SAMPLE`).
//!
//! Each setup prints one JSON line on stdout; a table closes the run.

#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use echomq::server::LocalServer;
use echomq::{Client, Consumer, Job, Queue, Worker, WorkerHandle};
use redis::aio::MultiplexedConnection;
use serde_json::json;
use tokio::sync::mpsc;

use support::{BLOCKING_CMDS, SCRIPT_CMDS, Snap, env_or, parse_info, percentile, round};

/// What one setup measured.
struct Figures {
    setup: &'static str,
    connections_opened: u64,
    connected: i64,
    script_calls_per_s: f64,
    blocking_calls_per_s: f64,
    commands_per_s: f64,
    /// The server's CPU while idle (`used_cpu_user + used_cpu_sys`, all
    /// threads), % of one core.
    server_cpu_pct: f64,
    idle_cpu_pct: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// `used_memory` grown per queue made (worker setup only).
    bytes_per_queue: Option<f64>,
    /// Keys in the database once the queues are made.
    keys: u64,
    sweep: Option<SweepCost>,
}

/// What one consistency sweep of every queue costs.
struct SweepCost {
    /// Each queue's own walk (`Queue::sweep`), timed over a sample and
    /// scaled to every queue: SCAN steps, script calls, server CPU seconds.
    per_queue: (f64, f64, f64),
    /// One walk for all (`maintenance::sweep_queues`, as the maintenance
    /// task sweeps): SCAN steps, script calls, server CPU seconds.
    shared: (f64, f64, f64),
}

async fn info(c: &mut MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO").arg(section).query_async(c).await.unwrap()
}

async fn snap(c: &mut MultiplexedConnection) -> Snap {
    let stats = info(c, "commandstats").await;
    let cpu = info(c, "cpu").await;
    Snap::parse(&stats, &cpu)
}

/// The server's CPU seconds, all threads (`used_cpu_user + used_cpu_sys`).
async fn server_cpu(c: &mut MultiplexedConnection) -> f64 {
    let cpu = parse_info(&info(c, "cpu").await);
    let num = |k: &str| cpu.get(k).and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0);
    num("used_cpu_user") + num("used_cpu_sys")
}

/// The server's `used_memory`.
async fn used_memory(c: &mut MultiplexedConnection) -> u64 {
    let m = parse_info(&info(c, "memory").await);
    m["used_memory"].trim().parse().unwrap()
}

async fn dbsize(c: &mut MultiplexedConnection) -> u64 {
    redis::cmd("DBSIZE").query_async(c).await.unwrap()
}

/// `connected_clients` and `total_connections_received`.
async fn clients(c: &mut MultiplexedConnection) -> (i64, u64) {
    let clients = parse_info(&info(c, "clients").await);
    let stats = parse_info(&info(c, "stats").await);
    (
        clients["connected_clients"].trim().parse().unwrap(),
        stats["total_connections_received"].trim().parse().unwrap(),
    )
}

/// A small deterministic generator for the random queue of each job.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Gives each queue one finished job and one pending one (which the
/// setup's handlers then run: the queues are idle by the measurement).
async fn fill(queues: &[Queue]) {
    for q in queues {
        q.enqueue(&0u32).await.unwrap();
        let leases = q.claim(1, Duration::from_secs(60)).await.unwrap();
        for l in &leases {
            q.complete(l).await.unwrap();
        }
        q.enqueue(&0u32).await.unwrap();
    }
}

/// One consistency sweep of every queue, each queue walking the whole
/// database itself (`Queue::sweep`, as the maintenance task sweeps each
/// queue), timed over the first `SWEEP_SAMPLE` queues and scaled.
async fn sweep_per_queue(raw: &mut MultiplexedConnection, queues: &[Queue]) -> (f64, f64, f64) {
    let sample = env_or("SWEEP_SAMPLE", 200usize).clamp(1, queues.len());
    let before = snap(raw).await;
    let cpu0 = server_cpu(raw).await;
    for q in &queues[..sample] {
        q.sweep(echomq::maintenance::SWEEP_STEP).await.unwrap();
    }
    let cpu1 = server_cpu(raw).await;
    let d = snap(raw).await.since(&before);
    let scale = queues.len() as f64 / sample as f64;
    (
        d.calls(&["scan"]) as f64 * scale,
        d.calls(SCRIPT_CMDS) as f64 * scale,
        (cpu1 - cpu0) * scale,
    )
}

/// One consistency sweep of every queue with one walk of the keyspace
/// (`maintenance::sweep_queues`: what the maintenance task does, unpaced).
async fn sweep_shared(raw: &mut MultiplexedConnection, queues: &[Queue]) -> (f64, f64, f64) {
    let before = snap(raw).await;
    let cpu0 = server_cpu(raw).await;
    echomq::maintenance::sweep_queues(queues, echomq::maintenance::SWEEP_STEP)
        .await
        .unwrap();
    let cpu1 = server_cpu(raw).await;
    let d = snap(raw).await.since(&before);
    (d.calls(&["scan"]) as f64, d.calls(SCRIPT_CMDS) as f64, cpu1 - cpu0)
}

/// Runs one setup: `start` spawns what serves `queues`, whose handlers send
/// their start instant on the channel given.
async fn measure(
    setup: &'static str,
    url: &str,
    raw: &mut MultiplexedConnection,
    start: impl FnOnce(&[Queue], mpsc::UnboundedSender<Instant>) -> Vec<WorkerHandle>,
) -> Figures {
    let n: usize = env_or("QUEUES", 50);
    let idle_secs: u64 = env_or("IDLE_SECS", 10);
    let lat_n: usize = env_or("LAT_N", 500);
    let deep = setup == "worker";
    let (connected0, received0) = clients(raw).await;
    let client = Client::connect(url).await.unwrap();
    let mem0 = used_memory(raw).await;
    let mut queues = Vec::with_capacity(n);
    for i in 0..n {
        queues.push(client.queue(&format!("{setup}-{i}")).await.unwrap());
    }
    if deep {
        fill(&queues).await;
    }
    let mem1 = used_memory(raw).await;
    let keys = dbsize(raw).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handles = start(&queues, tx);
    // Warm up: every queue claimed once and found empty, and the start-up
    // sweep under way (paced at one step a second: on a big database it
    // is still going during the measurement, as it is in a live process).
    tokio::time::sleep(Duration::from_secs(env_or("WARMUP_SECS", 20))).await;
    let (connected1, received1) = clients(raw).await;
    let before = snap(raw).await;
    let cpu0 = server_cpu(raw).await;
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let cpu1 = server_cpu(raw).await;
    let after = snap(raw).await;
    let d = after.since(&before);
    let secs = d.wall;
    // The start instants of the jobs `fill` left pending are not latencies.
    while rx.try_recv().is_ok() {}
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut lat = Vec::with_capacity(lat_n);
    for _ in 0..lat_n {
        let q = &queues[rng.below(n)];
        let sent = Instant::now();
        q.enqueue(&0u32).await.unwrap();
        let started = rx.recv().await.unwrap();
        lat.push(started.duration_since(sent).as_secs_f64() * 1e3);
    }
    lat.sort_by(f64::total_cmp);
    for h in handles {
        h.shutdown().await.unwrap();
    }
    let sweep = if deep {
        Some(SweepCost {
            per_queue: sweep_per_queue(raw, &queues).await,
            shared: sweep_shared(raw, &queues).await,
        })
    } else {
        None
    };
    Figures {
        setup,
        connections_opened: received1 - received0,
        connected: connected1 - connected0,
        script_calls_per_s: d.calls(SCRIPT_CMDS) as f64 / secs,
        blocking_calls_per_s: d.calls(BLOCKING_CMDS) as f64 / secs,
        commands_per_s: d.all_calls() as f64 / secs,
        server_cpu_pct: (cpu1 - cpu0) / secs * 100.0,
        idle_cpu_pct: d.client_cpu / secs * 100.0,
        p50_ms: percentile(&lat, 50.0),
        p99_ms: percentile(&lat, 99.0),
        bytes_per_queue: deep.then(|| mem1.saturating_sub(mem0) as f64 / n as f64),
        keys,
        sweep,
    }
}

fn handler(
    tx: mpsc::UnboundedSender<Instant>,
) -> impl Fn(Job<u32>) -> std::future::Ready<Result<(), echomq::HandlerError>> {
    move |_job| {
        let _ = tx.send(Instant::now());
        std::future::ready(Ok(()))
    }
}

#[tokio::main]
async fn main() {
    let server = LocalServer::start().expect("start a local server");
    let url = server.url();
    let mut raw = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let poll = Duration::from_millis(env_or(
        "POLL_MS",
        echomq::worker::DEFAULT_POLL_INTERVAL.as_millis() as u64,
    ));
    let setups: String = env_or("SETUPS", "worker,consumers".to_owned());
    let mut rows = Vec::new();
    if setups.split(',').any(|s| s.trim() == "worker") {
        // One worker per MAX_QUEUES queues, all on one client (one
        // maintenance task for all of them).
        rows.push(
            measure("worker", &url, &mut raw, |queues, tx| {
                queues
                    .chunks(echomq::worker::MAX_QUEUES)
                    .map(|chunk| {
                        let mut w = Worker::new().poll_interval(poll);
                        for q in chunk {
                            w = w.queue(q.clone(), handler(tx.clone()));
                        }
                        w.spawn().unwrap()
                    })
                    .collect()
            })
            .await,
        );
    }
    if setups.split(',').any(|s| s.trim() == "consumers") {
        rows.push(
            measure("consumers", &url, &mut raw, |queues, tx| {
                queues
                    .iter()
                    .map(|q| {
                        Consumer::new(q.clone(), handler(tx.clone()))
                            .poll_interval(poll)
                            .spawn()
                            .unwrap()
                    })
                    .collect()
            })
            .await,
        );
    }
    let queues = env_or::<usize>("QUEUES", 50);
    for f in &rows {
        println!(
            "{}",
            json!({
                "bench": "many_queues",
                "setup": f.setup,
                "queues": queues,
                "poll_ms": poll.as_millis() as u64,
                "connections_opened": f.connections_opened,
                "connected": f.connected,
                "script_calls_per_s": round(f.script_calls_per_s, 2),
                "blocking_calls_per_s": round(f.blocking_calls_per_s, 2),
                "commands_per_s": round(f.commands_per_s, 2),
                "server_cpu_pct": round(f.server_cpu_pct, 3),
                "idle_cpu_pct": round(f.idle_cpu_pct, 3),
                "latency_p50_ms": round(f.p50_ms, 3),
                "latency_p99_ms": round(f.p99_ms, 3),
                "bytes_per_queue": f.bytes_per_queue.map(|b| round(b, 1)),
                "keys": f.keys,
                "sweep_per_queue_scan_steps": f.sweep.as_ref().map(|s| round(s.per_queue.0, 0)),
                "sweep_per_queue_script_calls": f.sweep.as_ref().map(|s| round(s.per_queue.1, 0)),
                "sweep_per_queue_server_cpu_s": f.sweep.as_ref().map(|s| round(s.per_queue.2, 3)),
                "sweep_shared_scan_steps": f.sweep.as_ref().map(|s| s.shared.0),
                "sweep_shared_script_calls": f.sweep.as_ref().map(|s| s.shared.1),
                "sweep_shared_server_cpu_s": f.sweep.as_ref().map(|s| round(s.shared.2, 3)),
            })
        );
    }
    println!();
    println!(
        "{:<10} {:>12} {:>10} {:>14} {:>12} {:>12} {:>11} {:>10} {:>9} {:>9}",
        "setup",
        "conns opened",
        "connected",
        "scripts/s idle",
        "blocking/s",
        "commands/s",
        "server CPU%",
        "idle CPU%",
        "p50 ms",
        "p99 ms"
    );
    for f in &rows {
        println!(
            "{:<10} {:>12} {:>10} {:>14.2} {:>12.2} {:>12.2} {:>11.3} {:>10.3} {:>9.3} {:>9.3}",
            f.setup,
            f.connections_opened,
            f.connected,
            f.script_calls_per_s,
            f.blocking_calls_per_s,
            f.commands_per_s,
            f.server_cpu_pct,
            f.idle_cpu_pct,
            f.p50_ms,
            f.p99_ms
        );
        if let Some(b) = f.bytes_per_queue {
            println!("  memory per queue: {b:.0} bytes ({} keys in the database)", f.keys);
        }
        if let Some(s) = &f.sweep {
            let (scans, scripts, cpu) = s.per_queue;
            println!(
                "  one sweep of every queue, each queue walking the database: {scans:.0} SCAN steps, \
                 {scripts:.0} script calls, {cpu:.2} s server CPU"
            );
            let (scans, scripts, cpu) = s.shared;
            println!(
                "  one sweep of every queue, one walk for all: {scans:.0} SCAN steps, \
                 {scripts:.0} script calls, {cpu:.2} s server CPU"
            );
        }
    }
}
