//! The test helpers users get (`echomq::testing`) and "run now"
//! (`Queue::promote`), against a real server.

mod common;

use std::time::Duration;

use common::{setup, setup_with};
use echomq::admin::Moved;
use echomq::testing::{Drain, drain, waiting};
use echomq::{Backoff, EnqueueOptions, Error, HandlerError, Job, JobState, Outcome, QueueOptions};

// What code under test enqueued is listed (pending in claim order, then
// delayed); a drain runs the ready jobs inline with the handler, keeps
// results, runs what handlers enqueue, and leaves delayed jobs alone
// unless asked to run them too.
#[tokio::test]
async fn a_drain_runs_the_queue_inline() {
    let (_s, q) = setup("drain").await;
    q.enqueue(&"a".to_owned()).await.unwrap();
    q.enqueue(&"spawn".to_owned()).await.unwrap();
    q.enqueue_with(
        &"later".to_owned(),
        &EnqueueOptions::new().delay(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    let seen: Vec<String> = waiting::<String>(&q)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    assert_eq!(seen, vec!["a", "spawn", "later"]);

    let handler = |job: Job<String>| async move {
        if job.payload() == "spawn" {
            job.handle().enqueue(&"child".to_owned()).await?;
        }
        Ok::<_, HandlerError>(format!("did {}", job.payload()))
    };
    let report = drain(&q, handler).await.unwrap();
    let ran: Vec<_> = report.runs.iter().map(|r| r.result.clone().unwrap()).collect();
    assert_eq!(ran, vec!["did a", "did spawn", "did child"]);
    assert_eq!((report.completed(), report.hit_limit), (3, false));
    assert_eq!(q.counts().await.unwrap().delayed, 1, "delayed jobs wait");

    let report = Drain::new(&q).with_scheduled(true).run(handler).await.unwrap();
    assert_eq!(report.completed(), 1);
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.delayed, c.completed), (0, 0, 4), "{c:?}");
}

// Errors, panics and bad payloads settle as a Consumer's would: with
// scheduled jobs on, a failing job runs through its backoff to
// max_attempts; a handler that always snoozes stops at max_jobs.
#[tokio::test]
async fn a_drain_settles_like_a_consumer() {
    let opts = QueueOptions::new()
        .max_attempts(3)
        .backoff(Backoff::Fixed(Duration::from_secs(3600)));
    let (_s, q) = setup_with("drain-errors", opts).await;
    let flaky = q.enqueue(&1u32).await.unwrap();
    let panics = q.enqueue(&2u32).await.unwrap();
    let bad = q.enqueue(&"not a number").await.unwrap();
    let report = Drain::new(&q)
        .with_scheduled(true)
        .run(|job: Job<u32>| async move {
            match *job.payload() {
                1 => Err::<(), _>(HandlerError::retry("flaky")),
                _ => panic!("handler bug"),
            }
        })
        .await
        .unwrap();
    let of = |id: &str| -> Vec<(u64, Outcome, Option<String>)> {
        report
            .runs
            .iter()
            .filter(|r| r.id == id)
            .map(|r| (r.attempt, r.outcome, r.error.clone()))
            .collect()
    };
    let flaky_runs = of(&flaky);
    assert_eq!(flaky_runs.len(), 3, "{flaky_runs:?}");
    assert_eq!(flaky_runs[2], (3, Outcome::Failed, Some("flaky".into())));
    assert_eq!(of(&panics).len(), 3);
    assert_eq!(of(&panics)[0].2.as_deref(), Some("panicked"));
    assert!(of(&bad)[0].2.as_deref().unwrap().starts_with("undecodable payload"));
    assert_eq!(report.failed(), 3);
    assert_eq!(q.job(&flaky).await.unwrap().state, JobState::Failed);

    q.enqueue(&5u32).await.unwrap();
    let report = Drain::new(&q)
        .with_scheduled(true)
        .max_jobs(4)
        .run(|_job: Job<u32>| async move { Err::<(), _>(HandlerError::snooze(Duration::from_secs(60))) })
        .await
        .unwrap();
    assert_eq!((report.runs.len(), report.hit_limit), (4, true));
    assert_eq!(
        q.counts().await.unwrap().pending,
        1,
        "the job it stopped at is handed back"
    );
}

// "Run now": delayed jobs move to pending at their own place; a job that
// is not delayed is left alone; bad input is a typed error.
#[tokio::test]
async fn delayed_jobs_are_promoted_by_hand() {
    let (_s, q) = setup("promote").await;
    let later = EnqueueOptions::new().delay(Duration::from_secs(3600));
    let a = q.enqueue_with(&1u32, &later).await.unwrap().id;
    let b = q.enqueue_with(&2u32, &later).await.unwrap().id;
    let c = q.enqueue_with(&3u32, &later).await.unwrap().id;
    let now = q.enqueue(&4u32).await.unwrap();
    let moved = q.promote(&[&b, &now, "missing"]).await.unwrap();
    assert_eq!(
        moved,
        vec![
            (b.clone(), Moved::Done),
            (now.clone(), Moved::WrongState),
            ("missing".to_owned(), Moved::NotFound)
        ]
    );
    assert_eq!(q.job(&b).await.unwrap().state, JobState::Pending);
    // Claim order is enqueue order, not promotion order.
    let leased: Vec<String> = q
        .claim(10, Duration::from_secs(30))
        .await
        .unwrap()
        .iter()
        .map(|l| l.id().to_owned())
        .collect();
    assert_eq!(leased, vec![b.clone(), now.clone()]);
    assert_eq!(q.promote_all().await.unwrap(), 2);
    assert_eq!(q.job(&a).await.unwrap().state, JobState::Pending);
    assert_eq!(q.job(&c).await.unwrap().state, JobState::Pending);
    assert_eq!(q.promote_all().await.unwrap(), 0);
    assert!(matches!(q.promote(&[]).await, Err(Error::InvalidOption { .. })));
    assert!(matches!(q.promote(&[""]).await, Err(Error::InvalidId { .. })));
}
