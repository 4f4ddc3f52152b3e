//! The at-least-once core against a real server: lifecycle, redelivery,
//! fencing, racing reapers, retries, the server clock, bad input, NOSCRIPT.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{eventually, past, raw, setup, setup_with, snapshot};
use echomq::{
    Backoff, Consumer, EnqueueOptions, EnqueueStatus, Error, Job, JobState, Outcome, Queue, QueueOptions, Reaper,
    Retention, Settle,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, PartialEq, Clone)]
struct Email {
    to: String,
    n: u32,
}

fn email(n: u32) -> Email {
    Email {
        to: format!("u{n}@example.com"),
        n,
    }
}

const LEASE: Duration = Duration::from_secs(30);

// enqueue → claim → complete moves the job through pending, active, completed; counts and job() agree.
#[tokio::test]
async fn full_lifecycle() {
    let (_s, q) = setup("life").await;
    let id = q.enqueue(&email(1)).await.unwrap();
    let info = q.job(&id).await.unwrap();
    assert_eq!(info.state, JobState::Pending);
    assert_eq!(info.decode::<Email>().unwrap(), email(1));
    assert_eq!(q.counts().await.unwrap().pending, 1);

    let leases = q.claim(10, LEASE).await.unwrap();
    assert_eq!(leases.len(), 1);
    let lease = &leases[0];
    assert_eq!((lease.id(), lease.attempt()), (id.as_str(), 1));
    assert_eq!(lease.decode::<Email>().unwrap(), email(1));
    let info = q.job(&id).await.unwrap();
    assert_eq!((info.state, info.attempts), (JobState::Active, 1));
    assert_eq!(info.deadline_ms, Some(lease.deadline_ms()));
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.active), (0, 1));

    let s = q.complete(lease).await.unwrap();
    assert_eq!(s.outcome, Outcome::Completed);
    let info = q.job(&id).await.unwrap();
    assert_eq!(info.state, JobState::Completed);
    assert!(info.finished_ms.unwrap() >= info.created_ms);
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.active, c.completed), (0, 0, 1));
    assert!(q.claim(10, LEASE).await.unwrap().is_empty());
}

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

// A handler failing twice then succeeding completes with failures == 2; one always failing ends failed.
#[tokio::test]
async fn consumer_retries_then_completes_or_fails() {
    let opts = QueueOptions::new()
        .backoff(Backoff::Fixed(Duration::from_millis(10)))
        .max_attempts(3);
    let (_s, q) = setup_with("retry", opts).await;
    let flaky = q.enqueue(&email(1)).await.unwrap();
    let doomed = q.enqueue(&email(2)).await.unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let c2 = calls.clone();
    let handle = Consumer::new(q.clone(), move |job: Job<Email>| {
        let calls = c2.clone();
        async move {
            if job.payload().n == 2 {
                return Err(format!("always fails (attempt {})", job.attempt()).into());
            }
            if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                Err("not yet".into())
            } else {
                Ok(())
            }
        }
    })
    .spawn()
    .unwrap();
    let done = eventually(Duration::from_secs(10), || async {
        let c = q.counts().await.unwrap();
        c.completed == 1 && c.failed == 1
    })
    .await;
    handle.shutdown().await.unwrap();
    assert!(done, "jobs did not settle: {:?}", q.counts().await.unwrap());
    let f = q.job(&flaky).await.unwrap();
    assert_eq!((f.state, f.failures, f.attempts), (JobState::Completed, 2, 3));
    let d = q.job(&doomed).await.unwrap();
    assert_eq!((d.state, d.failures), (JobState::Failed, 3));
    assert_eq!(d.last_error.as_deref(), Some("always fails (attempt 3)"));
}

