//! echomq over a Valkey Cluster (feature `cluster`), against a real local
//! cluster (`echomq::server::LocalCluster`): queues on every master served
//! by one worker, a queue's slot resharded to another master while its jobs
//! flow, a master killed under load, with and without `WAIT 1`, and flows
//! and batches on every master.
//!
//! Figures for the guide (docs/cluster.md): `cargo test --all-features --test cluster -- --nocapture`.
//!
//! One module per concept: queues on every master (`masters`), resharding
//! (`resharding`), a killed master (`failover`), partitioned queues
//! (`partitions`), flows and batches (`flows`); their shared helpers are here.

#[path = "../common/mod.rs"]
mod common;
mod failover;
mod flows;
mod masters;
mod partitions;
mod resharding;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::server::LocalCluster;
use echomq::{CancellationToken, ClientOptions, Consumer, EnqueueOptions, Job, Queue};

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

/// A command on the node at `port`, through a plain connection of its own.
async fn on_node(port: u16, cmd: &redis::Cmd) -> redis::Value {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut conn = c.get_multiplexed_async_connection().await.unwrap();
    cmd.query_async(&mut conn).await.unwrap()
}
