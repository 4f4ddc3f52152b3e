//! Operating a queue against a real server: pause and resume.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{eventually, setup};
use echomq::admin::Moved;
use echomq::{Client, Consumer, Error, Job, WorkerEvent};

// Once pause returns, no consumer leases a job (four consumers on two
// clients, each with its own connection, racing to claim): every claim
// ran on the server before the pause. Running jobs finish, enqueue works,
// counts say paused; resume wakes the consumers and the backlog drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_every_claim_until_resume() {
    let (s, q) = setup("pause").await;
    let other = Client::connect(&s.url()).await.unwrap().queue(q.name()).await.unwrap();
    let claims: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let mut consumers = Vec::new();
    for handle in [&q, &other, &q, &other] {
        let claims = claims.clone();
        consumers.push(
            Consumer::new(handle.clone(), |_job: Job<u32>| async {
                tokio::time::sleep(Duration::from_millis(2)).await;
                Ok(())
            })
            .concurrency(4)
            .observer(move |e| {
                if let WorkerEvent::Claimed { id, server_ms, .. } = e {
                    claims.lock().unwrap().push((id.to_string(), *server_ms));
                }
            })
            .spawn()
            .unwrap(),
        );
    }
    q.enqueue_bulk(&(0..3000u32).collect::<Vec<_>>()).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.counts().await.unwrap().completed > 100
        })
        .await
    );
    let paused_at = q.pause().await.unwrap();
    assert!(q.is_paused().await.unwrap());
    // What was leased before the pause finishes; nothing new is leased.
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.counts().await.unwrap().active == 0
        })
        .await
    );
    let late: Vec<u64> = claims
        .lock()
        .unwrap()
        .iter()
        .map(|(_, t)| *t)
        .filter(|&t| t > paused_at)
        .collect();
    assert!(
        late.is_empty(),
        "{} claims ran after the pause at {paused_at}: {late:?}",
        late.len()
    );
    let c = q.counts().await.unwrap();
    assert!(c.paused && c.pending > 0, "{c:?}");
    // Enqueue still works while paused; the jobs wait.
    q.enqueue(&9999).await.unwrap();
    assert_eq!(q.counts().await.unwrap().pending, c.pending + 1);
    assert!(
        q.claim(10, Duration::from_secs(30)).await.unwrap().is_empty(),
        "a plain claim leased while paused"
    );

    q.resume().await.unwrap();
    assert!(!q.is_paused().await.unwrap());
    assert!(
        eventually(Duration::from_secs(20), || async {
            let c = q.counts().await.unwrap();
            c.pending == 0 && c.active == 0
        })
        .await,
        "{:?}",
        q.counts().await.unwrap()
    );
    let ran: std::collections::HashSet<String> = claims.lock().unwrap().iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ran.len(), 3001, "every job ran");
    for c in consumers {
        c.shutdown().await.unwrap();
    }
}

// Failed jobs go back to pending by id or all at once, with their failures
// and stalls reset (attempts kept), and run again; a job not failed is left.
#[tokio::test]
async fn failed_jobs_are_retried_by_hand() {
    let (_s, q) = common::setup_with("retry-failed", echomq::QueueOptions::new().max_attempts(1)).await;
    let ids = q.enqueue_bulk(&(0..5u32).collect::<Vec<_>>()).await.unwrap();
    for l in q.claim(5, Duration::from_secs(30)).await.unwrap() {
        q.retry(&l, None, "boom").await.unwrap();
    }
    assert_eq!(q.counts().await.unwrap().failed, 5);
    let pending = q.enqueue(&9u32).await.unwrap();
    let r = q.retry_failed(&[&ids[0], &pending, "nope"]).await.unwrap();
    assert_eq!(
        r,
        vec![
            (ids[0].clone(), Moved::Done),
            (pending.clone(), Moved::WrongState),
            ("nope".to_owned(), Moved::NotFound),
        ]
    );
    let info = q.job(&ids[0]).await.unwrap();
    assert_eq!(
        (
            info.state,
            info.failures,
            info.stalls,
            info.attempts,
            info.last_error.as_deref()
        ),
        (echomq::JobState::Pending, 0, 0, 1, Some("boom"))
    );
    assert_eq!(q.retry_all_failed().await.unwrap(), 4);
    let c = q.counts().await.unwrap();
    assert_eq!((c.failed, c.pending), (0, 6));
    // They run again, with their full max_attempts.
    assert!(common::complete_with_noop::<u32>(&q, 6).await);
}