// A panicking handler costs the job an attempt ("panicked"), not the consumer its life.
#[tokio::test]
async fn panic_is_a_failed_attempt() {
    let opts = QueueOptions::new()
        .backoff(Backoff::Fixed(Duration::ZERO))
        .max_attempts(2);
    let (_s, q) = setup_with("panic", opts).await;
    let bad = q.enqueue(&email(1)).await.unwrap();
    let handle = Consumer::new(q.clone(), |job: Job<Email>| async move {
        if job.payload().n == 1 {
            panic!("handler bug");
        }
        Ok(())
    })
    .spawn()
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.counts().await.unwrap().failed == 1
        })
        .await
    );
    // The consumer still works.
    let good = q.enqueue(&email(2)).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.job(&good).await.unwrap().state == JobState::Completed
        })
        .await
    );
    handle.shutdown().await.unwrap();
    let info = q.job(&bad).await.unwrap();
    assert_eq!((info.failures, info.last_error.as_deref()), (2, Some("panicked")));
}

// Deadlines are computed from the server's TIME: the lease deadline lies between server clock readings.
#[tokio::test]
async fn deadlines_follow_the_server_clock() {
    let (_s, q) = setup("clock").await;
    q.enqueue(&email(1)).await.unwrap();
    let lease_len = Duration::from_millis(700);
    let t0 = q.server_time_ms().await.unwrap();
    let mut lease = q.claim(1, lease_len).await.unwrap().remove(0);
    let t1 = q.server_time_ms().await.unwrap();
    assert!(
        (t0 + 700..=t1 + 700).contains(&lease.deadline_ms()),
        "{t0} {} {t1}",
        lease.deadline_ms()
    );
    let t2 = q.server_time_ms().await.unwrap();
    let d = q.extend(&mut lease, Duration::from_secs(5)).await.unwrap();
    let t3 = q.server_time_ms().await.unwrap();
    assert!((t2 + 5000..=t3 + 5000).contains(&d));
    // Delays are resolved on the server too.
    let t4 = q.server_time_ms().await.unwrap();
    let id = q
        .enqueue_with(&email(2), &EnqueueOptions::new().delay(Duration::from_secs(60)))
        .await
        .unwrap()
        .id;
    let due = q.job(&id).await.unwrap().deadline_ms.unwrap();
    assert!(due >= t4 + 60_000 && due <= q.server_time_ms().await.unwrap() + 60_000);
}

// Delayed jobs become claimable only when due; priority orders pending jobs; release returns a job at once.
#[tokio::test]
async fn delay_priority_and_release() {
    let (_s, q) = setup("order").await;
    let low = q
        .enqueue_with(&email(1), &EnqueueOptions::new().priority(-5))
        .await
        .unwrap()
        .id;
    let normal = q.enqueue(&email(2)).await.unwrap();
    let high = q
        .enqueue_with(&email(3), &EnqueueOptions::new().priority(9))
        .await
        .unwrap()
        .id;
    let later = q
        .enqueue_with(&email(4), &EnqueueOptions::new().delay(Duration::from_millis(300)))
        .await
        .unwrap()
        .id;
    let got: Vec<String> = q
        .claim(10, LEASE)
        .await
        .unwrap()
        .iter()
        .map(|l| l.id().to_owned())
        .collect();
    assert_eq!(got, vec![high.clone(), normal, low]);
    assert!(q.claim(10, LEASE).await.unwrap().is_empty(), "delayed job ran early");
    past(&q, q.job(&later).await.unwrap().deadline_ms.unwrap()).await;
    let l = q.claim(10, LEASE).await.unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].id(), later);
    assert_eq!(q.release(&l[0]).await.unwrap().outcome, Outcome::Released);
    let again = q.claim(1, LEASE).await.unwrap().remove(0);
    assert_eq!((again.id(), again.attempt()), (later.as_str(), 2));
    let info = q.job(&later).await.unwrap();
    assert_eq!(
        (info.failures, info.stalls),
        (0, 0),
        "release counted as a failure or stall"
    );
}

