//! `Worker::prefetch`: leases held ahead of free handlers never raise the
//! number of handlers running, a prefetched job that waits too long goes
//! back to pending unstarted (and is not leased again until a handler frees
//! up), and shutdown hands prefetched jobs, and jobs leased as it begins,
//! back without starting them.
//! Automatic prefetch (the default) leases ahead for short handlers only,
//! and stops when handlers turn long.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{EventLog, eventually, setup};
use echomq::{Consumer, Job, JobState, Queue};

/// The queue's active count, sampled every millisecond until `stop`.
struct ActiveSampler {
    on: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<u64>>,
}

impl ActiveSampler {
    fn start(q: &Queue) -> ActiveSampler {
        let (q, on) = (q.clone(), Arc::new(AtomicBool::new(true)));
        let running = on.clone();
        let task = tokio::spawn(async move {
            let mut seen = Vec::new();
            while running.load(Ordering::SeqCst) {
                seen.push(q.counts().await.unwrap().active);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            seen
        });
        ActiveSampler { on, task }
    }
    async fn stop(self) -> Vec<u64> {
        self.on.store(false, Ordering::SeqCst);
        self.task.await.unwrap()
    }
}

type BoxedRun = std::pin::Pin<Box<dyn Future<Output = Result<(), echomq::HandlerError>> + Send>>;

/// A handler that sleeps `slow_ms` for payloads of 1,000 and up (others
/// return at once), with the peak of handlers running at once and the
/// number of calls.
fn sleeper(
    slow_ms: u64,
) -> (
    Arc<AtomicUsize>,
    Arc<AtomicUsize>,
    impl Fn(Job<u32>) -> BoxedRun + Send + Sync,
) {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let handled = Arc::new(AtomicUsize::new(0));
    let (p, h) = (peak.clone(), handled.clone());
    let f = move |job: Job<u32>| -> BoxedRun {
        let (running, peak, handled) = (running.clone(), p.clone(), h.clone());
        Box::pin(async move {
            peak.fetch_max(running.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            if *job.payload() >= 1_000 {
                tokio::time::sleep(Duration::from_millis(slow_ms)).await;
            }
            running.fetch_sub(1, Ordering::SeqCst);
            handled.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    };
    (peak, handled, f)
}

async fn handled_at_least(handled: &AtomicUsize, n: usize) {
    let reached = eventually(Duration::from_secs(30), || async {
        handled.load(Ordering::SeqCst) >= n
    })
    .await;
    assert!(
        reached,
        "only {} jobs handled, waiting for {n}",
        handled.load(Ordering::SeqCst)
    );
}

// By default (automatic prefetch) a consumer of quick jobs leases ahead of
// its one handler, and stops once the jobs turn slow: the extra leases are
// retired as they come back, so the slow phase runs on one lease.
#[tokio::test]
async fn automatic_prefetch_follows_the_handlers() {
    let (_s, q) = setup("prefetch-auto").await;
    // Payloads below 1,000 return at once; 1,000 and up sleep 40 ms.
    let quick: Vec<u32> = (0..400).collect();
    let slow: Vec<u32> = (1_000..1_030).collect();
    q.enqueue_bulk(&quick).await.unwrap();
    q.enqueue_bulk(&slow).await.unwrap();
    let (peak, handled, handler) = sleeper(40);
    let sampler = ActiveSampler::start(&q);
    let consumer = Consumer::new(q.clone(), handler).concurrency(1).spawn().unwrap();
    handled_at_least(&handled, 400).await;
    let quick_samples = sampler.stop().await;
    // A few slow handlers turn prefetch off and the leases held ahead drain.
    handled_at_least(&handled, 410).await;
    let sampler = ActiveSampler::start(&q);
    handled_at_least(&handled, 425).await;
    let slow_samples = sampler.stop().await;
    handled_at_least(&handled, 430).await;
    consumer.shutdown().await.unwrap();
    assert_eq!(handled.load(Ordering::SeqCst), 430, "each job handled once");
    assert_eq!(peak.load(Ordering::SeqCst), 1, "one handler at a time");
    let quick_max = quick_samples.iter().copied().max().unwrap_or(0);
    assert!(
        (2..=5).contains(&quick_max),
        "quick jobs: {quick_max} leases held at most (want 2..=5: one handler, at most 4 ahead)"
    );
    let slow_max = slow_samples.iter().copied().max().unwrap_or(0);
    assert_eq!(slow_max, 1, "slow jobs: a lease held ahead ({slow_samples:?})");
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.active, c.completed, c.failed), (0, 0, 430, 0));
}

// `prefetch(0)` never leases ahead, however quick the handlers are.
#[tokio::test]
async fn prefetch_zero_never_leases_ahead() {
    let (_s, q) = setup("prefetch-off").await;
    let jobs: Vec<u32> = (0..300).collect();
    q.enqueue_bulk(&jobs).await.unwrap();
    let (peak, handled, handler) = sleeper(0);
    let sampler = ActiveSampler::start(&q);
    let consumer = Consumer::new(q.clone(), handler)
        .concurrency(2)
        .prefetch(0)
        .spawn()
        .unwrap();
    handled_at_least(&handled, 300).await;
    consumer.shutdown().await.unwrap();
    let samples = sampler.stop().await;
    assert!(peak.load(Ordering::SeqCst) <= 2);
    let max = samples.iter().copied().max().unwrap_or(0);
    assert!((1..=2).contains(&max), "leases held at most {max} (concurrency 2)");
    assert_eq!(q.counts().await.unwrap().completed, 300);
}

// Quick jobs leased ahead start without a renewal each (the claim and the
// settlement are the only calls a job costs): at concurrency 1 and
// prefetch 4, 300 no-op jobs take far fewer script calls than jobs.
#[tokio::test]
async fn quick_jobs_leased_ahead_start_without_a_renewal() {
    let (_s, q) = setup("prefetch-calls").await;
    let jobs: Vec<u32> = (0..300).collect();
    q.enqueue_bulk(&jobs).await.unwrap();
    let renewals = Arc::new(AtomicUsize::new(0));
    let r = renewals.clone();
    let (_peak, handled, handler) = sleeper(0);
    let consumer = Consumer::new(q.clone(), handler)
        .concurrency(1)
        .prefetch(4)
        .observer(move |e| {
            if matches!(e, echomq::WorkerEvent::Extended { .. }) {
                r.fetch_add(1, Ordering::SeqCst);
            }
        })
        .spawn()
        .unwrap();
    handled_at_least(&handled, 300).await;
    consumer.shutdown().await.unwrap();
    let n = renewals.load(Ordering::SeqCst);
    assert!(n < 30, "{n} renewals for 300 quick jobs leased ahead");
    assert_eq!(q.counts().await.unwrap().completed, 300);
}

// With concurrency 2 and prefetch 3 the consumer holds more leases than
// handlers (up to 5), but never runs more than 2 handlers at once.
#[tokio::test]
async fn prefetch_holds_more_leases_but_runs_no_more_handlers() {
    let (_s, q) = setup("prefetch-bounds").await;
    // 300 jobs of 2 ms each.
    let payloads: Vec<u32> = (1_000..1_300).collect();
    q.enqueue_bulk(&payloads).await.unwrap();
    let (peak, handled, handler) = sleeper(2);
    let sampler = ActiveSampler::start(&q);
    let consumer = Consumer::new(q.clone(), handler)
        .concurrency(2)
        .prefetch(3)
        .spawn()
        .unwrap();
    handled_at_least(&handled, 300).await;
    consumer.shutdown().await.unwrap();
    let max_active = sampler.stop().await.into_iter().max().unwrap_or(0);
    assert_eq!(handled.load(Ordering::SeqCst), 300, "each job handled once");
    assert_eq!(peak.load(Ordering::SeqCst), 2, "handlers at once");
    assert!(max_active <= 5, "leases held: {max_active} > concurrency + prefetch");
    assert!(
        max_active > 2,
        "no lease was ever held ahead of a handler ({max_active})"
    );
    let c = q.counts().await.unwrap();
    assert_eq!(
        (c.pending, c.active, c.completed, c.delayed, c.failed),
        (0, 0, 300, 0, 0)
    );
}

// A prefetched job that waits longer than a heartbeat interval for a slow
// handler is released unstarted, and is not leased again (no churn) until
// the handler finishes; then it runs once.
#[tokio::test]
async fn slow_handler_releases_the_prefetched_job_once() {
    let (_s, q) = setup("prefetch-slow").await;
    let slow = q.enqueue(&1u32).await.unwrap();
    let next = q.enqueue(&2u32).await.unwrap();
    let log = EventLog::default();
    let consumer = Consumer::new(q.clone(), |job: Job<u32>| async move {
        if *job.payload() == 1 {
            tokio::time::sleep(Duration::from_millis(900)).await;
        }
        Ok(())
    })
    .concurrency(1)
    .prefetch(1)
    .lease(Duration::from_millis(300))
    .heartbeat(Duration::from_millis(100))
    .observer(log.observer())
    .spawn()
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.job(&next).await.unwrap().state == JobState::Completed
        })
        .await
    );
    consumer.shutdown().await.unwrap();
    assert_eq!(q.job(&slow).await.unwrap().attempts, 1);
    let ev = log.of(&next);
    // Leased with the slow job, released unstarted, leased once more.
    assert_eq!(
        ev,
        [
            "claimed:1",
            "settled:1:release",
            "claimed:2",
            "done:2:ok",
            "settled:2:complete"
        ],
        "events of the prefetched job"
    );
    let info = q.job(&next).await.unwrap();
    assert_eq!((info.attempts, info.failures, info.stalls), (2, 0, 0));
}

