//! What happens to a job: the handler's outcomes, the limits fixed at
//! enqueue, and settlements that cannot be applied, each on its own.

mod common;

use std::time::Duration;

use common::{eventually, raw, setup, setup_with};
use echomq::limits::MAX_DELAY;
use echomq::queue::MAX_ERROR_BYTES;
use echomq::{
    Backoff, Consumer, EnqueueOptions, Error, HandlerError, Job, JobState, Outcome, QueueOptions, Reaper, Settle,
};

const LEASE: Duration = Duration::from_secs(30);

// The four outcomes: Ok completes; `?` retries after the backoff; fail()
// fails at once whatever attempts remain; snooze() runs again later
// without counting a failure.
#[tokio::test]
async fn handler_outcomes_decide_the_job() {
    let opts = QueueOptions::new()
        .max_attempts(5)
        .backoff(Backoff::Fixed(Duration::from_millis(10)));
    let (_s, q) = setup_with("outcomes", opts).await;
    let ok = q.enqueue(&"ok").await.unwrap();
    let flaky = q.enqueue(&"flaky").await.unwrap();
    let bad = q.enqueue(&"bad").await.unwrap();
    let sleepy = q.enqueue(&"sleepy").await.unwrap();
    let handle = Consumer::new(q.clone(), |job: Job<String>| async move {
        match job.payload().as_str() {
            "flaky" if job.attempt() < 3 => {
                let _n: u32 = "not a number".parse()?;
                Ok(())
            }
            "bad" => Err(HandlerError::fail("never valid")),
            "sleepy" if job.attempt() < 3 => Err(HandlerError::snooze(Duration::from_millis(20))),
            _ => Ok(()),
        }
    })
    .spawn()
    .unwrap();
    let done = eventually(Duration::from_secs(10), || async {
        let c = q.counts().await.unwrap();
        c.completed == 3 && c.failed == 1
    })
    .await;
    handle.shutdown().await.unwrap();
    assert!(done, "{:?}", q.counts().await.unwrap());
    let info = |id| {
        let q = q.clone();
        async move {
            let i = q.job(id).await.unwrap();
            (i.state, i.attempts, i.failures, i.last_error)
        }
    };
    assert_eq!(info(&ok).await, (JobState::Completed, 1, 0, None));
    let (state, attempts, failures, err) = info(&flaky).await;
    assert_eq!((state, attempts, failures), (JobState::Completed, 3, 2));
    assert!(err.unwrap().contains("invalid digit"));
    assert_eq!(
        info(&bad).await,
        (JobState::Failed, 1, 1, Some("never valid".to_owned())),
        "fail() used 1 of 5 attempts"
    );
    let (state, attempts, failures, _) = info(&sleepy).await;
    assert_eq!(
        (state, attempts, failures),
        (JobState::Completed, 3, 0),
        "snoozes counted no failure"
    );
}

// retry_after() schedules the next attempt after its own delay, not the backoff; a delay past MAX_DELAY saturates.
#[tokio::test]
async fn retry_after_and_saturation() {
    let opts = QueueOptions::new().backoff(Backoff::Fixed(Duration::from_millis(1)));
    let (_s, q) = setup_with("retry-after", opts).await;
    let soon = q.enqueue(&60_000u64).await.unwrap();
    let never = q.enqueue(&u64::MAX).await.unwrap();
    let fine = q.enqueue(&0u64).await.unwrap();
    let t0 = q.server_time_ms().await.unwrap();
    let handle = Consumer::new(q.clone(), |job: Job<u64>| async move {
        match *job.payload() {
            0 => Ok(()),
            ms => Err(HandlerError::retry_after("later", Duration::from_millis(ms))),
        }
    })
    .spawn()
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.counts().await.unwrap().delayed == 2
        })
        .await
    );
    handle.shutdown().await.unwrap();
    let t1 = q.server_time_ms().await.unwrap();
    let due = |id| {
        let q = q.clone();
        async move { q.job(id).await.unwrap().deadline_ms.unwrap() }
    };
    assert!((t0 + 60_000..=t1 + 60_000).contains(&due(&soon).await));
    let max = MAX_DELAY.as_millis() as u64;
    assert!(
        (t0 + max..=t1 + max).contains(&due(&never).await),
        "not saturated at MAX_DELAY"
    );
    assert_eq!(q.job(&fine).await.unwrap().state, JobState::Completed);
}

