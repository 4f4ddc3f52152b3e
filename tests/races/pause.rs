//! Pause across two OS processes: no claim runs on the server after the
//! pause answered, in either process. The second process is this test
//! binary run again (`pause_child_process`).

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::{Client, Consumer, ConsumerHandle, Job, WorkerEvent};

use super::common;
use super::common::{eventually, setup};

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
        .args(["--exact", "pause::pause_child_process", "--nocapture", "--ignored"])
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
