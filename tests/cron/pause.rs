//! Pausing, resuming and running a schedule now: a paused schedule makes
//! no job (and stays listed), its ticks while paused are skipped on resume,
//! an update keeps it paused; run now makes one job from its template.

use echomq::schedule::Schedule;
use echomq::{Error, JobState};
use serde_json::json;

use super::common::{past, setup};
use super::jobs_of;

#[tokio::test]
async fn a_paused_schedule_makes_no_job_and_resumes_from_now() {
    let (s, q) = setup("pause-sched").await;
    let every = Schedule::new("every", "* * * * * *").priority(4).max_attempts(3);
    q.upsert_schedule(&every, &json!({"tick": true})).await.unwrap();
    assert!(q.pause_schedule("every").await.unwrap());
    assert!(!q.pause_schedule("every").await.unwrap(), "already paused");
    let info = q.schedule("every").await.unwrap().unwrap();
    let paused_at = info.paused_ms.expect("paused");
    assert_eq!(q.schedules().await.unwrap().len(), 1, "still listed");
    // two ticks pass while paused
    past(&q, paused_at + 2_000).await;
    let report = q.run_schedules().await.unwrap();
    assert!(report.fired.is_empty(), "{report:?}");
    assert!(jobs_of(&s, &q, "every").await.is_empty());
    // an update keeps it paused
    q.upsert_schedule(&every, &json!({"tick": 2})).await.unwrap();
    assert!(q.schedule("every").await.unwrap().unwrap().paused_ms.is_some());
    assert!(q.run_schedules().await.unwrap().fired.is_empty());

    assert!(q.resume_schedule("every").await.unwrap());
    assert!(!q.resume_schedule("every").await.unwrap());
    let resumed = q.schedule("every").await.unwrap().unwrap();
    assert!(resumed.paused_ms.is_none());
    assert!(
        resumed.done_through_ms >= paused_at + 2_000,
        "the paused ticks are skipped"
    );
    past(&q, resumed.next_tick_ms.unwrap()).await;
    q.run_schedules().await.unwrap();
    let jobs = jobs_of(&s, &q, "every").await;
    assert!(!jobs.is_empty());
    assert!(jobs.keys().all(|&t| t > resumed.done_through_ms), "{:?}", jobs.keys());

    assert!(matches!(
        q.pause_schedule("nope").await,
        Err(Error::InvalidOption { .. })
    ));
    assert!(matches!(
        q.resume_schedule("nope").await,
        Err(Error::InvalidOption { .. })
    ));
    assert!(matches!(
        q.run_schedule_now("nope").await,
        Err(Error::InvalidOption { .. })
    ));
    assert!(matches!(q.pause_schedule("").await, Err(Error::InvalidId { .. })));
}

#[tokio::test]
async fn run_now_makes_one_job_from_the_template() {
    let (_s, q) = setup("run-now").await;
    let nightly = Schedule::new("nightly", "0 0 3 * * *")
        .priority(7)
        .max_attempts(5)
        .kind("report");
    q.upsert_schedule(&nightly, &json!({"report": "daily"})).await.unwrap();
    q.pause_schedule("nightly").await.unwrap();
    let made = q.run_schedule_now("nightly").await.unwrap();
    let job = q.job(&made.id).await.unwrap();
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(job.decode::<serde_json::Value>().unwrap(), json!({"report": "daily"}));
    assert_eq!(job.limits.max_attempts, 5);
    assert_eq!(job.kind.as_deref(), Some("report"));
    let again = q.run_schedule_now("nightly").await.unwrap();
    assert_ne!(again.id, made.id, "each run is a job of its own");
    assert_eq!(
        q.schedule("nightly").await.unwrap().unwrap().jobs,
        0,
        "ticks' count unchanged"
    );
}
