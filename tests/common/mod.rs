//! Test helpers: a private server per test binary run, a unique queue per test.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use echomq::server::LocalServer;
use echomq::{Client, Error, Queue, QueueOptions};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A unique queue name for this test process.
pub fn unique(name: &str) -> String {
    format!("{name}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Starts a private server and opens a uniquely named queue on it.
pub async fn setup(name: &str) -> (LocalServer, Queue) {
    setup_with(name, QueueOptions::new()).await
}

pub async fn setup_with(name: &str, opts: QueueOptions) -> (LocalServer, Queue) {
    let server = LocalServer::start().expect("start a local server (run scripts/test to install one)");
    let queue = Queue::connect_with(&server.url(), &unique(name), opts).await.unwrap();
    (server, queue)
}

/// Polls `check` every 20 ms until it is true or `limit` passes.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() > end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// True once job `id` of `queue` is completed (waits at most 10 s).
pub async fn completes(queue: &echomq::Queue, id: &str) -> bool {
    eventually(Duration::from_secs(10), || async {
        queue.job(id).await.unwrap().state == echomq::JobState::Completed
    })
    .await
}

/// Returns once the server's clock is past `deadline_ms` (a lease deadline
/// or due time): sleeps for the difference, then checks the server's TIME.
pub async fn past(queue: &echomq::Queue, deadline_ms: u64) {
    loop {
        let now = queue.server_time_ms().await.unwrap();
        if now > deadline_ms {
            return;
        }
        tokio::time::sleep(Duration::from_millis(deadline_ms - now + 1)).await;
    }
}

/// A raw connection for inspecting keys.
pub async fn raw(server: &LocalServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Every key of a queue with its full contents, for "nothing changed" checks.
pub async fn snapshot(server: &LocalServer, queue: &str) -> Vec<(String, String)> {
    let mut c = raw(server).await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("emq:{{{queue}}}:*"))
        .query_async(&mut c)
        .await
        .unwrap();
    keys.sort();
    let mut out = Vec::new();
    for k in keys {
        let t: String = redis::cmd("TYPE").arg(&k).query_async(&mut c).await.unwrap();
        let v: redis::Value = match t.as_str() {
            "hash" => redis::cmd("HGETALL").arg(&k).query_async(&mut c).await.unwrap(),
            "zset" => redis::cmd("ZRANGE")
                .arg(&k)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut c)
                .await
                .unwrap(),
            "list" => redis::cmd("LRANGE")
                .arg(&k)
                .arg(0)
                .arg(-1)
                .query_async(&mut c)
                .await
                .unwrap(),
            "set" => redis::cmd("SORT")
                .arg(&k)
                .arg("ALPHA")
                .query_async(&mut c)
                .await
                .unwrap(),
            "stream" => redis::cmd("XRANGE")
                .arg(&k)
                .arg("-")
                .arg("+")
                .query_async(&mut c)
                .await
                .unwrap(),
            _ => redis::cmd("GET").arg(&k).query_async(&mut c).await.unwrap(),
        };
        out.push((k, format!("{v:?}")));
    }
    out
}

/// Runs a consumer whose handler succeeds at once until `completed` jobs of
/// `queue` are completed (at most 10 s); returns whether they were.
pub async fn complete_with_noop<T>(queue: &echomq::Queue, completed: u64) -> bool
where
    T: serde::de::DeserializeOwned + Send + 'static,
{
    let handle = echomq::Consumer::new(queue.clone(), |_job: echomq::Job<T>| async { Ok(()) })
        .spawn()
        .unwrap();
    let done = eventually(Duration::from_secs(10), || async {
        queue.counts().await.unwrap().completed == completed
    })
    .await;
    handle.shutdown().await.unwrap();
    done
}

/// A consumer's observer events, as "kind:attempt[:detail]" per job id
/// (events name the fencing token; the log shows the attempt that claimed
/// with it, so tests read "claimed:1", "done:1:ok").
#[derive(Clone, Default)]
pub struct EventLog(std::sync::Arc<std::sync::Mutex<Log>>);

#[derive(Default)]
pub struct Log {
    events: Vec<(String, String)>,
    attempts: std::collections::HashMap<u64, u64>,
}

impl EventLog {
    /// The observer to hand to `Worker::observer`.
    pub fn observer(&self) -> impl Fn(&echomq::WorkerEvent<'_>) + Send + Sync + 'static {
        use echomq::WorkerEvent;
        let log = self.0.clone();
        move |e: &WorkerEvent<'_>| {
            let mut log = log.lock().unwrap();
            if let WorkerEvent::Claimed { token, attempt, .. } = e {
                log.attempts.insert(*token, *attempt);
            }
            let n = |token: &u64| log.attempts.get(token).copied().unwrap_or(0);
            let (id, s) = match e {
                WorkerEvent::Claimed { id, token, .. } => (id, format!("claimed:{}", n(token))),
                WorkerEvent::Extended { id, token, .. } => (id, format!("extended:{}", n(token))),
                WorkerEvent::LeaseLost {
                    id, token, confirmed, ..
                } => (id, format!("lease_lost:{}:{confirmed}", n(token))),
                WorkerEvent::HandlerDone { id, token, result, .. } => (id, format!("done:{}:{result}", n(token))),
                WorkerEvent::HandlerAborted { id, token, .. } => (id, format!("aborted:{}", n(token))),
                WorkerEvent::Settled { id, token, op, .. } => (id, format!("settled:{}:{op}", n(token))),
                WorkerEvent::SettleFailed { id, token, op, .. } => (id, format!("settle_failed:{}:{op}", n(token))),
                _ => return,
            };
            log.events.push((id.to_string(), s));
        }
    }
    /// Every event so far, in order.
    pub fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().events.iter().map(|(_, e)| e.clone()).collect()
    }
    /// The events of job `id`, in order.
    pub fn of(&self, id: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .events
            .iter()
            .filter(|(j, _)| j == id)
            .map(|(_, e)| e.clone())
            .collect()
    }
}

