//! Many queues in one process (issue 12): one `Worker` over `QUEUES` queues
//! against `QUEUES` `Consumer`s side by side, on one private server. For
//! each it reports the connections it opened, what it costs the server
//! while idle (script calls and commands a second, from `INFO
//! commandstats`), the process's idle CPU, and the enqueue→start latency of
//! jobs each enqueued on a random queue while the rest are idle. It
//! measures; it changes nothing.
//!
//! Run: `cargo bench --bench many_queues --features local-server` (server
//! binary from `ECHOMQ_SERVER_BIN`, `.tools/valkey` or `PATH`; see
//! `echomq::server`).
//!
//! Sizes (environment): `QUEUES` (50), `WARMUP_SECS` (20) seconds before
//! the idle figures (start-up sweeps finish there), `IDLE_SECS` (10) seconds of idle
//! measurement, `LAT_N` (500) jobs for the latency figure, `POLL_MS` (the
//! default poll interval, 5000). Maintenance (reaping) is on, as it is by
//! default; it is the same task either way, and its calls are counted.
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
    idle_cpu_pct: f64,
    p50_ms: f64,
    p99_ms: f64,
}

async fn info(c: &mut MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO").arg(section).query_async(c).await.unwrap()
}

async fn snap(c: &mut MultiplexedConnection) -> Snap {
    let stats = info(c, "commandstats").await;
    let cpu = info(c, "cpu").await;
    Snap::parse(&stats, &cpu)
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
    let (connected0, received0) = clients(raw).await;
    let client = Client::connect(url).await.unwrap();
    let mut queues = Vec::with_capacity(n);
    for i in 0..n {
        queues.push(client.queue(&format!("{setup}-{i}")).await.unwrap());
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handles = start(&queues, tx);
    // Warm up: every queue claimed once and found empty, and swept once
    // (a consumer's maintenance sweeps its queue when it starts, paced at
    // one step a second: a few steps each here, more when the database is bigger).
    tokio::time::sleep(Duration::from_secs(env_or("WARMUP_SECS", 20))).await;
    let (connected1, received1) = clients(raw).await;
    let before = snap(raw).await;
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let after = snap(raw).await;
    let d = after.since(&before);
    let secs = d.wall;
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
    Figures {
        setup,
        connections_opened: received1 - received0,
        connected: connected1 - connected0,
        script_calls_per_s: d.calls(SCRIPT_CMDS) as f64 / secs,
        blocking_calls_per_s: d.calls(BLOCKING_CMDS) as f64 / secs,
        commands_per_s: d.all_calls() as f64 / secs,
        idle_cpu_pct: d.client_cpu / secs * 100.0,
        p50_ms: percentile(&lat, 50.0),
        p99_ms: percentile(&lat, 99.0),
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
        echomq::consumer::DEFAULT_POLL_INTERVAL.as_millis() as u64,
    ));
    let one = measure("worker", &url, &mut raw, |queues, tx| {
        let mut w = Worker::new().poll_interval(poll);
        for q in queues {
            w = w.queue(q.clone(), handler(tx.clone()));
        }
        vec![w.spawn().unwrap()]
    })
    .await;
    let many = measure("consumers", &url, &mut raw, |queues, tx| {
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
    .await;
    let rows = [one, many];
    for f in &rows {
        println!(
            "{}",
            json!({
                "bench": "many_queues",
                "setup": f.setup,
                "queues": env_or::<usize>("QUEUES", 50),
                "poll_ms": poll.as_millis() as u64,
                "connections_opened": f.connections_opened,
                "connected": f.connected,
                "script_calls_per_s": round(f.script_calls_per_s, 2),
                "blocking_calls_per_s": round(f.blocking_calls_per_s, 2),
                "commands_per_s": round(f.commands_per_s, 2),
                "idle_cpu_pct": round(f.idle_cpu_pct, 3),
                "latency_p50_ms": round(f.p50_ms, 3),
                "latency_p99_ms": round(f.p99_ms, 3),
            })
        );
    }
    println!();
    println!(
        "{:<10} {:>12} {:>10} {:>14} {:>12} {:>12} {:>10} {:>9} {:>9}",
        "setup",
        "conns opened",
        "connected",
        "scripts/s idle",
        "blocking/s",
        "commands/s",
        "idle CPU%",
        "p50 ms",
        "p99 ms"
    );
    for f in &rows {
        println!(
            "{:<10} {:>12} {:>10} {:>14.2} {:>12.2} {:>12.2} {:>10.3} {:>9.3} {:>9.3}",
            f.setup,
            f.connections_opened,
            f.connected,
            f.script_calls_per_s,
            f.blocking_calls_per_s,
            f.commands_per_s,
            f.idle_cpu_pct,
            f.p50_ms,
            f.p99_ms
        );
    }
}
