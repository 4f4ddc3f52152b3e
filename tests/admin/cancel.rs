//! Cancelling jobs: waiting ones at once, running ones by request (low
//! level, in a Consumer, and while leased ahead).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::admin::Moved;
use echomq::{Consumer, Error, Job, WorkerEvent};

use super::common;
use super::common::{eventually, setup};

// Cancel a waiting job: pending and delayed jobs end cancelled at once and
// never run; their dedup markers are freed; cancelled jobs are counted,
// listed and removable; a finished job is left as it is; bad input gets
// its typed error; the sweep finds the sets and records in agreement.
#[tokio::test]
async fn waiting_jobs_are_cancelled_at_once() {
    use echomq::admin::Cancel;
    use echomq::{EnqueueOptions, JobState};
    let (_s, q) = setup("cancel-waiting").await;
    let pending = q
        .enqueue_with(&1u32, &EnqueueOptions::new().dedup("d-1"))
        .await
        .unwrap()
        .id;
    let delayed = q
        .enqueue_with(&2u32, &EnqueueOptions::new().delay(Duration::from_secs(60)))
        .await
        .unwrap()
        .id;
    let done = q.enqueue(&3u32).await.unwrap();
    let l = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    assert_eq!(l.id(), pending, "claim order");
    q.release(&l).await.unwrap();
    let l = q.claim(2, Duration::from_secs(30)).await.unwrap();
    // pending went back first; complete `done`, hand `pending` back.
    for lease in &l {
        if lease.id() == done {
            q.complete(lease).await.unwrap();
        } else {
            q.release(lease).await.unwrap();
        }
    }

    assert_eq!(q.cancel(&pending).await.unwrap(), Cancel::Cancelled);
    assert_eq!(q.cancel(&delayed).await.unwrap(), Cancel::Cancelled);
    assert_eq!(q.cancel(&pending).await.unwrap(), Cancel::Finished(JobState::Cancelled));
    assert_eq!(q.cancel(&done).await.unwrap(), Cancel::Finished(JobState::Completed));
    assert!(matches!(q.cancel("nope").await, Err(Error::JobNotFound(_))));
    assert!(matches!(q.cancel("").await, Err(Error::InvalidId { .. })));
    assert!(matches!(q.cancel_many(&[]).await, Err(Error::InvalidOption { .. })));
    let many: Vec<&str> = vec!["x"; echomq::admin::MAX_IDS + 1];
    assert!(matches!(q.cancel_many(&many).await, Err(Error::InvalidOption { .. })));

    let info = q.job(&pending).await.unwrap();
    assert_eq!(info.state, JobState::Cancelled);
    assert_eq!(info.last_error.as_deref(), Some("cancelled"));
    assert!(info.finished_ms.is_some());
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.delayed, c.cancelled, c.completed), (0, 0, 2, 1), "{c:?}");
    assert!(
        q.claim(10, Duration::from_secs(30)).await.unwrap().is_empty(),
        "a cancelled job ran"
    );
    // The dedup id is free again.
    let again = q
        .enqueue_with(&4u32, &EnqueueOptions::new().dedup("d-1"))
        .await
        .unwrap();
    assert_eq!(again.status, echomq::EnqueueStatus::Created);

    let page = q.list(JobState::Cancelled, None, 10).await.unwrap();
    let listed: Vec<&str> = page.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(listed, vec![delayed.as_str(), pending.as_str()], "newest first");
    assert_eq!(q.sweep(100).await.unwrap().repaired, 0);
    let removed = q.remove(&[&delayed]).await.unwrap();
    assert!(
        matches!(&removed[..], [(id, Ok(Moved::Done))] if *id == delayed),
        "{removed:?}"
    );
    assert_eq!(q.counts().await.unwrap().cancelled, 1);
}

