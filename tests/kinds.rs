//! Job kinds routed to typed handlers (`Kinds`), state for handlers
//! (`with_state`) and tower services as handlers, against a real server.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::setup;
use echomq::handlers::service;
use echomq::testing::drain;
use echomq::{Backoff, Consumer, EnqueueOptions, HandlerError, Job, JobKind, JobState, Kinds, RawPayload, with_state};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Email {
    to: String,
}
impl JobKind for Email {
    const KIND: &'static str = "email";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Sms {
    number: u64,
}
impl JobKind for Sms {
    const KIND: &'static str = "sms";
}

/// Decrements a running-calls counter when dropped.
struct Out(Arc<AtomicUsize>);
impl Drop for Out {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

const WAIT: Duration = Duration::from_secs(10);

/// A router for Email (returns the address, upper-cased, through state)
/// and Sms (returns the number doubled).
fn router() -> echomq::KindRouter {
    #[derive(Clone)]
    struct Shout(bool);
    async fn email(shout: Shout, job: Job<Email>) -> Result<String, HandlerError> {
        assert_eq!(job.kind(), Some("email"));
        let to = &job.payload().to;
        Ok(if shout.0 { to.to_uppercase() } else { to.clone() })
    }
    Kinds::new()
        .kind::<Email>(with_state(Shout(true), email))
        .kind::<Sms>(|job: Job<Sms>| async move { Ok::<_, HandlerError>(job.payload().number * 2) })
        .build()
        .unwrap()
}

// Two kinds on one queue each reach their own handler with their own payload
// type and keep their own result; the kind shows on the record and the lease.
#[tokio::test]
async fn kinds_route_to_their_handlers() {
    let (_s, q) = setup("kinds-route").await;
    let mail = q
        .enqueue_job(&Email {
            to: "ada@example.com".into(),
        })
        .await
        .unwrap();
    let sms = q.enqueue_jobs(&[Sms { number: 21 }]).await.unwrap().remove(0);
    let info = q.job(&mail).await.unwrap();
    assert_eq!(info.kind.as_deref(), Some("email"));
    assert_eq!(q.job(&sms).await.unwrap().kind.as_deref(), Some("sms"));

    let worker = Consumer::new(q.clone(), router()).spawn().unwrap();
    let mail = q.wait(&mail, WAIT).await.unwrap();
    let sms = q.wait(&sms, WAIT).await.unwrap();
    worker.shutdown().await.unwrap();
    assert_eq!(mail.result_as::<String>().unwrap().as_deref(), Some("ADA@EXAMPLE.COM"));
    assert_eq!(sms.result_as::<u64>().unwrap(), Some(42));

    // A lease carries the kind too; a typed enqueue's kind wins over the options'.
    q.enqueue_job_with(&Sms { number: 1 }, &EnqueueOptions::new().kind("ignored"))
        .await
        .unwrap();
    let leases = q.claim(10, Duration::from_secs(30)).await.unwrap();
    let kinds: Vec<_> = leases.iter().map(|l| l.kind()).collect();
    assert_eq!(kinds, [Some("sms")]);
}

// An unknown kind, a job without a kind and a payload that does not decode
// each fail for good on their first attempt (no retry), with a reason naming
// the kind.
#[tokio::test]
async fn an_unknown_kind_fails_once_with_a_clear_reason() {
    let (_s, q) = setup("kinds-unknown").await;
    let opts = EnqueueOptions::new().max_attempts(5);
    let fax = q.enqueue_with(&"hi", &opts.clone().kind("fax")).await.unwrap().id;
    let none = q.enqueue_with(&"hi", &opts).await.unwrap().id;
    let bad = q
        .enqueue_with(&"not an email", &opts.clone().kind("email"))
        .await
        .unwrap()
        .id;
    let worker = Consumer::new(q.clone(), router()).spawn().unwrap();
    let fax = q.wait(&fax, WAIT).await.unwrap();
    let none = q.wait(&none, WAIT).await.unwrap();
    let bad = q.wait(&bad, WAIT).await.unwrap();
    worker.shutdown().await.unwrap();
    for info in [&fax, &none, &bad] {
        assert_eq!((info.state, info.attempts), (JobState::Failed, 1), "{info:?}");
    }
    let reason = fax.last_error.unwrap();
    assert!(
        reason.contains(r#"unknown job kind "fax""#) && reason.contains(r#""email", "sms""#),
        "{reason}"
    );
    assert!(none.last_error.unwrap().contains("has no kind"));
    let reason = bad.last_error.unwrap();
    assert!(reason.contains(r#"job kind "email": undecodable payload"#), "{reason}");
}

// The inline test helper drains a queue through a router, and a fallback
// takes the kinds the router does not know, undecoded.
#[tokio::test]
async fn a_drain_runs_a_router_with_a_fallback() {
    let (_s, q) = setup("kinds-drain").await;
    q.enqueue_job(&Sms { number: 5 }).await.unwrap();
    q.enqueue_with(&[1, 2], &EnqueueOptions::new().kind("legacy"))
        .await
        .unwrap();
    let router = Kinds::new()
        .kind::<Sms>(|job: Job<Sms>| async move { Ok::<_, HandlerError>(job.payload().number) })
        .fallback(|job: Job<RawPayload>| async move {
            let text = String::from_utf8(job.payload().bytes().to_vec()).unwrap();
            Ok::<_, HandlerError>(format!("{}:{text}", job.kind().unwrap_or("-")))
        })
        .build()
        .unwrap();
    let report = drain(&q, router).await.unwrap();
    let results: Vec<_> = report.runs.iter().map(|r| r.result.clone().unwrap()).collect();
    assert_eq!(results, [serde_json::json!(5), serde_json::json!("legacy:[1,2]")]);
}

// A tower service with concurrency-limit and timeout layers handles jobs:
// the limit holds the handlers back, and a job past the timeout is retried,
// then fails at its max_attempts with the timeout's error.
#[tokio::test]
async fn a_tower_service_with_layers_handles_jobs() {
    let (_s, q) = setup("kinds-tower").await;
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (r, m) = (running.clone(), most.clone());
    let svc = tower::ServiceBuilder::new()
        .concurrency_limit(2)
        .timeout(Duration::from_millis(200))
        .service_fn(move |job: Job<u64>| {
            let (r, m) = (r.clone(), m.clone());
            async move {
                m.fetch_max(r.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                // Counts the call out also when the timeout drops it.
                let _out = Out(r);
                tokio::time::sleep(Duration::from_millis(*job.payload())).await;
                Ok::<_, tower::BoxError>(job.payload() + 1)
            }
        });
    let quick = q.enqueue_bulk(&[20u64, 20, 20, 20, 20, 20]).await.unwrap();
    let opts = EnqueueOptions::new()
        .max_attempts(2)
        .backoff(Backoff::fixed(Duration::from_millis(1)));
    let slow = q.enqueue_with(&60_000u64, &opts).await.unwrap().id;
    let worker = Consumer::new(q.clone(), service(svc)).concurrency(8).spawn().unwrap();
    for id in &quick {
        let info = q.wait(id, WAIT).await.unwrap();
        assert_eq!(info.result_as::<u64>().unwrap(), Some(21));
    }
    let slow = q.wait(&slow, WAIT).await.unwrap();
    worker.shutdown().await.unwrap();
    assert_eq!((slow.state, slow.attempts, slow.failures), (JobState::Failed, 2, 2));
    assert!(slow.last_error.unwrap().contains("timed out"));
    assert!(most.load(Ordering::SeqCst) <= 2, "the concurrency limit held");
}

// A cron schedule carries a kind to each job it makes; a schedule stored
// before kinds (no `kd` field) upserted again without one is unchanged.
#[tokio::test]
async fn a_schedule_carries_its_kind() {
    use echomq::schedule::{Schedule, ScheduleStatus, job_id};
    let (s, q) = setup("kinds-cron").await;
    let every = Schedule::new("every", "* * * * * *").kind(Sms::KIND);
    let payload = Sms { number: 7 };
    assert_eq!(
        q.upsert_schedule(&every, &payload).await.unwrap(),
        ScheduleStatus::Created
    );
    assert_eq!(
        q.upsert_schedule(&every, &payload).await.unwrap(),
        ScheduleStatus::Unchanged
    );
    let info = q.schedule("every").await.unwrap().unwrap();
    assert_eq!(info.kind.as_deref(), Some("sms"));
    let tick = info.next_tick_ms.unwrap();
    common::past(&q, tick).await;
    q.run_schedules().await.unwrap();
    let job = q.job(&job_id("every", tick)).await.unwrap();
    assert_eq!(job.kind.as_deref(), Some("sms"));

    let plain = Schedule::new("plain", "* * * * * *");
    q.upsert_schedule(&plain, &1).await.unwrap();
    let mut c = common::raw(&s).await;
    let key = format!("emq:{{{}}}:schedule:plain", q.name());
    let _: () = redis::cmd("HDEL")
        .arg(&key)
        .arg("kd")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(q.upsert_schedule(&plain, &1).await.unwrap(), ScheduleStatus::Unchanged);
    assert_eq!(q.schedule("plain").await.unwrap().unwrap().kind, None);
}
