//! A partitioned queue: spread over the masters, drained fairly, its
//! settings checked.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::server::LocalCluster;
use echomq::{Client, EnqueueOptions, Error, Job, QueueOptions, Retention, Worker};

use super::common;
use super::opts;

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
