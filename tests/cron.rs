//! Cron schedules: stored in the server, one job per tick whatever the
//! number of schedulers, their clocks, pauses and deaths; missed-tick
//! policies with bounded work; daylight-saving ticks; the schedule API.
//!
//! Scheduler processes are this test binary run again
//! (`--exact cron_child --ignored`), configured by `ECHOMQ_CRON_*`
//! variables, killed with the test (and when their stdin closes).

#![cfg(feature = "cron")]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{past, raw, setup, setup_with};
use echomq::schedule::{self, Missed, Schedule, ScheduleStatus, Scheduler};
use echomq::server::LocalServer;
use echomq::{Client, Consumer, Error, Job, JobInfo, Queue, QueueOptions, Retention};
use serde_json::json;

/// Every job of `schedule` in `queue`, by tick.
async fn jobs_of(server: &LocalServer, queue: &Queue, schedule: &str) -> BTreeMap<u64, JobInfo> {
    let mut c = raw(server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("emq:{{{}}}:job:cron:{schedule}@*", queue.name()))
        .query_async(&mut c)
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    for k in keys {
        let id = k.split_once(":job:").unwrap().1;
        let (name, tick) = schedule::tick_of(id).unwrap();
        assert_eq!(name, schedule);
        out.insert(tick, queue.job(id).await.unwrap());
    }
    out
}

/// The ticks of `cron` (UTC) after `after_ms` up to and including `until_ms`.
fn expected_ticks(cron: &str, after_ms: u64, until_ms: u64) -> Vec<u64> {
    let s = Schedule::new("x", cron);
    let mut out = Vec::new();
    let mut at = after_ms;
    loop {
        let t = s.ticks_after(UNIX_EPOCH + Duration::from_millis(at), 1).unwrap();
        let t = t[0].duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        if t > until_ms {
            return out;
        }
        out.push(t);
        at = t;
    }
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

// ---------------------------------------------------------------------------
// The schedule API
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Missed ticks
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// The script's own guards, as a late or stale scheduler meets them
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Sweep, obliterate
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Daylight saving
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Scheduler processes
// ---------------------------------------------------------------------------

/// libfaketime's thread-safe build, to run a scheduler with a skewed clock.
fn faketime_lib() -> &'static str {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .expect("libfaketime is missing (libfaketimeMT.so.1): apt-get install libfaketime (scripts/test installs it)")
}

/// A scheduler process: this test binary running `cron_child`.
struct Kid {
    name: String,
    child: Child,
    /// Its stdout lines so far.
    lines: Arc<Mutex<Vec<String>>>,
}

