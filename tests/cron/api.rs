//! The schedule API: add, update, list, remove; bad input; ticks becoming
//! jobs, in a scheduler and in a consumer's maintenance; the sweep and
//! obliterate; daylight-saving ticks.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use echomq::schedule::{self, Missed, Schedule, ScheduleStatus};
use echomq::{Consumer, Error, Job, QueueOptions};
use serde_json::json;

use super::common;
use super::common::{past, setup, setup_with};
use super::{jobs_of, ms};

// Add, update, list and remove; an unchanged upsert writes nothing; a new timing starts at the update.
#[tokio::test]
async fn add_update_list_remove() {
    let (_s, q) = setup("api").await;
    let nightly = Schedule::new("nightly", "0 30 2 * * *")
        .time_zone("Europe/Berlin")
        .missed(Missed::Skip)
        .priority(3)
        .max_attempts(7)
        .timeout(Duration::from_secs(90));
    assert_eq!(
        q.upsert_schedule(&nightly, &json!({"r": 1})).await.unwrap(),
        ScheduleStatus::Created
    );
    assert_eq!(
        q.upsert_schedule(&nightly, &json!({"r": 1})).await.unwrap(),
        ScheduleStatus::Unchanged
    );
    let first = q.schedule("nightly").await.unwrap().unwrap();
    assert_eq!(
        (first.cron.as_str(), first.time_zone.as_str()),
        ("0 30 2 * * *", "Europe/Berlin")
    );
    assert_eq!((first.missed, first.priority, first.jobs), (Missed::Skip, 3, 0));
    assert_eq!(first.limits.max_attempts, 7);
    assert_eq!(first.limits.timeout, Some(Duration::from_secs(90)));
    assert_eq!(first.grace, schedule::DEFAULT_GRACE);
    assert_eq!(first.decode::<serde_json::Value>().unwrap(), json!({"r": 1}));
    assert_eq!(
        first.done_through_ms, first.created_ms,
        "a new schedule starts when stored"
    );
    let next = first.next_tick_ms.unwrap();
    assert_eq!(
        next,
        ms(nightly
            .ticks_after(UNIX_EPOCH + Duration::from_millis(first.created_ms), 1)
            .unwrap()[0])
    );

    // A new payload keeps the schedule's place; a new expression starts at the update.
    assert_eq!(
        q.upsert_schedule(&nightly, &json!({"r": 2})).await.unwrap(),
        ScheduleStatus::Updated
    );
    let second = q.schedule("nightly").await.unwrap().unwrap();
    assert_eq!(second.done_through_ms, first.done_through_ms);
    assert_eq!(second.decode::<serde_json::Value>().unwrap(), json!({"r": 2}));
    let every_minute = Schedule::new("nightly", "0 * * * * *");
    assert_eq!(
        q.upsert_schedule(&every_minute, &json!({"r": 2})).await.unwrap(),
        ScheduleStatus::Updated
    );
    let third = q.schedule("nightly").await.unwrap().unwrap();
    assert!(third.done_through_ms >= second.updated_ms && third.done_through_ms == third.updated_ms);
    assert_eq!((third.time_zone.as_str(), third.missed), ("UTC", Missed::RunLatest));
    assert_eq!(third.limits.max_attempts, echomq::limits::DEFAULT_MAX_ATTEMPTS);

    q.upsert_schedule(&Schedule::new("a-first", "@hourly"), &1)
        .await
        .unwrap();
    let names: Vec<String> = q.schedules().await.unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["a-first", "nightly"]);

    assert!(q.remove_schedule("nightly").await.unwrap());
    assert!(!q.remove_schedule("nightly").await.unwrap());
    assert!(q.schedule("nightly").await.unwrap().is_none());
    let names: Vec<String> = q.schedules().await.unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["a-first"]);
}

// A bad name, expression, zone, grace or payload is a typed error when the schedule is added, and stores nothing.
#[tokio::test]
async fn bad_input_is_a_typed_error() {
    let (_s, q) = setup_with("bad", QueueOptions::new().max_payload_bytes(100)).await;
    let cases = [
        (Schedule::new("s", "61 * * * *"), "cron expression"),
        (Schedule::new("s", "* * *"), "cron expression"),
        (Schedule::new("s", "0 0 0 1 1 * 2020"), "cron expression"),
        (Schedule::new("s", "0 0 0 30 2 *"), "cron expression"),
        (
            Schedule::new("s", "* * * * *").time_zone("Europe/Atlantis"),
            "time zone",
        ),
        (Schedule::new("s", "* * * * *").grace(Duration::from_secs(5)), "grace"),
        (Schedule::new("s", "* * * * *").max_attempts(0), "max_attempts"),
    ];
    for (s, want) in cases {
        match q.upsert_schedule(&s, &1).await {
            Err(Error::InvalidOption { name, reason }) => assert_eq!(name, want, "{reason}"),
            other => panic!("{want}: {other:?}"),
        }
    }
    for name in ["", "new\nline", &"n".repeat(201)] {
        let e = q
            .upsert_schedule(&Schedule::new(name, "* * * * *"), &1)
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidId {
                    what: "schedule name",
                    ..
                }
            ),
            "{e}"
        );
    }
    let e = q
        .upsert_schedule(&Schedule::new("s", "* * * * *"), &"x".repeat(200))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::PayloadTooLarge { .. }), "{e}");
    assert!(q.schedules().await.unwrap().is_empty());
    assert!(matches!(q.remove_schedule("").await, Err(Error::InvalidId { .. })));
}

