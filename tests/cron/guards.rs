//! The script's own guards, as a late or stale scheduler meets them.

use std::time::Duration;

use echomq::schedule::{self, Schedule};
use echomq::{Consumer, Job, Queue, QueueOptions, Retention};

use super::common;
use super::common::{past, raw, setup_with};

/// Calls `lua/schedule_fire.lua` as echomq runs it (its function in this
/// build's library, which opening the queue loaded), the way a scheduler
/// that read the schedule long ago would.
async fn raw_fire(
    c: &mut redis::aio::MultiplexedConnection,
    library: &str,
    q: &Queue,
    name: &str,
    cron: &str,
    next: i64,
    ticks: &[u64],
) -> Vec<redis::Value> {
    let base = format!("emq:{{{}}}:", q.name());
    let hash = library.strip_prefix("echomq_").unwrap();
    let mut call = redis::cmd("FCALL");
    call.arg(format!("emq_{hash}_schedule_fire")).arg(5);
    call.arg(format!("{base}schedules"))
        .arg(format!("{base}schedule:{name}"))
        .arg(format!("{base}seq"))
        .arg(format!("{base}pending"))
        .arg(format!("{base}wake"));
    call.arg(&base).arg(name).arg(cron).arg("UTC").arg(next);
    for t in ticks {
        call.arg(*t);
    }
    call.query_async(c).await.unwrap()
}

fn int(v: &redis::Value) -> i64 {
    match v {
        redis::Value::Int(n) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

// A late scheduler offering a tick already taken makes nothing, even after retention deleted its job; future ticks and stale timings are refused.
#[tokio::test]
async fn late_future_and_stale_offers_are_refused() {
    let (s, q) = setup_with("late", QueueOptions::new().keep_completed(Retention::None)).await;
    q.upsert_schedule(&Schedule::new("t", "* * * * * *"), &1).await.unwrap();
    let first = q.schedule("t").await.unwrap().unwrap().next_tick_ms.unwrap();
    past(&q, first).await;
    let made = q.run_schedules().await.unwrap();
    assert_eq!(made.fired[0].jobs[0].tick_ms, first);
    // The job runs and, with Retention::None, its record is deleted.
    let id = schedule::job_id("t", first);
    let consumer = Consumer::new(q.clone(), |_job: Job<i32>| async { Ok(()) })
        .spawn()
        .unwrap();
    assert!(
        common::eventually(Duration::from_secs(10), || async { q.job(&id).await.is_err() }).await,
        "the record is deleted"
    );
    consumer.shutdown().await.unwrap();

    let mut c = raw(&s).await;
    let library = echomq::Client::connect(&s.url())
        .await
        .unwrap()
        .script_libraries()
        .await
        .unwrap()
        .current;
    // A scheduler that read the schedule before `first` was taken offers it again.
    let r = raw_fire(
        &mut c,
        &library,
        &q,
        "t",
        "* * * * * *",
        (first + 1000) as i64,
        &[first],
    )
    .await;
    assert_eq!(int(&r[0]), 1, "OK");
    assert_eq!(r.len(), 5, "no job made: {r:?}");
    assert!(q.job(&id).await.is_err(), "the deleted job is not made again");

    // A tick later than the server's now is refused and becomes the look time.
    let now = q.server_time_ms().await.unwrap();
    let future = now / 1000 * 1000 + 5_000;
    let before = q.schedule("t").await.unwrap().unwrap().done_through_ms;
    let r = raw_fire(
        &mut c,
        &library,
        &q,
        "t",
        "* * * * * *",
        (future + 1000) as i64,
        &[future],
    )
    .await;
    assert_eq!((r.len(), int(&r[3]) as u64), (5, future), "{r:?}");
    assert!(q.job(&schedule::job_id("t", future)).await.is_err());
    assert_eq!(q.schedule("t").await.unwrap().unwrap().done_through_ms, before);

    // Ticks planned from another expression than the stored one: STALE, nothing written.
    let snap = common::snapshot(&s, q.name()).await;
    let r = raw_fire(&mut c, &library, &q, "t", "*/2 * * * * *", -1, &[before + 1000]).await;
    assert_eq!(int(&r[0]), -7, "STALE");
    assert_eq!(common::snapshot(&s, q.name()).await, snap);
}
