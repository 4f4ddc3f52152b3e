//! Obliterate under load: refused while consumers work, then every key
//! deleted while they keep running, their stale settlements fenced.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::{Consumer, ConsumerHandle, Error, Job, QueueOptions, Retention, WorkerEvent};

use super::common;
use super::common::{eventually, setup_with};

/// Every key of queue `name` on the server.
async fn keys_of(c: &mut redis::aio::MultiplexedConnection, name: &str) -> BTreeSet<String> {
    redis::cmd("KEYS")
        .arg(format!("emq:{{{name}}}:*"))
        .query_async::<Vec<String>>(c)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

/// What a consumer's settlements answered, per job id.
#[derive(Default)]
struct Settlements {
    claimed: HashSet<String>,
    /// Settled, or its lease lost (the handler's result is then not sent).
    answered: HashSet<String>,
    /// Settlements refused, with the error.
    refused: Vec<(String, String)>,
}

// Obliterate under load: with consumers working through a stream of jobs
// and producers enqueueing, obliterate(false) answers QueueActive and
// deletes nothing (every key there before is there after; the sets agree
// with the records); obliterate(true), still under load, deletes every key
// of the queue while the consumers keep running, and their stale
// settlements are fenced (JobNotFound: the first step deletes the leased
// jobs' records) and write nothing: no key of the queue exists afterwards.
// The queue then works again as new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn obliterate_under_load() {
    // Every record is kept, so the normal flow deletes no key (but the wake
    // list) and the queue has thousands of keys: a forced obliterate takes
    // several steps, with settlements landing between them.
    let (s, q) = setup_with("oblit-load", QueueOptions::new().keep_completed(Retention::All)).await;
    let mut raw = common::raw(&s).await;
    let log: Arc<Mutex<Settlements>> = Arc::default();
    let consumers: Vec<ConsumerHandle> = (0..2)
        .map(|_| {
            let log = log.clone();
            Consumer::new(q.clone(), |_job: Job<u32>| async {
                tokio::time::sleep(Duration::from_millis(2)).await;
                Ok(())
            })
            .concurrency(8)
            .poll_interval(Duration::from_millis(20))
            .observer(move |e| {
                let mut log = log.lock().unwrap();
                match e {
                    WorkerEvent::Claimed { id, .. } => {
                        log.claimed.insert(id.to_string());
                    }
                    WorkerEvent::Settled { id, .. } | WorkerEvent::LeaseLost { id, .. } => {
                        log.answered.insert(id.to_string());
                    }
                    WorkerEvent::SettleFailed { id, error, .. } => {
                        log.answered.insert(id.to_string());
                        log.refused.push((id.to_string(), format!("{error:?}")));
                    }
                    _ => {}
                }
            })
            .spawn()
            .unwrap()
        })
        .collect();
    q.enqueue_bulk(&(0..3000u32).collect::<Vec<_>>()).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let producer = {
        let (q, stop) = (q.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.is_cancelled() {
                q.enqueue_bulk(&[1u32; 20]).await.unwrap();
                n += 20;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            n
        })
    };
    // One lease held by hand, so the queue surely has an active job.
    let held = q.claim(1, Duration::from_secs(120)).await.unwrap().remove(0);
    assert!(
        eventually(Duration::from_secs(20), || async {
            q.counts().await.unwrap().completed >= 500
        })
        .await
    );

    let before = keys_of(&mut raw, q.name()).await;
    let refused = q.obliterate(false).await;
    let after = keys_of(&mut raw, q.name()).await;
    assert!(
        matches!(refused, Err(Error::QueueActive { active, .. }) if active >= 1),
        "{refused:?}"
    );
    let wake = format!("emq:{{{}}}:wake", q.name());
    let gone: Vec<&String> = before.difference(&after).filter(|k| **k != wake).collect();
    assert!(gone.is_empty(), "a refused obliterate deleted {gone:?}");
    assert!(!q.is_paused().await.unwrap(), "a refused obliterate paused the queue");
    assert_eq!(
        q.sweep(1000).await.unwrap().repaired,
        0,
        "the sets disagree with the records"
    );

    // Forced, with the consumers still running (producers stop first, as
    // obliterate asks: a job enqueued while it runs may survive it).
    stop.cancel();
    let produced = producer.await.unwrap();
    let c = q.counts().await.unwrap();
    assert!(c.pending > 0 && c.active > 1, "no load left to race: {c:?}");
    let keys = keys_of(&mut raw, q.name()).await.len();
    let deleted = q.obliterate(true).await.unwrap();
    let left = keys_of(&mut raw, q.name()).await;
    assert!(left.is_empty(), "obliterate(true) left {} keys: {left:?}", left.len());
    // Each lease the consumers held is answered: settled before the
    // fence, or refused after it.
    let in_flight = || {
        let log = log.lock().unwrap();
        log.claimed.difference(&log.answered).count()
    };
    assert!(
        eventually(Duration::from_secs(10), || async { in_flight() == 0 }).await,
        "{} leases never answered",
        in_flight()
    );
    let refusals = log.lock().unwrap().refused.clone();
    assert!(!refusals.is_empty(), "no settlement raced the obliterate");
    for (id, e) in &refusals {
        assert!(e.starts_with("JobNotFound"), "job {id}: {e}");
    }
    let r = q.complete(&held).await;
    assert!(matches!(r, Err(Error::JobNotFound(_))), "{r:?}");
    let left = keys_of(&mut raw, q.name()).await;
    assert!(left.is_empty(), "stale settlements wrote {left:?}");

    // The queue works again, as new: only what a fresh enqueue and its
    // completion make exists.
    let fresh = q.enqueue_bulk(&(0..20u32).collect::<Vec<_>>()).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.counts().await.unwrap().completed == 20
        })
        .await
    );
    let base = format!("emq:{{{}}}:", q.name());
    let mut expected: BTreeSet<String> = ["seq", "token", "completed", "events"]
        .iter()
        .map(|k| format!("{base}{k}"))
        .collect();
    expected.extend(fresh.iter().map(|id| format!("{base}job:{id}")));
    let mut now = keys_of(&mut raw, q.name()).await;
    now.remove(&wake);
    assert_eq!(now, expected);
    assert_eq!(q.sweep(1000).await.unwrap().repaired, 0);
    for h in consumers {
        h.shutdown().await.unwrap();
    }
    println!(
        "obliterate under load: 3,000 jobs and {produced} more from a producer; forced over {keys} keys \
         (deleted {deleted}), {} stale settlements refused",
        refusals.len()
    );
}
