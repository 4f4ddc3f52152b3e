//! The local cluster helper (`echomq::server::LocalCluster`): it forms a
//! real Valkey/Redis Cluster, reshards a slot under writes without losing
//! a key, and follows a failover. Checked with the redis crate's own
//! cluster client, so these tests do not depend on echomq's connection.
//!
//! Timings: `cargo test --test local_cluster -- --nocapture`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::server::{LocalCluster, LocalServer, ServerError};
use redis::AsyncCommands;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

async fn client(cluster: &LocalCluster) -> ClusterConnection {
    ClusterClient::builder(cluster.urls())
        .response_timeout(Duration::from_secs(2))
        .connection_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
        .get_async_connection()
        .await
        .unwrap()
}

/// A key of the form `PREFIX:N` whose slot the master on `port` serves.
fn key_on(cluster: &LocalCluster, port: u16, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}:{i}"))
        .find(|k| cluster.master_of_slot(LocalCluster::slot_of(k)).unwrap() == port)
        .unwrap()
}

/// Writes `key` until the cluster acknowledges it (through a failover a
/// write may fail a few times); gives up after `limit`.
async fn set_until_ok(con: &mut ClusterConnection, key: &str, value: &str, limit: Duration) {
    let end = Instant::now() + limit;
    loop {
        match con.set::<_, _, ()>(key, value).await {
            Ok(()) => return,
            Err(err) if Instant::now() < end => {
                eprintln!("SET {key} failed, retrying: {err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => panic!("SET {key} still failing after {limit:?}: {err}"),
        }
    }
}

// Three masters and three replicas form one cluster with every slot
// served; a key in a slot of each master can be written and read through a
// cluster client, the helper's slot hash matches CLUSTER KEYSLOT, and a
// manual CLUSTER FAILOVER swaps a master and its replica without losing
// the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_serves_every_master_and_fails_over_by_hand() {
    let started = Instant::now();
    let cluster = tokio::task::spawn_blocking(|| LocalCluster::builder().masters(3).replicas_per_master(1).start())
        .await
        .unwrap()
        .unwrap();
    eprintln!("3 masters + 3 replicas formed in {:?}", started.elapsed());
    assert_eq!(cluster.nodes().len(), 6);
    let masters = cluster.master_ports().unwrap();
    assert_eq!(masters.len(), 3);
    let mut con = client(&cluster).await;
    for &m in &masters {
        let replica = cluster.replica_of(m).expect("every master has a replica");
        assert!(!masters.contains(&replica));
        let key = key_on(&cluster, m, "every-master");
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&key)
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(slot, LocalCluster::slot_of(&key));
        let _: () = con.set(&key, m).await.unwrap();
        let got: u16 = con.get(&key).await.unwrap();
        assert_eq!(got, m);
    }

    // Nothing fails a live master over: the wait times out, and its error
    // says what each node thinks.
    match cluster.wait_for_failover(masters[1], Duration::ZERO) {
        Err(ServerError::NotReady(why)) => {
            assert!(why.contains(&format!("{}: ok", masters[1])), "{why}");
        }
        other => panic!("expected NotReady, got {other:?}"),
    }

    let old = masters[0];
    let key = key_on(&cluster, old, "every-master");
    let replica = cluster.replica_of(old).unwrap();
    let handle = cluster.handle();
    let started = Instant::now();
    tokio::task::spawn_blocking(move || handle.failover(replica))
        .await
        .unwrap()
        .unwrap();
    eprintln!("manual failover took {:?}", started.elapsed());
    assert_eq!(cluster.master_of_slot(LocalCluster::slot_of(&key)).unwrap(), replica);
    assert_eq!(
        cluster.replica_of(replica),
        Some(old),
        "the old master follows the new one"
    );
    let got: u16 = con.get(&key).await.unwrap();
    assert_eq!(got, old, "a manual failover loses nothing");
}

