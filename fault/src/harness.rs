//! Drives a fault run from a (blocking) test: spawns worker, reaper and
//! producer processes against a server, injects process faults, records
//! each fault in the driver's own history, and runs the checker binary.
//!
//! Every process appends to `DIR/SRC.jsonl`; its stdout and stderr go to
//! `DIR/SRC.log`. The directory is removed when the [`Run`] is dropped,
//! unless the test is panicking (then its path is printed, for reading).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::history::{Ev, History, Record, read_file};
use crate::state::{self, ServerState};

/// The fault binaries to run, and extra environment for them (e.g.
/// `ECHOMQ_FAULT` for a negative-control build).
#[derive(Debug, Clone)]
pub struct Bins {
    /// `fault-worker`.
    pub worker: PathBuf,
    /// `fault-producer`.
    pub producer: PathBuf,
    /// `fault-check`.
    pub check: PathBuf,
    /// Extra environment of every spawned worker/producer.
    pub env: Vec<(String, String)>,
}

impl Bins {
    /// The same binaries with one more environment variable.
    pub fn with_env(mut self, name: &str, value: &str) -> Bins {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// Settings of one worker process (see `fault-worker`).
#[derive(Debug, Clone)]
pub struct WorkerOpts {
    /// Handlers at once.
    pub concurrency: usize,
    /// Jobs leased ahead of free handlers (`Worker::prefetch`; `None`:
    /// the consumer's default, automatic prefetch).
    pub prefetch: Option<usize>,
    /// Lease length.
    pub lease_ms: u64,
    /// Heartbeat interval (default a third of the lease; must be shorter
    /// than the lease).
    pub heartbeat_ms: Option<u64>,
    /// No heartbeats at all (`Worker::without_heartbeats`): the lease
    /// runs out `lease_ms` after the claim whatever the handler does.
    pub without_heartbeats: bool,
    /// Simulated work per job: a random sleep up to this.
    pub work_ms: u64,
    /// Run the guarded (effect-marker) effect too.
    pub guarded: bool,
    /// Graceful shutdown's grace period.
    pub shutdown_timeout_ms: u64,
    /// Response and connection timeout of its connections.
    pub response_timeout_ms: u64,
    /// Kill point, probability per job, most pauses.
    pub pause: Option<(String, f64, u32)>,
    /// Pause only on this job.
    pub pause_job: Option<String>,
    /// Connect here instead of the run's URL (a proxy, say).
    pub url: Option<String>,
    /// Run one raw attempt instead of a consumer (`fault-worker
    /// --role=raw`): claim, effect, stop at `after_effect_before_ack`
    /// until released, then send this call ("extend" or "complete") with
    /// its token whatever the time.
    pub stale_op: Option<&'static str>,
}

impl Default for WorkerOpts {
    fn default() -> Self {
        WorkerOpts {
            concurrency: 8,
            prefetch: None,
            lease_ms: 1000,
            heartbeat_ms: None,
            without_heartbeats: false,
            work_ms: 0,
            guarded: true,
            shutdown_timeout_ms: 2000,
            response_timeout_ms: 1000,
            pause: None,
            pause_job: None,
            url: None,
            stale_op: None,
        }
    }
}

/// Settings of one producer process (see `fault-producer`).
#[derive(Debug, Clone)]
pub struct ProducerOpts {
    /// First job number.
    pub from: u64,
    /// Jobs to enqueue.
    pub count: u64,
    /// Enqueues in flight.
    pub concurrency: usize,
    /// Every n-th job gets a dedup id (0: none).
    pub dedup_every: u64,
    /// Pause between enqueues of one task.
    pub pace_ms: u64,
    /// Connect here instead of the run's URL.
    pub url: Option<String>,
    /// Spread the jobs over this many lanes, `l0`.. (0: no lanes).
    pub lanes: u64,
    /// The cap to set on each of those lanes first.
    pub lane_cap: Option<u32>,
    /// The queue's global cap to set first.
    pub max_active: Option<u32>,
    /// The queue's rate limit to set first: (claims, window ms).
    pub rate: Option<(u32, u64)>,
    /// The default rate limit of lanes to set first: (claims, window ms).
    pub lane_rate: Option<(u32, u64)>,
}

impl Default for ProducerOpts {
    fn default() -> Self {
        ProducerOpts {
            from: 0,
            count: 100,
            concurrency: 8,
            dedup_every: 0,
            pace_ms: 0,
            url: None,
            lanes: 0,
            lane_cap: None,
            max_active: None,
            rate: None,
            lane_rate: None,
        }
    }
}

struct Proc {
    child: Child,
    role: &'static str,
    history: PathBuf,
    exited: Option<ExitStatus>,
}

/// The checker's verdict.
#[derive(Debug, Clone)]
pub struct Checked {
    /// Exit code 0.
    pub ok: bool,
    /// The report (its last output line).
    pub report: Value,
    /// Everything it printed.
    pub text: String,
}

impl Checked {
    /// A number from the report (0 when absent).
    pub fn n(&self, field: &str) -> u64 {
        self.report[field].as_u64().unwrap_or(0)
    }
    /// Whether some violation mentions `needle` (e.g. "I9").
    pub fn violates(&self, needle: &str) -> bool {
        self.report["violations"]
            .as_array()
            .is_some_and(|vs| vs.iter().any(|v| v.as_str().is_some_and(|s| s.contains(needle))))
    }
}

static RUNS: AtomicU64 = AtomicU64::new(0);

/// One fault run: its directory, queue, processes and driver history.
pub struct Run {
    /// Where the histories live.
    pub dir: PathBuf,
    /// The server URL the driver and the checker use.
    pub url: String,
    /// The URL processes connect to by default (a proxy, say; default `url`).
    pub client_url: String,
    /// The queue name (unique per run).
    pub queue: String,
    driver: History,
    bins: Bins,
    procs: BTreeMap<String, Proc>,
    next: usize,
    /// Keep the directory after the run (set when a check fails).
    pub keep: bool,
}

impl Run {
    /// A new run against `url`, named after `label`.
    pub fn new(bins: &Bins, url: &str, label: &str) -> Run {
        let n = RUNS.fetch_add(1, Ordering::Relaxed);
        let queue = format!("{label}-{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("echomq-fault-{queue}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the run directory");
        let driver = History::open(&dir.join("driver.jsonl"), "driver").expect("driver history");
        driver.write(Ev::Start {
            role: "driver".into(),
            pid: std::process::id(),
            lease_ms: 0,
            guarded: false,
        });
        Run {
            dir,
            url: url.to_owned(),
            client_url: url.to_owned(),
            queue,
            driver,
            bins: bins.clone(),
            procs: BTreeMap::new(),
            next: 1,
            keep: false,
        }
    }

    /// Whether the processes run a negative control (`ECHOMQ_FAULT` set).
    pub fn negative_control(&self) -> bool {
        self.bins.env.iter().any(|(k, _)| k == "ECHOMQ_FAULT")
    }

    /// Records a fault the test injected.
    pub fn fault(&self, kind: &str, target: &str, detail: &str) {
        self.driver.write(Ev::Fault {
            kind: kind.into(),
            target: target.into(),
            detail: detail.into(),
        });
    }

    /// Writes an event into the driver's history (e.g. claims the test made itself).
    pub fn record(&self, ev: Ev) {
        self.driver.write(ev);
    }

    fn spawn(&mut self, role: &'static str, prefix: &str, bin: PathBuf, args: Vec<String>) -> String {
        let src = format!("{prefix}{}", self.next);
        self.next += 1;
        let history = self.dir.join(format!("{src}.jsonl"));
        let log = std::fs::File::create(self.dir.join(format!("{src}.log"))).expect("process log");
        let child = Command::new(&bin)
            .arg(format!("--queue={}", self.queue))
            .arg(format!("--history={}", history.display()))
            .arg(format!("--src={src}"))
            .args(args)
            .envs(self.bins.env.iter().map(|(k, v)| (k, v)))
            // Under the temp dir, so CI's cleanup finds a process a dead test left behind.
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        self.procs.insert(
            src.clone(),
            Proc {
                child,
                role,
                history,
                exited: None,
            },
        );
        src
    }

    /// Starts a worker; returns its name.
    pub fn worker(&mut self, o: &WorkerOpts) -> String {
        let mut args = vec![
            format!("--url={}", o.url.as_deref().unwrap_or(&self.client_url)),
            match o.stale_op {
                Some(_) => "--role=raw".into(),
                None => "--role=worker".into(),
            },
            format!("--concurrency={}", o.concurrency),
            format!("--lease-ms={}", o.lease_ms),
            format!("--work-ms={}", o.work_ms),
            format!("--shutdown-timeout-ms={}", o.shutdown_timeout_ms),
            format!("--response-timeout-ms={}", o.response_timeout_ms),
        ];
        if let Some(op) = o.stale_op {
            args.push(format!("--stale-op={op}"));
        }
        if o.guarded {
            args.push("--guarded".into());
        }
        if let Some(hb) = o.heartbeat_ms {
            args.push(format!("--heartbeat-ms={hb}"));
        }
        if o.without_heartbeats {
            args.push("--no-heartbeats".into());
        }
        if let Some(n) = o.prefetch {
            args.push(format!("--prefetch={n}"));
        }
        if let Some((point, prob, max)) = &o.pause {
            args.push(format!("--pause-point={point}"));
            args.push(format!("--pause-prob={prob}"));
            args.push(format!("--pause-max={max}"));
        }
        if let Some(j) = &o.pause_job {
            args.push(format!("--pause-job={j}"));
        }
        let bin = self.bins.worker.clone();
        self.spawn("worker", "w", bin, args)
    }

    /// Starts a reaper process; with `until_empty` it exits after a pass that reaps nothing.
    pub fn reaper(&mut self, interval_ms: u64, batch: usize, until_empty: bool) -> String {
        let mut args = vec![
            format!("--url={}", self.client_url),
            "--role=reaper".into(),
            format!("--interval-ms={interval_ms}"),
            format!("--batch={batch}"),
        ];
        if until_empty {
            args.push("--until-empty".into());
        }
        let bin = self.bins.worker.clone();
        self.spawn("reaper", "r", bin, args)
    }

    /// Starts a producer; returns its name.
    pub fn producer(&mut self, o: &ProducerOpts) -> String {
        let mut args = vec![
            format!("--url={}", o.url.as_deref().unwrap_or(&self.client_url)),
            format!("--from={}", o.from),
            format!("--count={}", o.count),
            format!("--concurrency={}", o.concurrency),
            format!("--dedup-every={}", o.dedup_every),
            format!("--pace-ms={}", o.pace_ms),
            format!("--lanes={}", o.lanes),
        ];
        if let Some(cap) = o.lane_cap {
            args.push(format!("--lane-cap={cap}"));
        }
        if let Some(max) = o.max_active {
            args.push(format!("--max-active={max}"));
        }
        if let Some((n, w)) = o.rate {
            args.push(format!("--rate={n}:{w}"));
        }
        if let Some((n, w)) = o.lane_rate {
            args.push(format!("--lane-rate={n}:{w}"));
        }
        let bin = self.bins.producer.clone();
        self.spawn("producer", "p", bin, args)
    }

    fn proc(&mut self, src: &str) -> &mut Proc {
        self.procs.get_mut(src).unwrap_or_else(|| panic!("no process {src}"))
    }

    /// The process id of `src`.
    pub fn pid(&mut self, src: &str) -> u32 {
        self.proc(src).child.id()
    }

    /// Whether `src` is still running.
    pub fn alive(&mut self, src: &str) -> bool {
        let p = self.proc(src);
        if p.exited.is_some() {
            return false;
        }
        match p.child.try_wait() {
            Ok(Some(st)) => {
                p.exited = Some(st);
                false
            }
            _ => true,
        }
    }

    /// Live processes of a role ("worker", "reaper", "producer").
    pub fn live(&mut self, role: &str) -> Vec<String> {
        let names: Vec<String> = self
            .procs
            .iter()
            .filter(|(_, p)| p.role == role)
            .map(|(s, _)| s.clone())
            .collect();
        names.into_iter().filter(|s| self.alive(s)).collect()
    }

    fn signal(&mut self, src: &str, sig: &str) {
        let pid = self.pid(src).to_string();
        let _ = Command::new("kill").args(["-s", sig, &pid]).status();
    }

    /// SIGKILLs `src` and reaps it.
    pub fn kill(&mut self, src: &str) {
        if !self.alive(src) {
            return;
        }
        let p = self.proc(src);
        let _ = p.child.kill();
        p.exited = p.child.wait().ok();
        let kind = if p.role == "worker" || p.role == "reaper" {
            "kill_worker"
        } else {
            "kill_producer"
        };
        self.fault(kind, src, "SIGKILL");
    }

    /// SIGSTOPs `src` and waits until it is stopped.
    pub fn pause(&mut self, src: &str) {
        self.signal(src, "STOP");
        let pid = self.pid(src);
        wait_state(pid, true);
        self.fault("stop_worker", src, "SIGSTOP");
    }

    /// SIGCONTs `src`.
    pub fn resume(&mut self, src: &str) {
        self.signal(src, "CONT");
        let pid = self.pid(src);
        wait_state(pid, false);
        self.fault("cont_worker", src, "SIGCONT");
    }

    /// SIGTERMs `src` and waits up to `limit` for it to exit; returns how
    /// long it took, or `None` (then it is SIGKILLed).
    pub fn term(&mut self, src: &str, limit: Duration) -> Option<Duration> {
        if !self.alive(src) {
            return Some(Duration::ZERO);
        }
        let t0 = Instant::now();
        self.fault("term_worker", src, "SIGTERM");
        self.signal(src, "TERM");
        if self.wait_exit(src, limit) {
            Some(t0.elapsed())
        } else {
            self.kill(src);
            None
        }
    }

    /// Waits up to `limit` for `src` to exit.
    pub fn wait_exit(&mut self, src: &str, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if !self.alive(src) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        !self.alive(src)
    }

    /// Lets a worker paused at a kill point go on.
    pub fn release(&mut self, src: &str) {
        let h = self.proc(src).history.clone();
        std::fs::write(format!("{}.go", h.display()), b"go").expect("write the go file");
    }

    /// Whether `src` has stopped at a kill point.
    pub fn paused_at_point(&mut self, src: &str) -> bool {
        let h = self.proc(src).history.clone();
        Path::new(&format!("{}.paused", h.display())).exists()
    }

    /// The history of `src` so far.
    pub fn events(&mut self, src: &str) -> Vec<Record> {
        let h = self.proc(src).history.clone();
        read_file(&h).map(|(r, _)| r).unwrap_or_default()
    }

    /// Waits up to `limit` for an event of `src` matching `pred`.
    pub fn wait_event(&mut self, src: &str, limit: Duration, pred: impl Fn(&Ev) -> bool) -> Option<Ev> {
        let until = Instant::now() + limit;
        loop {
            if let Some(r) = self.events(src).into_iter().find(|r| pred(&r.ev)) {
                return Some(r.ev);
            }
            if Instant::now() > until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A blocking connection to the run's server.
    pub fn conn(&self) -> redis::RedisResult<redis::Connection> {
        let c = redis::Client::open(self.url.as_str())?.get_connection_with_timeout(Duration::from_secs(2))?;
        c.set_read_timeout(Some(Duration::from_secs(5)))?;
        c.set_write_timeout(Some(Duration::from_secs(5)))?;
        Ok(c)
    }

    /// Jobs per state set: pending, active, delayed, completed, failed.
    pub fn counts(&self) -> Option<[u64; 5]> {
        let mut c = self.conn().ok()?;
        let mut out = [0; 5];
        for (i, s) in state::SETS.iter().enumerate() {
            out[i] = redis::cmd("ZCARD")
                .arg(format!("emq:{{{}}}:{s}", self.queue))
                .query(&mut c)
                .ok()?;
        }
        Some(out)
    }

    /// True once the producers have exited and no job is pending, active or delayed.
    pub fn drained(&mut self) -> bool {
        if !self.live("producer").is_empty() {
            return false;
        }
        matches!(self.counts(), Some([0, 0, 0, done, failed]) if done + failed > 0)
    }

    /// Waits up to `limit` for [`drained`](Self::drained), calling `tick`
    /// every 20 ms meanwhile (to inject faults).
    pub fn drive(&mut self, limit: Duration, mut tick: impl FnMut(&mut Run)) -> bool {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if self.drained() {
                return true;
            }
            tick(self);
            std::thread::sleep(Duration::from_millis(20));
        }
        self.drained()
    }

    /// Stops every process gracefully (SIGTERM; SIGKILL after 30 s),
    /// producers first.
    pub fn stop_all(&mut self) {
        for role in ["producer", "worker", "reaper"] {
            for src in self.live(role) {
                self.term(&src, Duration::from_secs(30));
            }
        }
    }

    /// The server's final state of the run's queue.
    pub fn state(&self) -> ServerState {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(state::read(&self.url, &self.queue))
            .expect("read the server state")
    }

    /// Runs the checker on this run (extra arguments e.g. `--not-drained`).
    pub fn check(&self, extra: &[&str]) -> Checked {
        let out = Command::new(&self.bins.check)
            .arg(format!("--dir={}", self.dir.display()))
            .arg(format!("--url={}", self.url))
            .arg(format!("--queue={}", self.queue))
            .args(extra)
            .output()
            .expect("run fault-check");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let report = text
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or(Value::Null);
        assert!(
            !report.is_null(),
            "fault-check printed no report: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Checked {
            ok: out.status.success(),
            report,
            text,
        }
    }

    /// Every key of the queue (and its effect hashes) with its contents,
    /// for "nothing changed" checks.
    pub fn snapshot(&self) -> Vec<(String, String)> {
        let mut c = self.conn().expect("connect for a snapshot");
        let mut keys: Vec<String> = Vec::new();
        for pattern in [
            format!("emq:{{{}}}:*", self.queue),
            format!("fault:{{{}}}:*", self.queue),
        ] {
            let mut k: Vec<String> = redis::cmd("KEYS").arg(pattern).query(&mut c).expect("KEYS");
            keys.append(&mut k);
        }
        keys.sort();
        keys.retain(|k| !k.ends_with(":wake"));
        let mut out = Vec::new();
        for k in keys {
            let t: String = redis::cmd("TYPE").arg(&k).query(&mut c).expect("TYPE");
            let v: redis::Value = match t.as_str() {
                "hash" => redis::cmd("HGETALL").arg(&k).query(&mut c),
                "zset" => redis::cmd("ZRANGE")
                    .arg(&k)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(&mut c),
                "list" => redis::cmd("LRANGE").arg(&k).arg(0).arg(-1).query(&mut c),
                // The lifecycle events: a stale call must not add one either.
                "stream" => redis::cmd("XRANGE").arg(&k).arg("-").arg("+").query(&mut c),
                _ => redis::cmd("GET").arg(&k).query(&mut c),
            }
            .expect("read a key");
            out.push((k, format!("{v:?}")));
        }
        out
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        for p in self.procs.values_mut() {
            if p.exited.is_none() {
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
        }
        if self.keep || std::thread::panicking() || std::env::var_os("ECHOMQ_FAULT_KEEP").is_some() {
            eprintln!("fault run kept for inspection: {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Polls `/proc/PID/stat` until the process is (or is no longer) stopped.
fn wait_state(pid: u32, stopped: bool) {
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return;
        };
        let st = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next());
        if st.is_some_and(|s| (s == "T") == stopped) {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
