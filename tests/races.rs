//! Operator calls racing live traffic against a real server: pause across
//! two OS processes, obliterate under load, retention by age over 100,000
//! jobs, and listing while jobs move.

mod common;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{eventually, setup, setup_with};
use echomq::{Client, Consumer, ConsumerHandle, Error, Job, JobState, QueueOptions, Retention, WorkerEvent};

/// Environment of the second process of `pause_holds_across_two_processes`.
const CHILD_URL: &str = "ECHOMQ_RACES_URL";
const CHILD_QUEUE: &str = "ECHOMQ_RACES_QUEUE";
/// Lines the second process prints for the first start with this.
const CHILD_TAG: &str = "emq-races-child";

/// One `WorkerEvent::Claimed` as a test records it.
#[derive(Debug, Clone)]
struct Claim {
    id: String,
    token: u64,
    server_ms: u64,
}

/// Two consumers of `queue` (concurrency 4, polling every 20 ms, a handler
/// that takes 5 ms) that hand every claim to `record`.
fn two_consumers(queue: &echomq::Queue, record: Arc<dyn Fn(Claim) + Send + Sync>) -> Vec<ConsumerHandle> {
    (0..2)
        .map(|_| {
            let record = record.clone();
            Consumer::new(queue.clone(), |_job: Job<u32>| async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(())
            })
            .concurrency(4)
            .poll_interval(Duration::from_millis(20))
            .observer(move |e| {
                if let WorkerEvent::Claimed {
                    id, token, server_ms, ..
                } = e
                {
                    record(Claim {
                        id: id.to_string(),
                        token: *token,
                        server_ms: *server_ms,
                    });
                }
            })
            .spawn()
            .unwrap()
        })
        .collect()
}

/// The second process: kills it (and reaps it) when dropped, so a failing
/// test leaves no orphan behind.
struct ChildGuard(Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Each blocking connection (a consumer's wake-up wait runs only BLPOP on
/// it) with the number of commands it has run, from `CLIENT LIST` (field
/// `tot-cmds`, Valkey 8 on). A server without that field (Redis 7) cannot
/// tell the connections apart: each gets the server's BLPOP count shared
/// out evenly, from `INFO commandstats`.
async fn waiters(c: &mut redis::aio::MultiplexedConnection) -> HashMap<u64, u64> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query_async(c).await.unwrap();
    let field = |line: &str, name: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix(name))
            .map(|v| v.parse::<u64>().unwrap())
    };
    let blocking: Vec<&str> = list.lines().filter(|l| l.contains(" cmd=blpop ")).collect();
    if blocking.iter().all(|l| field(l, "tot-cmds=").is_some()) {
        return blocking
            .iter()
            .map(|l| (field(l, "id=").unwrap(), field(l, "tot-cmds=").unwrap()))
            .collect();
    }
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(c).await.unwrap();
    let calls = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_blpop:calls="))
        .and_then(|l| l.split(',').next())
        .map_or(0, |n| n.parse::<u64>().unwrap());
    let each = calls / blocking.len().max(1) as u64;
    blocking.iter().map(|l| (field(l, "id=").unwrap(), each)).collect()
}

