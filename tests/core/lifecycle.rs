//! A job's way through the states: enqueue, claim, complete; delay,
//! priority and release; retention of finished records.

use std::time::Duration;

use echomq::{EnqueueOptions, Error, JobState, Outcome, Queue, QueueOptions, Retention, Settle};

use super::common;
use super::common::{past, setup, setup_with};
use super::{Email, LEASE, email};

// enqueue → claim → complete moves the job through pending, active, completed; counts and job() agree.
#[tokio::test]
async fn full_lifecycle() {
    let (_s, q) = setup("life").await;
    let id = q.enqueue(&email(1)).await.unwrap();
    let info = q.job(&id).await.unwrap();
    assert_eq!(info.state, JobState::Pending);
    assert_eq!(info.decode::<Email>().unwrap(), email(1));
    assert_eq!(q.counts().await.unwrap().pending, 1);

    let leases = q.claim(10, LEASE).await.unwrap();
    assert_eq!(leases.len(), 1);
    let lease = &leases[0];
    assert_eq!((lease.id(), lease.attempt()), (id.as_str(), 1));
    assert_eq!(lease.decode::<Email>().unwrap(), email(1));
    let info = q.job(&id).await.unwrap();
    assert_eq!((info.state, info.attempts), (JobState::Active, 1));
    assert_eq!(info.deadline_ms, Some(lease.deadline_ms()));
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.active), (0, 1));

    let s = q.complete(lease).await.unwrap();
    assert_eq!(s.outcome, Outcome::Completed);
    let info = q.job(&id).await.unwrap();
    assert_eq!(info.state, JobState::Completed);
    assert!(info.finished_ms.unwrap() >= info.created_ms);
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.active, c.completed), (0, 0, 1));
    assert!(q.claim(10, LEASE).await.unwrap().is_empty());
}

// Delayed jobs become claimable only when due; priority orders pending jobs; release returns a job at once.
#[tokio::test]
async fn delay_priority_and_release() {
    let (_s, q) = setup("order").await;
    let low = q
        .enqueue_with(&email(1), &EnqueueOptions::new().priority(-5))
        .await
        .unwrap()
        .id;
    let normal = q.enqueue(&email(2)).await.unwrap();
    let high = q
        .enqueue_with(&email(3), &EnqueueOptions::new().priority(9))
        .await
        .unwrap()
        .id;
    let later = q
        .enqueue_with(&email(4), &EnqueueOptions::new().delay(Duration::from_millis(300)))
        .await
        .unwrap()
        .id;
    let got: Vec<String> = q
        .claim(10, LEASE)
        .await
        .unwrap()
        .iter()
        .map(|l| l.id().to_owned())
        .collect();
    assert_eq!(got, vec![high.clone(), normal, low]);
    assert!(q.claim(10, LEASE).await.unwrap().is_empty(), "delayed job ran early");
    past(&q, q.job(&later).await.unwrap().deadline_ms.unwrap()).await;
    let l = q.claim(10, LEASE).await.unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].id(), later);
    assert_eq!(q.release(&l[0]).await.unwrap().outcome, Outcome::Released);
    let again = q.claim(1, LEASE).await.unwrap().remove(0);
    assert_eq!((again.id(), again.attempt()), (later.as_str(), 2));
    let info = q.job(&later).await.unwrap();
    assert_eq!(
        (info.failures, info.stalls),
        (0, 0),
        "release counted as a failure or stall"
    );
}

// Retention keeps the newest N finished records (trimming once 64 more pile up) and deletes older ones; None deletes at once.
#[tokio::test]
async fn retention_trims_finished_jobs() {
    let (s, q) = setup_with("keep", QueueOptions::new().keep_completed(Retention::Newest(5))).await;
    q.enqueue_bulk(&(0..200).map(email).collect::<Vec<_>>()).await.unwrap();
    let mut most = 0;
    for l in q.claim(200, LEASE).await.unwrap() {
        q.complete(&l).await.unwrap();
        most = most.max(q.counts().await.unwrap().completed);
    }
    assert_eq!(most, 5 + 63, "retention let the records pile up past keep + slack");
    let kept = q.counts().await.unwrap().completed;
    assert!((5..5 + 64).contains(&kept), "{kept}");
    assert!(matches!(q.job("1").await, Err(Error::JobNotFound(_))));
    assert_eq!(q.job("200").await.unwrap().state, JobState::Completed);

    let q2 = Queue::connect_with(
        &s.url(),
        &common::unique("gone"),
        QueueOptions::new().keep_completed(Retention::None),
    )
    .await
    .unwrap();
    let id = q2.enqueue(&email(1)).await.unwrap();
    let l = q2.claim(1, LEASE).await.unwrap().remove(0);
    q2.complete(&l).await.unwrap();
    assert!(matches!(q2.job(&id).await, Err(Error::JobNotFound(_))));
    assert_eq!(q2.counts().await.unwrap(), echomq::Counts::default());
}

// Retention by age deletes the records of jobs finished longer ago than
// the age as later jobs finish (at most a thousand per call), so records
// stay bounded over a long run.
#[tokio::test]
async fn retention_by_age_keeps_records_bounded() {
    let keep = Retention::Within(Duration::from_millis(100));
    let (s, q) = setup_with("keep-age", QueueOptions::new().keep_completed(keep)).await;
    // Completes `n` jobs in batches; returns the server time of the last.
    let complete = |n: u32| {
        let q = q.clone();
        async move {
            q.enqueue_bulk(&(0..n).map(email).collect::<Vec<_>>()).await.unwrap();
            let mut last = 0;
            loop {
                let leases = q.claim(1000, LEASE).await.unwrap();
                if leases.is_empty() {
                    return last;
                }
                let items: Vec<(&echomq::Lease, &Settle)> = leases.iter().map(|l| (l, &Settle::Complete)).collect();
                for r in q.settle_many(&items).await.unwrap() {
                    last = r.unwrap().server_ms;
                }
            }
        }
    };
    let done = complete(2500).await;
    // (Batches that finished more than the age after the first ones have
    // trimmed those already, so fewer than 2,500 may be left.)
    let c1 = q.counts().await.unwrap().completed;
    assert!(c1 > 0 && c1 <= 2500, "{c1}");
    past(&q, done + 100).await;
    // Every record left is now older than the age: one more completion
    // deletes at most a thousand of them, the next ones the rest.
    complete(1).await;
    let c2 = q.counts().await.unwrap().completed;
    assert_eq!(c2, c1 + 1 - c1.min(1000));
    complete(1).await;
    complete(1).await;
    complete(1).await;
    let c3 = q.counts().await.unwrap().completed;
    assert!(c3 <= 4, "{c3} records left, all but the newest expired");
    // Bad settings are refused.
    for bad in [
        Retention::Within(Duration::ZERO),
        Retention::NewestWithin(0, Duration::from_secs(1)),
    ] {
        let e = Queue::connect_with(&s.url(), "x", QueueOptions::new().keep_failed(bad)).await;
        assert!(matches!(e, Err(Error::InvalidOption { .. })), "{bad:?}");
    }
}