// Cancel a running job, low level: the request is recorded (asking again
// changes nothing), a renewal reports it on the lease, and any settlement
// but complete ends the job cancelled, remembered per token like any
// settlement; a job whose worker died instead is cancelled by the reaper,
// not run again; a complete after the request completes it.
#[tokio::test]
async fn a_running_job_is_cancelled_by_request() {
    use echomq::admin::Cancel;
    use echomq::{JobState, Outcome, Reaper};
    let (_s, q) = setup("cancel-active").await;
    let ids = q.enqueue_bulk(&[1u32, 2, 3]).await.unwrap();
    let mut leases = q.claim(3, Duration::from_millis(300)).await.unwrap();
    for id in &ids {
        assert_eq!(q.cancel(id).await.unwrap(), Cancel::Requested);
    }
    assert_eq!(q.cancel(&ids[0]).await.unwrap(), Cancel::Requested);
    let info = q.job(&ids[0]).await.unwrap();
    assert_eq!(info.state, JobState::Active, "a request leaves the job running");
    assert!(info.cancel_requested_ms.is_some());

    // 1: the worker sees it at a renewal and retries: cancelled.
    assert!(!leases[0].cancel_requested());
    q.extend(&mut leases[0], Duration::from_secs(30)).await.unwrap();
    assert!(leases[0].cancel_requested());
    let r = q.retry(&leases[0], None, "stopping").await.unwrap();
    assert_eq!(r.outcome, Outcome::Cancelled);
    let again = q.retry(&leases[0], None, "stopping").await.unwrap();
    assert_eq!(again.outcome, Outcome::AlreadySettled);
    let info = q.job(&ids[0]).await.unwrap();
    assert_eq!(info.state, JobState::Cancelled);
    assert_eq!(info.last_error.as_deref(), Some("cancelled"));
    assert_eq!(
        info.errors[0].message, "stopping",
        "the handler's error is kept in the history"
    );

    // 2: completes anyway: the work was done.
    assert_eq!(q.complete(&leases[1]).await.unwrap().outcome, Outcome::Completed);
    assert_eq!(q.job(&ids[1]).await.unwrap().state, JobState::Completed);

    // 3: its worker is gone; the reaper cancels it at the lease.
    let deadline = leases[2].deadline_ms();
    common::past(&q, deadline).await;
    let report = Reaper::new(q.clone()).run_once().await.unwrap();
    assert_eq!(report.cancelled, vec![ids[2].clone()], "{report:?}");
    assert!(report.requeued.is_empty());
    assert_eq!(q.job(&ids[2]).await.unwrap().state, JobState::Cancelled);
    assert!(matches!(q.complete(&leases[2]).await, Err(Error::LeaseLost { .. })));
    assert!(q.claim(10, Duration::from_secs(30)).await.unwrap().is_empty());
    let c = q.counts().await.unwrap();
    assert_eq!((c.active, c.cancelled, c.completed), (0, 2, 1), "{c:?}");

    // Settle::Cancel ends a job cancelled without any request.
    let id = q.enqueue(&4u32).await.unwrap();
    let l = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    let cancel = echomq::Settle::Cancel {
        reason: "operator said so".into(),
    };
    let out = q.settle_many(&[(&l, &cancel)]).await.unwrap().remove(0).unwrap();
    assert_eq!(out.outcome, Outcome::Cancelled);
    let info = q.job(&id).await.unwrap();
    assert_eq!(
        (info.state, info.last_error.as_deref()),
        (JobState::Cancelled, Some("operator said so"))
    );
}

