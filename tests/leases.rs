//! Leases under faults, in one process: heartbeats keep long handlers'
//! leases, a lost or unconfirmable lease cancels the handler and is not
//! settled, and consumers survive server restarts.

mod common;

use std::time::Duration;

use common::{EventLog, eventually, raw, setup};
use echomq::server::LocalServer;
use echomq::{Client, ClientOptions, Consumer, Job, JobState, Reaper};
use tokio::time::Instant;

// A handler running ten times the lease keeps it by heartbeats and completes on its first attempt.
#[tokio::test]
async fn heartbeats_keep_long_handlers() {
    let (_s, q) = setup("long").await;
    let id = q.enqueue(&1).await.unwrap();
    let log = EventLog::default();
    let handle = Consumer::new(q.clone(), |_job: Job<u32>| async {
        tokio::time::sleep(Duration::from_millis(2000)).await;
        Ok(())
    })
    .lease(Duration::from_millis(200))
    .reap_interval(Duration::from_millis(20))
    .observer(log.observer())
    .spawn()
    .unwrap();
    assert!(common::completes(&q, &id).await);
    handle.shutdown().await.unwrap();
    let info = q.job(&id).await.unwrap();
    assert_eq!((info.attempts, info.stalls), (1, 0));
    let log = log.all();
    assert!(
        log.iter().filter(|e| e.starts_with("extended:1")).count() >= 10,
        "{log:?}"
    );
    assert!(log.contains(&"settled:1:complete".to_string()));
}

// When the lease is lost (reaped and re-claimed elsewhere), the handler is cancelled and its result not settled.
#[tokio::test]
async fn lost_lease_cancels_the_handler() {
    let (s, q) = setup("lost").await;
    let id = q.enqueue(&1).await.unwrap();
    let log = EventLog::default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let handle = Consumer::new(q.clone(), move |job: Job<u32>| {
        let tx = tx.clone();
        async move {
            job.cancellation().cancelled().await;
            let _ = tx.send(job.attempt());
            Ok(()) // would complete the job if anyone settled it
        }
    })
    .concurrency(1) // busy with the job, so it cannot take it back itself
    .lease(Duration::from_millis(600))
    .reaper(false)
    .observer(log.observer())
    .spawn()
    .unwrap();
    // Right after a heartbeat (the next is 200 ms away), expire the lease on
    // the server and let another worker take the job.
    assert!(
        eventually(Duration::from_secs(5), || async {
            log.all().iter().any(|e| e == "extended:1")
        })
        .await
    );
    let mut c = raw(&s).await;
    let active = format!("emq:{{{}}}:active", q.name());
    let _: () = redis::cmd("ZADD")
        .arg(&active)
        .arg("XX")
        .arg(0)
        .arg(&id)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(Reaper::new(q.clone()).run_once().await.unwrap().requeued.len(), 1);
    let other = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    assert_eq!(other.attempt(), 2);
    let cancelled = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap();
    assert_eq!(cancelled, Some(1));
    handle.shutdown().await.unwrap();
    let log = log.all();
    assert!(log.contains(&"lease_lost:1:true".to_string()), "{log:?}");
    assert!(
        !log.iter().any(|e| e.starts_with("settled:1")),
        "a lost lease was settled: {log:?}"
    );
    let info = q.job(&id).await.unwrap();
    assert_eq!(
        (info.state, info.attempts),
        (JobState::Active, 2),
        "the new owner's lease was disturbed"
    );
    q.complete(&other).await.unwrap();
}

// With the server paused past the lease, renewal cannot be confirmed in time: the handler is cancelled and not settled.
#[tokio::test]
async fn unconfirmed_renewal_cancels_the_handler() {
    let (s, q) = setup("paused").await;
    let id = q.enqueue(&1).await.unwrap();
    let log = EventLog::default();
    let handle = Consumer::new(q.clone(), |job: Job<u32>| async move {
        job.cancellation().cancelled().await;
        Ok(())
    })
    .lease(Duration::from_millis(500))
    .reaper(false)
    .observer(log.observer())
    .spawn()
    .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            q.job(&id).await.unwrap().state == JobState::Active
        })
        .await
    );
    s.pause();
    let paused_at = Instant::now();
    let lost = eventually(Duration::from_secs(3), || async {
        log.all().iter().any(|e| e == "lease_lost:1:false")
    })
    .await;
    let took = paused_at.elapsed();
    s.resume();
    assert!(lost, "{:?}", log.all());
    assert!(
        took < Duration::from_millis(1200),
        "cancellation took {took:?} for a 500 ms lease"
    );
    handle.shutdown().await.unwrap();
    assert!(!log.all().iter().any(|e| e.starts_with("settled:1")));
    // The lease lapses on the server, so the reaper returns the job.
    common::past(&q, q.job(&id).await.unwrap().deadline_ms.unwrap()).await;
    assert_eq!(Reaper::new(q.clone()).run_once().await.unwrap().requeued.len(), 1);
}