// Limits are the job's, fixed at enqueue: the handle that enqueued decides
// them, every consumer and reaper honours them, and the handler sees them.
#[tokio::test]
async fn limits_are_fixed_at_enqueue() {
    let (s, q) = setup_with(
        "limits",
        QueueOptions::new()
            .max_attempts(2)
            .backoff(Backoff::Fixed(Duration::ZERO)),
    )
    .await;
    let two = q.enqueue(&1).await.unwrap();
    let one = q
        .enqueue_with(&2, &EnqueueOptions::new().max_attempts(1))
        .await
        .unwrap()
        .id;
    let no_stall = q
        .enqueue_with(&3, &EnqueueOptions::new().max_stalls(0).priority(-1))
        .await
        .unwrap()
        .id;
    // Another handle with other defaults changes nothing for these jobs.
    let other = echomq::Queue::connect_with(&s.url(), q.name(), QueueOptions::new().max_attempts(9))
        .await
        .unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let handle = Consumer::new(other.clone(), move |job: Job<u32>| {
        let seen = seen2.clone();
        async move {
            seen.lock().unwrap().push((
                *job.payload(),
                job.attempt(),
                job.limits().max_attempts,
                job.is_last_attempt(),
            ));
            if *job.payload() == 3 {
                return Ok(());
            }
            Err("always".into())
        }
    })
    .spawn()
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.counts().await.unwrap().failed == 2
        })
        .await
    );
    handle.shutdown().await.unwrap();
    assert_eq!(
        (q.job(&two).await.unwrap().failures, q.job(&one).await.unwrap().failures),
        (2, 1)
    );
    let mut seen = seen.lock().unwrap().clone();
    seen.retain(|s| s.0 != 3);
    seen.sort();
    assert_eq!(seen, [(1, 1, 2, false), (1, 2, 2, true), (2, 1, 1, true)]);

    // max_stalls 0: the first expired lease fails the job, whoever reaps.
    let info = q.job(&no_stall).await.unwrap();
    assert_eq!(info.limits.max_stalls, 0);
    let id = q
        .enqueue_with(&4, &EnqueueOptions::new().max_stalls(0))
        .await
        .unwrap()
        .id;
    let l = q.claim(1, Duration::from_millis(10)).await.unwrap().remove(0);
    assert_eq!(l.id(), id);
    common::past(&q, l.deadline_ms()).await;
    let report = Reaper::new(other).run_once().await.unwrap();
    assert_eq!(report.failed, vec![(id, 1)]);
}

// One item that cannot be sent does not hold back the batch: it answers
// for itself and the others settle (0.1 failed the whole batch, and the
// consumer's innocent jobs stalled).
#[tokio::test]
async fn a_bad_item_does_not_poison_the_batch() {
    let (s, q) = setup("poison").await;
    q.enqueue_bulk(&[1, 2, 3]).await.unwrap();
    let l = q.claim(3, LEASE).await.unwrap();
    let too_long = Settle::Retry {
        delay: Some(Duration::MAX),
        error: "x".into(),
    };
    let r = q
        .settle_many(&[
            (&l[0], &Settle::Complete),
            (&l[1], &too_long),
            (&l[2], &Settle::Complete),
        ])
        .await
        .unwrap();
    assert_eq!(r[0].as_ref().unwrap().outcome, Outcome::Completed);
    assert!(matches!(r[1], Err(Error::InvalidOption { .. })), "{:?}", r[1]);
    assert_eq!(r[2].as_ref().unwrap().outcome, Outcome::Completed);
    assert_eq!(
        q.job(l[1].id()).await.unwrap().state,
        JobState::Active,
        "the bad item changed its job"
    );

    // A backoff saturates at MAX_DELAY however many failures a job has.
    let opts = EnqueueOptions::new().max_attempts(1_000).backoff(Backoff::Exponential {
        base: Duration::from_millis(1),
        max: MAX_DELAY,
    });
    let id = q.enqueue_with(&9, &opts).await.unwrap().id;
    let mut c = raw(&s).await;
    let _: () = redis::cmd("HSET")
        .arg(format!("emq:{{{}}}:job:{id}", q.name()))
        .arg("f")
        .arg(500)
        .query_async(&mut c)
        .await
        .unwrap();
    let l = q.claim(1, LEASE).await.unwrap().remove(0);
    let t0 = q.server_time_ms().await.unwrap();
    let Outcome::Retrying { due_ms: Some(due) } = q.retry(&l, None, "again").await.unwrap().outcome else {
        panic!("not delayed");
    };
    let max = MAX_DELAY.as_millis() as u64;
    assert!(
        (t0 + max..=q.server_time_ms().await.unwrap() + max).contains(&due),
        "{due}"
    );
}