// Shutdown lets the running handler finish and hands the prefetched jobs
// back without running them.
#[tokio::test]
async fn shutdown_releases_prefetched_jobs_unstarted() {
    let (_s, q) = setup("prefetch-stop").await;
    let ids: Vec<String> = q.enqueue_bulk(&[1u32, 2, 3]).await.unwrap();
    let started = Arc::new(tokio::sync::Notify::new());
    let log = EventLog::default();
    let consumer = {
        let started = started.clone();
        Consumer::new(q.clone(), move |_job: Job<u32>| {
            let started = started.clone();
            async move {
                started.notify_one();
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok(())
            }
        })
        .concurrency(1)
        .prefetch(2)
        .observer(log.observer())
        .spawn()
        .unwrap()
    };
    tokio::time::timeout(Duration::from_secs(10), started.notified())
        .await
        .unwrap();
    assert_eq!(q.counts().await.unwrap().active, 3, "one running, two prefetched");
    consumer.shutdown().await.unwrap();
    let mut states = HashMap::new();
    for id in &ids {
        states.insert(id.clone(), q.job(id).await.unwrap().state);
    }
    assert_eq!(states[&ids[0]], JobState::Completed, "the running job finished");
    for id in &ids[1..] {
        assert_eq!(states[id], JobState::Pending, "prefetched job {id} handed back");
        assert_eq!(log.of(id), ["claimed:1", "settled:1:release"], "job {id} never started");
    }
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.active, c.completed), (2, 0, 1));
}

