//! The start-up self-check and the consistency sweep.

mod common;

use std::time::Duration;

use common::{raw, setup};
use echomq::server::LocalServer;
use echomq::{Error, JobState, Queue, QueueOptions, Reaper};

// The self-check reports persistence settings, and an evicting server is refused unless allowed.
#[tokio::test]
async fn self_check_reports_and_refuses_eviction() {
    let server = LocalServer::builder().aof(true).appendfsync("always").start().unwrap();
    let q = Queue::connect(&server.url(), "check").await.unwrap();
    let r = q.self_check().await.unwrap();
    assert!(r.appendonly);
    assert_eq!(r.appendfsync, "always");
    assert_eq!(r.maxmemory_policy, "noeviction");
    assert!(r.durability().contains("power loss"));

    let lru = LocalServer::builder()
        .arg("maxmemory-policy", "allkeys-lru")
        .start()
        .unwrap();
    let e = Queue::connect(&lru.url(), "check").await.unwrap_err();
    assert!(
        matches!(e, Error::UnsafeServer(ref m) if m.contains("allkeys-lru")),
        "{e:?}"
    );
    let allowed = QueueOptions::new().allow_eviction(true);
    assert!(Queue::connect_with(&lru.url(), "check", allowed).await.is_ok());
}

// The sweep puts back jobs that a torn write left out of their set, and drops dangling members and hashes.
#[tokio::test]
async fn sweep_repairs_torn_state() {
    let (s, q) = setup("sweep").await;
    let ids = q.enqueue_bulk(&(0..10).collect::<Vec<u32>>()).await.unwrap();
    let leased = q.claim(2, Duration::from_secs(30)).await.unwrap();
    assert_eq!(q.sweep(3).await.unwrap().repaired, 0, "a healthy queue needs no repair");

    let mut c = raw(&s).await;
    let k = |s: &str| format!("emq:{{{}}}:{s}", q.name());
    // An active job missing from the active set would never be reaped: lost.
    let _: () = redis::cmd("ZREM")
        .arg(k("active"))
        .arg(leased[0].id())
        .query_async(&mut c)
        .await
        .unwrap();
    // A pending job also listed as completed.
    let _: () = redis::cmd("ZADD")
        .arg(k("completed"))
        .arg(1)
        .arg(&ids[5])
        .query_async(&mut c)
        .await
        .unwrap();
    // A pending member without a hash, and a hash without a payload.
    let _: () = redis::cmd("ZADD")
        .arg(k("pending"))
        .arg(1)
        .arg("ghost")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(k("job:torn"))
        .arg("st")
        .arg("active")
        .query_async(&mut c)
        .await
        .unwrap();

    let r = q.sweep(3).await.unwrap();
    assert_eq!(r.repaired, 4, "{r:?}");
    assert_eq!(q.sweep(3).await.unwrap().repaired, 0, "the sweep did not converge");
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.pending, counts.active, counts.completed), (8, 2, 0));
    assert!(matches!(q.job("torn").await, Err(Error::JobNotFound(_))));
    // The job put back into active is reaped (its deadline is "now") and runs again.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let rep = Reaper::new(q.clone()).run_once().await.unwrap();
    assert_eq!(rep.requeued, vec![(leased[0].id().to_owned(), 1)]);
    assert_eq!(q.job(leased[0].id()).await.unwrap().state, JobState::Pending);
}

// A queue whose name holds glob characters sweeps only its own jobs, never another queue's.
#[tokio::test]
async fn sweep_is_confined_to_its_queue() {
    let server = LocalServer::start().unwrap();
    let qa = Queue::connect(&server.url(), "a?").await.unwrap();
    let qb = Queue::connect(&server.url(), "ab").await.unwrap();
    qa.enqueue_bulk(&(0..10).collect::<Vec<u32>>()).await.unwrap();
    for l in qa.claim(10, Duration::from_secs(30)).await.unwrap() {
        qa.complete(&l).await.unwrap();
    }
    qb.enqueue_bulk(&(0..10).collect::<Vec<u32>>()).await.unwrap();
    let before = (qa.counts().await.unwrap(), qb.counts().await.unwrap());
    let r = qa.sweep(1000).await.unwrap();
    assert_eq!(r.repaired, 0, "{r:?}");
    assert_eq!(r.checked, 10 + 10, "its 10 hashes and 10 completed members");
    assert_eq!(before, (qa.counts().await.unwrap(), qb.counts().await.unwrap()));
    assert!(qa.claim(10, Duration::from_secs(30)).await.unwrap().is_empty());
}