// A slot holding keys is moved to another master (on password-protected
// nodes, so MIGRATE authenticates) in small batches while a writer keeps
// writing new keys to it through a cluster client (the source answers ASK
// for new keys meanwhile); afterwards the target serves the slot and
// every key preloaded or acknowledged is there with its value. A slot past
// 16383, a target that already has the slot or is no node are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrates_under_writes_without_losing_a_key() {
    let cluster = tokio::task::spawn_blocking(|| {
        LocalCluster::builder()
            .masters(3)
            .replicas_per_master(0)
            .node(LocalServer::builder().password("cluster secret"))
            .start()
    })
    .await
    .unwrap()
    .unwrap();
    let slot = LocalCluster::slot_of("{moving}");
    let from = cluster.master_of_slot(slot).unwrap();
    let to = *cluster.master_ports().unwrap().iter().find(|p| **p != from).unwrap();
    for (bad_slot, bad_to) in [(16_384, to), (slot, from), (slot, 1)] {
        let err = cluster.begin_migration(bad_slot, bad_to).unwrap_err();
        assert!(matches!(err, ServerError::Invalid(_)), "{err:?}");
    }
    assert!(matches!(
        cluster.wait_for_failover(1, Duration::from_secs(1)),
        Err(ServerError::Invalid(_))
    ));
    let mut con = client(&cluster).await;
    let mut expected = BTreeMap::new();
    for i in 0..200 {
        let key = format!("{{moving}}:pre:{i}");
        let _: () = con.set(&key, i).await.unwrap();
        expected.insert(key, i);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let written = Arc::new(Mutex::new(Vec::new()));
    let writer = tokio::spawn({
        let (stop, acked, written) = (stop.clone(), acked.clone(), written.clone());
        let mut con = con.clone();
        async move {
            let mut i = 0usize;
            while !stop.load(Ordering::Acquire) {
                let key = format!("{{moving}}:w:{i}");
                set_until_ok(&mut con, &key, &i.to_string(), Duration::from_secs(10)).await;
                written.lock().unwrap().push((key, i));
                acked.fetch_add(1, Ordering::Release);
                i += 1;
            }
        }
    });

    let handle = cluster.handle();
    let source_url = cluster.nodes().iter().find(|n| n.port() == from).unwrap().url();
    let migration = tokio::task::spawn_blocking(move || -> Result<usize, ServerError> {
        let mut source = redis::Client::open(source_url).unwrap().get_connection().unwrap();
        // Waits for the writer to get a few writes in: the point is to
        // migrate under load, whatever the machine's speed.
        let progress = |acked: &AtomicUsize| {
            let seen = acked.load(Ordering::Acquire);
            let end = Instant::now() + Duration::from_secs(10);
            while acked.load(Ordering::Acquire) < seen + 5 && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        progress(&acked);
        let mut migration = handle.begin_migration(slot, to)?;
        // The source now sends a new key to the target.
        let err = redis::cmd("SET")
            .arg("{moving}:new")
            .arg(1)
            .query::<()>(&mut source)
            .unwrap_err();
        assert_eq!(err.code(), Some("ASK"), "{err}");
        let mut steps = 0;
        while migration.step(25)? > 0 {
            steps += 1;
            progress(&acked);
        }
        progress(&acked);
        migration.finish()?;
        progress(&acked);
        Ok(steps)
    });
    let steps = migration.await.unwrap().unwrap();
    stop.store(true, Ordering::Release);
    writer.await.unwrap();
    assert!(steps >= 8, "200 preloaded keys move in batches of 25, not {steps}");
    assert_eq!(cluster.master_of_slot(slot).unwrap(), to);

    let written = written.lock().unwrap().clone();
    assert!(written.len() >= 20, "the writer kept writing: {}", written.len());
    expected.extend(written);
    for (key, value) in &expected {
        let got: Option<usize> = con.get(key).await.unwrap();
        assert_eq!(got, Some(*value), "{key}");
    }
    let mut target = redis::Client::open(cluster.nodes().iter().find(|n| n.port() == to).unwrap().url())
        .unwrap()
        .get_connection()
        .unwrap();
    let on_target: usize = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut target)
        .unwrap();
    assert_eq!(on_target, expected.len(), "every key of the slot is on the target");
}

// A master is SIGKILLed: its replica takes over (wait_for_failover names
// it), the cluster is ok again, a key written before the kill (and seen on
// the replica) survives, new writes to the failed master's slots work, and
// the old master, restarted, rejoins as the new master's replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_replaced_by_its_replica() {
    let mut cluster = tokio::task::spawn_blocking(|| LocalCluster::builder().masters(3).replicas_per_master(1).start())
        .await
        .unwrap()
        .unwrap();
    let old = cluster.master_ports().unwrap()[1];
    let replica = cluster.replica_of(old).unwrap();
    let key = key_on(&cluster, old, "failover");
    let mut con = client(&cluster).await;
    let _: () = con.set(&key, "before").await.unwrap();
    // Replication is asynchronous: wait until the replica has the key.
    let replica_url = cluster.nodes().iter().find(|n| n.port() == replica).unwrap().url();
    let mut direct = redis::Client::open(replica_url).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("READONLY").query(&mut direct).unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    while redis::cmd("EXISTS").arg(&key).query::<u32>(&mut direct).unwrap() == 0 {
        assert!(Instant::now() < end, "the replica never got the key");
        std::thread::sleep(Duration::from_millis(10));
    }

    cluster.node_mut(old).unwrap().kill();
    let killed = Instant::now();
    let handle = cluster.handle();
    let new = tokio::task::spawn_blocking(move || handle.wait_for_failover(old, Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    eprintln!("failover after SIGKILL took {:?}", killed.elapsed());
    assert_eq!(new, replica);
    assert!(cluster.master_ports().unwrap().contains(&new));
    assert!(!cluster.master_ports().unwrap().contains(&old));
    assert_eq!(cluster.master_of_slot(LocalCluster::slot_of(&key)).unwrap(), new);

    let value: String = loop {
        match con.get(&key).await {
            Ok(v) => break v,
            Err(err) => {
                assert!(Instant::now() < killed + Duration::from_secs(30), "{err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(value, "before");
    let after = key_on(&cluster, new, "after-failover");
    set_until_ok(&mut con, &after, "after", Duration::from_secs(10)).await;
    let got: String = con.get(&after).await.unwrap();
    assert_eq!(got, "after");

    // Restarted on its port and directory (nodes.conf), the old master
    // rejoins as a replica of its successor.
    cluster.node_mut(old).unwrap().restart().unwrap();
    let handle = cluster.handle();
    tokio::task::spawn_blocking(move || handle.wait_until_settled(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cluster.replica_of(new), Some(old));
}

// Out-of-range settings and arguments are typed errors, not panics.
#[test]
fn bad_arguments_are_rejected() {
    for builder in [
        LocalCluster::builder().masters(0),
        LocalCluster::builder().masters(17),
        LocalCluster::builder().replicas_per_master(5),
        LocalCluster::builder().node_timeout(Duration::from_millis(10)),
    ] {
        let err = builder.start().unwrap_err();
        assert!(matches!(err, ServerError::Invalid(_)), "{err:?}");
    }
}
