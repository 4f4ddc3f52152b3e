//! Aggregate throughput over a Valkey Cluster of 1, 2 and 3 masters
//! (issue 13): one partitioned queue (`PARTS` partitions, so spread over the
//! masters) filled in bulk, then drained by one worker. For each cluster
//! size it reports enqueue and process rates, the server CPU per job summed
//! over the masters, how that CPU splits between them, and this process's
//! CPU per job. It measures; it changes nothing.
//!
//! Run: `cargo bench --bench cluster --features local-server,cluster`
//! (server binary from `ECHOMQ_SERVER_BIN`, `.tools/valkey` or `PATH`).
//!
//! Sizes (environment): `MASTERS` ("1,2,3"), `N` (40,000) jobs per run,
//! `PARTS` (12) partitions, `CONCURRENCY` (64) of the worker, `RUNS` (3)
//! runs per size, alternating sizes; the median run is reported.
//!
//! Mind what the machine has: the masters and this process share its
//! cores, so past as many masters as spare cores the figures show the
//! cores, not the cluster. Each run prints one JSON line; a table closes.

#[allow(dead_code)]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use echomq::server::LocalCluster;
use echomq::{Client, ClientOptions, EnqueueOptions, Job, QueueOptions, Retention, Worker};
use serde_json::json;

use support::{client_cpu_seconds, env_list, env_or, median, parse_info, round};

/// Server CPU seconds of the node on `port` (user + sys).
async fn server_cpu(port: u16) -> f64 {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut conn = c.get_multiplexed_async_connection().await.unwrap();
    let text: String = redis::cmd("INFO").arg("cpu").query_async(&mut conn).await.unwrap();
    let info = parse_info(&text);
    let num = |k: &str| info.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    num("used_cpu_user") + num("used_cpu_sys")
}

async fn cpu_of(ports: &[u16]) -> Vec<f64> {
    let mut out = Vec::new();
    for p in ports {
        out.push(server_cpu(*p).await);
    }
    out
}

struct Run {
    masters: usize,
    enqueue_per_s: f64,
    process_per_s: f64,
    server_us_per_job: f64,
    busiest_share: f64,
    client_us_per_job: f64,
}

async fn run(masters: usize, n: usize, parts: usize, concurrency: usize) -> Run {
    let cluster = LocalCluster::builder()
        .masters(masters)
        .replicas_per_master(0)
        .start()
        .unwrap();
    let ports = cluster.master_ports().unwrap();
    let client = Client::connect_cluster(
        &[&cluster.url()],
        ClientOptions::new().response_timeout(Duration::from_secs(10)),
    )
    .await
    .unwrap();
    let pq = client
        .partitioned_queue_with("bench", parts, QueueOptions::new().keep_completed(Retention::None))
        .await
        .unwrap();

    let cpu0 = cpu_of(&ports).await;
    let client0 = client_cpu_seconds();
    let t0 = Instant::now();
    let chunk: Vec<(u64, EnqueueOptions)> = (0..500u64).map(|k| (k, EnqueueOptions::new())).collect();
    let mut sent = 0;
    while sent < n {
        let take = chunk.len().min(n - sent);
        pq.enqueue_bulk_with(&chunk[..take]).await.unwrap();
        sent += take;
    }
    let enqueue_s = t0.elapsed().as_secs_f64();

    let done = Arc::new(AtomicU64::new(0));
    let d = done.clone();
    let t1 = Instant::now();
    let worker = Worker::new()
        .concurrency(concurrency)
        .partitioned(&pq, move |_job: Job<u64>| {
            d.fetch_add(1, Ordering::Relaxed);
            async { Ok(()) }
        })
        .spawn()
        .unwrap();
    // Watch the handler's count (no server calls), then wait for the last
    // settlements (records are not kept: Retention::None).
    while (done.load(Ordering::Relaxed) as usize) < n {
        assert!(t1.elapsed() < Duration::from_secs(600), "jobs stopped running");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    while pq.counts().await.unwrap().active > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let process_s = t1.elapsed().as_secs_f64();
    worker.shutdown().await.unwrap();
    let cpu1 = cpu_of(&ports).await;
    let client_s = client_cpu_seconds() - client0;
    let per_node: Vec<f64> = cpu1.iter().zip(&cpu0).map(|(a, b)| a - b).collect();
    let total: f64 = per_node.iter().sum();
    let busiest = per_node.iter().cloned().fold(0.0, f64::max);
    let r = Run {
        masters,
        enqueue_per_s: n as f64 / enqueue_s,
        process_per_s: n as f64 / process_s,
        server_us_per_job: total * 1e6 / n as f64,
        busiest_share: if total > 0.0 { busiest / total } else { 0.0 },
        client_us_per_job: client_s * 1e6 / n as f64,
    };
    println!(
        "{}",
        json!({
            "bench": "cluster", "masters": masters, "n": n, "partitions": parts,
            "concurrency": concurrency,
            "enqueue_jobs_per_s": round(r.enqueue_per_s, 0),
            "process_jobs_per_s": round(r.process_per_s, 0),
            "server_cpu_us_per_job": round(r.server_us_per_job, 1),
            "server_cpu_s_per_master": per_node.iter().map(|s| round(*s, 2)).collect::<Vec<_>>(),
            "busiest_master_share": round(r.busiest_share, 2),
            "client_cpu_us_per_job": round(r.client_us_per_job, 1),
        })
    );
    r
}

fn main() {
    let sizes: Vec<usize> = env_list("MASTERS", "1,2,3");
    let n: usize = env_or("N", 40_000);
    let parts: usize = env_or("PARTS", 12);
    let concurrency: usize = env_or("CONCURRENCY", 64);
    let runs: usize = env_or("RUNS", 3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut all: Vec<Vec<Run>> = sizes.iter().map(|_| Vec::new()).collect();
    for _ in 0..runs {
        for (i, m) in sizes.iter().enumerate() {
            all[i].push(rt.block_on(run(*m, n, parts, concurrency)));
        }
    }
    println!();
    println!(
        "| masters | enqueue jobs/s | process jobs/s | server CPU µs/job (all masters) | busiest master's share | client CPU µs/job |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for runs in &all {
        let med = |f: fn(&Run) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        println!(
            "| {} | {:.0} | {:.0} | {:.1} | {:.2} | {:.1} |",
            runs[0].masters,
            med(|r| r.enqueue_per_s),
            med(|r| r.process_per_s),
            med(|r| r.server_us_per_job),
            med(|r| r.busiest_share),
            med(|r| r.client_us_per_job),
        );
    }
}
