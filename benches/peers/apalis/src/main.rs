//! apalis-bench: standalone peer benchmark for apalis-redis 1.0.0.
//! See README.md. Only FLUSHDBs the REDIS_URL it is given.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use apalis::prelude::*;
use apalis_redis::{Config, ConnectionManager, RedisStorage};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::json;

const APALIS_REDIS_VERSION: &str = "1.0.0";
const QUEUE: &str = "apalis-bench";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Job {
    i: u64,
    s: String,
}

fn job(i: u64) -> Job {
    Job { i, s: "xxxxxxxxxxxxxxxx".to_owned() }
}

// Per-run handler state (runs are sequential, so globals are fine).
static CALLS: AtomicUsize = AtomicUsize::new(0);
static TARGET: AtomicUsize = AtomicUsize::new(usize::MAX);
static FIRST: Mutex<Option<Instant>> = Mutex::new(None);
static LAST: Mutex<Option<Instant>> = Mutex::new(None);

async fn handler(_job: Job, wrk: WorkerContext) -> Result<(), BoxDynError> {
    {
        let mut f = FIRST.lock().unwrap();
        if f.is_none() {
            *f = Some(Instant::now());
        }
    }
    let n = CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    if n == TARGET.load(Ordering::SeqCst) {
        *LAST.lock().unwrap() = Some(Instant::now());
        // Graceful stop: the worker drains in-flight tasks and flushes pending acks on close.
        let _ = wrk.stop();
    }
    Ok(())
}

fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(d)
}

static OUT: OnceLock<Option<String>> = OnceLock::new();

fn emit(v: serde_json::Value) {
    let line = v.to_string();
    println!("{line}");
    if let Some(Some(path)) = OUT.get() {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open BENCH_OUT");
        writeln!(f, "{line}").expect("write BENCH_OUT");
    }
}

fn config(batch: usize) -> Config {
    Config::default().queue(QUEUE).batch_size(batch)
}

async fn flushdb(conn: &mut ConnectionManager) {
    let _: () = redis::cmd("FLUSHDB").query_async(conn).await.expect("FLUSHDB");
}

/// apalis-redis `{queue}:done` is a plain SET (SADD in handle_results.lua).
async fn scard(conn: &mut ConnectionManager, key: &str) -> u64 {
    redis::cmd("SCARD").arg(key).query_async(conn).await.expect("SCARD done set")
}

/// Jobs waiting to run: push always sets run_at >= now, so apalis-redis 1.0 puts every new job in
/// the `{queue}:scheduled` ZSET; fetch_next later moves due ones to the `{queue}:active` LIST.
async fn queued(conn: &mut ConnectionManager, cfg: &Config) -> u64 {
    let z: u64 = redis::cmd("ZCARD").arg(cfg.scheduled_jobs_set()).query_async(conn).await.expect("ZCARD");
    let l: u64 = redis::cmd("LLEN").arg(cfg.active_jobs_list()).query_async(conn).await.expect("LLEN");
    z + l
}

/// Untimed setup push via apalis's own bulk API, in chunks of 1000
/// (apalis-redis pushes a whole bulk in one Lua call; keep calls small).
async fn preload(storage: &mut RedisStorage<Job>, n: usize) {
    let mut i = 0u64;
    while (i as usize) < n {
        let end = ((i as usize) + 1000).min(n) as u64;
        let chunk: Vec<Job> = (i..end).map(job).collect();
        storage.push_bulk(chunk).await.expect("push_bulk");
        i = end;
    }
}

async fn fig_process(conn: &ConnectionManager, n: usize, concs: &[usize], runs: usize, batch: usize, timeout_s: u64) {
    for &conc in concs {
        for r in 1..=runs {
            let mut c = conn.clone();
            flushdb(&mut c).await;
            let mut storage: RedisStorage<Job> = RedisStorage::new(conn.clone()).with_config(config(batch));
            preload(&mut storage, n).await;
            let done_key = storage.get_config().done_jobs_set();

            CALLS.store(0, Ordering::SeqCst);
            TARGET.store(n, Ordering::SeqCst);
            *FIRST.lock().unwrap() = None;
            *LAST.lock().unwrap() = None;

            let worker = WorkerBuilder::new(format!("apalis-bench-c{conc}-r{r}"))
                .backend(storage)
                .concurrency(conc)
                .build(handler);
            let t_start = Instant::now();
            let res = tokio::time::timeout(Duration::from_secs(timeout_s), worker.run()).await;
            let t_stopped = Instant::now();
            let calls = CALLS.load(Ordering::SeqCst);
            let done_in_storage = scard(&mut c, &done_key).await;
            let first = *FIRST.lock().unwrap();
            let last = *LAST.lock().unwrap();

            let mut line = json!({
                "suite": "apalis", "apalis_redis": APALIS_REDIS_VERSION, "op": "process_noop",
                "n": n, "conc": conc, "run": r, "batch_size": batch,
                "check_handler_calls": calls, "check_done_in_storage": done_in_storage,
            });
            match (res, first, last) {
                (Ok(run_res), Some(f), Some(l)) => {
                    let s = (l - f).as_secs_f64();
                    // until worker.run() returned (graceful stop incl. flushing pending acks)
                    let s_stored = (t_stopped - f).as_secs_f64();
                    line["seconds"] = json!(s);
                    line["jobs_per_s"] = json!(n as f64 / s);
                    line["seconds_until_worker_stopped"] = json!(s_stored);
                    line["jobs_per_s_until_worker_stopped"] = json!(n as f64 / s_stored);
                    line["startup_to_first_call_s"] = json!((f - t_start).as_secs_f64());
                    if let Err(e) = run_res {
                        line["worker_error"] = json!(format!("{e:?}"));
                    }
                    if done_in_storage as usize != n {
                        line["warning"] = json!("done set != n after worker stop");
                    }
                }
                (Ok(run_res), _, _) => {
                    line["error"] = json!(format!("worker exited early: {run_res:?}"));
                }
                (Err(_), _, _) => {
                    line["error"] = json!("timeout");
                    line["timeout_s"] = json!(timeout_s);
                }
            }
            emit(line);
        }
    }
}

