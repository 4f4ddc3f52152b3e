//! The durability knob against real servers: a primary with a replica,
//! a primary without one, and an append-only file (WAIT / WAITAOF).

mod common;

use std::time::Duration;

use common::{eventually, unique};
use echomq::server::LocalServer;
use echomq::{Durability, EnqueueOptions, EnqueueStatus, Error, JobState, Queue, QueueOptions};

const WAIT_1: Durability = Durability::Replicas {
    count: 1,
    timeout: Duration::from_secs(2),
};

async fn raw(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A primary and one replica whose link is up.
async fn pair() -> (LocalServer, LocalServer) {
    let primary = LocalServer::start().unwrap();
    let replica = LocalServer::builder().replica_of(primary.port()).start().unwrap();
    let mut c = raw(replica.port()).await;
    let up = eventually(Duration::from_secs(10), || {
        let mut c = c.clone();
        async move {
            let info: String = redis::cmd("INFO").arg("replication").query_async(&mut c).await.unwrap();
            info.contains("master_link_status:up")
        }
    })
    .await;
    assert!(up, "the replica never linked up");
    let _: () = redis::cmd("PING").query_async(&mut c).await.unwrap();
    (primary, replica)
}

// With WAIT 1, an enqueue (single, coalesced or bulk) is on the replica
// the moment it is answered, and settlements go through as usual.
#[tokio::test]
async fn answered_enqueues_are_on_the_replica() {
    let (primary, replica) = pair().await;
    let q = Queue::connect_with(&primary.url(), &unique("dur"), QueueOptions::new().durability(WAIT_1))
        .await
        .unwrap();
    let mut r = raw(replica.port()).await;
    let on_replica = |id: String| {
        let mut r = r.clone();
        let key = format!("emq:{{{}}}:job:{id}", q.name());
        async move { redis::cmd("EXISTS").arg(key).query_async::<bool>(&mut r).await.unwrap() }
    };
    let one = q.enqueue(&1u32).await.unwrap();
    assert!(on_replica(one.clone()).await, "{one} is not on the replica yet");
    let many = futures_join(&q).await;
    for id in many {
        assert!(on_replica(id.clone()).await, "{id} is not on the replica yet");
    }
    for id in q.enqueue_bulk(&[7u32, 8, 9]).await.unwrap() {
        assert!(on_replica(id.clone()).await, "{id} is not on the replica yet");
    }
    let leases = q.claim(20, Duration::from_secs(30)).await.unwrap();
    assert_eq!(leases.len(), 12);
    for l in &leases {
        q.complete(l).await.unwrap();
    }
    let key = format!("emq:{{{}}}:job:{one}", q.name());
    let state: String = redis::cmd("HGET")
        .arg(&key)
        .arg("st")
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(
        state, "completed",
        "the settlement reached the replica before its answer"
    );
    // The replica had them because echomq waited, not by luck of timing.
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw(primary.port()).await)
        .await
        .unwrap();
    let waits: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
        .and_then(|l| l.split(',').next()?.parse().ok())
        .unwrap_or(0);
    assert!(
        waits >= 3 + 12,
        "{waits} WAITs for 3 enqueue calls and 12 settlements at least"
    );
}

