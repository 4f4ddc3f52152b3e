//! echomq over a Valkey Cluster (feature `cluster`), against a real local
//! cluster (`echomq::server::LocalCluster`): queues on every master served
//! by one worker, a queue's slot resharded to another master while its jobs
//! flow, and a master killed under load, with and without `WAIT 1`.
//!
//! Figures for the README: `cargo test --all-features --test cluster -- --nocapture`.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::server::LocalCluster;
use echomq::{
    CancellationToken, Client, ClientOptions, Consumer, Durability, EnqueueOptions, Error, Job, Queue, QueueOptions,
    Retention, Worker,
};

/// A queue name (with `stem`) whose slot the master on `port` serves.
fn name_on(cluster: &LocalCluster, port: u16, stem: &str) -> String {
    (0..)
        .map(|i| common::unique(&format!("{stem}{i}")))
        .find(|n| {
            cluster
                .master_of_slot(LocalCluster::slot_of(&format!("{{{n}}}")))
                .unwrap()
                == port
        })
        .unwrap()
}

fn opts() -> ClientOptions {
    ClientOptions::new()
        .response_timeout(Duration::from_secs(2))
        .connection_timeout(Duration::from_millis(500))
}

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

/// Producers that enqueue with their own ids, retrying each id until it is
/// acknowledged, and record what was acknowledged.
struct Producers {
    acked: Arc<Mutex<Vec<(String, Instant)>>>,
    errors: Arc<Mutex<Vec<Instant>>>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Producers {
    fn start(q: &Queue, n: usize) -> Producers {
        let acked: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
        let errors: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let stop = CancellationToken::new();
        let tasks = (0..n)
            .map(|k| {
                let (q, acked, errors, stop) = (q.clone(), acked.clone(), errors.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut i = 0u64;
                    while !stop.is_cancelled() {
                        let id = format!("p{k}-{i}");
                        let opts = EnqueueOptions::new().id(&id);
                        loop {
                            match q.enqueue_with(&i, &opts).await {
                                Ok(_) => break acked.lock().unwrap().push((id, Instant::now())),
                                Err(e) => {
                                    assert!(e.is_transient(), "a cluster change must give transient errors: {e}");
                                    errors.lock().unwrap().push(Instant::now());
                                    tokio::time::sleep(Duration::from_millis(20)).await;
                                }
                            }
                        }
                        i += 1;
                    }
                })
            })
            .collect();
        Producers {
            acked,
            errors,
            stop,
            tasks,
        }
    }

    fn count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    async fn stop(self) -> (Vec<(String, Instant)>, Vec<Instant>) {
        self.stop.cancel();
        for t in self.tasks {
            t.await.unwrap();
        }
        let acked = std::mem::take(&mut *self.acked.lock().unwrap());
        let errors = std::mem::take(&mut *self.errors.lock().unwrap());
        (acked, errors)
    }
}

/// A consumer that counts runs per job id.
fn counting_consumer(q: &Queue) -> (echomq::ConsumerHandle, Arc<Mutex<HashMap<String, u32>>>) {
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let seen = runs.clone();
    let handle = Consumer::new(q.clone(), move |job: Job<u64>| {
        *seen.lock().unwrap().entry(job.id().to_owned()).or_default() += 1;
        async { Ok(()) }
    })
    .concurrency(8)
    .lease(Duration::from_secs(2))
    .reap_interval(Duration::from_millis(200))
    .poll_interval(Duration::from_millis(500))
    .spawn()
    .unwrap();
    (handle, runs)
}

/// Waits until `q` holds no job left to run.
async fn drained(q: &Queue, limit: Duration) -> bool {
    common::eventually(limit, || async {
        q.counts().await.is_ok_and(|c| c.pending + c.active + c.delayed == 0)
    })
    .await
}

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

