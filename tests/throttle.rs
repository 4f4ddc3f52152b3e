//! Global concurrency and rate limits: the global cap holds across
//! consumers and is given back on every exit, rate limits hold on the
//! server's clock across consumers, a limited consumer sleeps instead of
//! polling, a lane's limit leaves the others flowing, and a handler's
//! `rate_limited` holds starts without counting a failure.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{eventually, raw, setup};
use echomq::throttle::RateLimit;
use echomq::{Consumer, EnqueueOptions, HandlerError, Job, JobState, Queue, Reaper, Settle};

const LEASE: Duration = Duration::from_secs(30);

fn rate(n: u32, ms: u64) -> Option<RateLimit> {
    Some(RateLimit::new(n, Duration::from_millis(ms)).unwrap())
}

async fn fill(q: &Queue, n: usize, opts: EnqueueOptions) -> Vec<String> {
    let jobs: Vec<(usize, EnqueueOptions)> = (0..n).map(|i| (i, opts.clone())).collect();
    q.enqueue_bulk_with(&jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect()
}

/// The most of `times` (ms) inside any half-open window of `w` ms.
fn most_in_window(times: &mut [u64], w: u64) -> usize {
    times.sort_unstable();
    let mut most = 0;
    let mut j = 0;
    for i in 0..times.len() {
        while times[i] - times[j] >= w {
            j += 1;
        }
        most = most.max(i - j + 1);
    }
    most
}

async fn wake_len(server: &echomq::server::LocalServer, q: &Queue) -> u64 {
    let key = format!("emq:{{{}}}:wake", q.name());
    redis::cmd("LLEN")
        .arg(key)
        .query_async(&mut raw(server).await)
        .await
        .unwrap()
}

// A cap of 3 holds while three consumers of 4 handlers each (and leases ahead) run 30 jobs: never more than 3 handlers at once; a plain claim and settle-and-claim get only the free slots.
#[tokio::test]
async fn the_global_cap_holds_across_consumers() {
    let (_s, q) = setup("cap").await;
    q.set_max_active(Some(3)).await.unwrap();
    assert_eq!(q.throttles().await.unwrap().max_active, Some(3));
    fill(&q, 30, EnqueueOptions::new()).await;
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for _ in 0..3 {
        let (running, most) = (running.clone(), most.clone());
        let h = Consumer::new(q.clone(), move |_job: Job<u64>| {
            let (running, most) = (running.clone(), most.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .concurrency(4)
        .prefetch(2)
        .spawn()
        .unwrap();
        handles.push(h);
    }
    assert!(
        eventually(Duration::from_secs(20), || async {
            q.counts().await.unwrap().completed == 30
        })
        .await
    );
    for h in handles {
        h.shutdown().await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!((1..=3).contains(&most), "{most} handlers at once");
    // A plain claim gets the free slots only, and so does settle-and-claim.
    fill(&q, 5, EnqueueOptions::new()).await;
    let held = q.claim(10, LEASE).await.unwrap();
    assert_eq!(held.len(), 3);
    assert!(q.claim(10, LEASE).await.unwrap().is_empty());
    let (done, next) = q
        .settle_and_claim(&[(&held[0], &Settle::Complete)], 5, LEASE)
        .await
        .unwrap();
    assert!(done[0].is_ok());
    assert_eq!(next.len(), 1, "the one slot the settlement freed");
}

// Every end of a lease gives its slot back under a cap of 1 (complete, release, snooze, cancel, reap), and a consumer that found the queue full is woken: the slot's end leaves a wake token.
#[tokio::test]
async fn the_cap_is_given_back_on_every_exit() {
    let (s, q) = setup("cap-exits").await;
    q.set_max_active(Some(1)).await.unwrap();
    fill(&q, 7, EnqueueOptions::new()).await;
    let take = || async { q.claim(5, LEASE).await.unwrap() };
    let mut held = take().await;
    assert_eq!(held.len(), 1);
    assert!(take().await.is_empty(), "at the cap");
    assert_eq!(wake_len(&s, &q).await, 0, "a claim at the cap clears the wake list");
    let exits = [
        Settle::Complete,
        Settle::Release,
        Settle::Snooze {
            delay: Duration::from_secs(60),
        },
        Settle::Cancel { reason: String::new() },
    ];
    for op in exits {
        let lease = held.pop().unwrap();
        q.settle_many(&[(&lease, &op)]).await.unwrap().pop().unwrap().unwrap();
        assert!(wake_len(&s, &q).await >= 1, "{op:?} woke a consumer");
        held = take().await;
        assert_eq!(held.len(), 1, "after {op:?}");
        assert!(take().await.is_empty());
    }
    // Cancel by an operator while active ends at its settlement (above); a
    // reap ends a lapsed lease.
    let lease = held.pop().unwrap();
    q.release(&lease).await.unwrap();
    let short = q.claim(1, Duration::from_millis(50)).await.unwrap().pop().unwrap();
    assert!(take().await.is_empty());
    common::past(&q, short.deadline_ms()).await;
    Reaper::new(q.clone()).run_once().await.unwrap();
    assert!(wake_len(&s, &q).await >= 1, "the reap woke a consumer");
    assert_eq!(take().await.len(), 1, "after the reap");
    // Removing the cap lets the rest go.
    q.set_max_active(None).await.unwrap();
    assert_eq!(take().await.len(), 3);
}

// Two consumers under a limit of 3 claims per 300 ms: the jobs' claim times on the server's clock never put 4 in any 300 ms window, and all 12 run.
#[tokio::test]
async fn a_rate_limit_holds_across_consumers_on_the_server_clock() {
    let (_s, q) = setup("rate").await;
    q.set_rate_limit(rate(3, 300)).await.unwrap();
    let ids = fill(&q, 12, EnqueueOptions::new()).await;
    let mut handles = Vec::new();
    for _ in 0..2 {
        let h = Consumer::new(q.clone(), |_job: Job<u64>| async { Ok(()) })
            .concurrency(4)
            .spawn()
            .unwrap();
        handles.push(h);
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.counts().await.unwrap().completed == 12
        })
        .await
    );
    for h in handles {
        h.shutdown().await.unwrap();
    }
    let mut times = Vec::new();
    for id in &ids {
        times.push(q.job(id).await.unwrap().first_started_ms.unwrap());
    }
    let span = times.iter().max().unwrap() - times.iter().min().unwrap();
    assert!(most_in_window(&mut times, 300) <= 3, "{times:?}");
    assert!(span >= 900, "12 claims at 3 per 300 ms span at least 900 ms: {span}");
}

// A consumer stopped by a rate limit sleeps until the window reopens: over a second of waiting it makes a handful of script calls, not a hot loop.
#[tokio::test]
async fn a_limited_consumer_does_not_poll_hot() {
    let (s, q) = setup("rate-idle").await;
    q.set_rate_limit(rate(1, 5_000)).await.unwrap();
    fill(&q, 3, EnqueueOptions::new()).await;
    let h = Consumer::new(q.clone(), |_job: Job<u64>| async { Ok(()) })
        .poll_interval(Duration::from_secs(2))
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            q.counts().await.unwrap().completed == 1
        })
        .await
    );
    let (leases, wait) = q.claim_or_wait(1, LEASE).await.unwrap();
    assert!(leases.is_empty());
    let wait = wait.expect("the limit says how long to wait");
    assert!(
        wait <= Duration::from_secs(5) && wait > Duration::from_secs(3),
        "{wait:?}"
    );
    let mut c = raw(&s).await;
    let before = script_calls(&mut c).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let calls = script_calls(&mut c).await - before;
    h.shutdown().await.unwrap();
    assert!(calls <= 6, "{calls} script calls in a second while limited");
    assert_eq!(q.counts().await.unwrap().completed, 1);
}

