//! Flows and batches on a cluster: a flow or batch of one queue keeps to
//! its slot, so it runs on every master as on one server, its parents
//! enqueued by the scripts that end their children on that master; a flow
//! whose steps, or a batch whose members, are on queues of several masters
//! moves on by message, also through a failover of the master that holds
//! its record.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::batch::{BatchOptions, Callback};
use echomq::flow::{ChildOutcome, FlowSpec, Step, StepState};
use echomq::server::LocalCluster;
use echomq::{Client, Durability, Error, Job, Queue, QueueOptions, Worker};
use serde_json::{Value, json};

use super::common;
use super::{name_on, opts};

// A flow (charge and reserve, then email) and a batch on a queue of each
// master, one worker for all: every email reads both its children's
// results, every batch's callback runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_and_batches_run_on_every_master() {
    let cluster = LocalCluster::builder().replicas_per_master(0).start().unwrap();
    let client = Client::connect_with(&cluster.url(), opts()).await.unwrap();
    let mut queues = Vec::new();
    for (i, port) in cluster.master_ports().unwrap().iter().enumerate() {
        queues.push(
            client
                .queue(&name_on(&cluster, *port, &format!("flow{i}-")))
                .await
                .unwrap(),
        );
    }
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut worker = Worker::new();
    for q in &queues {
        let seen = seen.clone();
        worker = worker.queue(q.clone(), move |job: Job<Value>| {
            let seen = seen.clone();
            async move {
                let kids = job.child_results::<String>().await?;
                let got: Vec<String> = kids
                    .into_iter()
                    .map(|c| match c.outcome {
                        ChildOutcome::Completed(r) => r,
                        other => format!("{other:?}"),
                    })
                    .collect();
                seen.lock().unwrap().push(format!("{}{got:?}", job.id()));
                Ok::<_, echomq::HandlerError>(format!("{}-done", job.id()))
            }
        });
    }
    let handle = worker.spawn().unwrap();
    let mut flows = Vec::new();
    for q in &queues {
        let spec = FlowSpec::new()
            .id("o")
            .step(Step::new("charge", &1).unwrap())
            .step(Step::new("reserve", &2).unwrap())
            .step(Step::new("email", &3).unwrap().after("charge").after("reserve"));
        flows.push(q.add_flow(&spec).await.unwrap());
        let batch = q
            .open_batch(
                &BatchOptions::new()
                    .id("b")
                    .on_success(Callback::new(&json!("cb")).unwrap()),
            )
            .await
            .unwrap();
        batch.add(&[1, 2]).await.unwrap();
        batch.close().await.unwrap();
    }
    // a batch on the first master with members on the other two
    let span = queues[0]
        .open_batch(
            &BatchOptions::new()
                .id("span")
                .on_success(Callback::new(&json!("cb")).unwrap()),
        )
        .await
        .unwrap();
    let mut span_members = Vec::new();
    for q in &queues[1..] {
        span_members.extend(span.on(q).unwrap().add(&[1, 2]).await.unwrap());
    }
    span_members.extend(span.add(&[3]).await.unwrap());
    span.close().await.unwrap();
    let all_ended = || async {
        for f in &flows {
            if !f.status().await.unwrap().is_ended() {
                return false;
            }
        }
        seen.lock()
            .unwrap()
            .iter()
            .filter(|s| s.starts_with("b:success") || s.starts_with("span:success"))
            .count()
            == 4
    };
    assert!(
        common::eventually(Duration::from_secs(20), all_ended).await,
        "{:?}",
        seen.lock().unwrap()
    );
    handle.shutdown().await.unwrap();
    for f in &flows {
        assert_eq!(f.status().await.unwrap().count(StepState::Completed), 3);
    }
    let st = span.status().await.unwrap();
    assert_eq!((st.total, st.completed), (5, 5));
    let seen = seen.lock().unwrap();
    for id in span_members.iter().map(String::as_str).chain(["span:success"]) {
        assert_eq!(
            seen.iter().filter(|s| s.starts_with(&format!("{id}["))).count(),
            1,
            "{id} ran once: {seen:?}"
        );
    }
    let emails: Vec<&String> = seen.iter().filter(|s| s.starts_with("o:email")).collect();
    assert_eq!(emails.len(), 3, "{seen:?}");
    for e in emails {
        assert_eq!(e, r#"o:email["o:charge-done", "o:reserve-done"]"#);
    }
}