// Pause with four consumers in two OS processes (two consumers each)
// claiming: no claim runs on the server after the pause answered, in
// either process (every recorded claim's server time, and the queue's
// token counter, unchanged while all four consumers keep polling); jobs
// running at the pause finish; enqueue works while paused; resume drains
// the rest and every job ran once at least.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_holds_across_two_processes() {
    let (s, q) = setup("pause-2p").await;
    let mut raw = common::raw(&s).await;
    let started = Instant::now();

    // The second process: this test binary, running only the child test.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "pause_child_process", "--nocapture", "--ignored"])
        .env(CHILD_URL, s.url())
        .env(CHILD_QUEUE, q.name())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut guard = ChildGuard(Some(child));
    let theirs: Arc<Mutex<Vec<Claim>>> = Arc::default();
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (theirs, ready) = (theirs.clone(), ready.clone());
        std::thread::spawn(move || {
            let mut done = false;
            for line in BufReader::new(stdout).lines() {
                let line = line.unwrap();
                let Some(rest) = line.strip_prefix(CHILD_TAG) else {
                    continue;
                };
                let f: Vec<&str> = rest.split_whitespace().collect();
                match f.as_slice() {
                    ["ready"] => ready.store(true, std::sync::atomic::Ordering::SeqCst),
                    ["claimed", id, token, ms] => theirs.lock().unwrap().push(Claim {
                        id: (*id).to_owned(),
                        token: token.parse().unwrap(),
                        server_ms: ms.parse().unwrap(),
                    }),
                    ["done"] => done = true,
                    other => panic!("unexpected line from the second process: {other:?}"),
                }
            }
            done
        })
    };

    let ours: Arc<Mutex<Vec<Claim>>> = Arc::default();
    let mine = {
        let ours = ours.clone();
        two_consumers(&q, Arc::new(move |c| ours.lock().unwrap().push(c)))
    };
    assert!(
        eventually(Duration::from_secs(20), || async {
            ready.load(std::sync::atomic::Ordering::SeqCst)
        })
        .await,
        "the second process did not start its consumers"
    );
    let mut ids: HashSet<String> = q
        .enqueue_bulk(&(0..4000u32).collect::<Vec<_>>())
        .await
        .unwrap()
        .into_iter()
        .collect();
    // Pause once both processes are claiming.
    assert!(
        eventually(Duration::from_secs(20), || async {
            ours.lock().unwrap().len() >= 100 && theirs.lock().unwrap().len() >= 100
        })
        .await,
        "both processes should be claiming: {} here, {} there",
        ours.lock().unwrap().len(),
        theirs.lock().unwrap().len()
    );
    let paused_at = q.pause().await.unwrap();
    let token_key = format!("emq:{{{}}}:token", q.name());
    let tokens_at_pause: u64 = redis::cmd("GET").arg(&token_key).query_async(&mut raw).await.unwrap();
    assert!(q.is_paused().await.unwrap());

    // Jobs leased before the pause finish; nothing new is leased.
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.counts().await.unwrap().active == 0
        })
        .await
    );
    let c = q.counts().await.unwrap();
    assert!(c.paused && c.pending > 0, "paused too late to show anything: {c:?}");
    // Enqueue works while paused; its wake-up makes consumers try a claim.
    ids.insert(q.enqueue(&9999u32).await.unwrap());
    assert_eq!(q.counts().await.unwrap().pending, c.pending + 1);

    // All four consumers keep polling: each has a blocking connection
    // (BLPOP on the wake list, one claim call per wake-up or poll), and
    // each of the four runs at least 10 more waits while paused.
    let first = waiters(&mut raw).await;
    let polled: Arc<Mutex<HashMap<u64, u64>>> = Arc::default();
    assert!(
        eventually(Duration::from_secs(20), || {
            let (mut raw, first, polled) = (raw.clone(), first.clone(), polled.clone());
            async move {
                let now = waiters(&mut raw).await;
                let mut polled = polled.lock().unwrap();
                for (id, n) in now {
                    polled.insert(id, n.saturating_sub(first.get(&id).copied().unwrap_or(0)));
                }
                polled.values().filter(|&&n| n >= 10).count() >= 4
            }
        })
        .await,
        "four consumers should keep polling while paused: {:?}",
        polled.lock().unwrap()
    );
    let tokens_later: u64 = redis::cmd("GET").arg(&token_key).query_async(&mut raw).await.unwrap();
    assert_eq!(
        tokens_later, tokens_at_pause,
        "a fencing token was minted while paused: a claim leased a job"
    );
    let c2 = q.counts().await.unwrap();
    assert_eq!((c2.pending, c2.active), (c.pending + 1, 0), "{c2:?}");

    let resumed_at = q.resume().await.unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            let c = q.counts().await.unwrap();
            c.pending == 0 && c.active == 0
        })
        .await,
        "{:?}",
        q.counts().await.unwrap()
    );
    for h in mine {
        h.shutdown().await.unwrap();
    }
    // Closing its stdin stops the second process (it shuts its consumers
    // down and prints "done").
    drop(stdin);
    let mut child = guard.0.take().unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "the second process failed: {status}");
    assert!(reader.join().unwrap(), "the second process did not finish");

    let ours = ours.lock().unwrap().clone();
    let theirs = theirs.lock().unwrap().clone();
    for (who, claims) in [("this process", &ours), ("the second process", &theirs)] {
        let late: Vec<&Claim> = claims
            .iter()
            .filter(|c| c.server_ms > paused_at && c.server_ms < resumed_at)
            .collect();
        assert!(
            late.is_empty(),
            "{who} leased {} jobs between the pause at {paused_at} and the resume at {resumed_at}: {late:?}",
            late.len()
        );
        // Tokens agree: minted before the pause's reading, or after the resume.
        for c in claims {
            if c.server_ms < paused_at {
                assert!(c.token <= tokens_at_pause, "{who}: {c:?} before the pause");
            } else if c.server_ms >= resumed_at {
                assert!(c.token > tokens_at_pause, "{who}: {c:?} after the resume");
            }
        }
    }
    let ran: HashSet<String> = ours.iter().chain(&theirs).map(|c| c.id.clone()).collect();
    assert_eq!(ran, ids, "every job ran");
    let before = |v: &[Claim]| v.iter().filter(|c| c.server_ms <= paused_at).count();
    println!(
        "pause across two processes: {} claims here, {} there ({} and {} before the pause); {:?}",
        ours.len(),
        theirs.len(),
        before(&ours),
        before(&theirs),
        started.elapsed()
    );
}

