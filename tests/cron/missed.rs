//! Missed ticks: each policy, and a week down costs one bounded pass.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use echomq::schedule::{Missed, Schedule};

use super::common::{past, raw, setup};
use super::{expected_ticks, jobs_of};

// A scheduler down for several ticks: Skip makes only the on-time ticks, RunLatest one more for the latest missed.
#[tokio::test]
async fn missed_ticks_follow_the_policy() {
    let (s, q) = setup("missed").await;
    let grace = Duration::from_secs(10);
    for (name, policy) in [("skip", Missed::Skip), ("latest", Missed::RunLatest)] {
        let sch = Schedule::new(name, "* * * * * *").missed(policy).grace(grace);
        q.upsert_schedule(&sch, &1).await.unwrap();
    }
    let start = q.schedule("skip").await.unwrap().unwrap().done_through_ms;
    let start_latest = q.schedule("latest").await.unwrap().unwrap().done_through_ms;
    // Nobody schedules for 14 s.
    past(&q, start.max(start_latest) + 14_000).await;
    let report = q.run_schedules().await.unwrap();
    assert_eq!(report.fired.len(), 2);
    for f in &report.fired {
        let created = if f.schedule == "skip" { start } else { start_latest };
        // The pass planned the ticks up to its read of the server's clock;
        // the script's own clock, a moment later, decided which were missed.
        let all = expected_ticks("* * * * * *", created, report.server_ms);
        let (missed, on_time): (Vec<u64>, Vec<u64>) = all.iter().partition(|&&t| f.server_ms - t > 10_000);
        assert!(missed.len() >= 3, "{missed:?}");
        let made: Vec<u64> = f.jobs.iter().map(|j| j.tick_ms).collect();
        let mut want = on_time.clone();
        if f.schedule == "latest" {
            want.insert(0, *missed.last().unwrap());
        }
        assert_eq!(made, want, "{}", f.schedule);
        assert_eq!(f.missed_ms, missed.last().copied(), "{}", f.schedule);
        let info = q.schedule(&f.schedule).await.unwrap().unwrap();
        assert_eq!(info.last_missed_ms, missed.last().copied());
        assert_eq!(info.jobs, want.len() as u64);
        assert_eq!(
            jobs_of(&s, &q, &f.schedule).await.keys().copied().collect::<Vec<_>>(),
            want
        );
    }
}

// A schedule every second whose schedulers were down for a week costs one bounded pass.
#[tokio::test]
async fn a_week_down_is_bounded_work() {
    let (s, q) = setup("week").await;
    let mut c = raw(&s).await;
    for (name, policy) in [("skip", Missed::Skip), ("latest", Missed::RunLatest)] {
        let sch = Schedule::new(name, "* * * * * *").missed(policy);
        q.upsert_schedule(&sch, &1).await.unwrap();
        // The state a week of downtime leaves: the last tick done a week ago.
        let week_ago = q.server_time_ms().await.unwrap() / 1000 * 1000 - 7 * 86_400_000;
        let _: () = redis::cmd("HSET")
            .arg(format!("emq:{{{}}}:schedule:{name}", q.name()))
            .arg("lt")
            .arg(week_ago)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let started = Instant::now();
    let mut passes = 0;
    // Per schedule: how many jobs, and how many of them for ticks taken
    // more than the grace (60 s) late.
    let mut made: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    // Passes until nothing is due at once (the grace's 60 ticks come in chunks of at most 100).
    loop {
        passes += 1;
        let r = q.run_schedules().await.unwrap();
        for f in &r.fired {
            let e = made.entry(f.schedule.clone()).or_default();
            e.0 += f.jobs.len();
            e.1 += f.jobs.iter().filter(|j| f.server_ms - j.tick_ms > 60_000).count();
        }
        if r.next_pass_ms.is_some_and(|t| t > r.server_ms) {
            break;
        }
        assert!(passes < 5, "unbounded: {passes} passes");
    }
    let took = started.elapsed();
    println!("a week down: {passes} passes, {took:?}, (jobs, of missed ticks) {made:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // Skip: the ticks of the last minute only (60, or one either side as
    // the pass's read and the script's clock fall); RunLatest: one more,
    // for the latest missed tick.
    let (skip, latest) = (made["skip"], made["latest"]);
    assert!((59..=61).contains(&skip.0) && skip.1 == 0, "{made:?}");
    assert!((60..=62).contains(&latest.0) && latest.1 == 1, "{made:?}");
}