impl Kid {
    /// Starts a child of `role` ("consumer": a consumer's maintenance;
    /// "scheduler": a standalone Scheduler) on `queue`, with extra env.
    fn spawn(name: &str, role: &str, url: &str, queue: &str, env: &[(&str, &str)]) -> Kid {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "cron_child", "--nocapture", "--ignored"])
            .env("ECHOMQ_CRON_URL", url)
            .env("ECHOMQ_CRON_QUEUE", queue)
            .env("ECHOMQ_CRON_ROLE", role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                l.lock().unwrap().push(line);
            }
        });
        Kid {
            name: name.to_owned(),
            child,
            lines,
        }
    }

    /// Waits (at most 60 s) for a line starting with `prefix`; returns it.
    async fn line(&self, prefix: &str) -> String {
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(l) = self.lines.lock().unwrap().iter().find(|l| l.starts_with(prefix)) {
                return l.clone();
            }
            assert!(Instant::now() < end, "{}: no line {prefix:?} within 60 s", self.name);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The job ids this process's schedulers made (from its debug log).
    fn made(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("scheduled job made"))
            .filter_map(|l| l.split("job_id=").nth(1))
            .map(|s| s.split_whitespace().next().unwrap_or("").to_owned())
            .collect()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {}", self.name);
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A scheduler process spawned by the tests above: a consumer (whose
/// client's maintenance schedules) or a standalone `Scheduler` on the queue
/// named in the environment, until its stdin closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a scheduler process that the other tests of tests/cron.rs spawn, with ECHOMQ_CRON_* set"]
async fn cron_child() {
    let var = |k: &str| {
        std::env::var(k).unwrap_or_else(|_| panic!("cron_child runs only as a child of tests/cron.rs: {k} is not set"))
    };
    let (url, queue, role) = (
        var("ECHOMQ_CRON_URL"),
        var("ECHOMQ_CRON_QUEUE"),
        var("ECHOMQ_CRON_ROLE"),
    );
    tracing_subscriber::fmt()
        .with_env_filter("echomq::schedule=debug")
        .with_writer(std::io::stdout)
        .with_ansi(false)
        .without_time()
        .init();
    let client = Client::connect(&url).await.unwrap();
    let q = client
        .queue_with(&queue, QueueOptions::new().keep_completed(Retention::All))
        .await
        .unwrap();
    let server_ms = q.server_time_ms().await.unwrap() as i64;
    let local_ms = ms(SystemTime::now()) as i64;
    println!("CHILD skew_ms={}", local_ms - server_ms);
    let stop: Box<dyn FnOnce() -> std::pin::Pin<Box<dyn Future<Output = ()>>>> = match role.as_str() {
        "consumer" => {
            let h = Consumer::new(q, |_job: Job<serde_json::Value>| async { Ok(()) })
                .spawn()
                .unwrap();
            Box::new(move || Box::pin(async move { h.shutdown().await.unwrap() }))
        }
        "scheduler" => {
            let h = Scheduler::new(q).spawn();
            Box::new(move || Box::pin(h.shutdown()))
        }
        other => panic!("unknown ECHOMQ_CRON_ROLE {other:?}"),
    };
    println!("CHILD ready");
    tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    })
    .await
    .unwrap();
    stop().await;
}

/// Checks that `jobs` hold exactly the ticks of every second after
/// `after_ms` up to the schedule's last tick done, none made before its
/// tick; returns the last tick and the largest lateness.
async fn one_job_per_tick(q: &Queue, jobs: &BTreeMap<u64, JobInfo>, after_ms: u64) -> (u64, u64) {
    let info = q.schedule("tick").await.unwrap().unwrap();
    let want = expected_ticks("* * * * * *", after_ms, info.done_through_ms);
    let got: Vec<u64> = jobs.keys().copied().collect();
    assert_eq!(got, want, "exactly the ticks, one job each, no gap");
    assert_eq!(info.jobs, want.len() as u64, "each made once");
    assert_eq!(info.last_missed_ms, None, "no tick missed");
    let mut late = 0;
    for (tick, job) in jobs {
        assert!(job.created_ms >= *tick, "tick {tick} made early, at {}", job.created_ms);
        late = late.max(job.created_ms - tick);
    }
    (info.done_through_ms, late)
}

