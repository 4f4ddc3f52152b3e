//! Checkpoints and iterable jobs against a real server: a value an attempt
//! stores with its job, fenced by its lease, that the next attempt reads
//! after a stall, a retry or a release at shutdown.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{past, setup};
use echomq::queue::MAX_CHECKPOINT_BYTES;
use echomq::{Consumer, Error, HandlerError, Job, JobState};
use serde_json::json;

// The next attempt after a stall reads the checkpoint; the stale attempt's
// later checkpoint is refused and changes nothing; clearing is fenced too.
#[tokio::test]
async fn a_checkpoint_survives_a_stall_and_fences_the_stale_attempt() {
    let (_s, q) = setup("ck-stall").await;
    let id = q.enqueue(&"job").await.unwrap();
    assert_eq!(q.checkpoint_of::<u64>(&id).await.unwrap(), None);
    let first = q.claim(1, Duration::from_millis(200)).await.unwrap().remove(0);
    q.checkpoint(&first, &json!({"next": 3})).await.unwrap();
    past(&q, first.deadline_ms()).await;
    q.reap(10).await.unwrap();
    let second = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    assert_eq!(second.id(), id);
    assert_eq!(q.checkpoint_of(&id).await.unwrap(), Some(json!({"next": 3})));

    let stale = q.checkpoint(&first, &json!({"next": 99})).await;
    assert!(matches!(stale, Err(Error::LeaseLost { .. })), "{stale:?}");
    assert!(matches!(q.clear_checkpoint(&first).await, Err(Error::LeaseLost { .. })));
    assert_eq!(q.checkpoint_of(&id).await.unwrap(), Some(json!({"next": 3})));
    assert_eq!(q.job(&id).await.unwrap().checkpoint, Some(json!({"next": 3})));

    // Too large: a typed error, nothing written.
    let big = "x".repeat(MAX_CHECKPOINT_BYTES);
    assert!(matches!(
        q.checkpoint(&second, &big).await,
        Err(Error::PayloadTooLarge { .. })
    ));
    assert_eq!(q.checkpoint_of(&id).await.unwrap(), Some(json!({"next": 3})));
    // A value of another type is a decode error, not a panic.
    assert!(matches!(q.checkpoint_of::<u64>(&id).await, Err(Error::Decode { .. })));

    q.clear_checkpoint(&second).await.unwrap();
    assert_eq!(q.checkpoint_of::<serde_json::Value>(&id).await.unwrap(), None);
    q.complete(&second).await.unwrap();
    assert!(matches!(q.checkpoint(&second, &1).await, Err(Error::LeaseLost { .. })));
}

// An iterable job resumes after a retry at the step after the last saved
// one: steps 0..10, the first attempt fails at step 4, the second starts
// at 4 and finishes; every step but the failed one ran once.
#[tokio::test]
async fn an_iterable_job_resumes_after_a_retry() {
    let (_s, q) = setup("ck-iterate").await;
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = ran.clone();
    let c = Consumer::new(q.clone(), move |job: Job<u64>| {
        let ran = seen.clone();
        async move {
            let attempt = job.attempt();
            let end = *job.payload();
            job.iterate(0u64, |i| {
                let ran = ran.clone();
                async move {
                    ran.lock().unwrap().push((attempt, i));
                    if attempt == 1 && i == 4 {
                        return Err(HandlerError::retry_after("step 4 failed", Duration::ZERO));
                    }
                    Ok((i + 1 < end).then_some(i + 1))
                }
            })
            .await
        }
    })
    .spawn()
    .unwrap();
    let id = q.enqueue(&10u64).await.unwrap();
    assert!(common::completes(&q, &id).await);
    c.shutdown().await.unwrap();
    let ran = ran.lock().unwrap().clone();
    let want: Vec<(u64, u64)> = (0..5).map(|i| (1, i)).chain((4..10).map(|i| (2, i))).collect();
    assert_eq!(ran, want);
    assert_eq!(q.job(&id).await.unwrap().checkpoint, Some(json!(9)));
}

// At shutdown an iterable job stops between steps and is released; the
// next worker resumes after its last saved step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_iterable_job_stops_at_shutdown_and_resumes() {
    let (_s, q) = setup("ck-shutdown").await;
    let done = Arc::new(AtomicU64::new(0));
    let started = Arc::new(tokio::sync::Notify::new());
    let worker = |q: echomq::Queue, done: Arc<AtomicU64>, started: Arc<tokio::sync::Notify>, slow: bool| {
        Consumer::new(q, move |job: Job<()>| {
            let done = done.clone();
            let started = started.clone();
            async move {
                job.iterate(0u64, |i| {
                    let done = done.clone();
                    let started = started.clone();
                    async move {
                        done.fetch_add(1, Ordering::SeqCst);
                        if i == 2 {
                            started.notify_one();
                        }
                        if slow {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Ok((i < 1_000).then_some(i + 1))
                    }
                })
                .await
            }
        })
        .shutdown_timeout(Duration::ZERO)
        .spawn()
        .unwrap()
    };
    let id = q.enqueue(&()).await.unwrap();
    let first = worker(q.clone(), done.clone(), started.clone(), true);
    started.notified().await;
    first.shutdown().await.unwrap();
    let info = q.job(&id).await.unwrap();
    assert_eq!(info.state, JobState::Pending, "released at shutdown");
    let saved = info.checkpoint.and_then(|v| v.as_u64()).expect("a saved cursor");
    // step 2 had started: the cursor saved after step 1 at least
    assert!((2..1_000).contains(&saved), "{saved}");
    let before = done.load(Ordering::SeqCst);
    let second = worker(q.clone(), done.clone(), Arc::new(tokio::sync::Notify::new()), false);
    assert!(common::completes(&q, &id).await);
    second.shutdown().await.unwrap();
    // the second attempt ran from the saved cursor to the end: 1,001 - saved steps
    assert_eq!(done.load(Ordering::SeqCst) - before, 1_001 - saved);
    assert_eq!(q.job(&id).await.unwrap().attempts, 2);
}