// Each due tick becomes one job with the schedule's payload and options; removing the schedule stops its jobs.
#[tokio::test]
async fn ticks_become_jobs_until_removed() {
    let (s, q) = setup("jobs").await;
    let every = Schedule::new("every", "* * * * * *").priority(9).max_attempts(2);
    q.upsert_schedule(&every, &json!({"hello": "world"})).await.unwrap();
    let info = q.schedule("every").await.unwrap().unwrap();
    let first = info.next_tick_ms.unwrap();
    past(&q, first + 1000).await;
    let report = q.run_schedules().await.unwrap();
    let made: Vec<u64> = report.fired[0].jobs.iter().map(|j| j.tick_ms).collect();
    assert!(made.starts_with(&[first, first + 1000]), "{made:?}");
    let job = q.job(&schedule::job_id("every", first)).await.unwrap();
    assert_eq!(job.decode::<serde_json::Value>().unwrap(), json!({"hello": "world"}));
    assert_eq!(job.limits.max_attempts, 2);
    assert!(job.created_ms >= first);
    // A second pass at once takes nothing twice.
    let again = q.run_schedules().await.unwrap();
    assert!(
        again
            .fired
            .iter()
            .all(|f| f.jobs.iter().all(|j| j.tick_ms > *made.last().unwrap()))
    );

    assert!(q.remove_schedule("every").await.unwrap());
    let removed_at = q.server_time_ms().await.unwrap();
    past(&q, removed_at + 2100).await;
    let report = q.run_schedules().await.unwrap();
    assert!(report.fired.is_empty() && report.next_pass_ms.is_none(), "{report:?}");
    let jobs = jobs_of(&s, &q, "every").await;
    assert!(jobs.keys().all(|&t| t <= removed_at), "no job after the removal");
}

// A consumer's maintenance runs the schedules: its handler gets one job per tick, no extra process.
#[tokio::test]
async fn a_consumers_maintenance_schedules() {
    let (_s, q) = setup("maint").await;
    q.upsert_schedule(&Schedule::new("beat", "* * * * * *"), &json!(null))
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let consumer = Consumer::new(q.clone(), move |job: Job<serde_json::Value>| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(job.id().to_owned());
            Ok(())
        }
    })
    .spawn()
    .unwrap();
    let mut ticks = Vec::new();
    while ticks.len() < 3 {
        let id = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a scheduled job within 10 s")
            .unwrap();
        let (name, tick) = schedule::tick_of(&id).unwrap();
        assert_eq!(name, "beat");
        ticks.push(tick);
    }
    consumer.shutdown().await.unwrap();
    assert!(ticks.windows(2).all(|w| w[1] == w[0] + 1000), "{ticks:?}");
}

// The sweep leaves schedules alone and finds nothing to repair; obliterate deletes them with the queue.
#[tokio::test]
async fn sweep_and_obliterate_know_schedules() {
    let (s, q) = setup("sweep").await;
    q.upsert_schedule(&Schedule::new("a", "* * * * * *"), &1).await.unwrap();
    q.upsert_schedule(&Schedule::new("b", "@daily"), &2).await.unwrap();
    let first = q.schedule("a").await.unwrap().unwrap().next_tick_ms.unwrap();
    past(&q, first).await;
    assert!(!q.run_schedules().await.unwrap().fired.is_empty());
    let report = q.sweep(100).await.unwrap();
    assert_eq!((report.repaired, report.skipped), (0, 0), "{report:?}");
    assert_eq!(q.schedules().await.unwrap().len(), 2);
    q.obliterate(true).await.unwrap();
    assert!(q.schedules().await.unwrap().is_empty());
    assert!(common::snapshot(&s, q.name()).await.is_empty());
}

// The documented daylight-saving ticks in Europe/Berlin (2026-03-29 and 2026-10-25), from the public preview.
#[test]
fn daylight_saving_ticks() {
    let at = |secs: u64| UNIX_EPOCH + Duration::from_secs(secs);
    let secs = |ticks: Vec<SystemTime>| -> Vec<u64> { ticks.iter().map(|t| ms(*t) / 1000).collect() };
    let daily = Schedule::new("d", "0 30 2 * * *").time_zone("Europe/Berlin");
    // From 2026-03-28T12:00Z: 02:30 does not exist on the 29th, so 03:00
    // CEST (01:00Z); then 02:30 CEST (00:30Z).
    let t = daily.ticks_after(at(1_774_699_200), 2).unwrap();
    assert_eq!(secs(t), [1_774_746_000, 1_774_830_600]);
    // From 2026-10-24T12:00Z: 02:30 happens twice on the 25th and runs
    // once, at the first (CEST, 00:30Z); then 02:30 CET (01:30Z).
    let t = daily.ticks_after(at(1_792_843_200), 2).unwrap();
    assert_eq!(secs(t), [1_792_888_200, 1_792_978_200]);
    // Every 30 minutes: the repeated hour runs twice (four ticks from 02:00 CEST to 02:30 CET).
    let half = Schedule::new("h", "0 */30 * * * *").time_zone("Europe/Berlin");
    let t = half.ticks_after(at(1_792_886_400 - 1), 4).unwrap(); // from 2026-10-25T00:00Z (02:00 CEST)
    assert_eq!(secs(t), [1_792_886_400, 1_792_888_200, 1_792_890_000, 1_792_891_800]);
}
