//! Priorities that age (Queue::set_priority_aging) against a real server:
//! a low-priority job overtakes the higher-priority jobs that became ready
//! more than (difference in levels) × the aging after it, and no others.

mod common;

use std::time::Duration;

use common::{past, setup};
use echomq::{EnqueueOptions, Error, Queue};

const LEASE: Duration = Duration::from_secs(30);

async fn add(q: &Queue, id: &str, priority: i8) -> u64 {
    q.enqueue_with(&id, &EnqueueOptions::new().id(id).priority(priority))
        .await
        .unwrap();
    q.job(id).await.unwrap().created_ms
}

/// Claims every pending job, one at a time: their ids in claim order.
async fn order(q: &Queue) -> Vec<String> {
    let mut ids = Vec::new();
    while let Some(l) = q.claim(1, LEASE).await.unwrap().pop() {
        ids.push(l.id().to_owned());
    }
    ids
}

// Aging 20 ms a level: a priority-0 job goes after the priority-10 jobs
// ready before it or within 200 ms after it, and before those ready later;
// without aging it goes after every one of them.
#[tokio::test]
async fn a_low_priority_job_overtakes_later_high_priority_ones() {
    for aging in [true, false] {
        let (_s, q) = setup("aging").await;
        let per_level = Duration::from_millis(20);
        if aging {
            q.set_priority_aging(Some(per_level)).await.unwrap();
        }
        assert_eq!(q.priority_aging().await.unwrap(), aging.then_some(per_level));
        for i in 0..3 {
            add(&q, &format!("before-{i}"), 10).await;
        }
        let t0 = add(&q, "low", 0).await;
        let mut soon = Vec::new();
        for i in 0..2 {
            let id = format!("soon-{i}");
            let ct = add(&q, &id, 10).await;
            // (on a machine too slow to enqueue it within 200 ms, it is a later one)
            soon.push((id, ct < t0 + 200));
        }
        past(&q, t0 + 200).await;
        for i in 0..3 {
            add(&q, &format!("late-{i}"), 10).await;
        }
        let got = order(&q).await;
        let mut want: Vec<String> = (0..3).map(|i| format!("before-{i}")).collect();
        if aging {
            want.extend(soon.iter().filter(|(_, s)| *s).map(|(id, _)| id.clone()));
            want.push("low".into());
            want.extend(soon.iter().filter(|(_, s)| !*s).map(|(id, _)| id.clone()));
            want.extend((0..3).map(|i| format!("late-{i}")));
        } else {
            want.extend(soon.iter().map(|(id, _)| id.clone()));
            want.extend((0..3).map(|i| format!("late-{i}")));
            want.push("low".into());
        }
        assert_eq!(got, want, "aging {aging}");
    }
}

// Within one priority the order is the enqueue order, a bulk call's too;
// a retried job keeps its place (its wait counts from when it was ready).
#[tokio::test]
async fn aging_keeps_the_order_within_a_priority() {
    let (_s, q) = setup("aging-order").await;
    q.set_priority_aging(Some(Duration::from_secs(1))).await.unwrap();
    let ids: Vec<String> = q.enqueue_bulk(&(0..500).collect::<Vec<u32>>()).await.unwrap();
    let first = q.claim(1, LEASE).await.unwrap().remove(0);
    assert_eq!(first.id(), ids[0]);
    q.retry(&first, Some(Duration::ZERO), "again").await.unwrap();
    assert_eq!(order(&q).await, ids);
}

// The setting changes only on an empty queue, and takes 1 ms to an hour.
#[tokio::test]
async fn aging_changes_only_on_an_empty_queue() {
    let (_s, q) = setup("aging-set").await;
    for bad in [
        Duration::ZERO,
        echomq::queue::MAX_PRIORITY_AGING + Duration::from_millis(1),
    ] {
        assert!(matches!(
            q.set_priority_aging(Some(bad)).await,
            Err(Error::InvalidOption { .. })
        ));
    }
    q.enqueue(&1).await.unwrap();
    let refused = q.set_priority_aging(Some(Duration::from_secs(1))).await;
    assert!(
        matches!(&refused, Err(Error::InvalidOption { name: "priority_aging", reason }) if reason.contains("1 pending")),
        "{refused:?}"
    );
    assert_eq!(q.priority_aging().await.unwrap(), None);
    let l = q.claim(1, LEASE).await.unwrap().remove(0);
    // active still counts
    assert!(q.set_priority_aging(Some(Duration::from_secs(1))).await.is_err());
    q.complete(&l).await.unwrap();
    q.set_priority_aging(Some(Duration::from_secs(1))).await.unwrap();
    assert_eq!(q.priority_aging().await.unwrap(), Some(Duration::from_secs(1)));
    // the same value again is no change, whatever the queue holds
    q.enqueue(&2).await.unwrap();
    q.set_priority_aging(Some(Duration::from_secs(1))).await.unwrap();
    assert!(q.set_priority_aging(None).await.is_err());
}
