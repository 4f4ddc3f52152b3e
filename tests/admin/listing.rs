//! Listing a state page by page, and the holder a job's record names.

use std::sync::Arc;
use std::time::Duration;

use echomq::{Consumer, Error, Job};

use super::common;
use super::common::{eventually, setup};

// Listing walks a state page by page in its order; while jobs move, a
// walk of pending shows each job at most once and every job that stayed;
// completed jobs come newest first, delayed ones with their due time.
#[tokio::test]
async fn states_are_listed_page_by_page() {
    let (_s, q) = setup("list").await;
    let ids = q.enqueue_bulk(&(0..250u32).collect::<Vec<_>>()).await.unwrap();
    let mut seen = Vec::new();
    let mut after: Option<echomq::admin::ListCursor> = None;
    let mut claimed = std::collections::HashSet::new();
    loop {
        let page = q.list(echomq::JobState::Pending, after.as_ref(), 100).await.unwrap();
        seen.extend(page.jobs.iter().map(|j| j.id.clone()));
        // Jobs move while the walk goes on: some are claimed, some enqueued.
        for l in q.claim(30, Duration::from_secs(30)).await.unwrap() {
            claimed.insert(l.id().to_owned());
        }
        q.enqueue(&0u32).await.unwrap();
        // The cursor survives its text form.
        after = page.next.map(|c| c.to_string().parse().unwrap());
        if after.is_none() {
            break;
        }
    }
    let unique: std::collections::HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "a job was shown twice");
    for id in &ids {
        assert!(
            seen.contains(id) || claimed.contains(id),
            "job {id} stayed pending but was not shown"
        );
    }
    // Claim order: the first page starts with the oldest job.
    assert_eq!(seen[0], ids[0]);

    let done = q.claim(3, Duration::from_secs(30)).await.unwrap();
    for l in &done {
        q.complete(l).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let page = q.list(echomq::JobState::Completed, None, 10).await.unwrap();
    let newest_first: Vec<&str> = done.iter().rev().map(|l| l.id()).collect();
    assert_eq!(
        page.jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        newest_first
    );
    assert!(page.next.is_none());

    let later = q
        .enqueue_with(&1u32, &echomq::EnqueueOptions::new().delay(Duration::from_secs(60)))
        .await
        .unwrap()
        .id;
    let delayed = q.list(echomq::JobState::Delayed, None, 10).await.unwrap();
    assert_eq!(delayed.jobs.len(), 1);
    assert_eq!(delayed.jobs[0].id, later);
    assert_eq!(delayed.jobs[0].deadline_ms, q.job(&later).await.unwrap().deadline_ms);

    assert!(matches!(
        q.list(echomq::JobState::Pending, None, 0).await,
        Err(Error::InvalidOption { .. })
    ));
    assert!("nonsense".parse::<echomq::admin::ListCursor>().is_err());
}

// The record names the consumer holding an active job (its name, or
// HOST:PID/N by default; a plain claim records the handle's holder);
// names are checked.
#[tokio::test]
async fn the_record_names_the_holder() {
    use echomq::JobState;
    let (_s, q) = setup("holder").await;
    let a = q.enqueue(&1u32).await.unwrap();
    let b = q.enqueue(&2u32).await.unwrap();
    let gate = Arc::new(tokio::sync::Notify::new());
    let g = gate.clone();
    let consumer = Consumer::new(q.clone(), move |_job: Job<u32>| {
        let g = g.clone();
        async move {
            g.notified().await;
            Ok(())
        }
    })
    .name("billing-worker-7")
    .concurrency(1)
    .prefetch(0)
    .spawn()
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.job(&a).await.unwrap().state == JobState::Active
        })
        .await
    );
    let page = q.list(JobState::Active, None, 10).await.unwrap();
    assert_eq!(page.jobs[0].holder.as_deref(), Some("billing-worker-7"));
    assert!(page.jobs[0].deadline_ms.is_some());
    gate.notify_one();
    consumer.shutdown().await.unwrap();
    assert_eq!(
        q.job(&a).await.unwrap().holder.as_deref(),
        Some("billing-worker-7"),
        "kept after"
    );

    let l = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    assert_eq!(l.id(), b);
    let host_pid = q.job(&b).await.unwrap().holder.unwrap();
    assert!(host_pid.ends_with(&format!(":{}", std::process::id())), "{host_pid}");
    assert_eq!(q.holder(), host_pid);
    let named = q.with_holder("cron-box").unwrap();
    named.release(&l).await.unwrap();
    named.claim(1, Duration::from_secs(30)).await.unwrap();
    assert_eq!(q.job(&b).await.unwrap().holder.as_deref(), Some("cron-box"));

    let default = Consumer::new(q.clone(), |_job: Job<u32>| async { Ok(()) })
        .spawn()
        .unwrap();
    let c = q.enqueue(&3u32).await.unwrap();
    assert!(common::completes(&q, &c).await);
    let h = q.job(&c).await.unwrap().holder.unwrap();
    assert!(h.starts_with(&format!("{host_pid}/")), "{h}");
    default.shutdown().await.unwrap();

    for bad in ["", "tab\there", &"x".repeat(201)] {
        assert!(
            matches!(q.with_holder(bad), Err(Error::InvalidOption { .. })),
            "{bad:?}"
        );
        let c = Consumer::new(q.clone(), |_job: Job<u32>| async { Ok(()) }).name(bad);
        assert!(matches!(c.spawn(), Err(Error::InvalidOption { .. })), "{bad:?}");
    }
}
