//! A producer process of a fault run: enqueues jobs `PREFIX{from}` ..
//! `PREFIX{from+count-1}` with caller-chosen ids, so an enqueue whose
//! outcome is unknown (timeout, dropped connection, server restart) is
//! retried safely with the same id until the server answers. Every
//! `--dedup-every`-th job carries a dedup id `g{k % groups}` (marker until
//! the job finishes). With `--lanes=N`, job k is on lane `l{k % N}`, and
//! `--lane-cap=C` first sets the cap of each of those lanes to C (stored in
//! the server, so every worker's claims honour it). `--max-active=C`,
//! `--rate=N:W_MS` and `--lane-rate=N:W_MS` first set the queue's global
//! cap, its rate limit and the default rate limit of its lanes. Records
//! invoke / ok / fail (definite or unknown).
//!
//! Limits belong to the job and are fixed here, at enqueue: the handle's
//! defaults (`Args::queue_options`) give every job 1,000 attempts, 1,000
//! stalls and a fixed 20 ms backoff unless `--max-attempts`,
//! `--max-stalls` or `--backoff-ms` say otherwise.
//!
//! ```text
//! fault-producer --url=U --queue=Q --history=p1.jsonl --src=p1 --from=0 --count=1000 \
//!     [--prefix=j] [--concurrency=8] [--dedup-every=0] [--dedup-groups=5]
//!     [--pace-ms=0] [--response-timeout-ms=1000] [--lanes=0] [--lane-cap=C]
//!     [--max-active=C] [--rate=N:W_MS] [--lane-rate=N:W_MS]
//!     [--max-attempts=1000] [--max-stalls=1000] [--backoff-ms=20]
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use echomq::{EnqueueOptions, EnqueueStatus, Queue};
use echomq_fault::args::Args;
use echomq_fault::history::{Ev, History};

/// How long one job's enqueue is retried before the producer gives up.
const GIVE_UP: Duration = Duration::from_secs(120);

/// A rate limit argument "N:W_MS".
fn rate(s: &str) -> echomq::throttle::RateLimit {
    let (n, w) = s.split_once(':').expect("a rate limit is N:W_MS");
    echomq::throttle::RateLimit::new(n.parse().expect("N"), Duration::from_millis(w.parse().expect("W_MS")))
        .expect("a valid rate limit")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = Args::from_env();
    let url = a.req("url");
    let hist = Arc::new(History::open(a.req("history").as_ref(), &a.req("src")).expect("open the history"));
    let from: u64 = a.get("from", 0);
    let count: u64 = a.get("count", 100);
    let prefix = a.get("prefix", "j".to_string());
    let dedup_every: u64 = a.get("dedup-every", 0);
    let groups: u64 = a.get("dedup-groups", 5);
    let pace = Duration::from_millis(a.get("pace-ms", 0));
    let lanes: u64 = a.get("lanes", 0);
    let queue = a.connect(&url).await;
    if let Some(cap) = a.opt("lane-cap") {
        let cap: u32 = cap.parse().expect("--lane-cap");
        for l in 0..lanes {
            queue
                .set_lane_cap(&format!("l{l}"), Some(cap))
                .await
                .expect("set a lane's cap");
        }
    }
    if let Some(max) = a.opt("max-active") {
        let max: u32 = max.parse().expect("--max-active");
        queue.set_max_active(Some(max)).await.expect("set the global cap");
    }
    if let Some(r) = a.opt("rate") {
        queue.set_rate_limit(Some(rate(&r))).await.expect("set the rate limit");
    }
    if let Some(r) = a.opt("lane-rate") {
        queue
            .set_lane_default_rate_limit(Some(rate(&r)))
            .await
            .expect("set the lanes' rate limit");
    }
    hist.write(Ev::Start {
        role: "producer".into(),
        pid: std::process::id(),
        lease_ms: 0,
        guarded: false,
    });
    let next = Arc::new(AtomicU64::new(from));
    let mut tasks = Vec::new();
    for _ in 0..a.get("concurrency", 8usize) {
        let (q, h, next, prefix) = (queue.clone(), hist.clone(), next.clone(), prefix.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let k = next.fetch_add(1, Ordering::SeqCst);
                if k >= from + count {
                    return;
                }
                let id = format!("{prefix}{k}");
                let dedup = (dedup_every > 0 && k % dedup_every == 0).then(|| format!("g{}", k % groups));
                let lane = (lanes > 0).then(|| format!("l{}", k % lanes));
                enqueue(&q, &h, &id, k, dedup, lane).await;
                if !pace.is_zero() {
                    tokio::time::sleep(pace).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("producer task");
    }
    hist.write(Ev::Stop { reason: "done".into() });
}

/// Enqueues one job, retrying an unknown outcome with the same id.
async fn enqueue(q: &Queue, h: &History, id: &str, n: u64, dedup: Option<String>, lane: Option<String>) {
    let mut opts = EnqueueOptions::new().id(id);
    if let Some(d) = &dedup {
        opts = opts.dedup(d.clone());
    }
    if let Some(l) = lane {
        opts = opts.lane(l);
    }
    let payload = echomq_fault::state::payload_for(n);
    let give_up = Instant::now() + GIVE_UP;
    loop {
        h.write(Ev::EnqueueInvoke {
            id: id.to_owned(),
            dedup: dedup.clone(),
        });
        let t0 = Instant::now();
        let res = q.enqueue_with(&payload, &opts).await;
        let ms = t0.elapsed().as_millis() as u64;
        match res {
            Ok(e) => {
                let status = match e.status {
                    EnqueueStatus::Created => "created",
                    EnqueueStatus::Existing => "existing",
                    EnqueueStatus::Deduplicated => "deduplicated",
                    _ => "other",
                };
                h.write(Ev::EnqueueOk {
                    id: id.to_owned(),
                    status: status.into(),
                    job: e.id,
                    ms,
                });
                return;
            }
            Err(e) => {
                let definite = !e.is_transient();
                h.write(Ev::EnqueueFail {
                    id: id.to_owned(),
                    error: e.to_string(),
                    definite,
                    ms,
                });
                if definite || Instant::now() > give_up {
                    eprintln!("enqueue {id}: giving up: {e}");
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
