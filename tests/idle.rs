//! Maintenance that stays cheap with many idle queues (issue 15): idle
//! queues are looked at with plain reads, not scripts, yet a lapsed lease
//! or a due delayed job still gets its script in time; and the sweep walks
//! the keyspace once for all queues, repairing a torn job on any of them.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::maintenance::{IDLE_INTERVAL, sweep_queues};
use echomq::server::LocalServer;
use echomq::{Client, EnqueueOptions, Job, JobState, Queue, Worker, WorkerHandle};
use redis::aio::MultiplexedConnection;

/// Calls of `names` so far (`INFO commandstats`).
async fn calls(raw: &mut MultiplexedConnection, names: &[&str]) -> u64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(raw).await.unwrap();
    stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter_map(|l| l.split_once(':'))
        .filter(|(name, _)| names.contains(name))
        .filter_map(|(_, f)| f.split(',').find_map(|kv| kv.strip_prefix("calls=")))
        .filter_map(|v| v.parse::<u64>().ok())
        .sum()
}

/// `n` queues on one client.
async fn queues(client: &Client, stem: &str, n: usize) -> Vec<Queue> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(client.queue(&common::unique(&format!("{stem}{i}-"))).await.unwrap());
    }
    out
}

/// A worker over `queues` whose safety-net poll is a minute away (so
/// claims do not blur the maintenance's own calls); records the jobs it
/// runs as `QUEUE/ID` (ids are numbered per queue).
fn worker(queues: &[Queue]) -> (WorkerHandle, Arc<Mutex<HashSet<String>>>) {
    let ran = Arc::new(Mutex::new(HashSet::new()));
    let mut w = Worker::new().poll_interval(Duration::from_secs(60));
    for q in queues {
        let ran = ran.clone();
        w = w.queue(q.clone(), move |job: Job<u32>| {
            ran.lock().unwrap().insert(format!("{}/{}", job.queue(), job.id()));
            async { Ok(()) }
        });
    }
    (w.spawn().unwrap(), ran)
}

// Idle queues are looked at with plain reads in pipelines: a whole idle interval of 40 queues makes no maintenance script call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_looks_make_no_script_calls() {
    let server = LocalServer::start().unwrap();
    let mut raw = common::raw(&server).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let qs = queues(&client, "look", 40).await;
    let (w, _) = worker(&qs);
    // The start-up sweep (one walk, and each queue's sets, beside the
    // first look) and the first claims are over once every queue has been
    // looked at again (two or three reads per queue a look).
    let zrange0 = calls(&mut raw, &["zrange"]).await;
    assert!(
        common::eventually(Duration::from_secs(20), || {
            let mut raw = raw.clone();
            async move { calls(&mut raw, &["zrange"]).await >= zrange0 + 5 * 40 }
        })
        .await,
        "the queues were not looked at"
    );
    let scripts0 = calls(&mut raw, &["fcall", "fcall_ro", "evalsha", "eval"]).await;
    let zrange1 = calls(&mut raw, &["zrange"]).await;
    tokio::time::sleep(IDLE_INTERVAL + Duration::from_secs(1)).await;
    let scripts = calls(&mut raw, &["fcall", "fcall_ro", "evalsha", "eval"]).await - scripts0;
    let looks = calls(&mut raw, &["zrange"]).await - zrange1;
    // 0.2: a reap and a schedule look per queue per 5 s (80 here).
    assert_eq!(scripts, 0, "script calls from 40 idle queues over an idle interval");
    assert!(looks >= 2 * 40, "each queue was looked at ({looks} ZRANGEs)");
    w.shutdown().await.unwrap();
}

// A lease of another process that lapses on a queue this process serves is reaped by the look-driven maintenance and its job run here, within the idle interval of its deadline; a delayed job is promoted when due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lapsed_leases_and_due_jobs_on_idle_queues_get_their_scripts() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let qs = queues(&client, "lapse", 20).await;
    let q = qs[7].clone();
    // Another process takes a lease and dies with it.
    let other = Client::connect(&server.url()).await.unwrap();
    let theirs = other.queue(q.name()).await.unwrap();
    let id = theirs.enqueue(&1u32).await.unwrap();
    let lease = theirs.claim(1, Duration::from_secs(2)).await.unwrap().remove(0);
    let deadline = lease.deadline_ms();
    drop(other);
    let (w, ran) = worker(&qs);
    common::past(&q, deadline).await;
    let lapsed = Instant::now();
    assert!(
        common::eventually(IDLE_INTERVAL + Duration::from_secs(3), || async {
            ran.lock().unwrap().contains(&format!("{}/{id}", q.name()))
        })
        .await,
        "the lapsed lease was not reaped within the idle interval"
    );
    assert!(lapsed.elapsed() <= IDLE_INTERVAL + Duration::from_secs(1));
    let info = q.job(&id).await.unwrap();
    assert_eq!(info.stalls, 1, "reaped once");
    assert!(common::completes(&q, &id).await);

    // A delayed job on another idle queue is promoted when due.
    let d = &qs[13];
    let e = d
        .enqueue_with(&2u32, &EnqueueOptions::new().delay(Duration::from_millis(1_500)))
        .await
        .unwrap();
    let due = d.server_time_ms().await.unwrap() + 1_500;
    common::past(d, due).await;
    let at_due = Instant::now();
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            ran.lock().unwrap().contains(&format!("{}/{}", d.name(), e.id))
        })
        .await
    );
    assert!(
        at_due.elapsed() < Duration::from_secs(2),
        "promoted {:?} after due",
        at_due.elapsed()
    );
    w.shutdown().await.unwrap();
}