// The second process of `pause_holds_across_two_processes`, run by it (it
// fails when started without the parent's environment): two consumers
// that print every claim, until stdin closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the second process of pause_holds_across_two_processes; run by it"]
async fn pause_child_process() {
    let url = std::env::var(CHILD_URL)
        .unwrap_or_else(|_| panic!("{CHILD_URL} is not set: this test is started by pause_holds_across_two_processes"));
    let name = std::env::var(CHILD_QUEUE).unwrap_or_else(|_| {
        panic!("{CHILD_QUEUE} is not set: this test is started by pause_holds_across_two_processes")
    });
    let q = Client::connect(&url).await.unwrap().queue(&name).await.unwrap();
    let handles = two_consumers(
        &q,
        Arc::new(|c: Claim| println!("{CHILD_TAG} claimed {} {} {}", c.id, c.token, c.server_ms)),
    );
    println!("{CHILD_TAG} ready");
    // Until the parent closes stdin (or dies).
    tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new()))
        .await
        .unwrap()
        .unwrap();
    for h in handles {
        h.shutdown().await.unwrap();
    }
    println!("{CHILD_TAG} done");
}

/// Every key of queue `name` on the server.
async fn keys_of(c: &mut redis::aio::MultiplexedConnection, name: &str) -> BTreeSet<String> {
    redis::cmd("KEYS")
        .arg(format!("emq:{{{name}}}:*"))
        .query_async::<Vec<String>>(c)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

/// What a consumer's settlements answered, per job id.
#[derive(Default)]
struct Settlements {
    claimed: HashSet<String>,
    /// Settled, or its lease lost (the handler's result is then not sent).
    answered: HashSet<String>,
    /// Settlements refused, with the error.
    refused: Vec<(String, String)>,
}

// Obliterate under load: with consumers working through a stream of jobs
// and producers enqueueing, obliterate(false) answers QueueActive and
// deletes nothing (every key there before is there after; the sets agree
// with the records); obliterate(true), still under load, deletes every key
// of the queue while the consumers keep running, and their stale
// settlements are fenced (JobNotFound: the first step deletes the leased
// jobs' records) and write nothing: no key of the queue exists afterwards.
// The queue then works again as new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn obliterate_under_load() {
    // Every record is kept, so the normal flow deletes no key (but the wake
    // list) and the queue has thousands of keys: a forced obliterate takes
    // several steps, with settlements landing between them.
    let (s, q) = setup_with("oblit-load", QueueOptions::new().keep_completed(Retention::All)).await;
    let mut raw = common::raw(&s).await;
    let log: Arc<Mutex<Settlements>> = Arc::default();
    let consumers: Vec<ConsumerHandle> = (0..2)
        .map(|_| {
            let log = log.clone();
            Consumer::new(q.clone(), |_job: Job<u32>| async {
                tokio::time::sleep(Duration::from_millis(2)).await;
                Ok(())
            })
            .concurrency(8)
            .poll_interval(Duration::from_millis(20))
            .observer(move |e| {
                let mut log = log.lock().unwrap();
                match e {
                    WorkerEvent::Claimed { id, .. } => {
                        log.claimed.insert(id.to_string());
                    }
                    WorkerEvent::Settled { id, .. } | WorkerEvent::LeaseLost { id, .. } => {
                        log.answered.insert(id.to_string());
                    }
                    WorkerEvent::SettleFailed { id, error, .. } => {
                        log.answered.insert(id.to_string());
                        log.refused.push((id.to_string(), format!("{error:?}")));
                    }
                    _ => {}
                }
            })
            .spawn()
            .unwrap()
        })
        .collect();
    q.enqueue_bulk(&(0..3000u32).collect::<Vec<_>>()).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let producer = {
        let (q, stop) = (q.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.is_cancelled() {
                q.enqueue_bulk(&[1u32; 20]).await.unwrap();
                n += 20;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            n
        })
    };
    // One lease held by hand, so the queue surely has an active job.
    let held = q.claim(1, Duration::from_secs(120)).await.unwrap().remove(0);
    assert!(
        eventually(Duration::from_secs(20), || async {
            q.counts().await.unwrap().completed >= 500
        })
        .await
    );

    let before = keys_of(&mut raw, q.name()).await;
    let refused = q.obliterate(false).await;
    let after = keys_of(&mut raw, q.name()).await;
    assert!(
        matches!(refused, Err(Error::QueueActive { active, .. }) if active >= 1),
        "{refused:?}"
    );
    let wake = format!("emq:{{{}}}:wake", q.name());
    let gone: Vec<&String> = before.difference(&after).filter(|k| **k != wake).collect();
    assert!(gone.is_empty(), "a refused obliterate deleted {gone:?}");
    assert!(!q.is_paused().await.unwrap(), "a refused obliterate paused the queue");
    assert_eq!(
        q.sweep(1000).await.unwrap().repaired,
        0,
        "the sets disagree with the records"
    );

    // Forced, with the consumers still running (producers stop first, as
    // obliterate asks: a job enqueued while it runs may survive it).
    stop.cancel();
    let produced = producer.await.unwrap();
    let c = q.counts().await.unwrap();
    assert!(c.pending > 0 && c.active > 1, "no load left to race: {c:?}");
    let keys = keys_of(&mut raw, q.name()).await.len();
    let deleted = q.obliterate(true).await.unwrap();
    let left = keys_of(&mut raw, q.name()).await;
    assert!(left.is_empty(), "obliterate(true) left {} keys: {left:?}", left.len());
    // Each lease the consumers held is answered: settled before the
    // fence, or refused after it.
    let in_flight = || {
        let log = log.lock().unwrap();
        log.claimed.difference(&log.answered).count()
    };
    assert!(
        eventually(Duration::from_secs(10), || async { in_flight() == 0 }).await,
        "{} leases never answered",
        in_flight()
    );
    let refusals = log.lock().unwrap().refused.clone();
    assert!(!refusals.is_empty(), "no settlement raced the obliterate");
    for (id, e) in &refusals {
        assert!(e.starts_with("JobNotFound"), "job {id}: {e}");
    }
    let r = q.complete(&held).await;
    assert!(matches!(r, Err(Error::JobNotFound(_))), "{r:?}");
    let left = keys_of(&mut raw, q.name()).await;
    assert!(left.is_empty(), "stale settlements wrote {left:?}");

    // The queue works again, as new: only what a fresh enqueue and its
    // completion make exists.
    let fresh = q.enqueue_bulk(&(0..20u32).collect::<Vec<_>>()).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.counts().await.unwrap().completed == 20
        })
        .await
    );
    let base = format!("emq:{{{}}}:", q.name());
    let mut expected: BTreeSet<String> = ["seq", "token", "completed", "events"]
        .iter()
        .map(|k| format!("{base}{k}"))
        .collect();
    expected.extend(fresh.iter().map(|id| format!("{base}job:{id}")));
    let mut now = keys_of(&mut raw, q.name()).await;
    now.remove(&wake);
    assert_eq!(now, expected);
    assert_eq!(q.sweep(1000).await.unwrap().repaired, 0);
    for h in consumers {
        h.shutdown().await.unwrap();
    }
    println!(
        "obliterate under load: 3,000 jobs and {produced} more from a producer; forced over {keys} keys \
         (deleted {deleted}), {} stale settlements refused",
        refusals.len()
    );
}

