//! Retry delays: a job's own backoff with jitter, drawn by the server.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{setup, setup_with};
use echomq::{Backoff, EnqueueOptions, Error, JobState, Lease, Outcome, Queue, QueueOptions};

const LEASE: Duration = Duration::from_secs(30);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Leases `n` jobs of `q` (several claims if need be).
async fn claim_all(q: &Queue, n: usize) -> Vec<Lease> {
    let mut leases = Vec::new();
    while leases.len() < n {
        let got = q.claim(n - leases.len(), LEASE).await.unwrap();
        assert!(!got.is_empty(), "only {} of {n} jobs to claim", leases.len());
        leases.extend(got);
    }
    leases
}

/// Retries `lease` with the job's own backoff (the server's choice); returns
/// the delay the server gave it, checking it against the job's record.
async fn server_delay(q: &Queue, lease: &Lease) -> u64 {
    let settled = q.retry(lease, None, "boom").await.unwrap();
    let Outcome::Retrying { due_ms: Some(due) } = settled.outcome else {
        panic!("{:?}", settled.outcome);
    };
    let info = q.job(lease.id()).await.unwrap();
    assert_eq!((info.state, info.deadline_ms), (JobState::Delayed, Some(due)));
    due - settled.server_ms
}

// 200 jobs with the same jittered backoff, retried once through the low-level
// retry: the server spreads their delays over [d/2, d], each within bounds.
#[tokio::test]
async fn jitter_spreads_retries_over_the_window() {
    let backoff = Backoff::exponential(ms(10_000), ms(60_000)).jitter(0.5);
    let (_s, q) = setup_with("jitter", QueueOptions::new().backoff(backoff)).await;
    q.enqueue_bulk(&(0..200).collect::<Vec<u32>>()).await.unwrap();
    let mut delays = Vec::new();
    for lease in claim_all(&q, 200).await {
        assert_eq!(lease.limits().backoff, backoff);
        delays.push(server_delay(&q, &lease).await);
    }
    assert_eq!(backoff.delay_range(1), (ms(5_000), ms(10_000)));
    assert!(delays.iter().all(|d| (5_000..=10_000).contains(d)), "{delays:?}");
    // Spread: each fifth of the window holds about 40 of them, and few repeat.
    for fifth in 0..5 {
        let lo = 5_000 + fifth * 1_000;
        let n = delays.iter().filter(|d| (lo..lo + 1_000).contains(*d)).count();
        assert!(n >= 15, "{n} delays in {lo}..{}: {delays:?}", lo + 1_000);
    }
    assert!(delays.iter().collect::<HashSet<_>>().len() >= 180, "{delays:?}");
}

// Without jitter (or with jitter 0) every delay is exactly the backoff, as
// before; with full jitter it is anywhere in [0, d]; and the second failure
// of a jittered exponential backoff draws from the doubled window.
#[tokio::test]
async fn unjittered_delays_are_exact_and_jitter_follows_the_schedule() {
    let (s, q) = setup("exact").await;
    let plain = Backoff::exponential(ms(8_000), ms(60_000));
    let full = Backoff::fixed(ms(8_000)).jitter(1.0);
    let step = Backoff::exponential(ms(100), ms(60_000)).jitter(0.5);
    let mut jobs = Vec::new();
    for i in 0..150u32 {
        let b = match i % 3 {
            0 => plain,
            1 => plain.jitter(0.0),
            _ => full,
        };
        jobs.push((i, EnqueueOptions::new().backoff(b)));
    }
    q.enqueue_bulk_with(&jobs).await.unwrap();
    let mut full_delays = Vec::new();
    for lease in claim_all(&q, 150).await {
        let d = server_delay(&q, &lease).await;
        if lease.limits().backoff == full {
            assert!(d <= 8_000, "{d}");
            full_delays.push(d);
        } else {
            assert_eq!(lease.limits().backoff, plain);
            assert_eq!(d, 8_000);
        }
    }
    assert!(full_delays.iter().any(|d| *d < 2_000) && full_delays.iter().any(|d| *d > 6_000));

    // A queue of its own, so no job above comes due in between.
    let q = Queue::connect(&s.url(), &common::unique("step")).await.unwrap();
    let id = q
        .enqueue_with(&0u32, &EnqueueOptions::new().backoff(step))
        .await
        .unwrap()
        .id;
    let first = q.claim(1, LEASE).await.unwrap().remove(0);
    assert_eq!(first.id(), id);
    let d1 = server_delay(&q, &first).await;
    assert!((50..=100).contains(&d1), "{d1}");
    common::past(&q, q.job(&id).await.unwrap().deadline_ms.unwrap()).await;
    let second = q.claim(1, LEASE).await.unwrap().remove(0);
    assert_eq!((second.id(), second.failures()), (id.as_str(), 1));
    let d2 = server_delay(&q, &second).await;
    assert!((100..=200).contains(&d2), "{d2}");
}

// A jitter out of 0.0..=1.0, or NaN, is a typed error wherever the backoff is
// used: enqueue, queue options.
#[tokio::test]
async fn bad_jitter_values_are_typed_errors() {
    let (s, q) = setup("bad-jitter").await;
    let b = Backoff::fixed(ms(100));
    let is_jitter_error = |r: Result<_, Error>| {
        matches!(
            r,
            Err(Error::InvalidOption {
                name: "backoff jitter",
                ..
            })
        )
    };
    for bad in [1.5, -0.25, f64::NAN, f64::INFINITY] {
        let opts = EnqueueOptions::new().backoff(b.jitter(bad));
        assert!(is_jitter_error(q.enqueue_with(&1u32, &opts).await.map(drop)), "{bad}");
        let opts = QueueOptions::new().backoff(b.jitter(bad));
        assert!(
            is_jitter_error(Queue::connect_with(&s.url(), q.name(), opts).await.map(drop)),
            "{bad}"
        );
    }
    assert_eq!(q.counts().await.unwrap().pending, 0, "nothing was enqueued");
}