// With heartbeats off the lease is a handler's whole time budget: a job
// that waited for a handler has its lease renewed once before it starts,
// so the wait does not eat into it (here: 200 ms waited + 850 ms run > the
// 1 s lease, which without the renewal would lapse mid-run and be reaped).
#[tokio::test]
async fn heartbeats_off_renew_a_job_that_waited() {
    let (_s, q) = setup("prefetch-no-beats").await;
    let first = q.enqueue(&200u64).await.unwrap();
    let waited = q.enqueue(&850u64).await.unwrap();
    let log = EventLog::default();
    let consumer = Consumer::new(q.clone(), |job: Job<u64>| async move {
        tokio::time::sleep(Duration::from_millis(*job.payload())).await;
        Ok(())
    })
    .concurrency(1)
    .prefetch(1)
    .lease(Duration::from_millis(1000))
    .without_heartbeats()
    .reap_interval(Duration::from_millis(20))
    .observer(log.observer())
    .spawn()
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.job(&waited).await.unwrap().state == JobState::Completed
        })
        .await
    );
    consumer.shutdown().await.unwrap();
    for id in [&first, &waited] {
        let info = q.job(id).await.unwrap();
        assert_eq!((info.attempts, info.stalls), (1, 0), "job {id}");
    }
    assert_eq!(
        log.of(&waited),
        ["claimed:1", "extended:1", "done:1:ok", "settled:1:complete"]
    );
    assert_eq!(log.of(&first), ["claimed:1", "done:1:ok", "settled:1:complete"]);
}

// Jobs leased by a claim still in flight when shutdown begins go back
// unstarted, though handlers are free (tried many times, since shutdown must
// land while the claim travels).
#[tokio::test]
async fn jobs_leased_as_shutdown_begins_are_not_started() {
    let (_s, q) = setup("prefetch-stop-race").await;
    let jobs: Vec<u32> = (0..5).collect();
    let handled = Arc::new(AtomicUsize::new(0));
    let mut raced = 0;
    for _ in 0..30 {
        q.enqueue_bulk(&jobs).await.unwrap();
        let h = handled.clone();
        let log = EventLog::default();
        let consumer = Consumer::new(q.clone(), move |_job: Job<u32>| {
            h.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        })
        .reaper(false)
        .observer(log.observer())
        .spawn()
        .unwrap();
        tokio::task::yield_now().await;
        consumer.shutdown().await.unwrap();
        raced += log.all().iter().filter(|e| e.starts_with("claimed:")).count();
        let c = q.counts().await.unwrap();
        assert_eq!((c.active, c.completed), (0, 0), "nothing started: {c:?}");
    }
    assert_eq!(
        handled.load(Ordering::SeqCst),
        0,
        "a handler started after shutdown began"
    );
    assert!(raced > 0, "shutdown never landed while a claim was in flight");
}
