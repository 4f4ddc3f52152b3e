//! Retry delays: a job's own backoff with jitter (drawn by the server), a
//! consumer's backoff and custom function, and which one wins.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{eventually, setup, setup_with};
use echomq::limits::MAX_DELAY;
use echomq::{
    Backoff, Consumer, EnqueueOptions, Error, HandlerError, Job, JobState, Lease, Outcome, Queue, QueueOptions,
    RetryContext, SettleOp, WorkerEvent,
};

const LEASE: Duration = Duration::from_secs(30);
const HOUR: Duration = Duration::from_secs(3_600);

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

/// The delays of the retries a consumer's settlements scheduled, per job id,
/// as its observer saw them (due time minus the script's now).
#[derive(Clone, Default)]
struct Delays(Arc<Mutex<Vec<(String, u64)>>>);

impl Delays {
    fn observer(&self) -> impl Fn(&WorkerEvent<'_>) + Send + Sync + 'static {
        let log = self.0.clone();
        move |e| {
            if let WorkerEvent::Settled {
                id,
                op: SettleOp::Retry,
                outcome: Outcome::Retrying { due_ms },
                server_ms,
                ..
            } = e
            {
                let d = due_ms.map_or(0, |due| due - server_ms);
                log.lock().unwrap().push((id.to_string(), d));
            }
        }
    }
    fn of(&self, id: &str) -> Vec<u64> {
        let log = self.0.lock().unwrap();
        log.iter().filter(|(j, _)| j == id).map(|(_, d)| *d).collect()
    }
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
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

// A consumer's backoff replaces the job's own for an error with `?`, a panic
// and a timeout alike; with jitter the consumer draws each delay in range.
#[tokio::test]
async fn consumer_backoff_overrides_the_jobs() {
    let (_s, q) = setup_with("consumer-backoff", QueueOptions::new().backoff(Backoff::fixed(HOUR))).await;
    let opts = EnqueueOptions::new().max_attempts(5).timeout(ms(300));
    let id = q.enqueue_with(&0u32, &opts).await.unwrap().id;
    let delays = Delays::default();
    let handle = Consumer::new(q.clone(), |job: Job<u32>| async move {
        match job.attempt() {
            1 => Err("first".into()),
            2 => panic!("second"),
            3 => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(())
            }
            _ => Ok(()),
        }
    })
    .backoff(Backoff::fixed(ms(40)))
    .observer(delays.observer())
    .spawn()
    .unwrap();
    let done = common::completes(&q, &id).await;
    handle.shutdown().await.unwrap();
    assert!(done, "{:?}", q.job(&id).await.unwrap());
    assert_eq!(delays.of(&id), [40, 40, 40]);
    let info = q.job(&id).await.unwrap();
    let errors: Vec<_> = info.errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!((info.failures, errors), (3, vec!["timeout", "panicked", "first"]));

    // Jitter: 40 jobs fail once each; the consumer spreads their retries.
    let (_s2, q) = setup_with("consumer-jitter", QueueOptions::new().backoff(Backoff::fixed(ms(1)))).await;
    q.enqueue_bulk(&(0..40).collect::<Vec<u32>>()).await.unwrap();
    let delays = Delays::default();
    let handle = Consumer::new(q.clone(), |_job: Job<u32>| async { Err::<(), _>("down".into()) })
        .backoff(Backoff::fixed(ms(10_000)).jitter(0.5))
        .observer(delays.observer())
        .spawn()
        .unwrap();
    let all = eventually(Duration::from_secs(10), || async { delays.len() == 40 }).await;
    handle.shutdown().await.unwrap();
    assert!(all);
    let d: Vec<u64> = delays.0.lock().unwrap().iter().map(|(_, d)| *d).collect();
    assert!(d.iter().all(|d| (5_000..=10_000).contains(d)), "{d:?}");
    assert!(d.iter().collect::<HashSet<_>>().len() >= 30, "{d:?}");
}

// A custom function sees this retry's failure count (the job's failures plus
// this one), the attempt, the job id, the job's own backoff and the error,
// and its delay is the one applied; one over MAX_DELAY saturates.
#[tokio::test]
async fn a_custom_function_sees_the_retry_and_chooses_the_delay() {
    let (_s, q) = setup("custom").await;
    let own = Backoff::exponential(ms(100), ms(1_000)).jitter(0.3);
    let opts = EnqueueOptions::new().backoff(own).max_attempts(5);
    let id = q.enqueue_with(&1u32, &opts).await.unwrap().id;
    let far = q.enqueue_with(&2u32, &opts).await.unwrap().id;
    type Seen = (String, u64, u64, Backoff, String, bool);
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let seen2 = seen.clone();
    let delays = Delays::default();
    let handle = Consumer::new(q.clone(), |job: Job<u32>| async move {
        match (*job.payload(), job.attempt()) {
            // A snooze counts no failure: attempt and failures part ways.
            (1, 1) => Err(HandlerError::snooze(ms(1))),
            (1, 2 | 3) => Err(format!("oops {}", job.attempt()).into()),
            (2, _) => Err("far".into()),
            _ => Ok(()),
        }
    })
    .backoff_with(move |ctx: &RetryContext<'_>| {
        let (lo, hi) = ctx.job_backoff().delay_range(ctx.failures());
        let in_range = (lo..=hi).contains(&ctx.job_delay());
        seen2.lock().unwrap().push((
            ctx.job_id().to_owned(),
            ctx.attempt(),
            ctx.failures(),
            ctx.job_backoff(),
            ctx.error().to_owned(),
            in_range,
        ));
        if ctx.error() == "far" {
            Duration::MAX
        } else {
            ms(30 * ctx.failures())
        }
    })
    .observer(delays.observer())
    .spawn()
    .unwrap();
    let done = common::completes(&q, &id).await;
    let far_delayed = eventually(Duration::from_secs(10), || async {
        q.job(&far).await.unwrap().state == JobState::Delayed
    })
    .await;
    handle.shutdown().await.unwrap();
    assert!(done && far_delayed);
    let seen = seen.lock().unwrap().clone();
    let mine: Vec<_> = seen.iter().filter(|s| s.0 == id).cloned().collect();
    assert_eq!(
        mine,
        [
            (id.clone(), 2, 1, own, "oops 2".to_owned(), true),
            (id.clone(), 3, 2, own, "oops 3".to_owned(), true),
        ]
    );
    assert_eq!(delays.of(&id), [30, 60]);
    assert_eq!(delays.of(&far), [MAX_DELAY.as_millis() as u64]);
}