/// Kills the master of a queue's slot under load and returns the
/// acknowledged enqueues the cluster lost.
async fn kill_a_master(durability: Durability) -> usize {
    let mut cluster = LocalCluster::builder().replicas_per_master(1).start().unwrap();
    let masters = cluster.master_ports().unwrap();
    let client = Client::connect_cluster(&[&cluster.url()], opts()).await.unwrap();
    let name = name_on(&cluster, masters[0], "failover");
    let q = client
        .queue_with(
            &name,
            QueueOptions::new()
                .keep_completed(Retention::All)
                .durability(durability),
        )
        .await
        .unwrap();
    let (consumer, runs) = counting_consumer(&q);
    let producers = Producers::start(&q, 8);
    assert!(
        common::eventually(Duration::from_secs(30), || async { producers.count() >= 1000 }).await,
        "no load before the kill"
    );
    let old = masters[0];
    let killed = Instant::now();
    cluster.node_mut(old).unwrap().kill();
    let new = tokio::task::block_in_place(|| cluster.wait_for_failover(old, Duration::from_secs(30))).unwrap();
    let failed_over = killed.elapsed();
    if durability != Durability::Primary {
        // The new master has no replica to confirm WAIT 1 until the old
        // master comes back as its replica.
        cluster.node_mut(old).unwrap().restart().unwrap();
    }
    let at_failover = producers.count();
    assert!(
        common::eventually(Duration::from_secs(30), || async {
            producers.count() >= at_failover + 1000
        })
        .await,
        "producers did not carry on after the failover"
    );
    let (acked, errors) = producers.stop().await;
    let mut lost = Vec::new();
    for (id, at) in &acked {
        match q.job(id).await {
            Ok(_) => {}
            Err(Error::JobNotFound(_)) => lost.push((id.clone(), at.saturating_duration_since(killed))),
            Err(e) => panic!("{id}: {e}"),
        }
    }
    assert!(
        drained(&q, Duration::from_secs(30)).await,
        "jobs left after the failover: {:?}",
        q.counts().await
    );
    consumer.shutdown().await.unwrap();
    let runs = runs.lock().unwrap();
    let never_ran = acked
        .iter()
        .filter(|(id, _)| !lost.iter().any(|(l, _)| l == id) && !runs.contains_key(id))
        .count();
    println!(
        "cluster failover ({durability:?}): master {old} killed, replica {new} promoted after {failed_over:?}; \
         {} enqueues acknowledged, {} retried errors, {} acknowledged enqueues lost {:?}",
        acked.len(),
        errors.len(),
        lost.len(),
        lost.iter().take(5).collect::<Vec<_>>()
    );
    assert_eq!(never_ran, 0, "a job the new master holds never ran");
    // None acknowledged after the failover is lost: only the tail that had
    // not reached the replica when the master died.
    assert!(
        lost.iter().all(|(_, after_kill)| *after_kill < failed_over),
        "an enqueue acknowledged after the failover was lost: {lost:?}"
    );
    lost.len()
}

// A master is SIGKILLed under eight producers and a consumer; its replica
// takes over and both carry on by themselves. Replication is asynchronous,
// so a few enqueues acknowledged just before the kill may be lost (the
// figure is printed); none acknowledged after the failover is, and every
// job the new master holds runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_replaced_and_work_goes_on() {
    kill_a_master(Durability::Primary).await;
}

// The same with `WAIT 1` after every enqueue and settlement: no
// acknowledged enqueue is lost, since each was on the replica before it
// was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_1_a_killed_master_loses_no_acknowledged_enqueue() {
    let lost = kill_a_master(Durability::Replicas {
        count: 1,
        timeout: Duration::from_millis(500),
    })
    .await;
    assert_eq!(lost, 0, "acknowledged enqueues lost despite WAIT 1");
}

