//! Through Sentinel: producers and consumers follow the master through a
//! failover by themselves, and the acknowledged enqueues the failover
//! lost are counted.
//!
//! Figures for the guide (docs/production-connections.md): `cargo test --test sentinel -- --nocapture`.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::server::SentinelGroup;
use echomq::{
    CancellationToken, Client, ClientOptions, Consumer, Durability, EnqueueOptions, Error, Job, QueueOptions, Retention,
};

/// Producer tasks, each sending one enqueue at a time.
const PRODUCERS: usize = 8;

/// What the producers saw.
#[derive(Default)]
struct Acked {
    /// Each acknowledged id, when, and by which producer.
    ids: Vec<(String, Instant, usize)>,
    /// When attempts failed, and whose (each was retried with the same id
    /// until acknowledged).
    errors: Vec<(Instant, usize)>,
}

// A master, one replica and three sentinels (down-after 1 s). Eight
// producers enqueue with caller-chosen ids, each retrying every id until
// it is acknowledged and recording every acknowledged id; a consumer runs
// the jobs. The
// master is SIGKILLed under that load. Without any help from the test,
// the producer's enqueues and the consumer's claims and settlements reach
// the promoted replica once Sentinel has promoted it; the consumer drains
// every job the new master holds (those whose completion was lost with
// the old master are reaped and run again). Acknowledged enqueues missing
// from the new master are counted: replication is asynchronous, so a few
// acknowledged just before the kill may be lost, never one acknowledged
// after the failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_and_consumers_follow_a_failover() {
    failover(Durability::Primary).await;
}

// The same with two replicas and `Durability::Replicas { count: 1 }`
// (WAIT 1 after every enqueue and settlement): not one acknowledged
// enqueue is lost, because each was on a replica before it was
// acknowledged, and Sentinel promotes the replica with the most of the
// stream. Until the other replica follows the new master, no enqueue can
// be confirmed, and producers retry theirs (`Error::NotDurable` is
// transient) with the same ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_1_a_failover_loses_no_acknowledged_enqueue() {
    let lost = failover(Durability::Replicas {
        count: 1,
        timeout: Duration::from_millis(500),
    })
    .await;
    assert_eq!(lost, 0, "acknowledged enqueues lost despite WAIT 1");
}