/// The server's `used_memory`, in bytes.
async fn used_memory(c: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query_async(c).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

// Retention by age keeps the server's memory flat: 100,000 jobs, enqueued
// in waves of 10,000 and completed by a consumer (concurrency 64, a no-op
// handler) on a queue keeping completed records for 500 ms. After each
// wave the completed set holds exactly the jobs finished within 500 ms of
// the last settlement (each settle call deletes up to 1,000 older records,
// more than a consumer's call adds, so the trims keep up): it is bounded
// by the completions of half a second, not by the jobs completed. Once
// those 500 ms pass, a few single completions trim the rest (a thousand
// each), and used_memory then is the same after every wave, within
// 256 KiB, where keeping every record would add 10,000 records a wave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_age_keeps_memory_flat() {
    const AGE: Duration = Duration::from_millis(500);
    const WAVE: u32 = 10_000;
    const WAVES: u32 = 10;
    const MARGIN: u64 = 256 * 1024;
    let started = Instant::now();
    let (s, q) = setup_with(
        "retention-age",
        QueueOptions::new().keep_completed(Retention::Within(AGE)),
    )
    .await;
    let mut raw = common::raw(&s).await;
    // The slow log keeps the arguments of up to 128 slow calls (a bulk
    // enqueue of a thousand jobs can be one), memory that grows with them
    // for a while and is not the queue's: off on this private server.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(-1)
        .query_async(&mut raw)
        .await
        .unwrap();
    let completed_key = format!("emq:{{{}}}:completed", q.name());
    let empty = used_memory(&mut raw).await;
    q.enqueue_bulk(&(0..WAVE).collect::<Vec<_>>()).await.unwrap();
    let filled = used_memory(&mut raw).await;

    // The finish time of every job (a settle call's server time is the
    // finish time it writes).
    let finished: Arc<Mutex<Vec<u64>>> = Arc::default();
    let consumer = {
        let finished = finished.clone();
        Consumer::new(q.clone(), |_job: Job<u32>| async { Ok(()) })
            .concurrency(64)
            .observer(move |e| {
                if let WorkerEvent::Settled {
                    outcome: echomq::Outcome::Completed,
                    server_ms,
                    ..
                } = e
                {
                    finished.lock().unwrap().push(*server_ms);
                }
            })
            .spawn()
            .unwrap()
    };
    let completions = |n: usize| {
        let finished = finished.clone();
        async move {
            assert!(
                eventually(Duration::from_secs(60), || async {
                    finished.lock().unwrap().len() == n
                })
                .await,
                "{} of {n} jobs completed",
                finished.lock().unwrap().len()
            );
        }
    };
    let kept = |mut raw: redis::aio::MultiplexedConnection| {
        let key = completed_key.clone();
        async move {
            redis::cmd("ZCARD")
                .arg(&key)
                .query_async::<u64>(&mut raw)
                .await
                .unwrap()
        }
    };
    // Per wave: records kept and used_memory as it ends; then, once the
    // records have aged out and been trimmed, records kept and used_memory.
    let mut samples: Vec<(u64, u64, u64, u64)> = Vec::new();
    let mut expected = 0;
    for wave in 1..=WAVES {
        if wave > 1 {
            q.enqueue_bulk(&(0..WAVE).collect::<Vec<_>>()).await.unwrap();
        }
        expected += WAVE as usize;
        completions(expected).await;
        let (at_end, memory_at_end) = (kept(raw.clone()).await, used_memory(&mut raw).await);
        let last = {
            let finished = finished.lock().unwrap();
            let last = *finished.iter().max().unwrap();
            let within = finished.iter().filter(|&&t| t + AGE.as_millis() as u64 >= last).count() as u64;
            assert_eq!(
                at_end, within,
                "wave {wave}: the completed set should hold exactly the jobs finished within {AGE:?} of the last"
            );
            last
        };
        // Past the age on the server's clock, single completions trim the
        // aged records, a thousand a call, until only they are left.
        common::past(&q, last + AGE.as_millis() as u64).await;
        let mut probes = 0;
        while kept(raw.clone()).await > probes {
            q.enqueue(&0u32).await.unwrap();
            probes += 1;
            expected += 1;
            completions(expected).await;
        }
        samples.push((at_end, memory_at_end, probes, used_memory(&mut raw).await));
    }
    consumer.shutdown().await.unwrap();

    println!(
        "retention by age over 100,000 jobs ({:?}): empty server {empty} B, first 10,000 jobs waiting {filled} B",
        started.elapsed()
    );
    println!(
        "| jobs completed | records kept at the wave's end | used_memory (B) | after 500 ms: records kept | used_memory (B) |"
    );
    for (wave, (at_end, memory_at_end, probes, rested)) in samples.iter().enumerate() {
        println!(
            "| {} | {at_end} | {memory_at_end} | {probes} | {rested} |",
            (wave as u32 + 1) * WAVE
        );
    }
    let rested: Vec<u64> = samples.iter().map(|s| s.3).collect();
    let (low, high) = (*rested.iter().min().unwrap(), *rested.iter().max().unwrap());
    assert!(
        high - low <= MARGIN,
        "used_memory once the records aged out moved by {} B over 100,000 jobs: {rested:?}",
        high - low
    );
}