// Three scheduler processes, one SIGKILLed and one SIGSTOPped then resumed: exactly one job per tick, no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_schedulers_one_job_per_tick() {
    let server = LocalServer::start().expect("start a local server");
    let name = common::unique("three");
    let q = Queue::connect_with(&server.url(), &name, QueueOptions::new().keep_completed(Retention::All))
        .await
        .unwrap();
    q.upsert_schedule(&Schedule::new("tick", "* * * * * *"), &json!({"n": 1}))
        .await
        .unwrap();
    let start = q.schedule("tick").await.unwrap().unwrap().done_through_ms;
    let url = server.url();
    let mut kids = [
        Kid::spawn("consumer-1", "consumer", &url, &name, &[]),
        Kid::spawn("consumer-2", "consumer", &url, &name, &[]),
        Kid::spawn("scheduler-3", "scheduler", &url, &name, &[]),
    ];
    for k in &kids {
        k.line("CHILD ready").await;
    }
    let at = |s: u64| start + s * 1000;
    past(&q, at(4)).await;
    kids[0].signal("-KILL");
    past(&q, at(6)).await;
    kids[1].signal("-STOP");
    past(&q, at(9)).await;
    kids[1].signal("-CONT");
    past(&q, at(13)).await;
    // Stop them all, then read what they made.
    for k in &mut kids {
        k.kill();
    }
    let jobs = jobs_of(&server, &q, "tick").await;
    let (last, late) = one_job_per_tick(&q, &jobs, start).await;
    assert!(last >= at(12), "ticks went on to the end: {last} < {}", at(12));
    let made: Vec<Vec<String>> = kids.iter().map(Kid::made).collect();
    let mut all: Vec<&String> = made.iter().flatten().collect();
    let total = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), total, "a job made by two processes");
    assert_eq!(total, jobs.len(), "every job made by one of the three");
    println!(
        "three schedulers: {} ticks, made {:?} by consumer-1 (killed), consumer-2 (paused 3 s), scheduler-3; latest {late} ms after its tick",
        jobs.len(),
        made.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

// Schedulers whose clocks are an hour ahead and an hour behind (libfaketime), alone and beside a normal one: the same ticks, none early, none extra.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_scheduler_clocks_change_nothing() {
    let lib = faketime_lib();
    let server = LocalServer::start().expect("start a local server");
    let name = common::unique("skew");
    let q = Queue::connect_with(&server.url(), &name, QueueOptions::new().keep_completed(Retention::All))
        .await
        .unwrap();
    q.upsert_schedule(&Schedule::new("tick", "* * * * * *"), &json!({"n": 1}))
        .await
        .unwrap();
    let start = q.schedule("tick").await.unwrap().unwrap().done_through_ms;
    let url = server.url();
    let faked = |skew: &'static str| -> Vec<(&'static str, &'static str)> {
        vec![("LD_PRELOAD", lib), ("FAKETIME", skew), ("DONT_FAKE_MONOTONIC", "1")]
    };
    let check_skew = |line: String, want: i64| {
        let skew: i64 = line.trim_start_matches("CHILD skew_ms=").parse().unwrap();
        assert!(
            (skew - want).abs() < 60_000,
            "faketime did not skew the child: {skew} ms, not {want}"
        );
    };

    // An hour ahead, alone for 3 s.
    let mut ahead = Kid::spawn("ahead", "consumer", &url, &name, &faked("+1h"));
    check_skew(ahead.line("CHILD skew_ms=").await, 3_600_000);
    ahead.line("CHILD ready").await;
    let t1 = q.server_time_ms().await.unwrap();
    past(&q, t1 + 3_000).await;
    ahead.kill();
    let ahead_gone = q.server_time_ms().await.unwrap();
    let made_ahead = ahead.made();
    // An hour behind, alone for 3 s.
    let mut behind = Kid::spawn("behind", "scheduler", &url, &name, &faked("-1h"));
    check_skew(behind.line("CHILD skew_ms=").await, -3_600_000);
    behind.line("CHILD ready").await;
    let t2 = q.server_time_ms().await.unwrap();
    past(&q, t2 + 3_000).await;
    // Then beside a scheduler with the right clock, for 3 s.
    let mut normal = Kid::spawn("normal", "consumer", &url, &name, &[]);
    check_skew(normal.line("CHILD skew_ms=").await, 0);
    normal.line("CHILD ready").await;
    let t3 = q.server_time_ms().await.unwrap();
    past(&q, t3 + 3_000).await;
    behind.kill();
    normal.kill();

    let jobs = jobs_of(&server, &q, "tick").await;
    let (_, late) = one_job_per_tick(&q, &jobs, start).await;
    // Alone, each skewed process made every tick of its phase, on time.
    let ticks_made = |ids: &[String]| -> Vec<u64> { ids.iter().map(|id| schedule::tick_of(id).unwrap().1).collect() };
    let ahead_ticks = ticks_made(&made_ahead);
    assert!(
        ahead_ticks.len() >= 2 && ahead_ticks.iter().all(|t| *t <= ahead_gone),
        "{ahead_ticks:?}"
    );
    let behind_ticks = ticks_made(&behind.made());
    assert!(
        behind_ticks.iter().filter(|&&t| t > t2 && t <= t3).count() >= 2,
        "{behind_ticks:?}"
    );
    assert!(late < 30_000, "a tick made {late} ms late");
    println!(
        "skewed clocks: {} ticks; made {} by +1h, {} by -1h, {} by the normal one; latest {late} ms after its tick",
        jobs.len(),
        ahead_ticks.len(),
        behind_ticks.len(),
        normal.made().len()
    );
}
