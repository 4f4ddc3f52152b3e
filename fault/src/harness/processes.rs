//! The processes of a run: spawning workers, reapers and producers,
//! signalling them (the process faults), and reading their histories.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{ProducerOpts, ReaperOpts, Run, WorkerOpts};
use crate::history::{Ev, Record, read_file};

/// A process of the run, and its exit status once seen.
pub(super) struct Proc {
    pub(super) child: Child,
    pub(super) role: &'static str,
    pub(super) history: PathBuf,
    pub(super) exited: Option<ExitStatus>,
}

impl Run {
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
        if o.wait_replicas > 0 {
            args.push(format!("--wait-replicas={}", o.wait_replicas));
        }
        if let Some(q) = &o.queue {
            // after the run's own `--queue`, so this one counts
            args.push(format!("--queue={q}"));
        }
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

    /// Starts a reaper process of the run's queue, passes `interval_ms`
    /// apart reaping up to `batch` leases; with `until_empty` it exits
    /// after a pass that reaps nothing.
    pub fn reaper(&mut self, interval_ms: u64, batch: usize, until_empty: bool) -> String {
        self.reaper_with(&ReaperOpts {
            interval_ms,
            batch,
            until_empty,
            ..ReaperOpts::default()
        })
    }

    /// Starts a reaper process with settings `o`; returns its name.
    pub fn reaper_with(&mut self, o: &ReaperOpts) -> String {
        let mut args = vec![
            format!("--url={}", self.client_url),
            "--role=reaper".into(),
            format!("--interval-ms={}", o.interval_ms),
            format!("--batch={}", o.batch),
        ];
        if o.until_empty {
            args.push("--until-empty".into());
        }
        if o.wait_replicas > 0 {
            args.push(format!("--wait-replicas={}", o.wait_replicas));
        }
        if let Some(q) = &o.queue {
            // after the run's own `--queue`, so this one counts
            args.push(format!("--queue={q}"));
        }
        let bin = self.bins.worker.clone();
        self.spawn("reaper", "r", bin, args)
    }

    /// Starts a scheduler of `schedule` (`cron`), passes every 100 ms.
    pub fn scheduler(&mut self, schedule: &str, cron: &str) -> String {
        let args = vec![
            format!("--url={}", self.client_url),
            "--role=scheduler".into(),
            format!("--schedule={schedule}"),
            format!("--cron={cron}"),
            "--interval-ms=100".into(),
        ];
        let bin = self.bins.worker.clone();
        self.spawn("scheduler", "s", bin, args)
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
        if o.wait_replicas > 0 {
            args.push(format!("--wait-replicas={}", o.wait_replicas));
        }
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
        if o.cancel_every > 0 {
            args.push(format!("--cancel-every={}", o.cancel_every));
            args.push(format!("--cancel-within-ms={}", o.cancel_within_ms));
        }
        if o.flows + o.batches > 0 {
            args.push(format!("--flows={}", o.flows));
            args.push(format!("--batches={}", o.batches));
            args.push(format!("--members={}", o.members));
            if let Some(far) = &self.far {
                args.push(format!("--far-queue={far}"));
            }
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
        // Only workers' and reapers' stops count as graceful stops (the
        // checker's figure); a producer or scheduler is just ended.
        let kind = match self.proc(src).role {
            "worker" | "reaper" => "term_worker",
            "producer" => "term_producer",
            _ => "term_scheduler",
        };
        self.fault(kind, src, "SIGTERM");
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
    /// schedulers and producers first.
    pub fn stop_all(&mut self) {
        for role in ["scheduler", "producer", "worker", "reaper"] {
            self.term_all(role, Duration::from_secs(30));
        }
    }

    /// SIGTERMs every live process of `role` in turn, each given `limit`.
    pub fn term_all(&mut self, role: &str, limit: Duration) {
        for src in self.live(role) {
            self.term(&src, limit);
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