// Stored error texts and echoed values are bounded.
#[tokio::test]
async fn sizes_are_bounded() {
    let (_s, q) = setup("bounds").await;
    q.enqueue(&1).await.unwrap();
    let l = q.claim(1, LEASE).await.unwrap().remove(0);
    let huge = "e".repeat(20 << 20);
    q.retry(&l, Some(Duration::ZERO), &huge).await.unwrap();
    let stored = q.job(l.id()).await.unwrap().last_error.unwrap();
    assert!(stored.len() <= MAX_ERROR_BYTES + 32, "{} bytes stored", stored.len());
    assert!(stored.ends_with("(20971520 bytes)"), "{}", &stored[stored.len() - 40..]);

    let id = "i".repeat(600_000);
    let e = q.enqueue_with(&1, &EnqueueOptions::new().id(id)).await.unwrap_err();
    assert!(matches!(e, Error::InvalidId { .. }));
    assert!(
        e.to_string().len() < 300,
        "the message repeats {} bytes",
        e.to_string().len()
    );
}

// A job's timeout cancels its handler and counts a failed attempt with
// error "timeout"; the retry that finishes in time completes.
#[tokio::test]
async fn a_job_timeout_is_a_failed_attempt() {
    let (_s, q) = setup_with("timeout", QueueOptions::new().backoff(Backoff::Fixed(Duration::ZERO))).await;
    let opts = EnqueueOptions::new().timeout(Duration::from_millis(200));
    let id = q.enqueue_with(&1u32, &opts).await.unwrap().id;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let handle = Consumer::new(q.clone(), move |job: Job<u32>| {
        let tx = tx.clone();
        async move {
            assert_eq!(job.limits().timeout, Some(Duration::from_millis(200)));
            if job.attempt() == 1 {
                // Ignores its cancellation: the consumer stops it anyway.
                tokio::time::sleep(Duration::from_secs(30)).await;
                let _ = tx.send("ran past the timeout");
            }
            Ok(())
        }
    })
    .spawn()
    .unwrap();
    let done = common::completes(&q, &id).await;
    handle.shutdown().await.unwrap();
    assert!(done);
    let info = q.job(&id).await.unwrap();
    assert_eq!((info.attempts, info.failures, info.stalls), (2, 1, 0));
    assert_eq!(info.last_error.as_deref(), Some("timeout"));
    assert!(rx.try_recv().is_err(), "the timed-out handler was not stopped");
    assert!(matches!(
        q.enqueue_with(&1u32, &EnqueueOptions::new().timeout(Duration::ZERO))
            .await,
        Err(Error::InvalidOption { .. })
    ));
}