// A consumer survives a server SIGKILL and restart: calls fail fast during the outage, work resumes after it.
#[tokio::test]
async fn consumer_survives_server_restart() {
    let mut server = LocalServer::builder().aof(true).appendfsync("always").start().unwrap();
    let opts = ClientOptions::new().response_timeout(Duration::from_millis(500));
    let client = Client::connect_with(&server.url(), opts).await.unwrap();
    let q = client.queue(&common::unique("restart")).await.unwrap();
    let handle = Consumer::new(q.clone(), |_job: Job<u32>| async { Ok(()) })
        .poll_interval(Duration::from_millis(200))
        .spawn()
        .unwrap();
    for i in 0..20 {
        q.enqueue(&i).await.unwrap();
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.counts().await.unwrap().completed == 20
        })
        .await
    );

    server.kill();
    let t = Instant::now();
    let err = q.enqueue(&99).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "enqueue hung {:?} during the outage",
        t.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart().unwrap();

    // The handle reconnects; acknowledged jobs from before the kill are still there.
    assert!(
        eventually(Duration::from_secs(10), || async { q.enqueue(&100).await.is_ok() }).await,
        "no reconnect"
    );
    for i in 101..120 {
        q.enqueue(&i).await.unwrap();
    }
    let done = eventually(Duration::from_secs(15), || async {
        q.counts()
            .await
            .map(|c| c.pending == 0 && c.active == 0)
            .unwrap_or(false)
    })
    .await;
    let c = q.counts().await.unwrap();
    handle.shutdown().await.unwrap();
    assert!(done, "consumer did not resume: {c:?}");
    assert!(c.completed >= 40, "{c:?}");
}

// A heartbeat set close to the lease is capped so renewals land in time: the job completes on its first attempt.
#[tokio::test]
async fn heartbeat_near_the_lease_is_capped() {
    let (_s, q) = setup("hbcap").await;
    let id = q.enqueue(&1).await.unwrap();
    let handle = Consumer::new(q.clone(), |_job: Job<u32>| async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        Ok(())
    })
    .lease(Duration::from_millis(1000))
    .heartbeat(Duration::from_millis(950))
    .reap_interval(Duration::from_millis(50))
    .spawn()
    .unwrap();
    let done = common::completes(&q, &id).await;
    handle.shutdown().await.unwrap();
    assert!(done);
    let info = q.job(&id).await.unwrap();
    assert_eq!((info.attempts, info.stalls), (1, 0));
}

// With heartbeats off, a handler still running at the end of its lease's
// safety window is cancelled and its result not settled (0.1 let it run on
// beside its redelivery).
#[tokio::test]
async fn heartbeats_off_still_cancel_at_the_lease() {
    let (_s, q) = setup("nobeat-cancel").await;
    let id = q.enqueue(&1).await.unwrap();
    let log = EventLog::default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let handle = Consumer::new(q.clone(), move |job: Job<u32>| {
        let tx = tx.clone();
        async move {
            let started = Instant::now();
            tokio::select! {
                _ = job.cancellation().cancelled() => { let _ = tx.send(started.elapsed()); }
                _ = tokio::time::sleep(Duration::from_secs(10)) => {}
            }
            Ok(())
        }
    })
    .lease(Duration::from_millis(300))
    .without_heartbeats()
    .reaper(false)
    .observer(log.observer())
    .spawn()
    .unwrap();
    let ran = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("the handler was not cancelled at the end of its lease")
        .unwrap();
    assert!(
        ran < Duration::from_millis(300),
        "cancelled after {ran:?}, past the 300 ms lease"
    );
    handle.shutdown().await.unwrap();
    assert_eq!(log.of(&id), ["claimed:1", "lease_lost:1:false", "done:1:lease_lost"]);
}

// A handler that ignores its cancellation after its lease is lost is aborted by the lease's deadline, so it never runs beside the job's redelivery (issue 29 item 5: 0.2 let four attempts of one job overlap in one process).
#[tokio::test]
async fn a_stubborn_handler_is_aborted_before_its_redelivery() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    /// Counts the attempts running; one fewer when the handler's future is dropped (its task aborted).
    struct Running(Arc<AtomicUsize>);
    impl Drop for Running {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let (_s, q) = setup("stubborn").await;
    let id = q.enqueue(&1).await.unwrap();
    let log = EventLog::default();
    let (running, most, starts) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let (r, m, n) = (running.clone(), most.clone(), starts.clone());
    let handle = Consumer::new(q.clone(), move |_job: Job<u32>| {
        let (r, m, n) = (r.clone(), m.clone(), n.clone());
        async move {
            let now = r.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            n.fetch_add(1, Ordering::SeqCst);
            let _running = Running(r);
            // Ignores its cancellation: waits until its task is dropped.
            std::future::pending::<()>().await;
            Ok::<(), echomq::HandlerError>(())
        }
    })
    .lease(Duration::from_millis(1000))
    .without_heartbeats()
    .reap_interval(Duration::from_millis(200))
    .concurrency(4)
    .shutdown_timeout(Duration::from_millis(100))
    .observer(log.observer())
    .spawn()
    .unwrap();
    assert!(
        eventually(Duration::from_secs(15), || async { starts.load(Ordering::SeqCst) >= 3 }).await,
        "the job was not redelivered twice"
    );
    handle.shutdown().await.unwrap();
    assert_eq!(most.load(Ordering::SeqCst), 1, "attempts ran side by side");
    let events = log.of(&id);
    for attempt in [1, 2] {
        let aborted = format!("aborted:{attempt}");
        let next = format!("claimed:{}", attempt + 1);
        let at = |e: &str| events.iter().position(|x| x == e);
        assert!(at(&aborted).is_some() && at(&aborted) < at(&next), "{events:?}");
    }
}