async fn fig_enqueue_add(conn: &ConnectionManager, n: usize, runs: usize, batch: usize) {
    let inflight = 64;
    for r in 1..=runs {
        let mut c = conn.clone();
        flushdb(&mut c).await;
        let storage: RedisStorage<Job> = RedisStorage::new(conn.clone()).with_config(config(batch));
        let t = Instant::now();
        let results: Vec<bool> = futures::stream::iter(0..n as u64)
            .map(|i| {
                // Clone shares the multiplexed ConnectionManager; each clone has its own sink buffer.
                let mut st = storage.clone();
                async move { st.push(job(i)).await.is_ok() }
            })
            .buffer_unordered(inflight)
            .collect()
            .await;
        let s = t.elapsed().as_secs_f64();
        let ok = results.iter().filter(|b| **b).count();
        let queued_n = queued(&mut c, storage.get_config()).await;
        emit(json!({
            "suite": "apalis", "apalis_redis": APALIS_REDIS_VERSION, "op": "enqueue_add_64inflight",
            "n": n, "conc": inflight, "run": r, "seconds": s, "jobs_per_s": n as f64 / s,
            "check_ok": ok, "check_queued": queued_n,
        }));
    }
}

async fn fig_enqueue_bulk(conn: &ConnectionManager, n: usize, runs: usize, batch: usize) {
    let chunk = 1000usize;
    for r in 1..=runs {
        let mut c = conn.clone();
        flushdb(&mut c).await;
        let mut storage: RedisStorage<Job> = RedisStorage::new(conn.clone()).with_config(config(batch));
        let chunks: Vec<Vec<Job>> = (0..n as u64)
            .collect::<Vec<_>>()
            .chunks(chunk)
            .map(|ch| ch.iter().map(|&i| job(i)).collect())
            .collect();
        let t = Instant::now();
        for ch in chunks {
            storage.push_bulk(ch).await.expect("push_bulk");
        }
        let s = t.elapsed().as_secs_f64();
        let queued_n = queued(&mut c, storage.get_config()).await;
        emit(json!({
            "suite": "apalis", "apalis_redis": APALIS_REDIS_VERSION, "op": "enqueue_addBulk_chunk1000",
            "n": n, "conc": 1, "run": r, "seconds": s, "jobs_per_s": n as f64 / s,
            "check_queued": queued_n,
        }));
    }
}

#[tokio::main]
async fn main() {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL must be set (this tool FLUSHDBs it)");
    let n = env_usize("N", 5000);
    let runs = env_usize("RUNS", 1);
    // apalis-redis Config::batch_size (tasks fetched per poll). apalis default is 10.
    let batch = env_usize("APALIS_BATCH", 10);
    let timeout_s = env_usize("TIMEOUT_S", 120) as u64;
    let concs: Vec<usize> = std::env::var("CONCS")
        .unwrap_or_else(|_| "1,16,64".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    OUT.set(std::env::var("BENCH_OUT").ok().filter(|s| !s.is_empty())).unwrap();

    let mut figs: Vec<String> = std::env::args().skip(1).collect();
    if figs.is_empty() {
        figs = vec!["process".into(), "enqueue_add".into(), "enqueue_bulk".into()];
    }

    let conn = apalis_redis::connect(url.as_str()).await.expect("connect");
    for f in &figs {
        match f.as_str() {
            "process" => fig_process(&conn, n, &concs, runs, batch, timeout_s).await,
            "enqueue_add" => fig_enqueue_add(&conn, n, runs, batch).await,
            "enqueue_bulk" => fig_enqueue_bulk(&conn, n, runs, batch).await,
            other => eprintln!("unknown figure {other:?} (use process, enqueue_add, enqueue_bulk)"),
        }
    }
}