// Caller-chosen ids and dedup ids make enqueue idempotent.
#[tokio::test]
async fn ids_and_dedup_make_enqueue_idempotent() {
    let (_s, q) = setup("dedup").await;
    let o = EnqueueOptions::new().id("order-7");
    let a = q.enqueue_with(&email(1), &o).await.unwrap();
    let b = q.enqueue_with(&email(2), &o).await.unwrap();
    assert_eq!((a.status, b.status), (EnqueueStatus::Created, EnqueueStatus::Existing));
    assert_eq!(a.id, "order-7");
    assert_eq!(q.job("order-7").await.unwrap().decode::<Email>().unwrap(), email(1));
    // All-digit ids are the minted ones: a caller cannot take one.
    let e = q
        .enqueue_with(&email(3), &EnqueueOptions::new().id("2"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidId { .. }), "{e:?}");
    q.enqueue(&email(4)).await.unwrap();

    let d = EnqueueOptions::new().dedup("user-9");
    let first = q.enqueue_with(&email(5), &d).await.unwrap();
    let second = q.enqueue_with(&email(6), &d).await.unwrap();
    assert_eq!(second.status, EnqueueStatus::Deduplicated);
    assert_eq!(second.id, first.id);
    // The marker goes when its job finishes.
    let mut leases = q.claim(10, LEASE).await.unwrap();
    leases.retain(|l| l.id() == first.id);
    q.complete(&leases[0]).await.unwrap();
    let third = q.enqueue_with(&email(7), &d).await.unwrap();
    assert_eq!(third.status, EnqueueStatus::Created);
    let c = q.counts().await.unwrap();
    assert_eq!((c.active, c.completed, c.pending), (2, 1, 1));
}

// Bad input gets a typed error and the queue keeps working.
#[tokio::test]
async fn bad_input_gets_typed_errors() {
    let (s, q) = setup_with("bad", QueueOptions::new().max_payload_bytes(1024)).await;
    for name in ["", "a{b}", "new\nline"] {
        assert!(
            matches!(
                Queue::connect(&s.url(), name).await,
                Err(Error::InvalidQueueName { .. })
            ),
            "{name:?}"
        );
    }
    let big = "x".repeat(2000);
    assert!(matches!(
        q.enqueue(&big).await,
        Err(Error::PayloadTooLarge { limit: 1024, .. })
    ));
    assert!(matches!(
        q.enqueue_with(&1, &EnqueueOptions::new().id("")).await,
        Err(Error::InvalidId { .. })
    ));
    assert!(matches!(q.job("nope").await, Err(Error::JobNotFound(_))));
    assert!(matches!(q.claim(0, LEASE).await, Err(Error::InvalidOption { .. })));

    // An undecodable payload fails that job for good; the consumer keeps going.
    let wrong = q.enqueue(&"not an email").await.unwrap();
    let right = q.enqueue(&email(1)).await.unwrap();
    assert!(common::complete_with_noop::<Email>(&q, 1).await);
    let w = q.job(&wrong).await.unwrap();
    assert_eq!(w.state, JobState::Failed);
    assert!(w.last_error.unwrap().starts_with("undecodable payload"));
    assert_eq!(q.job(&right).await.unwrap().state, JobState::Completed);

    // A queue written by a newer layout is refused, not misread.
    let mut c = raw(&s).await;
    let newer = common::unique("newer");
    let _: () = redis::cmd("HSET")
        .arg(format!("emq:{{{newer}}}:meta"))
        .arg("v")
        .arg(99)
        .query_async(&mut c)
        .await
        .unwrap();
    let e = Queue::connect(&s.url(), &newer).await.unwrap_err();
    assert!(
        matches!(e, Error::LayoutMismatch { ref found, .. } if found == "99"),
        "{e:?}"
    );

    // An unreachable server is a typed, transient error.
    let port = s.port();
    drop(s);
    let e = Queue::connect(&format!("redis://127.0.0.1:{port}/"), "q")
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    assert!(q.enqueue(&email(2)).await.unwrap_err().is_transient());
}