// Jobs in any state but active are removed with their dedup markers; an
// active job is refused; drain removes every pending and delayed job.
#[tokio::test]
async fn jobs_are_removed_and_queues_drained() {
    let (_s, q) = setup("remove").await;
    let opts = |d: &str| echomq::EnqueueOptions::new().dedup(d);
    let a = q.enqueue_with(&1u32, &opts("a")).await.unwrap().id;
    let b = q.enqueue(&2u32).await.unwrap();
    let active = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    let later = q
        .enqueue_with(&3u32, &echomq::EnqueueOptions::new().delay(Duration::from_secs(60)))
        .await
        .unwrap()
        .id;
    let r = q.remove(&[&b, &later, active.id(), "nope"]).await.unwrap();
    assert!(matches!(r[0].1, Ok(Moved::Done)), "{r:?}");
    assert!(matches!(r[1].1, Ok(Moved::Done)), "{r:?}");
    assert!(
        matches!(&r[2].1, Err(Error::JobActive(id)) if id == active.id()),
        "{r:?}"
    );
    assert!(matches!(r[3].1, Ok(Moved::NotFound)), "{r:?}");
    assert!(q.job(&b).await.is_err() && q.job(&later).await.is_err());
    assert_eq!(active.id(), a);
    // The active job finishes normally; removing it then frees its dedup id.
    q.complete(&active).await.unwrap();
    q.remove(&[&a]).await.unwrap();
    assert_eq!(
        q.enqueue_with(&4u32, &opts("a")).await.unwrap().status,
        echomq::EnqueueStatus::Created
    );

    q.enqueue_bulk(&(0..2500u32).collect::<Vec<_>>()).await.unwrap();
    q.enqueue_with(&5u32, &echomq::EnqueueOptions::new().delay(Duration::from_secs(60)))
        .await
        .unwrap();
    let held = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    assert_eq!(q.drain().await.unwrap(), 2501);
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.delayed, c.active), (0, 0, 1));
    q.complete(&held).await.unwrap();

    // Bad input is a typed error.
    assert!(matches!(q.remove(&[]).await, Err(Error::InvalidOption { .. })));
    assert!(matches!(q.retry_failed(&[""]).await, Err(Error::InvalidId { .. })));
}

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

// Obliterate deletes every key of the queue and nothing of another (whose
// name the first one's matches as a glob pattern); it refuses while a job
// is leased unless forced; the queue works again afterwards.
#[tokio::test]
async fn obliterate_deletes_the_queue_and_only_it() {
    let (s, _) = setup("unused").await;
    let client = Client::connect(&s.url()).await.unwrap();
    let name = common::unique("ob?");
    let q = client.queue(&name).await.unwrap();
    let other = client.queue(&name.replace('?', "x")).await.unwrap();
    q.enqueue_bulk(&(0..2500u32).collect::<Vec<_>>()).await.unwrap();
    other.enqueue(&1u32).await.unwrap();
    let held = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    let mut c = common::raw(&s).await;
    let _: () = redis::cmd("SET")
        .arg(q.user_key("mine").unwrap())
        .arg(1)
        .query_async(&mut c)
        .await
        .unwrap();
    let keys = |pattern: String| {
        let mut c = c.clone();
        async move {
            let k: Vec<String> = redis::cmd("KEYS").arg(pattern).query_async(&mut c).await.unwrap();
            k.len()
        }
    };
    let mine = format!("emq:{{{}}}:*", name.replace('?', "\\?"));
    let before = keys(mine.clone()).await;
    assert!(matches!(
        q.obliterate(false).await,
        Err(Error::QueueActive { active: 1, .. })
    ));
    assert_eq!(
        keys(mine.clone()).await,
        before,
        "a refused obliterate deleted something"
    );

    let deleted = q.obliterate(true).await.unwrap();
    assert_eq!(deleted as usize, before);
    assert_eq!(keys(mine).await, 0);
    assert_eq!(other.counts().await.unwrap().pending, 1, "the other queue was touched");
    // The stale lease is fenced; the queue starts again as new.
    assert!(q.complete(&held).await.is_err());
    q.enqueue(&7u32).await.unwrap();
    let l = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    assert!(
        l.token() > held.token(),
        "tokens never repeat, not even after obliterate"
    );
    assert!(!q.counts().await.unwrap().paused);
}

