//! Sequences against a real server: the jobs of one key run strictly one
//! after another in enqueue order, also while one waits for a retry; a
//! job ending any way (completed, failed, cancelled, expired, removed)
//! lets the next run; other keys and plain jobs run beside them; a queue
//! without sequences writes nothing for them.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{complete_as_old_process, past, raw, setup};
use echomq::admin::Moved;
use echomq::flow::{FlowSpec, Step};
use echomq::{Consumer, EnqueueOptions, Error, HandlerError, Job, JobState, Lease, Queue};

const LEASE: Duration = Duration::from_secs(30);

async fn claim(q: &Queue) -> Vec<Lease> {
    let mut l = q.claim(20, LEASE).await.unwrap();
    l.sort_by(|a, b| a.id().cmp(b.id()));
    l
}

fn ids(l: &[Lease]) -> Vec<&str> {
    l.iter().map(Lease::id).collect()
}

async fn add(q: &Queue, id: &str, key: &str) {
    q.enqueue_with(&id, &EnqueueOptions::new().id(id).sequence(key))
        .await
        .unwrap();
}

// One key's jobs run one at a time in enqueue order, the next held back
// while the one before waits for its retry; another key and a plain job
// run beside them.
#[tokio::test]
async fn a_key_runs_in_order_across_retries() {
    let (_s, q) = setup("seq-order").await;
    for id in ["a1", "a2", "a3"] {
        add(&q, id, "A").await;
    }
    add(&q, "b1", "B").await;
    q.enqueue_with(&"p", &EnqueueOptions::new().id("plain")).await.unwrap();
    assert_eq!(
        q.job("a2").await.unwrap().state,
        JobState::Delayed,
        "waiting for its turn"
    );

    let first = claim(&q).await;
    assert_eq!(ids(&first), ["a1", "b1", "plain"]);
    // a1 fails an attempt and waits 200 ms for its retry: a2 does not start
    q.retry(&first[0], Some(Duration::from_millis(200)), "flaky")
        .await
        .unwrap();
    q.complete(&first[1]).await.unwrap();
    assert!(claim(&q).await.is_empty(), "a2 waits while a1 waits for its retry");
    let due = q.job("a1").await.unwrap();
    assert_eq!(due.state, JobState::Delayed);
    past(&q, q.server_time_ms().await.unwrap() + 200).await;
    q.promote_all().await.unwrap();
    let again = claim(&q).await;
    assert_eq!(ids(&again), ["a1"], "the retry runs before a2");
    assert_eq!(again[0].attempt(), 2);
    q.complete(&again[0]).await.unwrap();
    let next = claim(&q).await;
    assert_eq!(ids(&next), ["a2"]);
    // failing for good lets the next one run too
    q.fail(&next[0], "broken").await.unwrap();
    assert_eq!(ids(&claim(&q).await), ["a3"]);
}

// A job that ends while it waits (cancelled, removed, expired) leaves the
// line; the head's cancel or removal lets the next run; a waiting job is
// not promoted by hand; a failed job retried by hand joins the back.
#[tokio::test]
async fn every_end_moves_the_line_on() {
    let (_s, q) = setup("seq-ends").await;
    for id in ["k1", "k2", "k3", "k4"] {
        add(&q, id, "K").await;
    }
    q.enqueue_with(
        &"k5",
        &EnqueueOptions::new()
            .id("k5")
            .sequence("K")
            .discard_after(Duration::from_millis(100)),
    )
    .await
    .unwrap();
    add(&q, "k6", "K").await;
    let promoted = q.promote(&["k3"]).await.unwrap();
    assert!(matches!(promoted[0].1, Moved::WrongState), "{:?}", promoted[0].1);
    q.cancel("k2").await.unwrap();
    q.remove(&["k3"]).await.unwrap();
    let expiry = q.job("k5").await.unwrap().expires_at_ms.unwrap();
    past(&q, expiry).await;
    q.reap(10).await.unwrap();
    assert_eq!(q.job("k5").await.unwrap().state, JobState::Expired);
    let head = claim(&q).await;
    assert_eq!(ids(&head), ["k1"], "k4 and k6 still wait behind k1");
    q.fail(&head[0], "no").await.unwrap();
    let next = claim(&q).await;
    assert_eq!(ids(&next), ["k4"], "k2, k3 and k5 left the line");
    // k1 retried by hand joins the back, behind k6
    q.retry_failed(&["k1"]).await.unwrap();
    assert_eq!(q.job("k1").await.unwrap().state, JobState::Delayed);
    q.complete(&next[0]).await.unwrap();
    // k6 is the head now, pending: cancelling it lets k1 run
    assert_eq!(q.job("k6").await.unwrap().state, JobState::Pending);
    q.cancel("k6").await.unwrap();
    let last = q.claim(20, LEASE).await.unwrap();
    assert_eq!(ids(&last), ["k1"]);
    q.complete(&last[0]).await.unwrap();
    assert!(claim(&q).await.is_empty());
}

