//! A queue's slot resharded to another master while its jobs flow, and
//! no script running while the slot is split between two masters.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use echomq::server::LocalCluster;
use echomq::{Client, Consumer, EnqueueOptions, Error, Job, QueueOptions, Retention};

use super::common;
use super::{Producers, counting_consumer, drained, name_on, on_node, opts};

// A queue's slot is resharded to another master, key by key with
// MIGRATE, while producers enqueue and a consumer runs its jobs. Every
// acknowledged enqueue is on the new master and completed; nothing is
// left pending or active.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_keeps_running_while_its_slot_moves_to_another_master() {
    let cluster = LocalCluster::builder().replicas_per_master(0).start().unwrap();
    let masters = cluster.master_ports().unwrap();
    let client = Client::connect_cluster(&[&cluster.url()], opts()).await.unwrap();
    let name = name_on(&cluster, masters[0], "reshard");
    let q = client
        .queue_with(&name, QueueOptions::new().keep_completed(Retention::All))
        .await
        .unwrap();
    let (consumer, runs) = counting_consumer(&q);
    let producers = Producers::start(&q, 4);
    assert!(
        common::eventually(Duration::from_secs(20), || async { producers.count() >= 500 }).await,
        "no load before the move"
    );
    let slot = LocalCluster::slot_of(&format!("{{{name}}}"));
    let handle = cluster.handle();
    let to = masters[1];
    let started = Instant::now();
    let before_move = producers.count();
    let ran_before_move = runs.lock().unwrap().len();
    let moved = tokio::task::spawn_blocking(move || {
        let mut m = handle.begin_migration(slot, to)?;
        // Small steps with pauses (pacing the fault, not waiting for a
        // condition), so the slot stays half-moved for a while under load.
        while m.step(10)? > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        let moved = m.moved();
        m.finish().map(|()| moved)
    })
    .await
    .unwrap()
    .unwrap();
    let took = started.elapsed();
    assert_eq!(cluster.master_of_slot(slot).unwrap(), to);
    let at_move = producers.count();
    let during = (at_move - before_move, runs.lock().unwrap().len() - ran_before_move);
    assert!(
        common::eventually(Duration::from_secs(20), || async { producers.count() >= at_move + 500 }).await,
        "producers did not carry on after the move"
    );
    let (acked, errors) = producers.stop().await;
    assert!(
        drained(&q, Duration::from_secs(30)).await,
        "jobs left after the move: {:?}",
        q.counts().await
    );
    consumer.shutdown().await.unwrap();
    let runs = runs.lock().unwrap().clone();
    let mut missing = Vec::new();
    for (id, _) in &acked {
        match q.job(id).await {
            Ok(job) => assert_eq!(job.state, echomq::JobState::Completed, "{id}"),
            Err(Error::JobNotFound(_)) => missing.push(id.clone()),
            Err(e) => panic!("{id}: {e}"),
        }
    }
    let ran_twice = runs.values().filter(|n| **n > 1).count();
    println!(
        "reshard: {} keys moved in {took:?} (meanwhile {} enqueues acknowledged, {} jobs ran); \
         {} enqueues acknowledged, {} retried errors, {} lost, {} jobs ran twice",
        moved,
        during.0,
        during.1,
        acked.len(),
        errors.len(),
        missing.len(),
        ran_twice
    );
    assert!(
        missing.is_empty(),
        "acknowledged enqueues lost in the move: {missing:?}"
    );
    let ids: HashSet<&String> = acked.iter().map(|(id, _)| id).collect();
    assert!(
        ids.iter().all(|id| runs.contains_key(*id)),
        "an acknowledged job never ran"
    );
}

async fn node_id(port: u16) -> String {
    redis::from_redis_value(on_node(port, redis::cmd("CLUSTER").arg("MYID")).await).unwrap()
}

