//! Queues on every master: one worker serves them all, and looks and the
//! sweep's walk reach every master.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::server::LocalCluster;
use echomq::{Client, EnqueueOptions, Job, Queue, Worker};

use super::common;
use super::{name_on, on_node, opts};

// One worker serves three queues, one on each master, through a client
// made by `Client::connect` to one node (it finds the cluster by itself).
// Its safety-net poll is a minute away, so jobs enqueued once it is idle
// only run in time if the wake-up listens on every master; counts, a
// delayed job (promoted by the maintenance on its queue's node), and
// `queue_names` (a walk of every master's keys) work too, and a master
// that lost the function library gets it again at its next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_serves_queues_on_every_master() {
    let cluster = LocalCluster::builder().replicas_per_master(0).start().unwrap();
    let client = Client::connect_with(&cluster.url(), opts()).await.unwrap();
    let masters = cluster.master_ports().unwrap();
    assert_eq!(masters.len(), 3);
    let mut queues: Vec<Queue> = Vec::new();
    for (i, port) in masters.iter().enumerate() {
        let name = name_on(&cluster, *port, &format!("every{i}-"));
        queues.push(client.queue(&name).await.unwrap());
    }
    let done = Arc::new(AtomicU64::new(0));
    let mut worker = Worker::new().poll_interval(Duration::from_secs(60));
    for q in &queues {
        let done = done.clone();
        worker = worker.queue(q.clone(), move |_job: Job<u64>| {
            done.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        });
    }
    let handle = worker.spawn().unwrap();
    for round in 1..=2u64 {
        for q in &queues {
            for k in 0..20u64 {
                q.enqueue(&k).await.unwrap();
            }
        }
        // Round 2 starts with the worker idle on every queue: only wake-ups
        // from each master end its waits.
        let want = round * 60;
        if round == 1 {
            // One master loses the function library (a restart without
            // persistence): its next call loads it again.
            assert!(
                common::eventually(Duration::from_secs(10), || async {
                    done.load(Ordering::SeqCst) >= want
                })
                .await
            );
            on_node(masters[1], redis::cmd("FUNCTION").arg("FLUSH")).await;
        }
        assert!(
            common::eventually(Duration::from_secs(10), || async {
                done.load(Ordering::SeqCst) >= want
            })
            .await,
            "round {round}: {} of {want} jobs ran",
            done.load(Ordering::SeqCst)
        );
    }
    for q in &queues {
        let c = q.counts().await.unwrap();
        assert_eq!((c.pending, c.active, c.completed), (0, 0, 40), "{}", q.name());
        q.enqueue_with(&7u64, &EnqueueOptions::new().delay(Duration::from_millis(300)))
            .await
            .unwrap();
    }
    assert!(
        common::eventually(Duration::from_secs(10), || async { done.load(Ordering::SeqCst) >= 123 }).await,
        "delayed jobs were not promoted on every master"
    );
    let names = client.queue_names("emq").await.unwrap();
    for q in &queues {
        assert!(names.iter().any(|n| n == q.name()), "{} not in {names:?}", q.name());
    }
    handle.shutdown().await.unwrap();
}

// On a cluster the maintenance looks at queues with one pipeline per slot and walks every master for the sweep: one walk repairs a torn job on each master, and a lapsed lease of another process on any master is reaped and its job run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looks_and_the_sweep_walk_cover_every_master() {
    let cluster = LocalCluster::builder().replicas_per_master(0).start().unwrap();
    let client = Client::connect_with(&cluster.url(), opts()).await.unwrap();
    let masters = cluster.master_ports().unwrap();
    let mut queues: Vec<Queue> = Vec::new();
    for (i, port) in masters.iter().enumerate() {
        for k in 0..2 {
            let name = name_on(&cluster, *port, &format!("walk{i}{k}-"));
            queues.push(client.queue(&name).await.unwrap());
        }
    }
    // A torn job on one queue of each master: missing from its set.
    let mut torn = Vec::new();
    for (i, port) in masters.iter().enumerate() {
        let q = &queues[2 * i];
        let id = q.enqueue(&1u64).await.unwrap();
        on_node(
            *port,
            redis::cmd("ZREM").arg(format!("emq:{{{}}}:pending", q.name())).arg(&id),
        )
        .await;
        torn.push((q.clone(), *port, id));
    }
    let r = echomq::maintenance::sweep_queues(&queues, 5).await.unwrap();
    assert_eq!(r.repaired, 3, "{r:?}");
    for (q, port, id) in &torn {
        let score = on_node(
            *port,
            redis::cmd("ZSCORE")
                .arg(format!("emq:{{{}}}:pending", q.name()))
                .arg(id),
        )
        .await;
        assert_ne!(score, redis::Value::Nil, "{} not repaired", q.name());
    }
    // Another process leases a job on the last master's queue and dies.
    let q = queues[5].clone();
    let other = Client::connect_with(&cluster.url(), opts()).await.unwrap();
    let theirs = other.queue(q.name()).await.unwrap();
    let lost = theirs.enqueue(&2u64).await.unwrap();
    let lease = theirs.claim(1, Duration::from_secs(1)).await.unwrap();
    assert_eq!(lease.len(), 1);
    drop(other);
    let ran = Arc::new(Mutex::new(HashSet::new()));
    let mut worker = Worker::new().poll_interval(Duration::from_secs(60));
    for q in &queues {
        let ran = ran.clone();
        worker = worker.queue(q.clone(), move |job: Job<u64>| {
            ran.lock().unwrap().insert(format!("{}/{}", job.queue(), job.id()));
            async { Ok(()) }
        });
    }
    let handle = worker.spawn().unwrap();
    assert!(
        common::eventually(echomq::maintenance::IDLE_INTERVAL + Duration::from_secs(5), || async {
            ran.lock().unwrap().contains(&format!("{}/{lost}", q.name()))
        })
        .await,
        "the lapsed lease on another master was not reaped"
    );
    let info = q.job(&lost).await.unwrap();
    assert_eq!(info.stalls, 1, "{info:?}");
    handle.shutdown().await.unwrap();
}
