//! Scheduler processes (this test binary run again as `cron_child`):
//! one job per tick whatever is killed, paused or skewed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use echomq::schedule::{self, Schedule, Scheduler};
use echomq::server::LocalServer;
use echomq::{Client, Consumer, Job, JobInfo, Queue, QueueOptions, Retention};
use serde_json::json;

use super::common;
use super::common::past;
use super::{expected_ticks, jobs_of, ms};

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
        cmd.args(["--exact", "processes::cron_child", "--nocapture", "--ignored"])
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
#[ignore = "a scheduler process that the other tests of tests/cron/ spawn, with ECHOMQ_CRON_* set"]
async fn cron_child() {
    let var = |k: &str| {
        std::env::var(k).unwrap_or_else(|_| panic!("cron_child runs only as a child of tests/cron/: {k} is not set"))
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