/// One handler run: the job, and when it started and returned.
type Runs = Arc<Mutex<Vec<(String, Instant, Instant)>>>;

/// A worker on `queues` whose handlers record their runs.
fn recording_worker(queues: &[Queue], runs: &Runs) -> Worker {
    let mut worker = Worker::new();
    for q in queues {
        let runs = runs.clone();
        worker = worker.queue(q.clone(), move |job: Job<Value>| {
            let runs = runs.clone();
            async move {
                let started = Instant::now();
                let kids = job.child_results::<String>().await?;
                for c in &kids {
                    assert!(matches!(c.outcome, ChildOutcome::Completed(_)), "{}: {c:?}", job.id());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                runs.lock()
                    .unwrap()
                    .push((job.id().to_owned(), started, Instant::now()));
                Ok::<_, echomq::HandlerError>(format!("{}-done", job.id()))
            }
        });
    }
    worker
}

/// The order over three queues: charge on `a`, reserve on `b`, email on
/// the flow's own queue after both, ship on `a` after email.
fn spread_order(id: &str, a: &Queue, b: &Queue) -> FlowSpec {
    FlowSpec::new()
        .id(id)
        .step(Step::new("charge", &1).unwrap().on(a))
        .step(Step::new("reserve", &2).unwrap().on(b))
        .step(Step::new("email", &3).unwrap().after("charge").after("reserve"))
        .step(Step::new("ship", &4).unwrap().on(a).after("email"))
}

/// Checks that every step of every flow ran, each parent only after each
/// of its children's runs had returned.
fn check_order(runs: &Runs, flows: usize) {
    let runs = runs.lock().unwrap();
    let first_start = |id: &str| runs.iter().filter(|r| r.0 == id).map(|r| r.1).min();
    let last_end = |id: &str| runs.iter().filter(|r| r.0 == id).map(|r| r.2).max();
    for i in 0..flows {
        let f = format!("f{i}");
        for (parent, kids) in [("email", &["charge", "reserve"][..]), ("ship", &["email"][..])] {
            let p = first_start(&format!("{f}:{parent}")).unwrap_or_else(|| panic!("{f}:{parent} never ran"));
            for k in kids {
                let k_end = last_end(&format!("{f}:{k}")).unwrap_or_else(|| panic!("{f}:{k} never ran"));
                assert!(k_end <= p, "{f}:{parent} started before {f}:{k} returned");
            }
        }
    }
}

// Flows whose steps are on three masters: each master's state changes in
// its own atomic call, and the steps' ends and releases go between the
// masters by message (no cross-slot script). Each parent runs after all
// its children, and reads their results from the flow's master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_spans_three_masters() {
    let cluster = LocalCluster::builder().replicas_per_master(0).start().unwrap();
    let client = Client::connect_with(&cluster.url(), opts()).await.unwrap();
    let mut queues = Vec::new();
    for (i, port) in cluster.master_ports().unwrap().iter().enumerate() {
        queues.push(
            client
                .queue(&name_on(&cluster, *port, &format!("span{i}-")))
                .await
                .unwrap(),
        );
    }
    let runs: Runs = Arc::default();
    let handle = recording_worker(&queues, &runs).spawn().unwrap();
    let (h, a, b) = (&queues[0], &queues[1], &queues[2]);
    let mut flows = Vec::new();
    for i in 0..10 {
        flows.push(h.add_flow(&spread_order(&format!("f{i}"), a, b)).await.unwrap());
    }
    let all_ended = || async {
        for f in &flows {
            if !f.status().await.unwrap().is_ended() {
                return false;
            }
        }
        true
    };
    assert!(
        common::eventually(Duration::from_secs(30), all_ended).await,
        "{:?}",
        flows[0].status().await
    );
    handle.shutdown().await.unwrap();
    for f in &flows {
        let st = f.status().await.unwrap();
        assert_eq!(st.count(StepState::Completed), 4, "{st:?}");
    }
    check_order(&runs, 10);
}