// After FUNCTION FLUSH every operation still works (the function library reloads when a call finds it missing).
#[tokio::test]
async fn function_flush_is_transparent() {
    let (s, q) = setup("noscript").await;
    let mut c = raw(&s).await;
    let flush = || redis::cmd("FUNCTION").arg("FLUSH").to_owned();
    flush().exec_async(&mut c).await.unwrap();
    q.enqueue(&email(1)).await.unwrap();
    q.enqueue(&email(2)).await.unwrap();
    q.enqueue(&email(3)).await.unwrap();
    flush().exec_async(&mut c).await.unwrap();
    let mut l = q.claim(3, Duration::from_millis(30)).await.unwrap();
    assert_eq!(l.len(), 3);
    flush().exec_async(&mut c).await.unwrap();
    q.extend(&mut l[0], LEASE).await.unwrap();
    flush().exec_async(&mut c).await.unwrap();
    q.complete(&l[0]).await.unwrap();
    flush().exec_async(&mut c).await.unwrap();
    q.retry(&l[1], Some(Duration::ZERO), "e").await.unwrap();
    flush().exec_async(&mut c).await.unwrap();
    q.release(&q.claim(1, LEASE).await.unwrap()[0]).await.unwrap();
    flush().exec_async(&mut c).await.unwrap();
    past(&q, l[2].deadline_ms()).await;
    assert_eq!(Reaper::new(q.clone()).run_once().await.unwrap().requeued.len(), 1);
    flush().exec_async(&mut c).await.unwrap();
    let last = q.claim(5, LEASE).await.unwrap();
    assert_eq!(last.len(), 2);
    flush().exec_async(&mut c).await.unwrap();
    q.fail(&last[0], "done").await.unwrap();
    let c = q.counts().await.unwrap();
    assert_eq!((c.completed, c.failed, c.active), (1, 1, 1));
}

// Retention keeps the newest N finished records (trimming once 64 more pile up) and deletes older ones; None deletes at once.
#[tokio::test]
async fn retention_trims_finished_jobs() {
    let (s, q) = setup_with("keep", QueueOptions::new().keep_completed(Retention::Newest(5))).await;
    q.enqueue_bulk(&(0..200).map(email).collect::<Vec<_>>()).await.unwrap();
    let mut most = 0;
    for l in q.claim(200, LEASE).await.unwrap() {
        q.complete(&l).await.unwrap();
        most = most.max(q.counts().await.unwrap().completed);
    }
    assert_eq!(most, 5 + 63, "retention let the records pile up past keep + slack");
    let kept = q.counts().await.unwrap().completed;
    assert!((5..5 + 64).contains(&kept), "{kept}");
    assert!(matches!(q.job("1").await, Err(Error::JobNotFound(_))));
    assert_eq!(q.job("200").await.unwrap().state, JobState::Completed);

    let q2 = Queue::connect_with(
        &s.url(),
        &common::unique("gone"),
        QueueOptions::new().keep_completed(Retention::None),
    )
    .await
    .unwrap();
    let id = q2.enqueue(&email(1)).await.unwrap();
    let l = q2.claim(1, LEASE).await.unwrap().remove(0);
    q2.complete(&l).await.unwrap();
    assert!(matches!(q2.job(&id).await, Err(Error::JobNotFound(_))));
    assert_eq!(q2.counts().await.unwrap(), echomq::Counts::default());
}

// An idle consumer is woken by enqueue (not a sleep loop): the job starts long before the poll interval.
#[tokio::test]
async fn idle_consumer_wakes_on_enqueue() {
    let (s, q) = setup("wake").await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let handle = Consumer::new(q.clone(), move |job: Job<Email>| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(job.payload().n);
            Ok(())
        }
    })
    .poll_interval(Duration::from_secs(30))
    .spawn()
    .unwrap();
    // Wait until it is idle, blocked in BLPOP.
    let c = raw(&s).await;
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut c = c.clone();
            async move {
                let info: String = redis::cmd("INFO").arg("clients").query_async(&mut c).await.unwrap();
                info.lines()
                    .any(|l| l.starts_with("blocked_clients:") && l != "blocked_clients:0")
            }
        })
        .await
    );
    for n in 0..5 {
        q.enqueue(&email(n)).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert_eq!(got.unwrap(), Some(n), "not woken within 5 s (poll interval is 30 s)");
    }
    handle.shutdown().await.unwrap();
}