/// A command on the node at `port`, through a plain connection of its own.
async fn on_node(port: u16, cmd: &redis::Cmd) -> redis::Value {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut conn = c.get_multiplexed_async_connection().await.unwrap();
    cmd.query_async(&mut conn).await.unwrap()
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

// A queue of six partitions spread over all three masters: enqueues
// without an id spread over the partitions, a lane's jobs share one, and
// a worker with one slot claims from the partitions in turn (each gets a
// fair share of the first starts), runs the lane's jobs in order, and
// drains them all; counts add up, a job is found by its id wherever its
// lane sent it, and opening the queue with fewer partitions is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_queue_spreads_over_masters_and_drains_fairly() {
    let cluster = LocalCluster::builder().replicas_per_master(0).start().unwrap();
    let masters: HashSet<u16> = cluster.master_ports().unwrap().into_iter().collect();
    let client = Client::connect_cluster(&[&cluster.url()], opts()).await.unwrap();
    let on_master = |name: &str, i: usize| {
        let part = echomq::partition::partition_name(name, i);
        cluster
            .master_of_slot(LocalCluster::slot_of(&format!("{{{part}}}")))
            .unwrap()
    };
    // A name whose six partitions cover every master.
    let name = (0..)
        .map(|i| common::unique(&format!("parts{i}-")))
        .find(|n| (0..6).map(|i| on_master(n, i)).collect::<HashSet<u16>>() == masters)
        .unwrap();
    let pq = client
        .partitioned_queue_with(&name, 6, QueueOptions::new().keep_completed(Retention::All))
        .await
        .unwrap();
    for k in 0..300u64 {
        pq.enqueue(&k).await.unwrap();
    }
    let mut lane_ids = Vec::new();
    for k in 0..60u64 {
        lane_ids.push(
            pq.enqueue_with(&k, &EnqueueOptions::new().lane("acme"))
                .await
                .unwrap()
                .id,
        );
    }
    let bulk: Vec<(u64, EnqueueOptions)> = (0..60u64)
        .map(|k| (k, EnqueueOptions::new().id(format!("bulk-{k}"))))
        .collect();
    assert_eq!(pq.enqueue_bulk_with(&bulk).await.unwrap().len(), 60);
    // Again with the same ids: nothing new (each id reaches its partition again).
    pq.enqueue_bulk_with(&bulk).await.unwrap();
    let lane_part = pq
        .partition_for(&EnqueueOptions::new().lane("acme"))
        .unwrap()
        .name()
        .to_owned();
    for q in pq.partitions() {
        let c = q.counts().await.unwrap();
        assert!(c.pending >= 25, "partition {} holds {} jobs", q.name(), c.pending);
    }
    assert_eq!(pq.counts().await.unwrap().pending, 420);

    // Each start: the partition, the lane, the payload.
    type Starts = Arc<Mutex<Vec<(String, Option<String>, u64)>>>;
    let started: Starts = Arc::default();
    let s = started.clone();
    // One job at a time, none leased ahead: starts follow the claim order.
    let worker = Worker::new()
        .concurrency(1)
        .prefetch(0)
        .partitioned(&pq, move |job: Job<u64>| {
            s.lock()
                .unwrap()
                .push((job.queue().to_owned(), job.lane().map(str::to_owned), *job.payload()));
            async { Ok(()) }
        })
        .spawn()
        .unwrap();
    assert!(
        common::eventually(Duration::from_secs(30), || async {
            pq.counts().await.is_ok_and(|c| c.completed == 420)
        })
        .await,
        "{:?}",
        pq.counts().await
    );
    worker.shutdown().await.unwrap();
    let started = started.lock().unwrap().clone();
    let mut first: HashMap<&str, usize> = HashMap::new();
    for (q, _, _) in started.iter().take(60) {
        *first.entry(q.as_str()).or_default() += 1;
    }
    assert_eq!(first.len(), 6, "the first 60 starts came from {first:?}");
    assert!(first.values().all(|n| *n >= 5), "unfair first starts: {first:?}");
    let lane: Vec<u64> = started
        .iter()
        .filter(|(_, l, _)| l.as_deref() == Some("acme"))
        .map(|(q, _, k)| {
            assert_eq!(*q, lane_part);
            *k
        })
        .collect();
    assert_eq!(lane, (0..60).collect::<Vec<u64>>(), "the lane's jobs ran out of order");
    assert_eq!(pq.job(&lane_ids[7]).await.unwrap().state, echomq::JobState::Completed);
    assert!(matches!(pq.job("no-such-job").await, Err(Error::JobNotFound(_))));
    let fewer = client.partitioned_queue(&name, 3).await;
    assert!(
        matches!(fewer, Err(Error::InvalidOption { name: "partitions", .. })),
        "{fewer:?}"
    );
}

// Partitioned queues work on one server too (each partition an ordinary
// queue), and bad counts and names are refused with typed errors.
#[tokio::test]
async fn partitioned_queue_settings_are_checked() {
    let server = echomq::server::LocalServer::start().unwrap();
    let client = echomq::Client::connect(&server.url()).await.unwrap();
    for n in [0, echomq::partition::MAX_PARTITIONS + 1] {
        let r = client.partitioned_queue("p", n).await;
        assert!(
            matches!(r, Err(Error::InvalidOption { name: "partitions", .. })),
            "{n}: {r:?}"
        );
    }
    let long = "x".repeat(echomq::keys::MAX_QUEUE_NAME_BYTES - 1);
    let r = client.partitioned_queue(&long, 10).await;
    assert!(matches!(r, Err(Error::InvalidQueueName { .. })), "{r:?}");
    let r = client.partitioned_queue("bad{name}", 2).await;
    assert!(matches!(r, Err(Error::InvalidQueueName { .. })), "{r:?}");
    let pq = client.partitioned_queue("p", 3).await.unwrap();
    let id = pq.enqueue(&1u64).await.unwrap();
    assert!(id.contains('-'), "a made id is a UUID: {id}");
    assert_eq!(pq.job(&id).await.unwrap().state, echomq::JobState::Pending);
    let names: Vec<&str> = pq.partitions().iter().map(|q| q.name()).collect();
    assert_eq!(names, ["p~0", "p~1", "p~2"]);
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