// The same while the master that holds the flows' and batches' records is
// SIGKILLed and its replica takes over (queues writing with WAIT 1, so a
// delivery is taken off its outbox only once a replica holds it): every
// flow still ends with all its steps completed, no parent before its
// children, and every batch counts its members on the other masters once
// and fires its callback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_over_masters_survive_a_failover_of_their_home() {
    let mut cluster = LocalCluster::builder().replicas_per_master(1).start().unwrap();
    let masters = cluster.master_ports().unwrap();
    let client = Client::connect_cluster(&[&cluster.url()], opts()).await.unwrap();
    let durability = Durability::Replicas {
        count: 1,
        timeout: Duration::from_secs(1),
    };
    let mut queues = Vec::new();
    for (i, port) in masters.iter().enumerate() {
        queues.push(
            client
                .queue_with(
                    &name_on(&cluster, *port, &format!("fo{i}-")),
                    QueueOptions::new().durability(durability),
                )
                .await
                .unwrap(),
        );
    }
    let runs: Runs = Arc::default();
    let handle = recording_worker(&queues, &runs).spawn().unwrap();
    let (h, a, b) = (&queues[0], &queues[1], &queues[2]);
    const FLOWS: usize = 30;
    let mut flows = Vec::new();
    for i in 0..FLOWS {
        flows.push(h.add_flow(&spread_order(&format!("f{i}"), a, b)).await.unwrap());
    }
    // batches of the same home with their members on the other masters
    const BATCHES: usize = 10;
    let (mut batches, mut members) = (Vec::new(), Vec::new());
    for i in 0..BATCHES {
        let batch = h
            .open_batch(
                &BatchOptions::new()
                    .id(format!("b{i}"))
                    .on_success(Callback::new(&json!("cb")).unwrap()),
            )
            .await
            .unwrap();
        for q in [a, b] {
            members.extend(batch.on(q).unwrap().add(&[1, 2, 3]).await.unwrap());
        }
        batch.close().await.unwrap();
        batches.push(batch);
    }
    assert!(
        common::eventually(Duration::from_secs(30), || async { runs.lock().unwrap().len() >= 20 }).await,
        "no flow ran before the kill"
    );
    let old = masters[0];
    cluster.node_mut(old).unwrap().kill();
    let new = tokio::task::block_in_place(|| cluster.wait_for_failover(old, Duration::from_secs(30))).unwrap();
    // The new master has no replica to confirm WAIT 1 until the old one
    // comes back as its replica.
    cluster.node_mut(old).unwrap().restart().unwrap();
    let all_ended = || async {
        for f in &flows {
            if !f.status().await.is_ok_and(|s| s.is_ended()) {
                return false;
            }
        }
        // every batch's callback enqueued, and its handler run
        for b in &batches {
            if !b.status().await.is_ok_and(|s| s.success_at.is_some()) {
                return false;
            }
        }
        batches.iter().all(|b| {
            let id = format!("{}:success", b.id());
            runs.lock().unwrap().iter().any(|r| r.0 == id)
        })
    };
    assert!(
        common::eventually(Duration::from_secs(60), all_ended).await,
        "flows left after the failover to {new}: {:?}",
        flows.iter().map(|f| f.id().to_owned()).collect::<Vec<_>>()
    );
    handle.shutdown().await.unwrap();
    for f in &flows {
        let st = f.status().await.unwrap();
        assert_eq!(st.count(StepState::Completed), 4, "{st:?}");
    }
    check_order(&runs, FLOWS);
    let runs_of = |id: &str| {
        runs.lock()
            .unwrap()
            .iter()
            .filter(|r| r.0 == id)
            .map(|r| r.2)
            .collect::<Vec<_>>()
    };
    for b in &batches {
        let st = b.status().await.unwrap();
        assert_eq!((st.total, st.completed), (6, 6), "{st:?}");
        let callback = runs_of(&format!("{}:success", b.id()));
        assert!(!callback.is_empty(), "{}: its callback ran", b.id());
    }
    for id in &members {
        assert!(!runs_of(id).is_empty(), "{id} ran");
    }
    println!(
        "flows and batches over masters, home master {old} killed, replica {new} promoted: {FLOWS} flows and \
         {BATCHES} batches ended, {} handler runs",
        runs.lock().unwrap().len()
    );
}