// One walk for many queues repairs a torn job and an orphaned dedup marker on two of them, leaves a queue outside the sweep alone, and then finds nothing to repair.
#[tokio::test]
async fn one_walk_repairs_any_of_many_queues() {
    let server = LocalServer::start().unwrap();
    let mut raw = common::raw(&server).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let qs = queues(&client, "walk", 30).await;
    let mut ids = Vec::new();
    for q in &qs {
        ids.push(q.enqueue(&1u32).await.unwrap());
    }
    let outside = client.queue(&common::unique("outside")).await.unwrap();
    let out_id = outside.enqueue(&1u32).await.unwrap();
    // Torn writes: a job missing from its set; a marker whose job is gone.
    let tear = |q: &Queue| format!("emq:{{{}}}:pending", q.name());
    let () = redis::cmd("ZREM")
        .arg(tear(&qs[17]))
        .arg(&ids[17])
        .query_async(&mut raw)
        .await
        .unwrap();
    let () = redis::cmd("ZREM")
        .arg(tear(&outside))
        .arg(&out_id)
        .query_async(&mut raw)
        .await
        .unwrap();
    let marker = format!("emq:{{{}}}:de:gone", qs[4].name());
    let () = redis::cmd("SET")
        .arg(&marker)
        .arg("no-such-job")
        .query_async(&mut raw)
        .await
        .unwrap();
    // Small steps: the walk takes many, and keys of a queue may come in several.
    let r = sweep_queues(&qs, 7).await.unwrap();
    assert_eq!(r.repaired, 2, "{r:?}");
    assert!(r.checked >= 30, "{r:?}");
    assert_eq!(r.skipped, 0, "{r:?}");
    assert_eq!(qs[17].job(&ids[17]).await.unwrap().state, JobState::Pending);
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(tear(&qs[17]))
        .arg(&ids[17])
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(score.is_some(), "the torn job is back on pending");
    let exists: bool = redis::cmd("EXISTS").arg(&marker).query_async(&mut raw).await.unwrap();
    assert!(!exists, "the orphaned marker is gone");
    let out_score: Option<f64> = redis::cmd("ZSCORE")
        .arg(tear(&outside))
        .arg(&out_id)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(out_score, None, "a queue outside the sweep is left alone");
    assert_eq!(sweep_queues(&qs, 7).await.unwrap().repaired, 0, "converged");
    // The per-queue sweep agrees.
    assert_eq!(outside.sweep(100).await.unwrap().repaired, 1);
}

// The maintenance task's start-up walk repairs a torn job on one of many queues it keeps (back on pending, where a claim finds it: the worker's first claims may run it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_up_walk_repairs_a_torn_job() {
    let server = LocalServer::start().unwrap();
    let mut raw = common::raw(&server).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let qs = queues(&client, "startup", 30).await;
    let q = &qs[21];
    let id = q.enqueue(&1u32).await.unwrap();
    let () = redis::cmd("ZREM")
        .arg(format!("emq:{{{}}}:pending", q.name()))
        .arg(&id)
        .query_async(&mut raw)
        .await
        .unwrap();
    let (w, ran) = worker(&qs);
    let pending = format!("emq:{{{}}}:pending", q.name());
    assert!(
        common::eventually(Duration::from_secs(10), || {
            let mut raw = raw.clone();
            let (pending, id) = (pending.clone(), id.clone());
            let ran = ran.lock().unwrap().contains(&format!("{}/{id}", q.name()));
            async move {
                if ran {
                    return true;
                }
                let score: Option<f64> = redis::cmd("ZSCORE")
                    .arg(&pending)
                    .arg(&id)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                score.is_some()
            }
        })
        .await,
        "the torn job was not repaired"
    );
    w.shutdown().await.unwrap();
}