/// Runs one job whose settler is held up for three leases (its observer
/// blocks, as a slow settle call would) and returns (attempts, stalls).
async fn settled_after_a_slow_settler(name: &str, heartbeats: bool) -> (u64, u64) {
    let (_s, q) = setup(name).await;
    let id = q.enqueue(&1).await.unwrap();
    let lease = Duration::from_millis(300);
    let consumer = Consumer::new(q.clone(), |_job: Job<u32>| async { Ok(()) })
        .lease(lease)
        .reap_interval(Duration::from_millis(10))
        // The settler runs observers inline: this one holds it up before
        // it sends the completion.
        .observer(move |e| {
            if let echomq::WorkerEvent::SettleSent { .. } = e {
                std::thread::sleep(lease * 3);
            }
        });
    let consumer = if heartbeats {
        consumer
    } else {
        consumer.without_heartbeats()
    };
    let handle = consumer.spawn().unwrap();
    let done = common::completes(&q, &id).await;
    handle.shutdown().await.unwrap();
    assert!(done);
    let info = q.job(&id).await.unwrap();
    (info.attempts, info.stalls)
}

// A finished job's lease is renewed until its settlement is answered: a
// settler held up for three leases still completes the job on its first
// attempt (0.1 stopped renewing when the handler returned, so the job
// lapsed, was reaped and ran again).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_lease_is_kept_until_the_settlement_is_answered() {
    assert_eq!(settled_after_a_slow_settler("keepalive", true).await, (1, 0));
}

// The same with heartbeats off: once the handler has returned, the lease
// is renewed until the settlement is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_lease_is_kept_until_the_settlement_is_answered_without_heartbeats() {
    assert_eq!(settled_after_a_slow_settler("keepalive-nobeat", false).await, (1, 0));
}

// A panicking observer does not take the settler down: every job is still
// settled, and the consumer shuts down cleanly (0.1's settler died and
// every later job stalled).
#[tokio::test]
async fn a_panicking_observer_is_contained() {
    let (_s, q) = setup("observer-panic").await;
    let ids: Vec<String> = q.enqueue_bulk(&(0..20u32).collect::<Vec<_>>()).await.unwrap();
    let log = EventLog::default();
    let handle = Consumer::new(q.clone(), |_job: Job<u32>| async { Ok(()) })
        .observer(|e| {
            if let echomq::WorkerEvent::Settled { .. } | echomq::WorkerEvent::SettleSent { .. } = e {
                panic!("observer bug");
            }
        })
        .observer(log.observer())
        .spawn()
        .unwrap();
    let done = eventually(Duration::from_secs(10), || async {
        q.counts().await.unwrap().completed == 20
    })
    .await;
    assert!(done, "{:?}", q.counts().await.unwrap());
    handle.shutdown().await.unwrap();
    for id in &ids {
        assert_eq!(q.job(id).await.unwrap().attempts, 1);
        // The observers after the panicking one still see every event.
        assert!(
            log.of(id).contains(&"settled:1:complete".to_string()),
            "{id}: {:?}",
            log.of(id)
        );
    }
}

// A handler whose `call` panics before it returns a future is a panicked
// attempt like any other: retried with "panicked", not stranded.
#[tokio::test]
async fn a_handler_panicking_in_call_is_a_failed_attempt() {
    struct Eager;
    impl echomq::Handler<u32> for Eager {
        type Output = ();
        type Future = std::future::Ready<Result<(), echomq::HandlerError>>;
        fn call(&self, job: Job<u32>) -> Self::Future {
            if job.attempt() == 1 {
                panic!("eager handler bug");
            }
            std::future::ready(Ok(()))
        }
    }
    let (_s, q) = common::setup_with(
        "eager",
        echomq::QueueOptions::new().backoff(echomq::Backoff::Fixed(Duration::ZERO)),
    )
    .await;
    let id = q.enqueue(&1).await.unwrap();
    let handle = Consumer::new(q.clone(), Eager).spawn().unwrap();
    let done = common::completes(&q, &id).await;
    handle.shutdown().await.unwrap();
    assert!(done);
    let info = q.job(&id).await.unwrap();
    assert_eq!((info.attempts, info.failures, info.stalls), (2, 1, 0));
}