/// Eight concurrent single enqueues (coalesced into shared calls).
async fn futures_join(q: &Queue) -> Vec<String> {
    let tasks: Vec<_> = (0..8u32)
        .map(|i| {
            let q = q.clone();
            tokio::spawn(async move { q.enqueue(&i).await.unwrap() })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

// Without a replica to confirm, an enqueue answers NotDurable with the id
// (transient; the job is on the primary, and enqueueing it again with the
// same id does not duplicate it); a settlement is applied and only logged.
#[tokio::test]
async fn unconfirmed_enqueues_say_so_with_their_ids() {
    let primary = LocalServer::start().unwrap();
    let short = Durability::Replicas {
        count: 1,
        timeout: Duration::from_millis(50),
    };
    let q = Queue::connect_with(&primary.url(), &unique("dur"), QueueOptions::new().durability(short))
        .await
        .unwrap();
    let e = q
        .enqueue_with(&1u32, &EnqueueOptions::new().id("order-1"))
        .await
        .unwrap_err();
    match &e {
        Error::NotDurable { ids, acked, wanted } => {
            assert_eq!((ids.as_slice(), *acked, *wanted), (&["order-1".to_owned()][..], 0, 1));
        }
        other => panic!("expected NotDurable, got {other:?}"),
    }
    assert!(e.is_transient());
    assert_eq!(q.job("order-1").await.unwrap().state, JobState::Pending);
    // Again with the same id: still one job.
    let again = Queue::connect(&primary.url(), q.name()).await.unwrap();
    let r = again
        .enqueue_with(&1u32, &EnqueueOptions::new().id("order-1"))
        .await
        .unwrap();
    assert_eq!(r.status, EnqueueStatus::Existing);
    match q.enqueue_bulk(&[2u32, 3]).await {
        Err(Error::NotDurable { ids, .. }) => assert_eq!(ids.len(), 2),
        other => panic!("expected NotDurable, got {other:?}"),
    }
    // A cancel is confirmed as an enqueue is: made on the primary, short.
    let doomed = q
        .enqueue_with(&9u32, &EnqueueOptions::new().id("doomed"))
        .await
        .unwrap_err();
    assert!(matches!(doomed, Error::NotDurable { .. }), "{doomed:?}");
    match q.cancel("doomed").await {
        Err(Error::NotDurable {
            ids,
            acked: 0,
            wanted: 1,
        }) => assert_eq!(ids, ["doomed"]),
        other => panic!("expected NotDurable, got {other:?}"),
    }
    assert_eq!(q.job("doomed").await.unwrap().state, JobState::Cancelled);
    let leases = q.claim(5, Duration::from_secs(30)).await.unwrap();
    assert_eq!(leases.len(), 3);
    q.complete(&leases[0]).await.unwrap();
    assert_eq!(q.job(leases[0].id()).await.unwrap().state, JobState::Completed);
}

// Adding a flow, opening a batch and closing it are confirmed as an
// enqueue is: short of replicas each answers NotDurable with the flow's or
// batch's id, and so does doing it again while the first write is on the
// primary alone; without confirmation, doing it again answers that the
// first write stands.
#[tokio::test]
async fn unconfirmed_flows_and_batches_say_so() {
    use echomq::batch::{BatchOptions, Callback};
    use echomq::flow::{FlowSpec, Step};
    let primary = LocalServer::start().unwrap();
    let short = Durability::Replicas {
        count: 1,
        timeout: Duration::from_millis(50),
    };
    let q = Queue::connect_with(&primary.url(), &unique("dur"), QueueOptions::new().durability(short))
        .await
        .unwrap();
    let spec = FlowSpec::new()
        .id("order-7")
        .step(Step::new("charge", &1u32).unwrap())
        .step(Step::new("ship", &2u32).unwrap().after("charge"));
    let short_of = |e: Error, id: &str| match e {
        Error::NotDurable {
            ids,
            acked: 0,
            wanted: 1,
        } => assert_eq!(ids, [id]),
        other => panic!("expected NotDurable for {id}, got {other:?}"),
    };
    // A handle that asks only the primary sees what the primary holds.
    let plain = Queue::connect(&primary.url(), q.name()).await.unwrap();
    short_of(q.add_flow(&spec).await.unwrap_err(), "order-7");
    // again: the flow found is still on the primary alone, so still short
    short_of(q.add_flow(&spec).await.unwrap_err(), "order-7");
    assert!(matches!(plain.add_flow(&spec).await, Err(Error::FlowExists(_))));
    let opts = BatchOptions::new()
        .id("b-7")
        .on_complete(Callback::new(&"done").unwrap());
    short_of(q.open_batch(&opts).await.unwrap_err(), "b-7");
    short_of(q.open_batch(&opts).await.unwrap_err(), "b-7");
    assert!(matches!(plain.open_batch(&opts).await, Err(Error::BatchExists(_))));
    let b = q.batch("b-7").unwrap();
    short_of(b.close().await.unwrap_err(), "b-7");
    short_of(b.close().await.unwrap_err(), "b-7");
    // a member added after a close that is on the primary alone: short too
    short_of(b.add(&[3u32]).await.unwrap_err(), "b-7");
    assert!(matches!(
        plain.batch("b-7").unwrap().add(&[3u32]).await,
        Err(Error::BatchClosed(_))
    ));
    assert!(matches!(
        plain.batch("b-7").unwrap().close().await,
        Err(Error::BatchClosed(_))
    ));
    // The close stood: the empty batch ended, its callback enqueued once.
    let st = b.status().await.unwrap();
    assert!(st.complete_at.is_some(), "{st:?}");
    assert_eq!(q.job("b-7:complete").await.unwrap().state, JobState::Pending);
}

// Fsynced needs WAITAOF and an append-only file: refused when the queue
// handle is made without them, kept with them.
#[tokio::test]
async fn fsynced_needs_an_append_only_file() {
    let fsynced = Durability::Fsynced {
        replicas: 0,
        timeout: Duration::from_secs(2),
    };
    let opts = || QueueOptions::new().durability(fsynced);
    let plain = LocalServer::start().unwrap();
    match Queue::connect_with(&plain.url(), &unique("dur"), opts()).await {
        Err(Error::InvalidOption {
            name: "durability",
            reason,
        }) => {
            assert!(reason.contains("WAITAOF"), "{reason}")
        }
        other => panic!("expected InvalidOption, got {:?}", other.map(|_| ())),
    }
    let aof = LocalServer::builder().aof(true).start().unwrap();
    let mut c = raw(aof.port()).await;
    let has_waitaof: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("WAITAOF")
        .query_async(&mut c)
        .await
        .unwrap();
    let opened = Queue::connect_with(&aof.url(), &unique("dur"), opts()).await;
    if matches!(has_waitaof.first(), Some(redis::Value::Nil) | None) {
        // Redis 7.0 has no WAITAOF.
        assert!(matches!(opened, Err(Error::InvalidOption { .. })));
        return;
    }
    let q = opened.unwrap();
    let id = q.enqueue(&1u32).await.unwrap();
    assert_eq!(q.job(&id).await.unwrap().state, JobState::Pending);
}

// Out-of-range settings are refused when the handle is made.
#[tokio::test]
async fn bad_settings_are_refused() {
    let server = LocalServer::start().unwrap();
    for d in [
        Durability::Replicas {
            count: 0,
            timeout: Duration::from_secs(1),
        },
        Durability::Replicas {
            count: 1,
            timeout: Duration::ZERO,
        },
        Durability::Fsynced {
            replicas: 1,
            timeout: Duration::from_secs(61),
        },
        Durability::Replicas {
            count: 65,
            timeout: Duration::from_secs(1),
        },
    ] {
        let r = Queue::connect_with(&server.url(), &unique("dur"), QueueOptions::new().durability(d)).await;
        assert!(
            matches!(r, Err(Error::InvalidOption { name: "durability", .. })),
            "{d:?}"
        );
    }
}

// WAIT counts the replicas that have this connection's own writes. A call
// that finds its work already done writes nothing, so its WAIT would pass
// at once even though the replica lacks the write it found (another
// connection's, still unconfirmed). Every confirmed call writes, so its
// confirmation covers all it read: with the only replica stopped, a retry
// from a second connection answers NotDurable as the first did.
#[tokio::test]
async fn a_retry_on_another_connection_is_not_confirmed_by_a_replica_that_lacks_the_first_write() {
    use echomq::batch::BatchOptions;
    use echomq::flow::{FlowSpec, Step};
    let (primary, replica) = pair().await;
    let short = Durability::Replicas {
        count: 1,
        timeout: Duration::from_millis(200),
    };
    let name = unique("dur");
    let first = Queue::connect_with(&primary.url(), &name, QueueOptions::new().durability(short))
        .await
        .unwrap();
    let second = Queue::connect_with(&primary.url(), &name, QueueOptions::new().durability(short))
        .await
        .unwrap();
    // both handles have written and been confirmed once, so each one's
    // connection has an offset the replica acknowledged
    first.enqueue(&0u32).await.unwrap();
    second.enqueue(&0u32).await.unwrap();
    replica.pause();
    let not_durable = |r: echomq::Result<()>, what: &str| match r {
        Err(Error::NotDurable { .. }) => {}
        other => panic!("{what}: expected NotDurable while the replica is stopped, got {other:?}"),
    };
    let enqueue = |q: &Queue| {
        let q = q.clone();
        async move {
            q.enqueue_with(&1u32, &EnqueueOptions::new().id("order-1"))
                .await
                .map(|_| ())
        }
    };
    not_durable(enqueue(&first).await, "the first enqueue");
    not_durable(enqueue(&second).await, "the same enqueue again from another connection");
    let spec = FlowSpec::new().id("flow-1").step(Step::new("a", &1u32).unwrap());
    not_durable(first.add_flow(&spec).await.map(|_| ()), "the first add_flow");
    not_durable(
        second.add_flow(&spec).await.map(|_| ()),
        "the same flow again from another connection",
    );
    let opts = BatchOptions::new().id("batch-1");
    not_durable(first.open_batch(&opts).await.map(|_| ()), "the first open_batch");
    not_durable(
        second.open_batch(&opts).await.map(|_| ()),
        "the same batch again from another connection",
    );
    replica.resume();
    // once the replica has them, the retries are confirmed and say what stands
    let r = second
        .enqueue_with(&1u32, &EnqueueOptions::new().id("order-1"))
        .await
        .unwrap();
    assert_eq!(r.status, EnqueueStatus::Existing);
    assert!(matches!(second.add_flow(&spec).await, Err(Error::FlowExists(_))));
    assert!(matches!(second.open_batch(&opts).await, Err(Error::BatchExists(_))));
}
