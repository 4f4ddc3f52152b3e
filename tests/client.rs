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
        .filter(|l| l.starts_with("cmdstat_fcall:"))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

// Fifty queues with a consumer each share one connection (plus one
// blocking connection per consumer for its wake-ups) and one maintenance
// task, which reaps idle queues every IDLE_INTERVAL rather than every
// reap interval and looks at their cron schedules every LOOK_INTERVAL (as
// long); idle consumers claim once per poll interval (0.1: 100
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
    // 0.1: 50 × (2 reaps + 1 claim) a second × 4 s = 600 calls; now at
    // most 50 × (1 reap + 1 claim + 1 schedule look) per 5 s, so a 4 s
    // window holds at most one of each per queue.
    assert!(idle <= 150, "{idle} script calls in 4 s from 50 idle queues");
    eprintln!("50 idle queues: {connections} connections, {idle} script calls in 4 s");
    for c in consumers {
        c.shutdown().await.unwrap();
    }
}

// The maintenance task lives on the runtime of the consumer that started
// it; when that runtime shuts down, the consumers of another runtime start
// it again, and their queues are still reaped.
#[test]
fn maintenance_outlives_the_runtime_that_started_it() {
    let server = LocalServer::start().unwrap();
    let rt = |n| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build()
            .unwrap()
    };
    let (a, b) = (rt(1), rt(1));
    let client = b.block_on(Client::connect(&server.url())).unwrap();
    let qa = b.block_on(client.queue("rt-a")).unwrap();
    let qb = b.block_on(client.queue("rt-b")).unwrap();
    // A's consumer registers first, so the task runs on runtime A.
    let _on_a = a.block_on(async {
        Consumer::new(qa.clone(), |_job: Job<u32>| async { Ok(()) })
            .spawn()
            .unwrap()
    });
    // A worker leases a job of rt-b and vanishes.
    let stale = b.block_on(async {
        qb.enqueue(&1).await.unwrap();
        qb.claim(1, Duration::from_millis(200)).await.unwrap().remove(0)
    });
    let on_b = b.block_on(async {
        Consumer::new(qb.clone(), |_job: Job<u32>| async { Ok(()) })
            .reap_interval(Duration::from_millis(20))
            .poll_interval(Duration::from_millis(100))
            .spawn()
            .unwrap()
    });
    drop(a);
    b.block_on(async {
        common::past(&qb, stale.deadline_ms()).await;
        let reaped = common::eventually(Duration::from_secs(5), || async {
            qb.job(stale.id()).await.unwrap().stalls == 1
        })
        .await;
        assert!(reaped, "queue rt-b was not reaped after runtime A shut down");
        on_b.shutdown().await.unwrap();
    });
}

// Dropping a running consumer's `run` future stops it: no job is claimed after.
#[tokio::test]
async fn dropping_run_stops_the_consumer() {
    let (_s, q) = common::setup("drop-run").await;
    let run = Consumer::new(q.clone(), |_job: Job<u32>| async { Ok(()) }).run(std::future::pending());
    assert!(tokio::time::timeout(Duration::from_millis(200), run).await.is_err());
    // Its settler and claim loop wind down; nothing claims what comes next.
    let id = q.enqueue(&1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        q.job(&id).await.unwrap().attempts,
        0,
        "a dropped consumer still claimed"
    );
}

// The function libraries listing tells this build's library from another
// build's left in the server, which can then be deleted.
#[tokio::test]
async fn script_libraries_tell_this_build_from_others() {
    let server = LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let before = client.script_libraries().await.unwrap();
    assert!(!before.loaded && before.others.is_empty(), "{before:?}");
    let q = client.queue("libs").await.unwrap();
    q.enqueue(&1u32).await.unwrap();
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let old = "#!lua name=echomq_0123456789ab\nredis.register_function('emq_0123456789ab_x', function() return 1 end)";
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(old)
        .query_async(&mut c)
        .await
        .unwrap();
    let libs = client.script_libraries().await.unwrap();
    assert!(libs.loaded, "{libs:?}");
    assert!(libs.current.starts_with("echomq_") && libs.current != "echomq_0123456789ab");
    assert_eq!(libs.others, vec!["echomq_0123456789ab".to_owned()]);
}
