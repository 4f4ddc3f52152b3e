//! Failed jobs retried by hand, alone and while reapers run.

use std::time::Duration;

use echomq::admin::Moved;

use super::common;

// Failed jobs go back to pending by id or all at once, with their failures
// and stalls reset (attempts kept), and run again; a job not failed is left.
#[tokio::test]
async fn failed_jobs_are_retried_by_hand() {
    let (_s, q) = common::setup_with("retry-failed", echomq::QueueOptions::new().max_attempts(1)).await;
    let ids = q.enqueue_bulk(&(0..5u32).collect::<Vec<_>>()).await.unwrap();
    for l in q.claim(5, Duration::from_secs(30)).await.unwrap() {
        q.retry(&l, None, "boom").await.unwrap();
    }
    assert_eq!(q.counts().await.unwrap().failed, 5);
    let pending = q.enqueue(&9u32).await.unwrap();
    let r = q.retry_failed(&[&ids[0], &pending, "nope"]).await.unwrap();
    assert_eq!(
        r,
        vec![
            (ids[0].clone(), Moved::Done),
            (pending.clone(), Moved::WrongState),
            ("nope".to_owned(), Moved::NotFound),
        ]
    );
    let info = q.job(&ids[0]).await.unwrap();
    assert_eq!(
        (
            info.state,
            info.failures,
            info.stalls,
            info.attempts,
            info.last_error.as_deref()
        ),
        (echomq::JobState::Pending, 0, 0, 1, Some("boom"))
    );
    assert_eq!(q.retry_all_failed().await.unwrap(), 4);
    let c = q.counts().await.unwrap();
    assert_eq!((c.failed, c.pending), (0, 6));
    // They run again, with their full max_attempts.
    assert!(common::complete_with_noop::<u32>(&q, 6).await);
}

// Failed jobs retried by hand while reapers run: every job ends in exactly
// one state, agreeing with its set, and the retried ones run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_jobs_retried_while_reapers_run() {
    let opts = echomq::QueueOptions::new().max_attempts(1).max_stalls(100);
    let (_s, q) = common::setup_with("retry-race", opts).await;
    q.enqueue_bulk(&(0..1000u32).collect::<Vec<_>>()).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let reapers: Vec<_> = (0..3)
        .map(|_| {
            let (q, stop) = (q.clone(), stop.clone());
            tokio::spawn(async move {
                let r = echomq::Reaper::new(q);
                while !stop.is_cancelled() {
                    r.run_once().await.unwrap();
                }
            })
        })
        .collect();
    // Half fail at once, half are leased briefly and left to stall.
    for l in q.claim(500, Duration::from_secs(60)).await.unwrap() {
        q.fail(&l, "no").await.unwrap();
    }
    assert_eq!(q.claim(500, Duration::from_millis(30)).await.unwrap().len(), 500);
    let mut moved = 0;
    while moved < 500 {
        moved += q.retry_all_failed().await.unwrap();
    }
    stop.cancel();
    for r in reapers {
        r.await.unwrap();
    }
    let c = q.counts().await.unwrap();
    assert_eq!(c.pending + c.active + c.failed + c.delayed + c.completed, 1000, "{c:?}");
    assert_eq!(
        q.sweep(1000).await.unwrap().repaired,
        0,
        "the sets disagree with the records"
    );
    assert!(
        common::complete_with_noop::<u32>(&q, 1000).await,
        "{:?}",
        q.counts().await.unwrap()
    );
}