/// `INFO commandstats` calls of the script commands so far.
async fn script_calls(c: &mut redis::aio::MultiplexedConnection) -> u64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(c).await.unwrap();
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_fcall:"))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

// A lane under a rate limit of 1 per 400 ms gives one job and then none until its window reopens, while another lane and the unlaned jobs keep flowing; then it takes its turn again.
#[tokio::test]
async fn a_lane_rate_limit_leaves_other_lanes_flowing() {
    let (_s, q) = setup("lane-rate").await;
    q.set_lane_rate_limit("slow", rate(1, 400)).await.unwrap();
    assert_eq!(q.lane_rate_limit("slow").await.unwrap().own, rate(1, 400));
    fill(&q, 3, EnqueueOptions::new().lane("slow")).await;
    fill(&q, 4, EnqueueOptions::new().lane("fast")).await;
    fill(&q, 4, EnqueueOptions::new()).await;
    let mut got = Vec::new();
    loop {
        let (leases, wait) = q.claim_or_wait(1, LEASE).await.unwrap();
        match leases.into_iter().next() {
            Some(l) => got.push(l.lane().unwrap_or("").to_owned()),
            None => {
                let wait = wait.expect("a stopped lane says when it reopens");
                assert!(wait <= Duration::from_millis(400), "{wait:?}");
                break;
            }
        }
    }
    assert_eq!(got.iter().filter(|l| *l == "slow").count(), 1, "{got:?}");
    assert_eq!(got.len(), 9, "{got:?}");
    let stopped = q.lane_rate_limit("slow").await.unwrap();
    let reopens = stopped.reopens_ms.expect("the lane is stopped");
    common::past(&q, reopens - 1).await;
    let next = q.claim(5, LEASE).await.unwrap();
    assert_eq!(next.len(), 1, "one more once the window reopened");
    assert_eq!(next[0].lane(), Some("slow"));
}