/// One failover under load with `durability`; returns the acknowledged
/// enqueues lost.
async fn failover(durability: Durability) -> usize {
    // With WAIT 1, a second replica: the new master needs one to confirm
    // anything, and the sentinels point the other replica at it as part of
    // the failover.
    let replicas = if durability == Durability::Primary { 1 } else { 2 };
    let mut group = SentinelGroup::builder()
        .replicas(replicas)
        .sentinels(3)
        .start()
        .unwrap();
    let urls = group.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let opts = ClientOptions::new()
        .response_timeout(Duration::from_secs(1))
        .connection_timeout(Duration::from_millis(500));
    let client = Client::connect_sentinel(&urls, group.master_name(), opts)
        .await
        .unwrap();
    let q = client
        .queue_with(
            &common::unique("failover"),
            QueueOptions::new()
                .keep_completed(Retention::All)
                .durability(durability),
        )
        .await
        .unwrap();

    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let seen = runs.clone();
    let consumer = Consumer::new(q.clone(), move |job: Job<u64>| {
        *seen.lock().unwrap().entry(job.id().to_owned()).or_default() += 1;
        async { Ok(()) }
    })
    .concurrency(8)
    .lease(Duration::from_secs(2))
    .reap_interval(Duration::from_millis(200))
    .poll_interval(Duration::from_millis(500))
    .spawn()
    .unwrap();

    let acked: Arc<Mutex<Acked>> = Arc::default();
    let stop = CancellationToken::new();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|k| {
            let (q, acked, stop) = (q.clone(), acked.clone(), stop.clone());
            tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.is_cancelled() {
                    let id = format!("p{k}-{n}");
                    let opts = EnqueueOptions::new().id(&id);
                    loop {
                        match q.enqueue_with(&n, &opts).await {
                            Ok(_) => {
                                acked.lock().unwrap().ids.push((id, Instant::now(), k));
                                break;
                            }
                            Err(e) => {
                                assert!(e.is_transient(), "a failover error must be transient: {e}");
                                acked.lock().unwrap().errors.push((Instant::now(), k));
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                        }
                    }
                    n += 1;
                }
            })
        })
        .collect();
    let count = |a: &Arc<Mutex<Acked>>| a.lock().unwrap().ids.len();
    let completed = |r: &Arc<Mutex<HashMap<String, u32>>>| r.lock().unwrap().len();
    assert!(
        common::eventually(Duration::from_secs(30), || async {
            count(&acked) >= 2000 && completed(&runs) >= 1000
        })
        .await,
        "no load before the kill"
    );

    // SIGKILL the master under load.
    let old = group.master_port().unwrap();
    let killed = Instant::now();
    let acked_before = count(&acked);
    group.node_mut(old).unwrap().kill();
    let new = tokio::task::block_in_place(|| group.wait_for_failover(old, Duration::from_secs(30))).unwrap();
    let failed_over = killed.elapsed();
    let acked_at_failover = count(&acked);

    // Producer and consumer carry on against the new master by themselves.
    assert!(
        common::eventually(Duration::from_secs(30), || async {
            count(&acked) >= acked_at_failover + 2000
        })
        .await,
        "the producer did not carry on after the failover"
    );
    stop.cancel();
    for p in producers {
        p.await.unwrap();
    }
    let acked = Arc::try_unwrap(acked).ok().unwrap().into_inner().unwrap();
    // Each producer sends one enqueue at a time: what it acknowledged after
    // its first failure since the kill, the new master acknowledged (a
    // reply may arrive just after the kill from the old master).
    let first_error: Vec<Instant> = (0..PRODUCERS)
        .map(|k| {
            let e = acked.errors.iter().find(|(at, p)| *p == k && *at > killed);
            e.expect("every producer failed during the failover").0
        })
        .collect();
    let first_after = acked
        .ids
        .iter()
        .filter(|(_, at, k)| *at > first_error[*k])
        .map(|(_, at, _)| at.duration_since(killed))
        .min()
        .unwrap();

    // Which acknowledged ids does the new master hold?
    let mut lost = Vec::new();
    for (id, at, k) in &acked.ids {
        match q.job(id).await {
            Ok(_) => {}
            Err(Error::JobNotFound(_)) => lost.push((id.clone(), *at, *k)),
            Err(e) => panic!("{id}: {e}"),
        }
    }
    // Every job it holds completes: the consumer drains the queue.
    assert!(
        common::eventually(Duration::from_secs(30), || async {
            let c = q.counts().await.unwrap();
            c.pending + c.active + c.delayed == 0
        })
        .await,
        "the consumer did not drain the new master: {:?}",
        q.counts().await.unwrap()
    );
    consumer.shutdown().await.unwrap();
    let runs = runs.lock().unwrap().clone();
    let present: HashSet<&str> = acked
        .ids
        .iter()
        .map(|(id, _, _)| id.as_str())
        .filter(|id| !lost.iter().any(|(l, _, _)| l == id))
        .collect();
    let unrun: Vec<&&str> = present.iter().filter(|id| !runs.contains_key(**id)).collect();
    assert!(unrun.is_empty(), "acknowledged jobs never run: {unrun:?}");
    let after_failover = acked.ids[acked_at_failover..]
        .iter()
        .filter(|(id, _, _)| runs.contains_key(id))
        .count();
    let twice = runs.values().filter(|n| **n > 1).count();

    // Only writes acknowledged by the old master can be lost.
    for (id, at, k) in &lost {
        assert!(
            *at < first_error[*k],
            "{id} was acknowledged by the new master and lost"
        );
    }
    eprintln!(
        "sentinel failover ({durability:?}): {} enqueues acknowledged ({acked_before} before the SIGKILL of the master on port {old}); \
         failover to port {new} seen by all sentinels {:.2} s after the kill; first enqueue acknowledged by the new \
         master {:.2} s after the kill ({} failed attempts retried meanwhile); {} acknowledged enqueues lost; \
         {after_failover} jobs enqueued after the failover ran; {twice} jobs ran twice (their completion did not reach the new \
         master)",
        acked.ids.len(),
        failed_over.as_secs_f64(),
        first_after.as_secs_f64(),
        acked.errors.len(),
        lost.len(),
    );
    println!(
        "{{\"durability\":\"{durability:?}\",\"acked\":{},\"acked_before_kill\":{acked_before},\"lost\":{},\"failover_s\":{:.3},\"first_ack_after_s\":{:.3},\"enqueue_errors\":{},\"ran_twice\":{twice}}}",
        acked.ids.len(),
        lost.len(),
        failed_over.as_secs_f64(),
        first_after.as_secs_f64(),
        acked.errors.len(),
    );
    assert!(after_failover > 0);
    lost.len()
}