/// A small deterministic generator (xorshift64*), so a failing walk can be
/// replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A priority in -8..=7.
    fn priority(&mut self) -> i8 {
        (self.next() % 16) as i8 - 8
    }
}

/// The members of a sorted set, in one read.
async fn members(c: &mut redis::aio::MultiplexedConnection, key: &str) -> HashSet<String> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async::<Vec<String>>(c)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

/// Walks `state` page by page (`limit` a page); returns the ids shown, in order.
async fn walk(q: &echomq::Queue, state: JobState, limit: usize) -> Vec<String> {
    let mut shown = Vec::new();
    let mut after: Option<echomq::admin::ListCursor> = None;
    loop {
        let page = q.list(state, after.as_ref(), limit).await.unwrap();
        shown.extend(page.jobs.into_iter().map(|j| j.id));
        match page.next {
            Some(c) => after = Some(c),
            None => return shown,
        }
    }
}

// Listing while jobs move, all at once: a consumer completes jobs and a
// producer enqueues jobs of random priorities (so they land before and
// after the cursor) while pending and completed are walked 20 at a time,
// and completed records are trimmed at the far end. Each walk shows no job
// twice, and shows every job that was in the state both before and after
// the walk (a job leaves pending or completed for good here, so those
// stayed for the whole walk).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walks_while_jobs_move() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    let started = Instant::now();
    let opts = QueueOptions::new().keep_completed(Retention::Newest(1500));
    let (s, q) = setup_with("walk-moving", opts).await;
    let mut raw = common::raw(&s).await;
    let base = format!("emq:{{{}}}:", q.name());
    let mut rng = Rng(seed);
    let with_priorities = |rng: &mut Rng, n: u32| -> Vec<(u32, echomq::EnqueueOptions)> {
        (0..n)
            .map(|i| (i, echomq::EnqueueOptions::new().priority(rng.priority())))
            .collect()
    };
    // A full completed set (trimmed to about 1,500), then a backlog.
    q.enqueue_bulk(&(0..2000u32).collect::<Vec<_>>()).await.unwrap();
    loop {
        let leases = q.claim(500, Duration::from_secs(60)).await.unwrap();
        if leases.is_empty() {
            break;
        }
        let items: Vec<_> = leases.iter().map(|l| (l, &echomq::Settle::Complete)).collect();
        for r in q.settle_many(&items).await.unwrap() {
            r.unwrap();
        }
    }
    q.enqueue_bulk_with(&with_priorities(&mut rng, 3000)).await.unwrap();

    let consumer = Consumer::new(q.clone(), |_job: Job<u32>| async {
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok(())
    })
    .concurrency(4)
    // No job leased ahead: a job leaves pending once and never comes back.
    .prefetch(0)
    .spawn()
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let producer = {
        let (q, stop, mut rng) = (q.clone(), stop.clone(), Rng(seed.rotate_left(17) | 1));
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                q.enqueue_bulk_with(&with_priorities(&mut rng, 5)).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };

    let mut figures = Vec::new();
    for (state, set) in [
        (JobState::Pending, "pending"),
        (JobState::Completed, "completed"),
        (JobState::Pending, "pending"),
        (JobState::Completed, "completed"),
    ] {
        let key = format!("{base}{set}");
        let before = members(&mut raw, &key).await;
        let shown = walk(&q, state, 20).await;
        let after = members(&mut raw, &key).await;
        let unique: HashSet<&String> = shown.iter().collect();
        assert_eq!(
            unique.len(),
            shown.len(),
            "seed {seed}: a {set} walk showed a job twice"
        );
        let missed: Vec<&String> = before.intersection(&after).filter(|id| !unique.contains(id)).collect();
        assert!(
            missed.is_empty(),
            "seed {seed}: a {set} walk left out {} jobs that stayed {set}: {missed:?}",
            missed.len()
        );
        // The walk raced real movement: jobs left the state and others came.
        let (left, came) = (before.difference(&after).count(), after.difference(&before).count());
        assert!(
            left > 20 && came > 20,
            "seed {seed}: {set} barely moved: {left} left, {came} came"
        );
        figures.push(format!("{set}: {} shown, {left} left, {came} came", shown.len()));
    }
    stop.cancel();
    producer.await.unwrap();
    consumer.shutdown().await.unwrap();
    println!(
        "walks while jobs move (seed {seed}, {:?}): {}",
        started.elapsed(),
        figures.join("; ")
    );
}
