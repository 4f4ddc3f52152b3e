//! Expires-at against a real server: a job not started by its expiry
//! ends expired, decided on the server's clock at the claim that finds it,
//! by the reaper for jobs nobody claims, and by a retry, release or reap
//! that would make it wait past it.

mod common;

use std::time::{Duration, SystemTime};

use common::{past, setup};
use echomq::server::LocalServer;
use echomq::{
    Client, Consumer, EnqueueOptions, EnqueueStatus, Error, EventCursor, EventKind, HandlerError, Job, JobState,
    Outcome, limits::MAX_DELAY,
};

/// The job's expiry, as its record holds it.
async fn expiry(q: &echomq::Queue, id: &str) -> u64 {
    q.job(id).await.unwrap().expires_at_ms.expect("the job has an expiry")
}

// A claim past the expiry leases the job behind it and ends the expired
// one: a finished state of its own, counted, listed and evented, with its
// dedup marker released.
#[tokio::test]
async fn a_claim_past_the_expiry_ends_the_job_expired() {
    let (_s, q) = setup("xa-claim").await;
    let opts = EnqueueOptions::new()
        .discard_after(Duration::from_millis(200))
        .dedup("report-7");
    let doomed = q.enqueue_with(&"late", &opts).await.unwrap().id;
    let kept = q.enqueue(&"on time").await.unwrap();
    let before = q.server_time_ms().await.unwrap();
    let xa = expiry(&q, &doomed).await;
    assert!(
        xa > before && xa <= before + 200,
        "expiry {xa} counted from the server's now {before}"
    );
    past(&q, xa).await;

    let leases = q.claim(10, Duration::from_secs(30)).await.unwrap();
    let ids: Vec<&str> = leases.iter().map(|l| l.id()).collect();
    assert_eq!(ids, [kept.as_str()], "only the job still in time is leased");
    let job = q.job(&doomed).await.unwrap();
    assert_eq!(job.state, JobState::Expired);
    assert_eq!(job.attempts, 0, "it never started");
    assert_eq!(job.last_error.as_deref(), Some("expired"));
    assert!(job.finished_ms.is_some());
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.active, c.expired), (0, 1, 1));
    assert_eq!(c.of(JobState::Expired), 1);
    let page = q.list(JobState::Expired, None, 10).await.unwrap();
    assert_eq!(
        page.jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        [doomed.as_str()]
    );
    let mut events = q.events(EventCursor::Start).await.unwrap();
    let mut seen = false;
    while let Some(e) = events.next_within(Duration::from_millis(200)).await.unwrap() {
        seen |= e.kind == EventKind::Expired && e.job_id.as_deref() == Some(doomed.as_str());
    }
    assert!(seen, "an expired event for {doomed}");
    // The marker went with the job: the same dedup id makes a new job.
    let again = q
        .enqueue_with(&"again", &EnqueueOptions::new().dedup("report-7"))
        .await
        .unwrap();
    assert_eq!(again.status, EnqueueStatus::Created);
    // An expired job is finished: cancel leaves it, clean and remove take it.
    assert!(q.cancel(&doomed).await.is_ok());
    assert_eq!(q.job(&doomed).await.unwrap().state, JobState::Expired);
    assert_eq!(q.clean(JobState::Expired, Duration::ZERO, 10).await.unwrap(), 1);
    assert!(matches!(q.job(&doomed).await, Err(Error::JobNotFound(_))));
}