// Graceful shutdown lets running handlers finish, and releases those past
// the grace period (several, so that some handlers see their cancellation
// and return before the consumer notices the grace period is over).
#[tokio::test]
async fn shutdown_finishes_or_releases() {
    let (_s, q) = setup("shutdown").await;
    let quick = q.enqueue(&email(1)).await.unwrap();
    let mut slow = Vec::new();
    for _ in 0..8 {
        slow.push(q.enqueue(&email(2)).await.unwrap());
    }
    let started = Arc::new(AtomicU32::new(0));
    let st = started.clone();
    let handle = Consumer::new(q.clone(), move |job: Job<Email>| {
        let st = st.clone();
        async move {
            st.fetch_add(1, Ordering::SeqCst);
            let wait = if job.payload().n == 1 { 200 } else { 60_000 };
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(wait)) => Ok(()),
                _ = job.cancellation().cancelled() => Err("cancelled".into()),
            }
        }
    })
    .shutdown_timeout(Duration::from_millis(600))
    .spawn()
    .unwrap();
    assert!(eventually(Duration::from_secs(5), || async { started.load(Ordering::SeqCst) == 9 }).await);
    handle.shutdown().await.unwrap();
    assert_eq!(q.job(&quick).await.unwrap().state, JobState::Completed);
    for id in &slow {
        let s = q.job(id).await.unwrap();
        assert_eq!((s.state, s.failures, s.stalls), (JobState::Pending, 0, 0), "job {id}");
    }
}

/// libfaketime, to run the server with a skewed clock; None where not installed.
fn faketime_lib() -> Option<&'static str> {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
}