// The worst moments of a resharding: the queue's slot is split, its job
// records on one node and its sets on the other. A claim run on either
// node would find one half missing: on the old master it raises in
// mid-script (after whatever it wrote: the server rolls nothing back); on
// the new one (sent there by `ASK`) the records not moved yet look like
// missing jobs. Every call declares the queue's resharding guard, a key
// that never exists, so both nodes refuse it (`TRYAGAIN`, which the
// cluster connection retries) until the move ends: no job runs while the
// slot is split, no error but a transient one reaches the caller, and once
// the slot has moved every job runs, none left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_script_runs_while_a_queue_slot_is_split_records_first() {
    split_slot(true).await;
}

// The same with the queue's sets moved first and its job records behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_script_runs_while_a_queue_slot_is_split_sets_first() {
    split_slot(false).await;
}

async fn split_slot(records_first: bool) {
    let cluster = LocalCluster::builder().replicas_per_master(0).start().unwrap();
    let masters = cluster.master_ports().unwrap();
    let client = Client::connect_cluster(&[&cluster.url()], opts()).await.unwrap();
    let name = name_on(&cluster, masters[0], "split");
    let q = client.queue(&name).await.unwrap();
    for k in 0..20u64 {
        q.enqueue(&k).await.unwrap();
    }
    // Every key a claim declares exists (an active job, a delayed one, the
    // wake list's tokens), so only the guard can keep a claim from running
    // on a split slot.
    let held = q.claim(1, Duration::from_secs(600)).await.unwrap();
    assert_eq!(held.len(), 1);
    q.enqueue_with(&0u64, &EnqueueOptions::new().delay(Duration::from_secs(3_600)))
        .await
        .unwrap();
    let slot = LocalCluster::slot_of(&format!("{{{name}}}"));
    let (from, to) = (masters[0], masters[1]);
    let (from_id, to_id) = (node_id(from).await, node_id(to).await);
    on_node(
        to,
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("IMPORTING")
            .arg(&from_id),
    )
    .await;
    on_node(
        from,
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("MIGRATING")
            .arg(&to_id),
    )
    .await;
    let keys_in_slot = || async {
        let v = on_node(from, redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(10_000)).await;
        redis::from_redis_value::<Vec<String>>(v).unwrap()
    };
    let migrate = |keys: Vec<String>| async move {
        if !keys.is_empty() {
            let mut m = redis::cmd("MIGRATE");
            m.arg("127.0.0.1")
                .arg(to)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(keys);
            on_node(from, &m).await;
        }
    };
    // One half moves; the other stays behind.
    let half: Vec<String> = keys_in_slot()
        .await
        .into_iter()
        .filter(|k| k.contains(":job:") == records_first)
        .collect();
    assert!(!half.is_empty());
    if !records_first {
        let wake = half.iter().any(|k| k.ends_with(":wake"));
        assert!(wake, "no wake tokens: {half:?}");
    }
    migrate(half).await;
    // A producer meanwhile gets its job in, or a transient error.
    match q.enqueue(&99u64).await {
        Ok(_) => {}
        Err(e) => assert!(e.is_transient(), "enqueue on a split slot: {e}"),
    }

    let done = Arc::new(AtomicU64::new(0));
    let d = done.clone();
    let consumer = Consumer::new(q.clone(), move |_job: Job<u64>| {
        d.fetch_add(1, Ordering::SeqCst);
        async { Ok(()) }
    })
    .concurrency(4)
    .spawn()
    .unwrap();
    // A window to fail in (a claim that ran would run its job at once).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        done.load(Ordering::SeqCst),
        0,
        "a job ran while its queue's slot was split"
    );

    // The rest moves, and the slot is handed over.
    migrate(keys_in_slot().await).await;
    for port in &masters {
        on_node(
            *port,
            redis::cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("NODE").arg(&to_id),
        )
        .await;
    }
    assert!(
        common::eventually(Duration::from_secs(15), || async { done.load(Ordering::SeqCst) >= 19 }).await,
        "{} of the 19 jobs not held ran after the move: {:?}",
        done.load(Ordering::SeqCst),
        q.counts().await
    );
    // Settled too (the handler counts before its settlement lands).
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            q.counts()
                .await
                .is_ok_and(|c| c.pending == 0 && c.active == 1 && c.completed == done.load(Ordering::SeqCst))
        })
        .await,
        "{:?}",
        q.counts().await
    );
    consumer.shutdown().await.unwrap();
}
