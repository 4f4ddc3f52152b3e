//! The consumer: retries, panics, waking on enqueue, graceful shutdown,
//! and surviving the death of its own settler.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use echomq::{Backoff, Consumer, Error, Job, JobState, QueueOptions, Reaper};

use super::common::{eventually, raw, setup, setup_with};
use super::{Email, email};

// A handler failing twice then succeeding completes with failures == 2; one always failing ends failed.
#[tokio::test]
async fn consumer_retries_then_completes_or_fails() {
    let opts = QueueOptions::new()
        .backoff(Backoff::Fixed(Duration::from_millis(10)))
        .max_attempts(3);
    let (_s, q) = setup_with("retry", opts).await;
    let flaky = q.enqueue(&email(1)).await.unwrap();
    let doomed = q.enqueue(&email(2)).await.unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let c2 = calls.clone();
    let handle = Consumer::new(q.clone(), move |job: Job<Email>| {
        let calls = c2.clone();
        async move {
            if job.payload().n == 2 {
                return Err(format!("always fails (attempt {})", job.attempt()).into());
            }
            if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                Err("not yet".into())
            } else {
                Ok(())
            }
        }
    })
    .spawn()
    .unwrap();
    let done = eventually(Duration::from_secs(10), || async {
        let c = q.counts().await.unwrap();
        c.completed == 1 && c.failed == 1
    })
    .await;
    handle.shutdown().await.unwrap();
    assert!(done, "jobs did not settle: {:?}", q.counts().await.unwrap());
    let f = q.job(&flaky).await.unwrap();
    assert_eq!((f.state, f.failures, f.attempts), (JobState::Completed, 2, 3));
    let d = q.job(&doomed).await.unwrap();
    assert_eq!((d.state, d.failures), (JobState::Failed, 3));
    assert_eq!(d.last_error.as_deref(), Some("always fails (attempt 3)"));
}

// A panicking handler costs the job an attempt ("panicked"), not the consumer its life.
#[tokio::test]
async fn panic_is_a_failed_attempt() {
    let opts = QueueOptions::new()
        .backoff(Backoff::Fixed(Duration::ZERO))
        .max_attempts(2);
    let (_s, q) = setup_with("panic", opts).await;
    let bad = q.enqueue(&email(1)).await.unwrap();
    let handle = Consumer::new(q.clone(), |job: Job<Email>| async move {
        if job.payload().n == 1 {
            panic!("handler bug");
        }
        Ok(())
    })
    .spawn()
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.counts().await.unwrap().failed == 1
        })
        .await
    );
    // The consumer still works.
    let good = q.enqueue(&email(2)).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.job(&good).await.unwrap().state == JobState::Completed
        })
        .await
    );
    handle.shutdown().await.unwrap();
    let info = q.job(&bad).await.unwrap();
    assert_eq!((info.failures, info.last_error.as_deref()), (2, Some("panicked")));
}

// An idle consumer is woken by enqueue (not a sleep loop): the job starts long before the poll interval.
#[tokio::test]
async fn idle_consumer_wakes_on_enqueue() {
    let (s, q) = setup("wake").await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let handle = Consumer::new(q.clone(), move |job: Job<Email>| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(job.payload().n);
            Ok(())
        }
    })
    .poll_interval(Duration::from_secs(30))
    .spawn()
    .unwrap();
    // Wait until it is idle, blocked in BLPOP.
    let c = raw(&s).await;
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut c = c.clone();
            async move {
                let info: String = redis::cmd("INFO").arg("clients").query_async(&mut c).await.unwrap();
                info.lines()
                    .any(|l| l.starts_with("blocked_clients:") && l != "blocked_clients:0")
            }
        })
        .await
    );
    for n in 0..5 {
        q.enqueue(&email(n)).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert_eq!(got.unwrap(), Some(n), "not woken within 5 s (poll interval is 30 s)");
    }
    handle.shutdown().await.unwrap();
}

// Graceful shutdown lets running handlers finish, and releases those past
// the grace period (several, so that some handlers see their cancellation
// and return before the consumer notices the grace period is over).
#[tokio::test]
async fn shutdown_finishes_or_releases() {
    let (_s, q) = setup("shutdown").await;
    let quick = q.enqueue(&email(1)).await.unwrap();
    let mut slow = Vec::new();
    for _ in 0..8 {
        slow.push(q.enqueue(&email(2)).await.unwrap());
    }
    let started = Arc::new(AtomicU32::new(0));
    let st = started.clone();
    let handle = Consumer::new(q.clone(), move |job: Job<Email>| {
        let st = st.clone();
        async move {
            st.fetch_add(1, Ordering::SeqCst);
            let wait = if job.payload().n == 1 { 200 } else { 60_000 };
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(wait)) => Ok(()),
                _ = job.cancellation().cancelled() => Err("cancelled".into()),
            }
        }
    })
    .shutdown_timeout(Duration::from_millis(600))
    .spawn()
    .unwrap();
    assert!(eventually(Duration::from_secs(5), || async { started.load(Ordering::SeqCst) == 9 }).await);
    handle.shutdown().await.unwrap();
    assert_eq!(q.job(&quick).await.unwrap().state, JobState::Completed);
    for id in &slow {
        let s = q.job(id).await.unwrap();
        assert_eq!((s.state, s.failures, s.stalls), (JobState::Pending, 0, 0), "job {id}");
    }
}

// If one of a consumer's own tasks dies (the settler, made to panic in the
// fault suite's build with ECHOMQ_FAULT=settler-panic), the consumer stops
// claiming, its job tasks settle their jobs directly, the jobs the dead
// settler held come back by the reaper, and shutdown reports
// Error::Internal. In a normal build the same run simply completes.
#[tokio::test]
async fn a_dead_settler_stops_the_consumer_and_reports() {
    let dying = std::env::var("ECHOMQ_FAULT").is_ok_and(|f| f.contains("settler-panic"));
    let opts = QueueOptions::new().max_stalls(10);
    let (_s, q) = setup_with("dead-settler", opts).await;
    q.enqueue_bulk(&(0..10).map(email).collect::<Vec<_>>()).await.unwrap();
    let handle = Consumer::new(q.clone(), |_job: Job<Email>| async { Ok(()) })
        .concurrency(2)
        .prefetch(0)
        .lease(Duration::from_millis(300))
        .reap_interval(Duration::from_millis(20))
        .spawn()
        .unwrap();
    if !dying {
        assert!(
            eventually(Duration::from_secs(10), || async {
                q.counts().await.unwrap().completed == 10
            })
            .await
        );
        handle.shutdown().await.unwrap();
        return;
    }
    // The settler dies on its first batch; the consumer stops by itself.
    assert!(
        eventually(Duration::from_secs(10), || async { handle.is_finished() }).await,
        "the consumer kept running"
    );
    let e = handle.shutdown().await.unwrap_err();
    assert!(matches!(e, Error::Internal { task: "settler", .. }), "{e:?}");
    // Nothing stays leased: what the dead settler held is reaped, the rest
    // was settled directly or never claimed.
    let reaper = Reaper::new(q.clone());
    assert!(
        eventually(Duration::from_secs(10), || async {
            reaper.run_once().await.unwrap();
            q.counts().await.unwrap().active == 0
        })
        .await
    );
    let c = q.counts().await.unwrap();
    assert_eq!(c.pending + c.completed, 10, "{c:?}");
}