/// The role (`master`, `slave`) the node on `url` reports ("" when it
/// does not answer: Sentinel disconnects a node's clients as it demotes it).
async fn role(url: &str) -> String {
    let info = async {
        let mut c = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
        redis::cmd("INFO")
            .arg("replication")
            .query_async::<String>(&mut c)
            .await
    };
    let info = info.await.unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("role:"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Clients of the node on `url` blocked in `BLPOP`.
async fn waiting_in_blpop(url: &str) -> usize {
    let mut c = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut c).await.unwrap();
    list.lines().filter(|l| l.contains(" cmd=blpop ")).count()
}

// A graceful failover (SENTINEL FAILOVER: the old master is demoted to a
// replica and its clients are disconnected), followed by a least-privilege
// user that may not run ROLE (acl::rules, created on both nodes): echomq
// takes the sentinels' word for the master, and its consumer's blocking
// wait moves to the new master, where an enqueue wakes it at once (its
// poll interval is a minute). A name no sentinel monitors, and a list of
// no sentinels, are refused at connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privilege_user_follows_a_graceful_failover() {
    let group = SentinelGroup::builder().replicas(1).sentinels(1).start().unwrap();
    for node in group.nodes() {
        let mut c = redis::Client::open(node.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER").arg("echomq").arg("reset").arg("on").arg(">pw");
        for rule in echomq::acl::rules("emq").split(' ') {
            cmd.arg(rule);
        }
        let () = cmd.query_async(&mut c).await.unwrap();
    }
    let urls = group.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let opts = || {
        ClientOptions::new()
            .master_auth(Some("echomq"), "pw")
            .response_timeout(Duration::from_secs(1))
            .connection_timeout(Duration::from_millis(500))
    };
    let client = Client::connect_sentinel(&urls, group.master_name(), opts())
        .await
        .unwrap();
    let q = client.queue(&common::unique("graceful")).await.unwrap();
    let consumer = Consumer::new(q.clone(), |_job: Job<u32>| async { Ok(()) })
        .poll_interval(Duration::from_secs(60))
        .spawn()
        .unwrap();
    let id = q.enqueue(&1u32).await.unwrap();
    assert!(common::completes(&q, &id).await);

    let old = group.master_port().unwrap();
    let old_url = group.nodes().iter().find(|n| n.port() == old).unwrap().url();
    let mut sentinel = redis::Client::open(urls[0])
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // Until the sentinel has checked the new replica (NOGOODSLAVE before).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r: redis::RedisResult<()> = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(group.master_name())
            .query_async(&mut sentinel)
            .await;
        match r {
            Ok(()) => break,
            Err(e) if std::time::Instant::now() < deadline => {
                assert_eq!(e.code(), Some("NOGOODSLAVE"), "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("SENTINEL FAILOVER refused for 30 s: {e}"),
        }
    }
    let new = tokio::task::block_in_place(|| group.wait_for_failover(old, Duration::from_secs(30))).unwrap();
    let new_url = group.nodes().iter().find(|n| n.port() == new).unwrap().url();
    assert!(
        common::eventually(Duration::from_secs(30), || async { role(&old_url).await == "slave" }).await,
        "the old master was not demoted"
    );

    // The producer's retried enqueue reaches the new master; the job runs.
    let id = loop {
        match q.enqueue(&2u32).await {
            Ok(id) => break id,
            Err(e) => {
                assert!(e.is_transient(), "{e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert!(common::completes(&q, &id).await);
    // Idle again, the consumer waits in BLPOP on the new master, and an
    // enqueue wakes it within a second, not a poll interval.
    assert!(
        common::eventually(Duration::from_secs(70), || async {
            waiting_in_blpop(&new_url).await == 1
        })
        .await,
        "the consumer does not wait on the new master"
    );
    assert_eq!(waiting_in_blpop(&old_url).await, 0);
    let id = q.enqueue(&3u32).await.unwrap();
    let started = std::time::Instant::now();
    q.wait(&id, Duration::from_secs(10)).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    consumer.shutdown().await.unwrap();

    // Refused at connect: an unknown name, no sentinel at all.
    let e = Client::connect_sentinel(&urls, "nosuch", opts()).await.unwrap_err();
    assert!(
        e.to_string().contains("no sentinel monitors a master by this name"),
        "{e}"
    );
    let e = Client::connect_sentinel(&[], "mymaster", opts()).await.unwrap_err();
    assert!(matches!(e, Error::InvalidOption { name: "sentinels", .. }), "{e:?}");
}