// A custom function that panics: the retry falls back to the job's own
// backoff and the consumer carries on with the next jobs.
#[tokio::test]
async fn a_panicking_custom_function_falls_back_to_the_jobs_backoff() {
    let (_s, q) = setup_with("panicky", QueueOptions::new().backoff(Backoff::fixed(ms(77)))).await;
    let id = q.enqueue(&1u32).await.unwrap();
    let delays = Delays::default();
    let handle = Consumer::new(q.clone(), |job: Job<u32>| async move {
        if job.attempt() == 1 {
            return Err("fails once".into());
        }
        Ok(())
    })
    .backoff_with(|_| panic!("a bug in the backoff function"))
    .observer(delays.observer())
    .spawn()
    .unwrap();
    assert!(common::completes(&q, &id).await);
    assert_eq!(delays.of(&id), [77]);
    let next = q.enqueue(&2u32).await.unwrap();
    assert!(common::completes(&q, &next).await, "the consumer stopped");
    assert!(!handle.is_finished());
    handle.shutdown().await.unwrap();
}

// retry_after() wins over the consumer's backoff, over a custom function and
// over the job's own backoff.
#[tokio::test]
async fn retry_after_beats_every_backoff() {
    let (_s, q) = setup_with("retry-after-wins", QueueOptions::new().backoff(Backoff::fixed(HOUR))).await;
    let handler = |job: Job<u32>| async move {
        if job.attempt() == 1 {
            return Err(HandlerError::retry_after("later", ms(25)));
        }
        Ok(())
    };
    for (name, consumer) in [
        (
            "backoff",
            Consumer::new(q.clone(), handler).backoff(Backoff::fixed(HOUR)),
        ),
        ("backoff_with", Consumer::new(q.clone(), handler).backoff_with(|_| HOUR)),
    ] {
        let id = q.enqueue(&0u32).await.unwrap();
        let delays = Delays::default();
        let handle = consumer.observer(delays.observer()).spawn().unwrap();
        let done = common::completes(&q, &id).await;
        handle.shutdown().await.unwrap();
        assert!(done, "{name}");
        assert_eq!(delays.of(&id), [25], "{name}");
    }
}

// A jitter out of 0.0..=1.0, or NaN, is a typed error wherever the backoff is
// used: enqueue, queue options, a consumer's backoff.
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
        let consumer = Consumer::new(q.clone(), |_job: Job<u32>| async { Ok(()) }).backoff(b.jitter(bad));
        assert!(is_jitter_error(consumer.spawn().map(drop)), "{bad}");
    }
    let consumer = Consumer::new(q.clone(), |_job: Job<u32>| async { Ok(()) }).backoff(Backoff::fixed(Duration::MAX));
    assert!(matches!(
        consumer.spawn(),
        Err(Error::InvalidOption { name: "backoff", .. })
    ));
    assert_eq!(q.counts().await.unwrap().pending, 0, "nothing was enqueued");
}
