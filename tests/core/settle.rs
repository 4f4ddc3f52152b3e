//! Settling: repeated and batched settlements, each item fenced by its
//! own token, and settle-and-claim in one call.

use std::time::Duration;

use echomq::{Error, Outcome, QueueOptions, Reaper, Retention, Settle};

use super::common::{past, setup, setup_with, snapshot};
use super::{LEASE, email};

// A settle repeated with the same token after success answers AlreadySettled, not a second move.
#[tokio::test]
async fn repeated_settle_is_idempotent() {
    let (s, q) = setup("idem").await;
    q.enqueue(&email(1)).await.unwrap();
    q.enqueue(&email(2)).await.unwrap();
    let leases = q.claim(2, LEASE).await.unwrap();
    assert_eq!(q.complete(&leases[0]).await.unwrap().outcome, Outcome::Completed);
    let before = snapshot(&s, q.name()).await;
    assert_eq!(q.complete(&leases[0]).await.unwrap().outcome, Outcome::AlreadySettled);
    assert_eq!(before, snapshot(&s, q.name()).await);
    // A different settlement with the spent token is refused.
    assert!(matches!(q.fail(&leases[0], "late").await, Err(Error::LeaseLost { .. })));

    let r = q.retry(&leases[1], Some(Duration::ZERO), "boom").await.unwrap();
    assert_eq!(r.outcome, Outcome::Retrying { due_ms: None });
    assert_eq!(
        q.retry(&leases[1], Some(Duration::ZERO), "boom").await.unwrap().outcome,
        Outcome::AlreadySettled
    );
    assert_eq!(q.job(leases[1].id()).await.unwrap().failures, 1);
}

// A batch settle fences each item by its own token and reports each result; a repeat answers AlreadySettled.
#[tokio::test]
async fn settle_many_fences_each_item() {
    let (s, q) = setup("batch").await;
    q.enqueue_bulk(&(0..5).map(email).collect::<Vec<_>>()).await.unwrap();
    let stale = q.claim(1, Duration::from_millis(20)).await.unwrap().remove(0);
    past(&q, stale.deadline_ms()).await;
    Reaper::new(q.clone()).run_once().await.unwrap();
    let l = q.claim(5, LEASE).await.unwrap();
    assert_eq!(l.len(), 5);
    let retry = Settle::Retry {
        delay: Some(Duration::from_secs(60)),
        error: "later".into(),
    };
    let fail = Settle::Fail { reason: "bad".into() };
    let items = [
        (&l[0], &Settle::Complete),
        (&l[1], &retry),
        (&l[2], &fail),
        (&l[3], &Settle::Release),
        (&stale, &Settle::Complete),
    ];
    let r = q.settle_many(&items).await.unwrap();
    assert_eq!(r[0].as_ref().unwrap().outcome, Outcome::Completed);
    assert!(matches!(
        r[1].as_ref().unwrap().outcome,
        Outcome::Retrying { due_ms: Some(_) }
    ));
    assert_eq!(r[2].as_ref().unwrap().outcome, Outcome::Failed);
    assert_eq!(r[3].as_ref().unwrap().outcome, Outcome::Released);
    assert!(matches!(r[4], Err(Error::LeaseLost { token, .. }) if token == stale.token()));
    // The stale item names the job l[0] completed in the same batch: refused, not a second completion.
    assert_eq!(stale.id(), l[0].id());
    assert_eq!(q.job(stale.id()).await.unwrap().attempts, 2);
    let c = q.counts().await.unwrap();
    assert_eq!((c.completed, c.delayed, c.failed, c.pending, c.active), (1, 1, 1, 1, 1));
    let snap = snapshot(&s, q.name()).await;
    let again = q.settle_many(&items[..3]).await.unwrap();
    assert!(
        again
            .iter()
            .all(|r| r.as_ref().unwrap().outcome == Outcome::AlreadySettled)
    );
    assert_eq!(snap, snapshot(&s, q.name()).await);
}

// settle_and_claim settles and leases the next ready jobs in one call, and leases nothing when told to claim 0.
#[tokio::test]
async fn settle_and_claim_refills_in_one_call() {
    let (_s, q) = setup("fused").await;
    q.enqueue_bulk(&(0..3).map(email).collect::<Vec<_>>()).await.unwrap();
    let first = q.claim(1, LEASE).await.unwrap().remove(0);
    let (r, next) = q
        .settle_and_claim(&[(&first, &Settle::Complete)], 5, LEASE)
        .await
        .unwrap();
    assert_eq!(r[0].as_ref().unwrap().outcome, Outcome::Completed);
    assert_eq!(next.len(), 2);
    assert!(next.iter().all(|l| l.attempt() == 1
        && l.token() > first.token()
        && l.deadline_ms() >= r[0].as_ref().unwrap().server_ms + 29_000));
    let (_, none) = q
        .settle_and_claim(&[(&next[0], &Settle::Release)], 0, LEASE)
        .await
        .unwrap();
    assert!(none.is_empty());
    let c = q.counts().await.unwrap();
    assert_eq!((c.completed, c.active, c.pending), (1, 1, 1));
}

// The same lease twice in one batch settles once, even when finished records are deleted at once.
#[tokio::test]
async fn duplicate_items_in_one_batch_settle_once() {
    let (_s, q) = setup_with("dup", QueueOptions::new().keep_completed(Retention::None)).await;
    q.enqueue(&email(1)).await.unwrap();
    let l = q.claim(1, LEASE).await.unwrap().remove(0);
    let fail = Settle::Fail { reason: "x".into() };
    let r = q.settle_many(&[(&l, &Settle::Complete), (&l, &fail)]).await.unwrap();
    assert_eq!(r[0].as_ref().unwrap().outcome, Outcome::Completed);
    assert!(
        matches!(r[1], Err(Error::LeaseLost { token, .. }) if token == l.token()),
        "{:?}",
        r[1]
    );
    assert_eq!(q.counts().await.unwrap(), echomq::Counts::default());
}