/// libfaketime's thread-safe build (a server has threads), for tests that
/// run a server with a skewed or stepped clock.
pub fn faketime_lib() -> &'static str {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .expect("libfaketime is missing (libfaketimeMT.so.1): apt-get install libfaketime (scripts/test installs it)")
}

/// A server, a client on it, and `n` queues of that client named after
/// `name` (the groups that span queues: flows, batches).
pub async fn queues(name: &str, n: usize) -> (LocalServer, Client, Vec<Queue>) {
    let s = LocalServer::start().expect("start a local server (run scripts/test to install one)");
    let client = Client::connect(&s.url()).await.unwrap();
    let mut qs = Vec::new();
    for i in 0..n {
        qs.push(client.queue(&unique(&format!("{name}{i}"))).await.unwrap());
    }
    (s, client, qs)
}

/// Which callbacks of batch `bid` exist as jobs of `q`, of success,
/// complete and death.
pub async fn callbacks(q: &Queue, bid: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    for which in ["success", "complete", "death"] {
        match q.job(&format!("{bid}:{which}")).await {
            Ok(_) => out.push(which),
            Err(Error::JobNotFound(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    out
}

/// The messages on queue `q`'s outbox, oldest first (lua/README.md, `outbox`).
pub async fn outbox(s: &LocalServer, q: &Queue) -> Vec<Vec<u8>> {
    redis::cmd("LRANGE")
        .arg(format!("emq:{{{}}}:outbox", q.name()))
        .arg(0)
        .arg(-1)
        .query_async(&mut raw(s).await)
        .await
        .unwrap()
}

/// Moves pending job `id` of `q` to completed as a process that knows
/// none of echomq's groups would (record and sets only: no flow, batch or
/// sequence told), with `result` as its result if given.
pub async fn complete_as_old_process(s: &LocalServer, q: &Queue, id: &str, result: Option<&str>) {
    let base = format!("emq:{{{}}}:", q.name());
    let mut fields = vec![("st", "completed"), ("ft", "1")];
    if let Some(r) = result {
        fields.push(("rs", r));
    }
    let _: () = redis::pipe()
        .hset_multiple(format!("{base}job:{id}"), &fields)
        .ignore()
        .zrem(format!("{base}pending"), id)
        .ignore()
        .zadd(format!("{base}completed"), id, 1)
        .ignore()
        .query_async(&mut raw(s).await)
        .await
        .unwrap();
}