// Cancel a job a Consumer is running: the handler sees the request through
// its cancellation token at the next heartbeat and stops; the job ends
// cancelled. A handler that ignores the request is cancelled after the
// consumer's shutdown grace, and the job still ends cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_stops_a_cancelled_job() {
    use echomq::admin::Cancel;
    use echomq::{HandlerResult, JobState};
    let (_s, q) = setup("cancel-consumer").await;
    let cooperative = q.enqueue(&"cooperative").await.unwrap();
    let stubborn = q.enqueue(&"stubborn").await.unwrap();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let started: Arc<Mutex<Vec<String>>> = Arc::default();
    let (seen2, started2) = (seen.clone(), started.clone());
    let consumer = Consumer::new(q.clone(), move |job: Job<String>| {
        let (seen, started) = (seen2.clone(), started2.clone());
        async move {
            started.lock().unwrap().push(job.id().to_owned());
            if job.payload() == "cooperative" {
                job.cancellation().cancelled().await;
                seen.lock()
                    .unwrap()
                    .push(format!("{} {}", job.id(), job.cancel_requested()));
                return Err(echomq::HandlerError::fail("stopped on request"));
            }
            // Ignores the token.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(())
        }
    })
    .lease(Duration::from_millis(300))
    .shutdown_timeout(Duration::from_millis(200))
    .observer({
        let seen = seen.clone();
        move |e| {
            if let WorkerEvent::HandlerDone { id, result, .. } = e {
                seen.lock().unwrap().push(format!("{id} {result}"));
            }
            if let WorkerEvent::CancelRequested { id, .. } = e {
                seen.lock().unwrap().push(format!("{id} requested"));
            }
        }
    })
    .spawn()
    .unwrap();
    assert!(eventually(Duration::from_secs(10), || async { started.lock().unwrap().len() == 2 }).await);
    for id in [&cooperative, &stubborn] {
        assert_eq!(q.cancel(id).await.unwrap(), Cancel::Requested);
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            let c = q.counts().await.unwrap();
            c.cancelled == 2 && c.active == 0
        })
        .await,
        "{:?}",
        q.counts().await.unwrap()
    );
    let seen = seen.lock().unwrap().clone();
    for want in [
        format!("{cooperative} requested"),
        format!("{cooperative} true"),
        format!("{cooperative} {}", HandlerResult::Cancelled),
        format!("{stubborn} requested"),
        format!("{stubborn} {}", HandlerResult::Cancelled),
    ] {
        assert!(seen.contains(&want), "{want:?} not in {seen:?}");
    }
    assert_eq!(q.job(&stubborn).await.unwrap().state, JobState::Cancelled);
    let info = q.job(&cooperative).await.unwrap();
    assert_eq!(info.state, JobState::Cancelled);
    consumer.shutdown().await.unwrap();
}

// A job leased ahead (prefetch) and cancelled while it waits for a free
// handler (longer than RECHECK_AFTER_WAIT) never starts: it is renewed
// before it starts, learns of the request, and ends cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cancelled_while_leased_ahead_never_starts() {
    use echomq::JobState;
    use echomq::admin::Cancel;
    let (_s, q) = setup("cancel-ahead").await;
    let ids = [q.enqueue(&1u32).await.unwrap(), q.enqueue(&2u32).await.unwrap()];
    let gate = Arc::new(tokio::sync::Notify::new());
    let started: Arc<Mutex<Vec<String>>> = Arc::default();
    let (g, st) = (gate.clone(), started.clone());
    // Whichever job gets the one handler first holds it until the gate opens.
    let consumer = Consumer::new(q.clone(), move |job: Job<u32>| {
        let (g, st) = (g.clone(), st.clone());
        async move {
            let first = {
                let mut st = st.lock().unwrap();
                st.push(job.id().to_owned());
                st.len() == 1
            };
            if first {
                g.notified().await;
            }
            Ok(())
        }
    })
    .concurrency(1)
    .prefetch(1)
    .spawn()
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || {
            let (q, st) = (q.clone(), started.clone());
            let ids = ids.clone();
            async move {
                let Some(running) = st.lock().unwrap().first().cloned() else {
                    return false;
                };
                let other = if running == ids[0] { &ids[1] } else { &ids[0] };
                q.job(other).await.unwrap().state == JobState::Active
            }
        })
        .await,
        "one job runs while the other is leased ahead"
    );
    let running = started.lock().unwrap()[0].clone();
    let other = if running == ids[0] {
        ids[1].clone()
    } else {
        ids[0].clone()
    };
    // Past the wait after which a job leased ahead is checked before it starts.
    tokio::time::sleep(echomq::worker::RECHECK_AFTER_WAIT).await;
    assert_eq!(q.cancel(&other).await.unwrap(), Cancel::Requested);
    gate.notify_one();
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.job(&other).await.unwrap().state == JobState::Cancelled
        })
        .await,
        "{:?}",
        q.job(&other).await.unwrap()
    );
    assert_eq!(
        *started.lock().unwrap(),
        vec![running.clone()],
        "the cancelled job never started"
    );
    assert!(common::completes(&q, &running).await);
    consumer.shutdown().await.unwrap();
}
