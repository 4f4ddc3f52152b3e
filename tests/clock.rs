//! Steps of the server's clock (a server under libfaketime whose offset
//! the test changes mid-run through a timestamp file): forward past every
//! lease, running jobs keep their leases and count no stall; backward,
//! finished jobs keep the order they finished in.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::server::LocalServer;
use echomq::{Consumer, Job, JobState, Queue, QueueOptions, Retention, WorkerEvent};
use tokio::sync::Semaphore;

/// A server whose clock offset is read from a file at every call, so
/// [`set_offset`] steps it mid-run (its monotonic clock is left alone).
fn stepped_server() -> (LocalServer, PathBuf) {
    let file = std::env::temp_dir().join(format!("{}.faketime", common::unique("clock")));
    set_offset(&file, "+0");
    let server = LocalServer::builder()
        .env("LD_PRELOAD", common::faketime_lib())
        .env("FAKETIME_TIMESTAMP_FILE", file.to_str().unwrap())
        .env("FAKETIME_NO_CACHE", "1")
        .env("DONT_FAKE_MONOTONIC", "1")
        .start()
        .expect("start a local server under libfaketime");
    (server, file)
}

/// Sets the server's clock offset: "+600" is ten minutes ahead, "-3600" an hour behind.
fn set_offset(file: &Path, offset: &str) {
    std::fs::write(file, format!("{offset}\n")).unwrap();
}

/// Waits until the server's clock is about `want_ms` ahead of ours.
async fn offset_is(q: &Queue, want_ms: i64) {
    let seen = common::eventually(Duration::from_secs(5), || async {
        let server = q.server_time_ms().await.unwrap() as i64;
        let ours = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        (server - ours - want_ms).abs() < 30_000
    })
    .await;
    assert!(seen, "the server's clock did not move to offset {want_ms} ms");
}

// The server's clock jumps ten minutes ahead, past every lease: the maintenance task notices the step and holds reaping while the workers renew, so the running jobs finish on their first attempt with no stall and no lease lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_step_costs_running_jobs_nothing() {
    let (server, file) = stepped_server();
    let q = Queue::connect(&server.url(), &common::unique("forward")).await.unwrap();
    offset_is(&q, 0).await;
    let gate = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let renewals = Arc::new(AtomicUsize::new(0));
    let lost = Arc::new(Mutex::new(Vec::new()));
    let (g, s) = (gate.clone(), started.clone());
    let (r, l) = (renewals.clone(), lost.clone());
    let worker = Consumer::new(q.clone(), move |_job: Job<u32>| {
        let (g, s) = (g.clone(), s.clone());
        async move {
            s.fetch_add(1, Ordering::SeqCst);
            let _ = g.acquire().await.unwrap();
            Ok(())
        }
    })
    .concurrency(3)
    .lease(Duration::from_secs(3))
    .observer(move |e| match e {
        WorkerEvent::Extended { .. } => {
            r.fetch_add(1, Ordering::SeqCst);
        }
        WorkerEvent::LeaseLost { id, .. } => l.lock().unwrap().push(id.to_string()),
        _ => {}
    })
    .spawn()
    .unwrap();
    let ids = q.enqueue_bulk(&[1u32, 2, 3]).await.unwrap();
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            started.load(Ordering::SeqCst) == 3
        })
        .await
    );
    // A renewal each, so the maintenance task has looked at the clock at least once meanwhile.
    let before = renewals.load(Ordering::SeqCst);
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            renewals.load(Ordering::SeqCst) >= before + 3
        })
        .await
    );

    set_offset(&file, "+600");
    offset_is(&q, 600_000).await;
    // Two renewals each against the new clock: a lease's length and more.
    let stepped = renewals.load(Ordering::SeqCst);
    assert!(
        common::eventually(Duration::from_secs(20), || async {
            renewals.load(Ordering::SeqCst) >= stepped + 6
        })
        .await,
        "the workers stopped renewing"
    );
    gate.add_permits(3);
    for id in &ids {
        assert!(common::completes(&q, id).await, "job {id} did not complete");
        let info = q.job(id).await.unwrap();
        assert_eq!((info.attempts, info.stalls), (1, 0), "job {id}: {info:?}");
    }
    assert!(
        lost.lock().unwrap().is_empty(),
        "leases lost: {:?}",
        lost.lock().unwrap()
    );
    worker.shutdown().await.unwrap();
    let _ = std::fs::remove_file(&file);
}

// The server's clock goes an hour back between two groups of completions: the finished set keeps them in the order they finished, so listings show the newest first and retention trims the oldest.
#[tokio::test]
async fn a_backward_step_keeps_finish_order() {
    let (server, file) = stepped_server();
    let opts = QueueOptions::new().keep_completed(Retention::All);
    let q = Queue::connect_with(&server.url(), &common::unique("backward"), opts)
        .await
        .unwrap();
    offset_is(&q, 0).await;
    let mut finished = Vec::new();
    for group in 0..2 {
        if group == 1 {
            set_offset(&file, "-3600");
            offset_is(&q, -3_600_000).await;
        }
        for n in 0..3u32 {
            let id = q.enqueue(&n).await.unwrap();
            let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
            q.complete(&lease).await.unwrap();
            finished.push(id);
        }
    }
    let page = q.list(JobState::Completed, None, 10).await.unwrap();
    let listed: Vec<String> = page.jobs.iter().map(|j| j.id.clone()).collect();
    let newest_first: Vec<String> = finished.iter().rev().cloned().collect();
    // Jobs finished after the step tie at the newest score; they come before the older ones.
    assert_eq!(
        listed[..3].iter().collect::<std::collections::BTreeSet<_>>(),
        newest_first[..3].iter().collect::<std::collections::BTreeSet<_>>(),
        "{listed:?}"
    );
    assert_eq!(listed[3..], newest_first[3..], "{listed:?}");
    let _ = std::fs::remove_file(&file);
}