// With the server's clock an hour off the client's, leases and reaping follow the server's clock.
#[tokio::test]
async fn skewed_server_clock_decides() {
    let lib = faketime_lib().expect("libfaketime is missing: apt-get install faketime (scripts/test installs it)");
    for skew in ["+1h", "-1h"] {
        let started = echomq::server::LocalServer::builder()
            .env("LD_PRELOAD", lib)
            .env("FAKETIME", skew)
            .start();
        // Debian's jemalloc-linked redis-server recurses in libfaketime's
        // clock_gettime and never starts under it; scripts/test runs this
        // test on Valkey, and .ci/run says so for its Redis 7.0 pass.
        let Ok(server) = started else {
            println!("SKIPPED: this server binary does not start under libfaketime (jemalloc): {started:?}");
            return;
        };
        let q = Queue::connect(&server.url(), &common::unique("skew")).await.unwrap();
        let client_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let server_ms = q.server_time_ms().await.unwrap();
        assert!(
            server_ms.abs_diff(client_ms) > 3_000_000,
            "faketime did not skew the server ({skew})"
        );

        let id = q.enqueue(&email(1)).await.unwrap();
        let lease = q.claim(1, Duration::from_millis(300)).await.unwrap().remove(0);
        assert!(
            lease.deadline_ms().abs_diff(server_ms + 300) < 2_000,
            "deadline not on the server clock ({skew})"
        );
        // The lease expires 300 ms later by the server's clock, whatever the client's says.
        assert!(Reaper::new(q.clone()).run_once().await.unwrap().requeued.is_empty());
        past(&q, lease.deadline_ms()).await;
        assert_eq!(
            Reaper::new(q.clone()).run_once().await.unwrap().requeued,
            vec![(id.clone(), 1)],
            "{skew}"
        );

        // A consumer works normally against the skewed server.
        assert!(common::complete_with_noop::<Email>(&q, 1).await);
    }
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

// Concurrent single enqueues are coalesced into fewer script calls, and each caller still gets its own answer.
#[tokio::test]
async fn concurrent_enqueues_coalesce_with_exact_answers() {
    let (s, q) = setup("coalesce").await;
    let mut c = raw(&s).await;
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut c).await.unwrap();
    let tasks: Vec<_> = (0..200u32)
        .map(|i| {
            let q = q.clone();
            tokio::spawn(async move {
                let opts = EnqueueOptions::new().id(format!("c-{}", i % 100));
                (i, q.enqueue_with(&email(i), &opts).await.unwrap())
            })
        })
        .collect();
    let mut created = 0;
    for t in tasks {
        let (i, e) = t.await.unwrap();
        assert_eq!(e.id, format!("c-{}", i % 100));
        if e.status == EnqueueStatus::Created {
            created += 1;
        } else {
            assert_eq!(e.status, EnqueueStatus::Existing);
        }
    }
    assert_eq!(created, 100);
    assert_eq!(q.counts().await.unwrap().pending, 100);
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    let calls: u64 = stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_fcall:"))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum();
    assert!(calls < 200, "200 concurrent enqueues took {calls} script calls");
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

// If one of a consumer's own tasks dies (the settler, made to panic in the
// fault suite's build with ECHOMQ_FAULT=settler-panic), the consumer stops
// claiming, its job tasks settle their jobs directly, the jobs the dead
// settler held come back by the reaper, and shutdown reports
// Error::Internal. In a normal build the same run simply completes.
#[tokio::test]
async fn a_dead_settler_stops_the_consumer_and_reports() {
    let dying = std::env::var("ECHOMQ_FAULT").is_ok_and(|f| f.contains("settler-panic"));
    let opts = QueueOptions::new().max_stalls(10);
    let (_s, q) = setup_with("dead-settler", opts).await;
    q.enqueue_bulk(&(0..10).map(email).collect::<Vec<_>>()).await.unwrap();
    let handle = Consumer::new(q.clone(), |_job: Job<Email>| async { Ok(()) })
        .concurrency(2)
        .prefetch(0)
        .lease(Duration::from_millis(300))
        .reap_interval(Duration::from_millis(20))
        .spawn()
        .unwrap();
    if !dying {
        assert!(
            eventually(Duration::from_secs(10), || async {
                q.counts().await.unwrap().completed == 10
            })
            .await
        );
        handle.shutdown().await.unwrap();
        return;
    }
    // The settler dies on its first batch; the consumer stops by itself.
    assert!(
        eventually(Duration::from_secs(10), || async { handle.is_finished() }).await,
        "the consumer kept running"
    );
    let e = handle.shutdown().await.unwrap_err();
    assert!(matches!(e, Error::Internal { task: "settler", .. }), "{e:?}");
    // Nothing stays leased: what the dead settler held is reaped, the rest
    // was settled directly or never claimed.
    let reaper = Reaper::new(q.clone());
    assert!(
        eventually(Duration::from_secs(10), || async {
            reaper.run_once().await.unwrap();
            q.counts().await.unwrap().active == 0
        })
        .await
    );
    let c = q.counts().await.unwrap();
    assert_eq!(c.pending + c.completed, 10, "{c:?}");
}

// run_at schedules on the server's clock: a time past runs now, a future
// one is due exactly then, not before; with a delay it is refused.
#[tokio::test]
async fn run_at_is_due_on_the_server_clock() {
    let (_s, q) = setup("run-at").await;
    let server_now = q.server_time_ms().await.unwrap();
    let at = |ms: u64| std::time::UNIX_EPOCH + Duration::from_millis(ms);
    let overdue = q
        .enqueue_with(&email(1), &EnqueueOptions::new().run_at(at(server_now - 60_000)))
        .await
        .unwrap()
        .id;
    assert_eq!(q.job(&overdue).await.unwrap().state, JobState::Pending);
    let due = server_now + 400;
    let later = q
        .enqueue_with(&email(2), &EnqueueOptions::new().run_at(at(due)))
        .await
        .unwrap()
        .id;
    let info = q.job(&later).await.unwrap();
    assert_eq!((info.state, info.deadline_ms), (JobState::Delayed, Some(due)));
    assert_eq!(q.claim(10, LEASE).await.unwrap().len(), 1, "only the past one is due");
    past(&q, due).await;
    let l = q.claim(10, LEASE).await.unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].id(), later);
    let both = EnqueueOptions::new().run_at(at(due)).delay(Duration::from_secs(1));
    assert!(matches!(
        q.enqueue_with(&email(3), &both).await,
        Err(Error::InvalidOption { .. })
    ));
    let far = EnqueueOptions::new().run_at(at(server_now + 400 * 86_400_000));
    assert!(matches!(
        q.enqueue_with(&email(3), &far).await,
        Err(Error::InvalidOption { .. })
    ));
}