// A handler's progress shows in the job's record while it runs, and the
// last report stays after the job finishes.
#[tokio::test]
async fn progress_is_recorded_by_the_current_attempt() {
    let (_s, q) = setup("progress").await;
    let id = q.enqueue(&1u32).await.unwrap();
    let (reported, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let (go, release) = tokio::sync::oneshot::channel::<()>();
    let release = std::sync::Arc::new(tokio::sync::Mutex::new(Some(release)));
    let handle = Consumer::new(q.clone(), move |job: Job<u32>| {
        let (reported, release) = (reported.clone(), release.clone());
        async move {
            job.progress(&serde_json::json!({"done": 1, "of": 2})).await?;
            let _ = reported.send(());
            if let Some(r) = release.lock().await.take() {
                let _ = r.await;
            }
            job.progress(&2).await?;
            Ok(())
        }
    })
    .spawn()
    .unwrap();
    seen.recv().await.unwrap();
    let info = q.job(&id).await.unwrap();
    assert_eq!(info.progress, Some(serde_json::json!({"done": 1, "of": 2})));
    go.send(()).unwrap();
    assert!(common::completes(&q, &id).await);
    handle.shutdown().await.unwrap();
    assert_eq!(q.job(&id).await.unwrap().progress, Some(serde_json::json!(2)));
}

// A producer waits for a job to finish and gets its record; a wait that
// runs out answers Timeout.
#[tokio::test]
async fn producers_wait_for_jobs() {
    let (_s, q) = setup("wait").await;
    let id = q.enqueue(&1u32).await.unwrap();
    assert!(matches!(
        q.wait(&id, Duration::from_millis(50)).await,
        Err(Error::Timeout(_))
    ));
    let handle = Consumer::new(q.clone(), |_job: Job<u32>| async { Ok(()) })
        .spawn()
        .unwrap();
    let done = q.wait(&id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.state, JobState::Completed);
    handle.shutdown().await.unwrap();
    assert!(matches!(
        q.wait("nope", Duration::from_secs(1)).await,
        Err(Error::JobNotFound(_))
    ));
}

// A job's record keeps when it first started and its last five errors,
// newest first.
#[tokio::test]
async fn the_record_keeps_first_start_and_recent_errors() {
    let (_s, q) = setup_with("record", QueueOptions::new().max_attempts(7)).await;
    let id = q.enqueue(&1u32).await.unwrap();
    assert_eq!(q.job(&id).await.unwrap().first_started_ms, None);
    let t0 = q.server_time_ms().await.unwrap();
    for n in 1..=7 {
        let l = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
        q.retry(&l, Some(Duration::ZERO), &format!("error {n}")).await.unwrap();
    }
    let info = q.job(&id).await.unwrap();
    assert_eq!(info.state, JobState::Failed);
    let started = info.first_started_ms.unwrap();
    assert!(started >= t0 && started <= info.finished_ms.unwrap());
    let messages: Vec<&str> = info.errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(messages, ["error 7", "error 6", "error 5", "error 4", "error 3"]);
    assert!(info.errors.windows(2).all(|w| w[0].at_ms >= w[1].at_ms));
    assert_eq!(info.errors.len(), echomq::job::ERRORS_KEPT);
}

// What a handler returns is kept with the completed job (`()` keeps
// nothing); a producer waits for it; a result too large to keep does not
// undo the work: the job completes without it.
#[tokio::test]
async fn handler_results_are_kept_with_the_job() {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Receipt {
        total: u64,
        lines: Vec<String>,
    }
    let (_s, q) = setup("results").await;
    let receipt = q.enqueue(&"receipt").await.unwrap();
    let unit = q.enqueue(&"unit").await.unwrap();
    let huge = q.enqueue(&"huge").await.unwrap();
    let handle = Consumer::new(q.clone(), |job: Job<String>| async move {
        Ok(match job.payload().as_str() {
            "receipt" => serde_json::json!({"total": 42, "lines": ["tea", "cake"]}),
            "huge" => serde_json::json!("x".repeat(echomq::queue::MAX_RESULT_BYTES)),
            _ => serde_json::Value::Null,
        })
    })
    .spawn()
    .unwrap();
    let done = q.wait(&receipt, Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.state, JobState::Completed);
    assert_eq!(
        done.result_as::<Receipt>().unwrap(),
        Some(Receipt {
            total: 42,
            lines: vec!["tea".into(), "cake".into()],
        })
    );
    assert!(matches!(done.result_as::<u32>(), Err(Error::Decode { .. })));
    let unit = q.wait(&unit, Duration::from_secs(10)).await.unwrap();
    assert_eq!((unit.state, unit.result), (JobState::Completed, None));
    let huge = q.wait(&huge, Duration::from_secs(10)).await.unwrap();
    assert_eq!((huge.state, huge.result), (JobState::Completed, None));
    handle.shutdown().await.unwrap();

    // A plain `()` handler still compiles and keeps nothing.
    let id = q.enqueue(&"plain").await.unwrap();
    let plain = Consumer::new(q.clone(), |_job: Job<String>| async { Ok(()) })
        .spawn()
        .unwrap();
    assert_eq!(q.wait(&id, Duration::from_secs(10)).await.unwrap().result, None);
    plain.shutdown().await.unwrap();
}

// Low level: complete_with_result keeps a result; a bad one is refused
// before anything is settled (the lease still holds), per item in a batch.
#[tokio::test]
async fn results_through_the_low_level_calls() {
    let (_s, q) = setup("results-low").await;
    let ids = q.enqueue_bulk(&[1u32, 2, 3]).await.unwrap();
    let leases = q.claim(3, LEASE).await.unwrap();
    let r = q.complete_with_result(&leases[0], &[1, 2, 3]).await.unwrap();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(q.job(&ids[0]).await.unwrap().result, Some(serde_json::json!([1, 2, 3])));
    let big = "y".repeat(echomq::queue::MAX_RESULT_BYTES);
    assert!(matches!(
        q.complete_with_result(&leases[1], &big).await,
        Err(Error::PayloadTooLarge { .. })
    ));
    let not_json = Settle::Return {
        result: "{not json".into(),
    };
    let fine = Settle::Return {
        result: r#"{"ok":true}"#.into(),
    };
    let out = q
        .settle_many(&[(&leases[1], &not_json), (&leases[2], &fine)])
        .await
        .unwrap();
    assert!(
        matches!(out[0], Err(Error::InvalidOption { name: "result", .. })),
        "{out:?}"
    );
    assert_eq!(out[1].as_ref().unwrap().outcome, Outcome::Completed);
    assert_eq!(q.job(&ids[1]).await.unwrap().state, JobState::Active, "nothing settled");
    assert_eq!(
        q.job(&ids[2]).await.unwrap().result,
        Some(serde_json::json!({"ok": true}))
    );
    // A resent completion is remembered and does not change the result.
    let again = q.complete_with_result(&leases[0], &"other").await.unwrap();
    assert_eq!(again.outcome, Outcome::AlreadySettled);
    assert_eq!(q.job(&ids[0]).await.unwrap().result, Some(serde_json::json!([1, 2, 3])));
}