// Bad input is refused before anything is written.
#[tokio::test]
async fn bad_sequences_are_refused() {
    let (_s, q) = setup("seq-bad").await;
    for opts in [
        EnqueueOptions::new().sequence("s").delay(Duration::from_secs(1)),
        EnqueueOptions::new()
            .sequence("s")
            .run_at(std::time::SystemTime::now() + Duration::from_secs(5)),
    ] {
        assert!(matches!(
            q.enqueue_with(&1, &opts).await,
            Err(Error::InvalidOption { name: "sequence", .. })
        ));
    }
    for key in ["", "a\nb"] {
        assert!(matches!(
            q.enqueue_with(&1, &EnqueueOptions::new().sequence(key)).await,
            Err(Error::InvalidId {
                what: "sequence key",
                ..
            })
        ));
    }
    let step = Step::new("a", &1).unwrap().options(EnqueueOptions::new().sequence("s"));
    assert!(matches!(
        q.add_flow(&FlowSpec::new().step(step)).await,
        Err(Error::InvalidFlow(m)) if m.contains("sequence")
    ));
    assert_eq!(q.counts().await.unwrap().pending, 0);
}

// A queue that never had a sequence writes no field, flag or key for them.
#[tokio::test]
async fn a_queue_without_sequences_writes_nothing_for_them() {
    let (s, q) = setup("seq-none").await;
    let id = q.enqueue(&1).await.unwrap();
    let l = claim(&q).await;
    q.complete(&l[0]).await.unwrap();
    let mut c = raw(&s).await;
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(format!("emq:{{{}}}:job:{id}", q.name()))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(!fields.iter().any(|f| f == "sq"), "{fields:?}");
    let sq: Option<String> = redis::cmd("HGET")
        .arg(format!("emq:{{{}}}:meta", q.name()))
        .arg("sq")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(sq, None);
}