// A dedup marker with a TTL stands for its TTL whatever the job does, and
// a later enqueue with the same dedup id makes a new job.
#[tokio::test]
async fn dedup_with_a_ttl_stands_for_the_ttl() {
    let (s, q) = setup("dedup-ttl").await;
    let opts = EnqueueOptions::new().dedup_for("report-7", Duration::from_millis(300));
    let first = q.enqueue_with(&email(1), &opts).await.unwrap();
    assert_eq!(first.status, EnqueueStatus::Created);
    let again = q.enqueue_with(&email(2), &opts).await.unwrap();
    assert_eq!(
        (again.status, again.id.as_str()),
        (EnqueueStatus::Deduplicated, first.id.as_str())
    );
    // Finishing the job does not release a TTL marker...
    let l = q.claim(1, LEASE).await.unwrap().remove(0);
    q.complete(&l).await.unwrap();
    assert_eq!(
        q.enqueue_with(&email(3), &opts).await.unwrap().status,
        EnqueueStatus::Deduplicated
    );
    // ...its TTL does.
    let mut c = raw(&s).await;
    let marker = format!("emq:{{{}}}:de:report-7", q.name());
    let ttl: i64 = redis::cmd("PTTL").arg(&marker).query_async(&mut c).await.unwrap();
    assert!((1..=300).contains(&ttl), "{ttl}");
    past(&q, q.server_time_ms().await.unwrap() + ttl as u64).await;
    assert!(
        eventually(Duration::from_secs(2), || async {
            let e: i64 = redis::cmd("EXISTS")
                .arg(&marker)
                .query_async(&mut raw(&s).await)
                .await
                .unwrap();
            e == 0
        })
        .await
    );
    let later = q.enqueue_with(&email(4), &opts).await.unwrap();
    assert_eq!(later.status, EnqueueStatus::Created);
    assert_ne!(later.id, first.id);
}

// A bulk enqueue with per-job options stores each job as its options say
// and answers in order, Existing for an id already there.
#[tokio::test]
async fn bulk_enqueue_with_per_job_options() {
    let (_s, q) = setup("bulk-opts").await;
    q.enqueue_with(&email(0), &EnqueueOptions::new().id("b-2"))
        .await
        .unwrap();
    let jobs = vec![
        (email(1), EnqueueOptions::new().id("b-1").priority(-1)),
        (email(2), EnqueueOptions::new().id("b-2")),
        (email(3), EnqueueOptions::new().delay(Duration::from_secs(60))),
        (email(4), EnqueueOptions::new().max_attempts(9).priority(5)),
    ];
    let r = q.enqueue_bulk_with(&jobs).await.unwrap();
    let statuses: Vec<EnqueueStatus> = r.iter().map(|e| e.status).collect();
    assert_eq!(
        statuses,
        [
            EnqueueStatus::Created,
            EnqueueStatus::Existing,
            EnqueueStatus::Created,
            EnqueueStatus::Created
        ]
    );
    assert_eq!((r[0].id.as_str(), r[1].id.as_str()), ("b-1", "b-2"));
    assert_eq!(q.job(&r[2].id).await.unwrap().state, JobState::Delayed);
    assert_eq!(q.job(&r[3].id).await.unwrap().limits.max_attempts, 9);
    // Priority decides the claim order: the max_attempts(9) job, then b-2, then b-1.
    let order: Vec<String> = q
        .claim(10, LEASE)
        .await
        .unwrap()
        .iter()
        .map(|l| l.id().to_owned())
        .collect();
    assert_eq!(order, [r[3].id.clone(), "b-2".to_owned(), "b-1".to_owned()]);
    let bad = vec![
        (email(5), EnqueueOptions::new()),
        (email(6), EnqueueOptions::new().id("")),
    ];
    assert!(matches!(q.enqueue_bulk_with(&bad).await, Err(Error::InvalidId { .. })));
    assert_eq!(
        q.counts().await.unwrap().pending,
        0,
        "nothing of a refused batch was stored"
    );
}