// Jobs nobody claims, pending or delayed, end expired at the reaper's pass
// once their expiry has passed; a job with a later expiry stays.
#[tokio::test]
async fn the_reaper_ends_waiting_jobs_nobody_claims() {
    let (_s, q) = setup("xa-reap").await;
    let short = EnqueueOptions::new().discard_after(Duration::from_millis(300));
    let pending = q.enqueue_with(&1, &short).await.unwrap().id;
    let delayed_opts = EnqueueOptions::new()
        .delay(Duration::from_millis(100))
        .discard_after(Duration::from_millis(300));
    let delayed = q.enqueue_with(&2, &delayed_opts).await.unwrap().id;
    let long = EnqueueOptions::new().discard_after(Duration::from_secs(3_600));
    let stays = q.enqueue_with(&3, &long).await.unwrap().id;
    let laned = q.enqueue_with(&4, &short.clone().lane("tenant-a")).await.unwrap().id;

    let report = q.reap(100).await.unwrap();
    assert_eq!(report.expired_waiting, 0, "nothing has expired yet");
    let first = expiry(&q, &pending).await;
    assert_eq!(
        report.next_due_ms,
        Some(q.job(&delayed).await.unwrap().deadline_ms.unwrap())
    );
    past(&q, expiry(&q, &laned).await.max(first)).await;

    let report = q.reap(100).await.unwrap();
    assert_eq!(report.expired_waiting, 3, "{report:?}");
    for id in [&pending, &delayed, &laned] {
        assert_eq!(q.job(id).await.unwrap().state, JobState::Expired, "{id}");
    }
    assert_eq!(q.job(&stays).await.unwrap().state, JobState::Pending);
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.delayed, c.expired), (1, 0, 3));
    // The laned job left its lane: the lane gives nothing, the queue the survivor.
    let leases = q.claim(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(leases.iter().map(|l| l.id()).collect::<Vec<_>>(), [stays.as_str()]);
    assert!(q.list_lane("tenant-a", None, 10).await.unwrap().jobs.is_empty());
    // A second pass finds nothing more.
    assert_eq!(q.reap(100).await.unwrap().expired_waiting, 0);
}

// A job that fails and would wait for its retry past its expiry ends
// expired at once, keeping the handler's error in its history; one whose
// retry comes before the expiry retries, and expires if it is still
// waiting when the expiry passes.
#[tokio::test]
async fn a_job_expires_while_waiting_for_a_retry() {
    let (_s, q) = setup("xa-retry").await;
    let opts = EnqueueOptions::new()
        .discard_after(Duration::from_secs(2))
        .max_attempts(5);
    let id = q.enqueue_with(&"x", &opts).await.unwrap().id;

    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    let early = q
        .retry(&lease, Some(Duration::from_millis(100)), "flaky")
        .await
        .unwrap();
    assert!(matches!(early.outcome, Outcome::Retrying { .. }), "{:?}", early.outcome);
    assert_eq!(q.job(&id).await.unwrap().state, JobState::Delayed);

    past(&q, q.job(&id).await.unwrap().deadline_ms.unwrap()).await;
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    assert_eq!(lease.attempt(), 2);
    let late = q
        .retry(&lease, Some(Duration::from_secs(60)), "still flaky")
        .await
        .unwrap();
    assert_eq!(late.outcome, Outcome::Expired);
    let job = q.job(&id).await.unwrap();
    assert_eq!(job.state, JobState::Expired);
    assert_eq!(job.failures, 2);
    assert_eq!(job.errors.first().map(|e| e.message.as_str()), Some("still flaky"));
    // The stale lease is fenced like any other.
    assert!(matches!(q.complete(&lease).await, Err(Error::LeaseLost { .. })));

    // A retry due before the expiry, with nobody to claim it until after.
    let id = q.enqueue_with(&"y", &opts).await.unwrap().id;
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    q.retry(&lease, Some(Duration::from_millis(50)), "flaky").await.unwrap();
    past(&q, expiry(&q, &id).await).await;
    assert!(q.claim(1, Duration::from_secs(30)).await.unwrap().is_empty());
    assert_eq!(q.job(&id).await.unwrap().state, JobState::Expired);
}

// A consumer whose handler keeps failing with a backoff past the expiry:
// the job ends expired, not failed, and its handler ran once.
#[tokio::test]
async fn a_consumer_sees_the_job_expire_instead_of_retrying() {
    let (_s, q) = setup("xa-consumer").await;
    let opts = EnqueueOptions::new()
        .discard_after(Duration::from_secs(1))
        .max_attempts(10);
    let id = q.enqueue_with(&0, &opts).await.unwrap().id;
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen = runs.clone();
    let c = Consumer::new(q.clone(), move |_job: Job<u32>| {
        let runs = seen.clone();
        async move {
            runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err::<(), _>(HandlerError::retry_after("down", Duration::from_secs(30)))
        }
    })
    .spawn()
    .unwrap();
    let ended = common::eventually(Duration::from_secs(10), || async {
        q.job(&id).await.unwrap().state == JobState::Expired
    })
    .await;
    c.shutdown().await.unwrap();
    assert!(ended, "the job did not end expired: {:?}", q.job(&id).await.unwrap());
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
}

