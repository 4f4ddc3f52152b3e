//! Fencing beyond one lease: leases bound to their queue, settlements
//! remembered per token, and effect markers across reused ids.

mod common;

use std::time::Duration;

use common::{past, setup, setup_with, snapshot};
use echomq::{
    Client, EffectMarker, Effects, EnqueueOptions, Error, MarkerState, Outcome, QueueOptions, Reaper, Retention, Settle,
};

const LEASE: Duration = Duration::from_secs(30);

// A lease of queue A is refused by queue B's handle for every settlement,
// renewal and marker, although B has a job with the same id leased under
// the same kind of token; nothing of B changes.
#[tokio::test]
async fn a_lease_only_settles_in_its_own_queue() {
    let (s, a) = setup("qa").await;
    let client = Client::connect(&s.url()).await.unwrap();
    let b = client.queue(&common::unique("qb")).await.unwrap();
    a.enqueue_with(&1, &EnqueueOptions::new().id("job-5")).await.unwrap();
    b.enqueue_with(&2, &EnqueueOptions::new().id("job-5")).await.unwrap();
    let mut from_a = a.claim(1, LEASE).await.unwrap().remove(0);
    let from_b = b.claim(1, LEASE).await.unwrap().remove(0);
    assert_eq!(from_a.id(), from_b.id());

    let before = snapshot(&s, b.name()).await;
    let wrong = |r: Result<(), Error>| matches!(r, Err(Error::WrongQueue { .. }));
    assert!(wrong(b.complete(&from_a).await.map(drop)));
    assert!(wrong(b.retry(&from_a, None, "x").await.map(drop)));
    assert!(wrong(b.fail(&from_a, "x").await.map(drop)));
    assert!(wrong(b.release(&from_a).await.map(drop)));
    assert!(wrong(b.snooze(&from_a, Duration::ZERO).await.map(drop)));
    assert!(wrong(b.extend(&mut from_a, LEASE).await.map(drop)));
    assert!(wrong(b.complete_with(&from_a, &Effects::new()).await.map(drop)));
    assert!(wrong(EffectMarker::for_lease(&b, &from_a, "mail").map(drop)));
    let batch = b
        .settle_many(&[(&from_a, &Settle::Complete), (&from_b, &Settle::Complete)])
        .await
        .unwrap();
    assert!(matches!(batch[0], Err(Error::WrongQueue { .. })), "{:?}", batch[0]);
    assert_eq!(
        batch[1].as_ref().unwrap().outcome,
        Outcome::Completed,
        "the good item still settles"
    );
    let mut after = snapshot(&s, b.name()).await;
    // Only the good item's completion changed B (its event included).
    let moved = |k: &str| {
        [":active", ":completed", "job:job-5", ":events"]
            .iter()
            .any(|s| k.ends_with(s))
    };
    after.retain(|(k, _)| !moved(k));
    let mut expected = before;
    expected.retain(|(k, _)| !moved(k));
    assert_eq!(after, expected);
    assert_eq!(a.complete(&from_a).await.unwrap().outcome, Outcome::Completed);
}

// A re-sent settlement answers AlreadySettled even after a later attempt
// of the same job settled (0.1 remembered only the last settlement and
// answered LeaseLost).
#[tokio::test]
async fn a_resent_settlement_is_remembered_per_token() {
    let (_s, q) = setup("per-token").await;
    q.enqueue(&1).await.unwrap();
    let first = q.claim(1, LEASE).await.unwrap().remove(0);
    assert!(matches!(
        q.retry(&first, Some(Duration::ZERO), "try again")
            .await
            .unwrap()
            .outcome,
        Outcome::Retrying { due_ms: None }
    ));
    let second = q.claim(1, LEASE).await.unwrap().remove(0);
    assert_eq!(q.complete(&second).await.unwrap().outcome, Outcome::Completed);
    // The first attempt's retry reply was lost; it sends it again.
    let again = q.retry(&first, Some(Duration::ZERO), "try again").await.unwrap();
    assert_eq!(again.outcome, Outcome::AlreadySettled);
    // Another settlement with the first token was never made: refused.
    assert!(matches!(q.complete(&first).await, Err(Error::LeaseLost { .. })));
    assert_eq!(q.job(first.id()).await.unwrap().failures, 1);
}

// Effect markers are fenced by tokens that never repeat: after a job's
// record is deleted and its id enqueued again, the old attempt cannot
// claim the marker of the new one (0.1 answered Fresh to both).
#[tokio::test]
async fn markers_tell_incarnations_of_an_id_apart() {
    let (_s, q) = setup_with("fx-reuse", QueueOptions::new().keep_failed(Retention::None)).await;
    let opts = EnqueueOptions::new().id("pay-9");
    q.enqueue_with(&1, &opts).await.unwrap();
    let old = q.claim(1, Duration::from_millis(50)).await.unwrap().remove(0);
    // The old attempt stalls; the next one fails the job for good and its record goes.
    past(&q, old.deadline_ms()).await;
    Reaper::new(q.clone()).run_once().await.unwrap();
    let next = q.claim(1, LEASE).await.unwrap().remove(0);
    q.fail(&next, "gone").await.unwrap();
    assert!(q.job("pay-9").await.is_err());
    q.enqueue_with(&2, &opts).await.unwrap();
    let new = q.claim(1, LEASE).await.unwrap().remove(0);
    let new_marker = EffectMarker::for_lease(&q, &new, "charge").unwrap();
    assert_eq!(new_marker.claim().await.unwrap(), MarkerState::Fresh);
    let old_marker = EffectMarker::for_lease(&q, &old, "charge").unwrap();
    assert!(matches!(old_marker.claim().await, Err(Error::LeaseLost { .. })));
    new_marker.done().await.unwrap();
    assert!(matches!(
        old_marker.done().await,
        Err(Error::MarkerLost { done: true, .. })
    ));
}

// Tokens keep growing across reaps and reclaims, and across a deleted and
// re-created queue (the counter restarts from the server clock).
#[tokio::test]
async fn tokens_never_repeat() {
    let (s, q) = setup("tokens").await;
    q.enqueue(&1).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let l = q.claim(1, Duration::from_millis(20)).await.unwrap().remove(0);
        seen.push(l.token());
        past(&q, l.deadline_ms()).await;
        Reaper::new(q.clone()).run_once().await.unwrap();
    }
    let mut c = common::raw(&s).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("emq:{{{}}}:*", q.name()))
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut c).await.unwrap();
    q.enqueue(&2).await.unwrap();
    seen.push(q.claim(1, LEASE).await.unwrap().remove(0).token());
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
}