// A handler's rate_limited snoozes its job without counting a failure and holds the queue's claims until the delay passes; on a laned job only its lane is held.
#[tokio::test]
async fn rate_limited_holds_starts_and_counts_no_failure() {
    let (_s, q) = setup("hold").await;
    let ids = fill(&q, 3, EnqueueOptions::new()).await;
    let hits = Arc::new(AtomicUsize::new(0));
    let hits2 = hits.clone();
    let h = Consumer::new(q.clone(), move |job: Job<u64>| {
        let hits = hits2.clone();
        async move {
            if hits.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(HandlerError::rate_limited(Duration::from_millis(600)));
            }
            let _ = job;
            Ok(())
        }
    })
    .concurrency(1)
    .prefetch(0) // no job leased ahead of the hold: the hold stops claims
    .spawn()
    .unwrap();
    // The first call is rate limited: for 600 ms nothing else starts.
    assert!(eventually(Duration::from_secs(5), || async { hits.load(Ordering::SeqCst) >= 1 }).await);
    let limits = q.throttles().await.unwrap();
    let held = limits.held_until_ms.expect("the queue is held");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.counts().await.unwrap().completed == 3
        })
        .await
    );
    h.shutdown().await.unwrap();
    let mut failures = 0;
    for id in &ids {
        let j = q.job(id).await.unwrap();
        assert_eq!(j.state, JobState::Completed);
        failures += j.failures;
        assert!(j.finished_ms.unwrap() >= held, "no job finished before the hold ended");
    }
    assert_eq!(failures, 0);

    // On a laned job only its lane is held.
    let a = fill(&q, 2, EnqueueOptions::new().lane("a")).await;
    fill(&q, 2, EnqueueOptions::new().lane("b")).await;
    let first = q.claim(1, LEASE).await.unwrap().pop().unwrap();
    let lane = first.lane().unwrap().to_owned();
    q.rate_limited(&first, Duration::from_secs(30)).await.unwrap();
    let mut others = Vec::new();
    while let Some(l) = q.claim(1, LEASE).await.unwrap().pop() {
        others.push(l.lane().unwrap().to_owned());
    }
    assert!(others.iter().all(|l| *l != lane), "{others:?}");
    assert_eq!(others.len(), 2, "the other lane's jobs flow: {others:?}");
    assert!(q.lane_rate_limit(&lane).await.unwrap().reopens_ms.is_some());
    assert_eq!(q.job(first.id()).await.unwrap().failures, 0);
    let _ = a;
}

// A lane its rate limit stopped is back in turn after its window once the sweep runs, even if no claim has run since; the lane reads blocked until then.
#[tokio::test]
async fn the_sweep_puts_a_stopped_lane_back() {
    let (_s, q) = setup("sweep-lanes").await;
    q.set_lane_rate_limit("a", rate(1, 200)).await.unwrap();
    fill(&q, 3, EnqueueOptions::new().lane("a")).await;
    assert_eq!(q.claim(5, LEASE).await.unwrap().len(), 1);
    let lane = q.lane("a").await.unwrap();
    assert_eq!(lane.state, echomq::lanes::LaneState::Blocked);
    let reopens = q.lane_rate_limit("a").await.unwrap().reopens_ms.unwrap();
    common::past(&q, reopens).await;
    q.sweep(100).await.unwrap();
    assert_eq!(q.lane("a").await.unwrap().state, echomq::lanes::LaneState::Ready);
    assert_eq!(q.lane_rate_limit("a").await.unwrap().reopens_ms, None);
}

// A rate limit is reached, not just kept: 300 jobs at 50 a second start
// over at least 5 s (the limit) and at most 5 s / 0.95 (issue 29: they
// took half as long again, the consumer waiting past each window's end).
#[tokio::test]
async fn a_rate_limit_is_used_to_95_percent() {
    let (_s, q) = setup("rate-reach").await;
    q.set_rate_limit(rate(50, 1_000)).await.unwrap();
    let ids = fill(&q, 300, EnqueueOptions::new()).await;
    let h = Consumer::new(q.clone(), |_job: Job<u64>| async { Ok(()) })
        .concurrency(16)
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async {
            q.counts().await.unwrap().completed == 300
        })
        .await
    );
    h.shutdown().await.unwrap();
    let mut times = Vec::new();
    for id in &ids {
        times.push(q.job(id).await.unwrap().first_started_ms.unwrap());
    }
    assert!(most_in_window(&mut times, 1_000) <= 50, "over the limit");
    let span = times.iter().max().unwrap() - times.iter().min().unwrap();
    eprintln!("300 claims at 50/s spanned {span} ms (ideal 5000)");
    assert!(span >= 5_000, "{span}");
    assert!(
        span as f64 <= 5_000.0 / 0.95,
        "300 claims at 50 per second spanned {span} ms"
    );
}