// Remove racing claims over the same jobs: every job ends either removed
// (no record, never leased) or leased (active, and `remove` refused it),
// never both; the sets agree with the records afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_races_claims() {
    let (_s, q) = setup("remove-race").await;
    let ids = q.enqueue_bulk(&(0..2000u32).collect::<Vec<_>>()).await.unwrap();
    let claimer = {
        let q = q.clone();
        tokio::spawn(async move {
            let mut leased = Vec::new();
            loop {
                let got = q.claim(16, Duration::from_secs(60)).await.unwrap();
                if got.is_empty() {
                    return leased;
                }
                leased.extend(got.into_iter().map(|l| l.id().to_owned()));
            }
        })
    };
    let remover = {
        let (q, ids) = (q.clone(), ids.clone());
        tokio::spawn(async move {
            let mut removed = Vec::new();
            for chunk in ids.chunks(16).rev() {
                let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
                for (id, r) in q.remove(&refs).await.unwrap() {
                    match r {
                        Ok(Moved::Done) => removed.push(id),
                        Err(Error::JobActive(_)) | Ok(Moved::NotFound) => {}
                        other => panic!("{id}: {other:?}"),
                    }
                }
            }
            removed
        })
    };
    let (leased, removed) = (claimer.await.unwrap(), remover.await.unwrap());
    let leased: std::collections::HashSet<String> = leased.into_iter().collect();
    for id in &removed {
        assert!(!leased.contains(id), "job {id} was removed and leased");
        assert!(q.job(id).await.is_err());
    }
    assert_eq!(
        leased.len() + removed.len(),
        2000,
        "a job was neither leased nor removed"
    );
    assert_eq!(q.counts().await.unwrap().active as usize, leased.len());
    assert_eq!(
        q.sweep(1000).await.unwrap().repaired,
        0,
        "the sets disagree with the records"
    );
}

// Failed jobs retried by hand while reapers run: every job ends in exactly
// one state, agreeing with its set, and the retried ones run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_jobs_retried_while_reapers_run() {
    let opts = echomq::QueueOptions::new().max_attempts(1).max_stalls(100);
    let (_s, q) = common::setup_with("retry-race", opts).await;
    q.enqueue_bulk(&(0..1000u32).collect::<Vec<_>>()).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let reapers: Vec<_> = (0..3)
        .map(|_| {
            let (q, stop) = (q.clone(), stop.clone());
            tokio::spawn(async move {
                let r = echomq::Reaper::new(q);
                while !stop.is_cancelled() {
                    r.run_once().await.unwrap();
                }
            })
        })
        .collect();
    // Half fail at once, half are leased briefly and left to stall.
    for l in q.claim(500, Duration::from_secs(60)).await.unwrap() {
        q.fail(&l, "no").await.unwrap();
    }
    assert_eq!(q.claim(500, Duration::from_millis(30)).await.unwrap().len(), 500);
    let mut moved = 0;
    while moved < 500 {
        moved += q.retry_all_failed().await.unwrap();
    }
    stop.cancel();
    for r in reapers {
        r.await.unwrap();
    }
    let c = q.counts().await.unwrap();
    assert_eq!(c.pending + c.active + c.failed + c.delayed + c.completed, 1000, "{c:?}");
    assert_eq!(
        q.sweep(1000).await.unwrap().repaired,
        0,
        "the sets disagree with the records"
    );
    assert!(
        common::complete_with_noop::<u32>(&q, 1000).await,
        "{:?}",
        q.counts().await.unwrap()
    );
}

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