// A Consumer at concurrency 8 over four keys whose jobs fail their first
// attempt now and then: each key's jobs start in enqueue order, each only
// after the one before it ended, and every job completes.
#[tokio::test]
async fn a_consumer_keeps_each_key_in_order() {
    let (_s, q) = setup("seq-consumer").await;
    let log: Arc<Mutex<Vec<(String, &'static str)>>> = Arc::default();
    let l = log.clone();
    let worker = Consumer::new(q.clone(), move |job: Job<String>| {
        let l = l.clone();
        async move {
            l.lock().unwrap().push((job.id().to_owned(), "start"));
            tokio::time::sleep(Duration::from_millis(2)).await;
            let n: u64 = job.id().rsplit('-').next().unwrap().parse().unwrap();
            if n.is_multiple_of(3) && job.attempt() == 1 {
                l.lock().unwrap().push((job.id().to_owned(), "retry"));
                return Err(HandlerError::from("first attempt fails"));
            }
            l.lock().unwrap().push((job.id().to_owned(), "end"));
            Ok(())
        }
    })
    .concurrency(8)
    .backoff(echomq::Backoff::Fixed(Duration::from_millis(5)))
    .spawn()
    .unwrap();
    for n in 0..20 {
        for key in ["w", "x", "y", "z"] {
            add(&q, &format!("{key}-{n}"), key).await;
        }
    }
    let done = common::eventually(Duration::from_secs(20), || async {
        q.counts().await.unwrap().completed == 80
    })
    .await;
    worker.shutdown().await.unwrap();
    assert!(done, "every job completed");
    let log = log.lock().unwrap();
    for key in ["w", "x", "y", "z"] {
        // the key's events, in the order they happened
        let mine: Vec<&(String, &str)> = log
            .iter()
            .filter(|(id, _)| id.starts_with(&format!("{key}-")))
            .collect();
        let mut expect_next = 0u64;
        let mut running: Option<&str> = None;
        for (id, what) in mine {
            let n: u64 = id.rsplit('-').next().unwrap().parse().unwrap();
            match *what {
                "start" => {
                    assert!(running.is_none(), "{id} started while {running:?} ran");
                    assert_eq!(n, expect_next, "{key}: {id} started out of order");
                    running = Some(id);
                }
                "retry" => running = None,
                _ => {
                    running = None;
                    expect_next += 1;
                }
            }
        }
        assert_eq!(expect_next, 20, "{key}");
    }
}

// A debounce into a job that waits for its turn replaces its payload and
// leaves it waiting: it still runs after the job before it.
#[tokio::test]
async fn a_debounce_keeps_a_waiting_job_in_line() {
    let (_s, q) = setup("seq-debounce").await;
    add(&q, "d1", "D").await;
    q.enqueue_with(&"old", &EnqueueOptions::new().id("d2").sequence("D").dedup("dd"))
        .await
        .unwrap();
    let r = q
        .enqueue_with(&"new", &EnqueueOptions::new().dedup("dd").replace_waiting(true))
        .await
        .unwrap();
    assert_eq!((r.id.as_str(), r.status), ("d2", echomq::EnqueueStatus::Replaced));
    assert_eq!(q.job("d2").await.unwrap().state, JobState::Delayed);
    let head = claim(&q).await;
    assert_eq!(ids(&head), ["d1"]);
    q.complete(&head[0]).await.unwrap();
    let next = claim(&q).await;
    assert_eq!(ids(&next), ["d2"]);
    assert_eq!(next[0].decode::<String>().unwrap(), "new");
}

// The sweep moves a line on whose head ended without moving it (as a
// process without sequences would settle it), and makes pending a head
// left waiting (a torn release); one walk of every queue does the same.
#[tokio::test]
async fn the_sweep_moves_a_stuck_line_on() {
    let (s, q) = setup("seq-sweep").await;
    for id in ["s1", "s2", "s3"] {
        add(&q, id, "S").await;
    }
    let mut c = raw(&s).await;
    let base = format!("emq:{{{}}}:", q.name());
    // s1 completed by an old process: its record and sets moved, the line not
    complete_as_old_process(&s, &q, "s1", None).await;
    assert!(claim(&q).await.is_empty(), "s2 is stuck behind the ended s1");
    let report = q.sweep(100).await.unwrap();
    assert!(report.repaired >= 1, "{report:?}");
    let l = claim(&q).await;
    assert_eq!(ids(&l), ["s2"]);
    // a torn release: s2 ended and left the line, but s3 was not made pending
    q.complete(&l[0]).await.unwrap();
    let s3 = claim(&q).await;
    assert_eq!(ids(&s3), ["s3"]);
    q.release(&s3[0]).await.unwrap();
    let _: () = redis::cmd("ZREM")
        .arg(format!("{base}pending"))
        .arg("s3")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(format!("{base}delayed"))
        .arg(9_007_199_254_740_991u64)
        .arg("s3")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(format!("{base}job:s3"))
        .arg("st")
        .arg("delayed")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(claim(&q).await.is_empty());
    echomq::maintenance::sweep_queues(std::slice::from_ref(&q), 100)
        .await
        .unwrap();
    assert_eq!(ids(&claim(&q).await), ["s3"]);
}
