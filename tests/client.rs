//! One client shared by many queues: one multiplexed connection, one
//! maintenance task, and idle queues that cost next to nothing.

mod common;

use std::time::Duration;

use echomq::server::LocalServer;
use echomq::{Client, Consumer, Job};

/// `INFO commandstats` calls of the script commands so far.
async fn script_calls(c: &mut redis::aio::MultiplexedConnection) -> u64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(c).await.unwrap();
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

// Fifty queues with a consumer each share one connection (plus one
// blocking connection per consumer for its wake-ups) and one maintenance
// task, which reaps idle queues every IDLE_INTERVAL rather than every
// reap interval; idle consumers claim once per poll interval (0.1: 100
// connections, and 100 reap plus 50 claim calls a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_queues_share_connections_and_maintenance() {
    let server = LocalServer::start().unwrap();
    let mut raw = common::raw(&server).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let mut queues = Vec::new();
    let mut consumers = Vec::new();
    for i in 0..50 {
        let q = client.queue(&format!("q{i}")).await.unwrap();
        consumers.push(
            Consumer::new(q.clone(), |_job: Job<u32>| async { Ok(()) })
                .spawn()
                .unwrap(),
        );
        queues.push(q);
    }
    // Every queue works, through the shared connection.
    for q in &queues {
        q.enqueue(&1).await.unwrap();
    }
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            for q in &queues {
                if q.counts().await.unwrap().completed != 1 {
                    return false;
                }
            }
            true
        })
        .await
    );
    let clients: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut raw).await.unwrap();
    let connections = clients.lines().count() - 1; // less the test's own
    assert!(connections <= 51, "{connections} connections for 50 queues");

    // Idle: let the first passes and sweeps run, then count script calls.
    tokio::time::sleep(echomq::maintenance::IDLE_INTERVAL).await;
    let before = script_calls(&mut raw).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let idle = script_calls(&mut raw).await - before;
    // 0.1: 50 × (2 reaps + 1 claim) a second × 4 s = 600 calls; now about
    // 50 × (1 reap + 1 claim) per 5 s.
    assert!(idle <= 120, "{idle} script calls in 4 s from 50 idle queues");
    eprintln!("50 idle queues: {connections} connections, {idle} script calls in 4 s");
    for c in consumers {
        c.shutdown().await.unwrap();
    }
}