// Retention by age deletes the records of jobs finished longer ago than
// the age as later jobs finish (at most a thousand per call), so records
// stay bounded over a long run.
#[tokio::test]
async fn retention_by_age_keeps_records_bounded() {
    let keep = Retention::Within(Duration::from_millis(100));
    let (s, q) = setup_with("keep-age", QueueOptions::new().keep_completed(keep)).await;
    // Completes `n` jobs in batches; returns the server time of the last.
    let complete = |n: u32| {
        let q = q.clone();
        async move {
            q.enqueue_bulk(&(0..n).map(email).collect::<Vec<_>>()).await.unwrap();
            let mut last = 0;
            loop {
                let leases = q.claim(1000, LEASE).await.unwrap();
                if leases.is_empty() {
                    return last;
                }
                let items: Vec<(&echomq::Lease, &Settle)> = leases.iter().map(|l| (l, &Settle::Complete)).collect();
                for r in q.settle_many(&items).await.unwrap() {
                    last = r.unwrap().server_ms;
                }
            }
        }
    };
    let done = complete(2500).await;
    // (Batches that finished more than the age after the first ones have
    // trimmed those already, so fewer than 2,500 may be left.)
    let c1 = q.counts().await.unwrap().completed;
    assert!(c1 > 0 && c1 <= 2500, "{c1}");
    past(&q, done + 100).await;
    // Every record left is now older than the age: one more completion
    // deletes at most a thousand of them, the next ones the rest.
    complete(1).await;
    let c2 = q.counts().await.unwrap().completed;
    assert_eq!(c2, c1 + 1 - c1.min(1000));
    complete(1).await;
    complete(1).await;
    complete(1).await;
    let c3 = q.counts().await.unwrap().completed;
    assert!(c3 <= 4, "{c3} records left, all but the newest expired");
    // Bad settings are refused.
    for bad in [
        Retention::Within(Duration::ZERO),
        Retention::NewestWithin(0, Duration::from_secs(1)),
    ] {
        let e = Queue::connect_with(&s.url(), "x", QueueOptions::new().keep_failed(bad)).await;
        assert!(matches!(e, Err(Error::InvalidOption { .. })), "{bad:?}");
    }
}

// A job's W3C traceparent travels from the enqueue to every claim of it
// and to the handler's Job; a malformed one is refused and stores nothing.
#[tokio::test]
async fn the_traceparent_travels_with_the_job() {
    let (_s, q) = setup("traceparent").await;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let opts = echomq::EnqueueOptions::new().id("t1").traceparent(tp);
    q.enqueue_with(&1u32, &opts).await.unwrap();
    q.enqueue_with(&2u32, &echomq::EnqueueOptions::new().id("t2"))
        .await
        .unwrap();
    let leases = q.claim(2, Duration::from_secs(30)).await.unwrap();
    assert_eq!(leases[0].traceparent(), Some(tp));
    assert_eq!(leases[1].traceparent(), None);
    q.retry(&leases[0], Some(Duration::ZERO), "again").await.unwrap();
    q.complete(&leases[1]).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let c = Consumer::new(q.clone(), move |job: Job<u32>| {
        let tx = tx.clone();
        async move {
            tx.send(job.traceparent().map(str::to_owned)).unwrap();
            Ok(())
        }
    })
    .spawn()
    .unwrap();
    assert_eq!(rx.recv().await.unwrap().as_deref(), Some(tp));
    c.shutdown().await.unwrap();
    for bad in [
        "",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-abc-def-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
    ] {
        let r = q
            .enqueue_with(&3u32, &echomq::EnqueueOptions::new().traceparent(bad))
            .await;
        assert!(
            matches!(
                r,
                Err(Error::InvalidId {
                    what: "traceparent",
                    ..
                })
            ),
            "{bad:?}: {r:?}"
        );
    }
    assert_eq!(q.counts().await.unwrap().pending, 0);
}