// A step's end on its own master's outbox, its home's only replica
// stopped: the relay that delivers it is short, and so is a second relay
// (another client) that finds the end already written at home. Neither
// may take the message off, or a failover of the home before its replica
// had the end would lose it for good (the flow would wait forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_finds_an_end_delivered_takes_it_off_only_once_the_home_replica_has_it() {
    let cluster = LocalCluster::builder()
        .masters(2)
        .replicas_per_master(1)
        .start()
        .unwrap();
    let masters = cluster.master_ports().unwrap();
    let durability = Durability::Replicas {
        count: 1,
        timeout: Duration::from_millis(200),
    };
    let (home, far) = (
        name_on(&cluster, masters[0], "rh-"),
        name_on(&cluster, masters[1], "rf-"),
    );
    let mut handles = Vec::new();
    for _ in 0..2 {
        let client = Client::connect_cluster(&[&cluster.url()], opts()).await.unwrap();
        let o = QueueOptions::new().durability(durability);
        let h = client.queue_with(&home, o.clone()).await.unwrap();
        let f = client.queue_with(&far, o).await.unwrap();
        handles.push((h, f));
    }
    let (h1, f1) = &handles[0];
    let (_, f2) = &handles[1];
    let flow = h1
        .add_flow(
            &FlowSpec::new()
                .id("o")
                .step(Step::new("charge", &1).unwrap().on(f1))
                .step(Step::new("ship", &2).unwrap().after("charge")),
        )
        .await
        .unwrap();
    // the step reached its queue (the add relayed it at once)
    let lease = f1
        .claim(1, Duration::from_secs(30))
        .await
        .unwrap()
        .pop()
        .expect("the step on its queue");
    f1.complete(&lease).await.unwrap();
    let far_master = masters[1];
    let outbox = |f: &Queue| {
        let key = format!("emq:{{{}}}:outbox", f.name());
        async move {
            let mut c = redis::Client::open(format!("redis://127.0.0.1:{far_master}/"))
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            redis::cmd("LLEN").arg(&key).query_async::<u64>(&mut c).await.unwrap()
        }
    };
    assert_eq!(outbox(f1).await, 1, "the step's end waits on its queue's outbox");
    let replica = cluster.replica_of(masters[0]).unwrap();
    let node = cluster.nodes().iter().find(|n| n.port() == replica).unwrap();
    node.pause();
    for (who, f) in [("the relay that delivers it", f1), ("a second relay", f2)] {
        match f.relay().await {
            Err(Error::NotDurable {
                acked: 0, wanted: 1, ..
            }) => {}
            other => panic!("{who}: expected NotDurable while the home's replica is stopped, got {other:?}"),
        }
        assert_eq!(outbox(f).await, 1, "{who} took the end off its outbox");
    }
    node.resume();
    assert_eq!(f2.relay().await.unwrap(), 1);
    assert_eq!(outbox(f2).await, 0);
    let st = flow.status().await.unwrap();
    assert_eq!(st.count(StepState::Completed), 1, "{st:?}");
}