// A job running at its expiry is not stopped: it completes. One whose
// lease lapses past its expiry is reaped into expired, not back to
// pending; one released past it ends expired too.
#[tokio::test]
async fn a_running_job_may_finish_but_never_starts_again() {
    let (_s, q) = setup("xa-running").await;
    let opts = EnqueueOptions::new().discard_after(Duration::from_millis(300));
    let done = q.enqueue_with(&1, &opts).await.unwrap().id;
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    past(&q, expiry(&q, &done).await).await;
    assert_eq!(q.complete(&lease).await.unwrap().outcome, Outcome::Completed);
    assert_eq!(q.job(&done).await.unwrap().state, JobState::Completed);

    let stalled = q.enqueue_with(&2, &opts).await.unwrap().id;
    let lease = q.claim(1, Duration::from_millis(400)).await.unwrap().remove(0);
    past(&q, lease.deadline_ms()).await;
    let report = q.reap(10).await.unwrap();
    assert_eq!(report.expired, std::slice::from_ref(&stalled), "{report:?}");
    let job = q.job(&stalled).await.unwrap();
    assert_eq!((job.state, job.stalls), (JobState::Expired, 1));

    let released = q.enqueue_with(&3, &opts).await.unwrap().id;
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    past(&q, expiry(&q, &released).await).await;
    assert_eq!(q.release(&lease).await.unwrap().outcome, Outcome::Expired);
    assert_eq!(q.job(&released).await.unwrap().state, JobState::Expired);
    assert_eq!(q.counts().await.unwrap().expired, 2);
}

// Bad expiries are typed errors and write nothing.
#[tokio::test]
async fn bad_expiries_are_refused() {
    let (_s, q) = setup("xa-bad").await;
    let now = SystemTime::now();
    let bad = [
        EnqueueOptions::new().expires_at(now - Duration::from_secs(1)),
        EnqueueOptions::new().expires_at(now + MAX_DELAY + Duration::from_secs(60)),
        EnqueueOptions::new().discard_after(Duration::ZERO),
        EnqueueOptions::new().discard_after(MAX_DELAY + Duration::from_secs(1)),
        EnqueueOptions::new()
            .delay(Duration::from_secs(60))
            .discard_after(Duration::from_secs(30)),
        EnqueueOptions::new()
            .run_at(now + Duration::from_secs(600))
            .expires_at(now + Duration::from_secs(300)),
    ];
    for opts in &bad {
        let r = q.enqueue_with(&1, opts).await;
        assert!(matches!(r, Err(Error::InvalidOption { .. })), "{opts:?}: {r:?}");
    }
    // A bulk enqueue with one bad job writes none of them.
    let jobs = vec![(1, EnqueueOptions::new()), (2, bad[0].clone())];
    assert!(matches!(
        q.enqueue_bulk_with(&jobs).await,
        Err(Error::InvalidOption { .. })
    ));
    assert_eq!(q.counts().await.unwrap(), echomq::Counts::default());
}

// The client's clock an hour behind the server's (the server runs under
// libfaketime, an hour ahead): `discard_after` counts from the server's
// now, so the job is in time for its whole span; `expires_at` is a time
// on the server's clock, so one the client thinks is half an hour ahead
// has already passed for the server, and the first claim ends the job.
#[tokio::test]
async fn expiry_is_decided_on_the_servers_clock() {
    let server = LocalServer::builder()
        .env("LD_PRELOAD", common::faketime_lib())
        .env("FAKETIME", "+1h")
        .env("DONT_FAKE_MONOTONIC", "1")
        .start()
        .expect("start a local server under libfaketime");
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.queue(&common::unique("xa-skew")).await.unwrap();
    let ours = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let theirs = q.server_time_ms().await.unwrap();
    assert!(
        theirs > ours + 3_000_000,
        "the server's clock is not ahead: {theirs} vs {ours}"
    );

    let relative = q
        .enqueue_with(&1, &EnqueueOptions::new().discard_after(Duration::from_secs(600)))
        .await
        .unwrap()
        .id;
    let xa = expiry(&q, &relative).await;
    assert!(
        xa >= theirs + 590_000 && xa <= theirs + 610_000,
        "{xa} is the server's now + 10 min"
    );
    let leases = q.claim(1, Duration::from_secs(30)).await.unwrap();
    assert_eq!(leases.len(), 1, "in time on the server's clock");
    q.complete(&leases[0]).await.unwrap();

    let absolute = q
        .enqueue_with(
            &2,
            &EnqueueOptions::new().expires_at(SystemTime::now() + Duration::from_secs(1_800)),
        )
        .await
        .unwrap()
        .id;
    assert!(q.claim(1, Duration::from_secs(30)).await.unwrap().is_empty());
    assert_eq!(q.job(&absolute).await.unwrap().state, JobState::Expired);
}
