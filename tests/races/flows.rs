//! Flows and batches under crashes: workers whose runtimes are dropped
//! mid-job (their leases lapse and the reaper takes the jobs back),
//! handlers that fail attempts, and a server SIGKILLed and restarted from
//! its append-only file, while flows and batches run. Afterwards: every
//! step of every flow completed, no parent was created or started before
//! every child it waits on had finished, each parent and each batch
//! callback was enqueued exactly once (the event stream), after every
//! member had ended. Half the flows have two steps, and half the batches
//! half their members, on a second queue, so those are made and their
//! ends come back by relayed messages, which crashes deliver twice (a
//! relay dropped between applying and taking off) and the restart must
//! not lose.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use echomq::batch::{BatchOptions, Callback};
use echomq::flow::{FlowSpec, Step, StepState};
use echomq::server::LocalServer;
use echomq::{
    Backoff, ClientOptions, Consumer, EventCursor, EventKind, EventSettings, HandlerError, Job, JobInfo, JobState,
    Queue, QueueOptions, Retention,
};
use serde_json::{Value, json};

const FLOWS: usize = 40;
const BATCHES: usize = 10;
const MEMBERS: usize = 8;

fn options() -> QueueOptions {
    QueueOptions::new()
        .keep_completed(Retention::All)
        .keep_failed(Retention::All)
        .max_attempts(1000)
        .max_stalls(1000)
        .backoff(Backoff::Fixed(Duration::from_millis(20)))
}

/// Members an odd batch puts on the second queue.
const ELSEWHERE_MEMBERS: usize = 4;

/// Steps an odd flow puts on the second queue (a leaf and a parent).
const ELSEWHERE: [&str; 2] = ["b", "mid"];

/// A flow of six steps: two leaves, a step after both, one with two
/// parents, and a top after both of those; an odd one has the steps of
/// [`ELSEWHERE`] on `other`.
fn flow(i: usize, other: &Queue) -> FlowSpec {
    let step = |name: &str| {
        let s = Step::new(name, &i).unwrap();
        if i % 2 == 1 && ELSEWHERE.contains(&name) {
            s.on(other)
        } else {
            s
        }
    };
    FlowSpec::new()
        .id(format!("f{i}"))
        .step(step("a"))
        .step(step("b"))
        .step(step("ab").after("a").after("b"))
        .step(step("c"))
        .step(step("mid").after("ab").after("c"))
        .step(step("top").after("mid").after("c"))
}

