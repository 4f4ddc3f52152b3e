//! Redelivery and fencing: an unsettled lease is reaped and delivered
//! again, a stale token changes nothing, racing reapers reap once, stalls
//! are counted.

use std::collections::HashMap;
use std::time::Duration;

use echomq::{EnqueueOptions, EnqueueStatus, Error, JobState, Outcome, QueueOptions, Reaper, Retention};

use super::common::{past, setup, setup_with, snapshot};
use super::{LEASE, email};

// A claimed job never settled is reaped after its lease and delivered again with a higher token.
#[tokio::test]
async fn unsettled_lease_is_redelivered() {
    let (_s, q) = setup("redeliver").await;
    let id = q.enqueue(&email(1)).await.unwrap();
    let first = q.claim(1, Duration::from_millis(200)).await.unwrap().remove(0);
    // Before the deadline the reaper leaves it alone.
    assert!(Reaper::new(q.clone()).run_once().await.unwrap().requeued.is_empty());
    past(&q, first.deadline_ms()).await;
    let report = Reaper::new(q.clone()).run_once().await.unwrap();
    assert_eq!(report.requeued, vec![(id.clone(), 1)]);
    let second = q.claim(1, LEASE).await.unwrap().remove(0);
    assert_eq!(second.id(), id);
    assert!(second.token() > first.token(), "tokens only grow");
    assert_eq!((first.attempt(), second.attempt()), (1, 2));
    assert!(second.deadline_ms() >= first.deadline_ms());
    q.complete(&second).await.unwrap();
    let info = q.job(&id).await.unwrap();
    assert_eq!(
        (info.state, info.attempts, info.stalls, info.failures),
        (JobState::Completed, 2, 1, 0)
    );
}

// After reap and re-claim, every settlement with the old token is LeaseLost and changes nothing.
#[tokio::test]
async fn stale_token_is_fenced() {
    let (s, q) = setup("fence").await;
    q.enqueue(&email(1)).await.unwrap();
    let mut old = q.claim(1, Duration::from_millis(50)).await.unwrap().remove(0);
    past(&q, old.deadline_ms()).await;
    Reaper::new(q.clone()).run_once().await.unwrap();
    let _new = q.claim(1, LEASE).await.unwrap().remove(0);

    let before = snapshot(&s, q.name()).await;
    assert!(matches!(q.complete(&old).await, Err(Error::LeaseLost { token, .. }) if token == old.token()));
    assert!(matches!(
        q.retry(&old, Some(Duration::ZERO), "x").await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(matches!(
        q.snooze(&old, Duration::ZERO).await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(matches!(q.fail(&old, "x").await, Err(Error::LeaseLost { .. })));
    assert!(matches!(q.release(&old).await, Err(Error::LeaseLost { .. })));
    assert!(matches!(q.extend(&mut old, LEASE).await, Err(Error::LeaseLost { .. })));
    assert_eq!(before, snapshot(&s, q.name()).await, "a stale settle changed the queue");
}

// Many reapers racing over many expired leases reap each job exactly once.
#[tokio::test]
async fn racing_reapers_reap_each_job_once() {
    let (_s, q) = setup("race").await;
    let n = 600;
    q.enqueue_bulk(&(0..n).map(email).collect::<Vec<_>>()).await.unwrap();
    let mut claimed = 0;
    let mut last_deadline = 0;
    while claimed < n {
        let leases = q.claim(64, Duration::from_millis(100)).await.unwrap();
        claimed += leases.len() as u32;
        last_deadline = last_deadline.max(leases.iter().map(|l| l.deadline_ms()).max().unwrap_or(0));
    }
    past(&q, last_deadline).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let r = Reaper::new(q.clone()).batch(37);
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let rep = r.run_once().await.unwrap();
                if rep.requeued.is_empty() {
                    return mine;
                }
                mine.extend(rep.requeued);
            }
        }));
    }
    let mut seen: HashMap<String, u64> = HashMap::new();
    for t in tasks {
        for (id, stalls) in t.await.unwrap() {
            assert_eq!(stalls, 1, "job {id} counted {stalls} stalls");
            assert!(seen.insert(id.clone(), stalls).is_none(), "job {id} reaped twice");
        }
    }
    assert_eq!(seen.len(), n as usize);
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.active), (n as u64, 0));
    for id in seen.keys().take(20) {
        assert_eq!(q.job(id).await.unwrap().stalls, 1);
    }
}

// A job stalling more than max_stalls fails for good with reason "stalled".
#[tokio::test]
async fn too_many_stalls_fail_the_job() {
    let (_s, q) = setup("stalls").await;
    let id = q
        .enqueue_with(&email(1), &EnqueueOptions::new().max_stalls(1))
        .await
        .unwrap()
        .id;
    let reaper = Reaper::new(q.clone());
    for round in 1..=2 {
        let l = q.claim(1, Duration::from_millis(20)).await.unwrap().remove(0);
        past(&q, l.deadline_ms()).await;
        let rep = reaper.run_once().await.unwrap();
        if round == 1 {
            assert_eq!(rep.requeued, vec![(id.clone(), 1)]);
        } else {
            assert_eq!(rep.failed, vec![(id.clone(), 2)]);
        }
    }
    let info = q.job(&id).await.unwrap();
    assert_eq!((info.state, info.stalls, info.failures), (JobState::Failed, 2, 0));
    assert_eq!(info.last_error.as_deref(), Some("stalled"));
}

// A job whose record was deleted and whose id was enqueued again cannot be
// touched by a worker still holding a lease of the old job: tokens never
// repeat for a queue (0.1 minted token 1 again and let the stale re-send
// complete, and delete, the new job).
#[tokio::test]
async fn reused_id_cannot_be_settled_by_a_stale_token() {
    let (s, q) = setup_with("reuse", QueueOptions::new().keep_completed(Retention::None)).await;
    let opts = EnqueueOptions::new().id("order-1");
    q.enqueue_with(&email(1), &opts).await.unwrap();
    let a = q.claim(1, LEASE).await.unwrap().remove(0);
    q.complete(&a).await.unwrap();
    assert!(matches!(q.job("order-1").await, Err(Error::JobNotFound(_))));

    // The same caller id makes a new job, claimed by another worker.
    assert_eq!(
        q.enqueue_with(&email(2), &opts).await.unwrap().status,
        EnqueueStatus::Created
    );
    let b = q.claim(1, LEASE).await.unwrap().remove(0);
    assert_eq!((b.id(), b.attempt()), ("order-1", 1));
    assert_ne!(a.token(), b.token());

    // The first worker re-sends its complete (its reply was lost): refused, nothing changes.
    let before = snapshot(&s, q.name()).await;
    let stale = q.complete(&a).await;
    assert!(matches!(stale, Err(Error::LeaseLost { .. })), "{stale:?}");
    assert_eq!(
        before,
        snapshot(&s, q.name()).await,
        "the stale complete changed the new job"
    );
    assert_eq!(q.job("order-1").await.unwrap().state, JobState::Active);
    assert_eq!(q.complete(&b).await.unwrap().outcome, Outcome::Completed);
}
