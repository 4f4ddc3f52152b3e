//! A producer process of a fault run: enqueues jobs `PREFIX{from}` ..
//! `PREFIX{from+count-1}` with caller-chosen ids, so an enqueue whose
//! outcome is unknown (timeout, dropped connection, server restart) is
//! retried safely with the same id until the server answers. Every
//! `--dedup-every`-th job carries a dedup id `g{k % groups}` (marker until
//! the job finishes). With `--lanes=N`, job k is on lane `l{k % N}`, and
//! `--lane-cap=C` first sets the cap of each of those lanes to C (stored in
//! the server, so every worker's claims honour it). `--max-active=C`,
//! `--rate=N:W_MS` and `--lane-rate=N:W_MS` first set the queue's global
//! cap, its rate limit and the default rate limit of its lanes. With
//! `--cancel-every=N`, every N-th job created is asked to be cancelled
//! (`Queue::cancel`) at a random moment up to `--cancel-within-ms` after
//! its enqueue was answered: waiting, running or finished by then; an
//! answer lost is asked again. Records invoke / ok / fail (definite or
//! unknown) and each cancel's answer.
//!
//! With `--flows=N` and `--batches=N` (`--members=M`, default 8), it also
//! adds flows `f{from}`.. and batches `b{from}`.. beside the plain jobs
//! (`echomq_fault::groups`: their shapes and records), from as many tasks,
//! and first makes room in the queue's event stream for every event of
//! the run (the checker counts each job's enqueues there). With
//! `--far-queue=Q2` the groups span that second queue too (some steps and
//! members are made there: `echomq_fault::groups`).
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
//!     [--cancel-every=0] [--cancel-within-ms=50]
//!     [--flows=0] [--batches=0] [--members=8] [--far-queue=Q2]
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use echomq::admin::Cancel;
use echomq::{EnqueueOptions, EnqueueStatus, Error, Queue};
use echomq_fault::args::Args;
use echomq_fault::groups;
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
    let cancel_every: u64 = a.get("cancel-every", 0);
    let cancel_within = a.get("cancel-within-ms", 50u64);
    let flows: u64 = a.get("flows", 0);
    let batches: u64 = a.get("batches", 0);
    let members: u64 = a.get("members", 8);
    let names: Vec<String> = std::iter::once(a.req("queue")).chain(a.opt("far-queue")).collect();
    let mut queues = a.connect_all(&url, &names).await;
    let far = (queues.len() > 1).then(|| queues.remove(1));
    let queue = queues.remove(0);
    if flows + batches > 0 {
        for q in std::iter::once(&queue).chain(&far) {
            q.set_events(&echomq::EventSettings::default().max_len(1_000_000))
                .await
                .expect("make room in the event stream");
        }
    }
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
    let cancels = Arc::new(tokio::sync::Mutex::new(tokio::task::JoinSet::new()));
    let mut tasks = Vec::new();
    for _ in 0..a.get("concurrency", 8usize) {
        let (q, h, next, prefix) = (queue.clone(), hist.clone(), next.clone(), prefix.clone());
        let cancels = cancels.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let k = next.fetch_add(1, Ordering::SeqCst);
                if k >= from + count {
                    return;
                }
                let id = format!("{prefix}{k}");
                let dedup = (dedup_every > 0 && k % dedup_every == 0).then(|| format!("g{}", k % groups));
                let lane = (lanes > 0).then(|| format!("l{}", k % lanes));
                let created = enqueue(&q, &h, &id, k, dedup, lane).await;
                if let Some(job) = created.filter(|_| cancel_every > 0 && k % cancel_every == cancel_every / 2) {
                    let (q, h) = (q.clone(), h.clone());
                    cancels.lock().await.spawn(async move {
                        tokio::time::sleep(Duration::from_millis(fastrand::u64(0..=cancel_within))).await;
                        cancel(&q, &h, &job).await;
                    });
                }
                if !pace.is_zero() {
                    tokio::time::sleep(pace).await;
                }
            }
        }));
    }
    let next_group = Arc::new(AtomicU64::new(0));
    for _ in 0..a.get("concurrency", 8usize) {
        let (q, far, h, next) = (queue.clone(), far.clone(), hist.clone(), next_group.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let k = next.fetch_add(1, Ordering::SeqCst);
                if k < flows {
                    groups::add_flow(&q, far.as_ref(), &h, from + k).await;
                } else if k < flows + batches {
                    groups::add_batch(&q, far.as_ref(), &h, from + k - flows, members).await;
                } else {
                    return;
                }
                if !pace.is_zero() {
                    tokio::time::sleep(pace).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("producer task");
    }
    let mut cancels = cancels.lock().await;
    while let Some(done) = cancels.join_next().await {
        done.expect("cancel task");
    }
    hist.write(Ev::Stop { reason: "done".into() });
}

/// Asks to cancel job `id`, again while the answer is lost.
async fn cancel(q: &Queue, h: &History, id: &str) {
    let give_up = Instant::now() + GIVE_UP;
    loop {
        let t0 = Instant::now();
        let res = q.cancel(id).await;
        let ms = t0.elapsed().as_millis() as u64;
        let (answer, again) = match &res {
            Ok(Cancel::Cancelled) => ("cancelled".to_owned(), false),
            Ok(Cancel::Requested) => ("requested".to_owned(), false),
            Ok(Cancel::Finished(state)) => (format!("finished:{}", state.as_str()), false),
            Ok(_) => ("other".to_owned(), false),
            Err(Error::JobNotFound(_)) => ("not_found".to_owned(), false),
            Err(e) => (format!("error: {e}"), e.is_transient() && Instant::now() < give_up),
        };
        h.write(Ev::CancelAsked {
            id: id.to_owned(),
            answer,
            ms,
        });
        if !again {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Enqueues one job, retrying an unknown outcome with the same id; the
/// job's id when this call created it.
async fn enqueue(
    q: &Queue,
    h: &History,
    id: &str,
    n: u64,
    dedup: Option<String>,
    lane: Option<String>,
) -> Option<String> {
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
                    job: e.id.clone(),
                    ms,
                });
                return (e.status == EnqueueStatus::Created).then_some(e.id);
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
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