/// A job's fate on an attempt, fixed by its id and attempt (FNV-1a, then
/// the high bits): 0 fails the attempt, 1 takes 300 ms, the rest are quick.
fn fate(id: &str, attempt: u64) -> u64 {
    let h = id
        .bytes()
        .chain(attempt.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    (h >> 61) & 7
}

/// A worker on a runtime of its own: dropping the runtime is a crash
/// (no settlement, no release: its leases lapse).
fn worker(url: &str, name: &str) -> tokio::runtime::Runtime {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (url, name) = (url.to_owned(), name.to_owned());
    rt.spawn(async move {
        let opts = ClientOptions::new().response_timeout(Duration::from_millis(500));
        let Ok(client) = echomq::Client::connect_with(&url, opts).await else {
            return;
        };
        let Ok(q) = client.queue_with(&name, options()).await else {
            return;
        };
        let handler = |job: Job<Value>| async move {
            match fate(job.id(), job.attempt()) {
                0 => Err(HandlerError::from("a failed attempt")),
                1 => {
                    // long enough that a crash often lands in it
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Ok(json!(job.id()))
                }
                _ => Ok(json!(job.id())),
            }
        };
        let _ = Consumer::new(q, handler)
            .concurrency(4)
            .lease(Duration::from_millis(400))
            .reap_interval(Duration::from_millis(100))
            .poll_interval(Duration::from_millis(100))
            .run(std::future::pending::<()>())
            .await;
    });
    rt
}

#[test]
fn flows_and_batches_survive_crashes_and_a_restart() {
    let mut server = LocalServer::builder().aof(true).appendfsync("always").start().unwrap();
    let url = server.url();
    let name = super::common::unique("flow-crash");
    let name2 = super::common::unique("flow-crash-other");
    let main = tokio::runtime::Runtime::new().unwrap();
    let (q, q2): (Queue, Queue) = main.block_on(async {
        let opts = ClientOptions::new().response_timeout(Duration::from_millis(500));
        let client = echomq::Client::connect_with(&url, opts).await.unwrap();
        let q = client.queue_with(&name, options()).await.unwrap();
        let q2 = client.queue_with(&name2, options()).await.unwrap();
        // room for every event of the run: the check reads them all
        for q in [&q, &q2] {
            q.set_events(&EventSettings::default().max_len(1_000_000))
                .await
                .unwrap();
        }
        (q, q2)
    });
    // workers of the two queues, in turn
    let names = [name.clone(), name2.clone()];
    let mut started = 0;
    let mut next_worker = || {
        started += 1;
        worker(&url, &names[started % 2])
    };
    let mut workers: Vec<tokio::runtime::Runtime> = (0..4).map(|_| next_worker()).collect();
    // Flows and batches added while workers crash; the ids of the odd
    // batches' members on the second queue.
    let elsewhere: Vec<Vec<String>> = main.block_on(async {
        for i in 0..FLOWS {
            q.add_flow(&flow(i, &q2)).await.unwrap();
        }
        let mut elsewhere = Vec::new();
        for i in 0..BATCHES {
            let b = q
                .open_batch(
                    &BatchOptions::new()
                        .id(format!("b{i}"))
                        .on_success(Callback::new(&json!("success")).unwrap())
                        .on_complete(Callback::new(&json!("complete")).unwrap()),
                )
                .await
                .unwrap();
            let members: Vec<usize> = (0..MEMBERS).collect();
            if i % 2 == 1 {
                // half its members on the second queue, by message
                let ids = b.on(&q2).unwrap().add(&members[..ELSEWHERE_MEMBERS]).await.unwrap();
                elsewhere.push(ids);
                b.add(&members[ELSEWHERE_MEMBERS..]).await.unwrap();
            } else {
                b.add(&members).await.unwrap();
            }
            b.close().await.unwrap();
        }
        elsewhere
    });
    let until = Instant::now() + Duration::from_secs(90);
    let (mut crashes, mut restarted) = (0, false);
    let ended = loop {
        std::thread::sleep(Duration::from_millis(250));
        // a crash: the oldest worker's runtime dropped mid-work, a new one started
        workers.remove(0).shutdown_background();
        workers.push(next_worker());
        crashes += 1;
        if crashes == 3 && !restarted {
            server.restart().unwrap();
            restarted = true;
        }
        let done = main.block_on(async {
            for i in 0..FLOWS {
                match q.flow(&format!("f{i}")).unwrap().status().await {
                    Ok(st) if st.is_ended() => {}
                    _ => return false,
                }
            }
            for i in 0..BATCHES {
                match q.batch(&format!("b{i}")).unwrap().status().await {
                    Ok(st) if st.complete_at.is_some() => {}
                    _ => return false,
                }
            }
            for q in [&q, &q2] {
                if !q.counts().await.is_ok_and(|c| c.pending + c.active + c.delayed == 0) {
                    return false;
                }
            }
            true
        });
        if done || Instant::now() > until {
            break done;
        }
    };
    for w in workers {
        w.shutdown_background();
    }
    assert!(restarted && crashes >= 3);
    assert!(ended, "every flow and batch ended within 90 s ({crashes} crashes)");

    main.block_on(async {
        // every enqueue on both queues' streams, by job id
        let mut enqueued: HashMap<String, usize> = HashMap::new();
        for q in [&q, &q2] {
            let mut reader = q.events(EventCursor::Start).await.unwrap();
            while let Some(ev) = reader.next_within(Duration::from_millis(200)).await.unwrap() {
                if ev.kind == EventKind::Enqueued {
                    *enqueued.entry(ev.job_id.unwrap()).or_default() += 1;
                }
            }
        }
        let job_of = |id: String, elsewhere: bool| {
            let q = if elsewhere { q2.clone() } else { q.clone() };
            async move { q.job(&id).await.unwrap() }
        };
        let info = |id: String| job_of(id, false);
        let mut stalls = 0;
        for i in 0..FLOWS {
            let f = q.flow(&format!("f{i}")).unwrap();
            let st = f.status().await.unwrap();
            assert_eq!(st.count(StepState::Completed), 6, "{st:?}");
            let mut jobs: HashMap<&str, JobInfo> = HashMap::new();
            for step in ["a", "b", "ab", "c", "mid", "top"] {
                let j = job_of(f.job_id(step), i % 2 == 1 && ELSEWHERE.contains(&step)).await;
                assert_eq!(j.state, JobState::Completed);
                stalls += j.stalls;
                assert_eq!(enqueued.get(&j.id), Some(&1), "{} enqueued once", j.id);
                jobs.insert(step, j);
            }
            for (parent, children) in [("ab", &["a", "b"][..]), ("mid", &["ab", "c"]), ("top", &["mid", "c"])] {
                let p = &jobs[parent];
                for c in children {
                    let done = jobs[c].finished_ms.unwrap();
                    assert!(p.created_ms >= done, "f{i}: {parent} created before {c} finished");
                    assert!(
                        p.first_started_ms.unwrap() >= done,
                        "f{i}: {parent} started before {c} finished"
                    );
                }
                let kids = f.child_results::<String>(parent).await.unwrap();
                assert_eq!(kids.len(), children.len());
            }
        }
        for i in 0..BATCHES {
            let b = q.batch(&format!("b{i}")).unwrap().status().await.unwrap();
            assert_eq!((b.total, b.completed), (MEMBERS as u64, MEMBERS as u64));
            if i % 2 == 1 {
                for id in &elsewhere[i / 2] {
                    let m = job_of(id.clone(), true).await;
                    assert_eq!(m.state, JobState::Completed);
                    assert_eq!(enqueued.get(&m.id), Some(&1), "{} enqueued once", m.id);
                    assert!(m.finished_ms.unwrap() <= b.ended_at.unwrap());
                }
            }
            for which in ["success", "complete"] {
                let id = format!("b{i}:{which}");
                assert_eq!(enqueued.get(&id), Some(&1), "{id} enqueued once");
                let cb = info(id).await;
                assert_eq!(cb.state, JobState::Completed);
                assert!(cb.created_ms >= b.ended_at.unwrap());
            }
        }
        // a relay dropped between applying a message and taking it off
        // leaves it there, to be delivered again (a no-op) by the next one
        for q in [&q, &q2] {
            q.relay().await.unwrap();
        }
        let receipts = check_records(&url, &name, &name2).await;
        println!(
            "flows under crashes: {crashes} crashes, one restart, {stalls} stalls among flow steps, \
             {receipts} steps and members made on the second queue by message"
        );
    });
}

/// The server's final state, as a checker reads it: every flow record of
/// `home` is whole (every edge between two of its steps, every step ended
/// once, no step still waiting or holding its spec, no steps left to
/// count, its keep time running), no batch has a member of the second
/// queue left to count, no outbox holds a message, and the
/// second queue holds one receipt per step or member it was sent (each step's job
/// enqueued once is the event stream's check). Answers the receipts.
async fn check_records(url: &str, home: &str, other: &str) -> usize {
    let mut c = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for i in 0..FLOWS {
        let fk = format!("emq:{{{home}}}:flow:f{i}");
        let h: HashMap<String, String> = redis::cmd("HGETALL").arg(&fk).query_async(&mut c).await.unwrap();
        let nodes: Vec<&str> = h["nodes"].split('\x1f').collect();
        assert_eq!(h["left"], "0", "f{i}: steps left to count");
        for name in &nodes {
            assert!(
                h[&format!("r:{name}")].starts_with('c'),
                "f{i}: {name} ended once, completed"
            );
            for gone in ["w:", "sp:", "so:"] {
                assert!(
                    !h.contains_key(&format!("{gone}{name}")),
                    "f{i}: {gone}{name} left over"
                );
            }
            if let Some(kids) = h.get(&format!("k:{name}")) {
                for edge in kids.split('\x1e') {
                    let kid = edge.split('\x1f').next().unwrap();
                    assert!(nodes.contains(&kid), "f{i}: dangling edge {name} -> {kid}");
                }
            }
        }
        let ttl: i64 = redis::cmd("PTTL").arg(&fk).query_async(&mut c).await.unwrap();
        assert!(ttl > 0, "f{i}: its record's keep time runs");
    }
    for i in 0..BATCHES {
        let h: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(format!("emq:{{{home}}}:batch:b{i}"))
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(!h.keys().any(|f| f.starts_with("m:")), "b{i}: a member left to count");
    }
    for q in [home, other] {
        let n: usize = redis::cmd("LLEN")
            .arg(format!("emq:{{{q}}}:outbox"))
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(n, 0, "{q}: messages left on the outbox");
    }
    let receipts: usize = redis::cmd("ZCARD")
        .arg(format!("emq:{{{other}}}:inbox"))
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        receipts,
        FLOWS / 2 * ELSEWHERE.len() + BATCHES / 2 * ELSEWHERE_MEMBERS,
        "one message applied per step or member made on the second queue"
    );
    receipts
}
