//! Drives a fault run from a (blocking) test: spawns worker, reaper and
//! producer processes against a server, injects process faults, records
//! each fault in the driver's own history, and runs the checker binary.
//!
//! Every process appends to `DIR/SRC.jsonl`; its stdout and stderr go to
//! `DIR/SRC.log`. The directory is removed when the [`Run`] is dropped,
//! unless the test is panicking (then its path is printed, for reading).
//!
//! The run itself is here; the processes it spawns and signals are in
//! `processes.rs`, their settings in `options.rs`, and reading the
//! server and running the checker in `verdict.rs`.

mod options;
mod processes;
mod verdict;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::history::{Ev, History};
pub use options::{ProducerOpts, ReaperOpts, WorkerOpts};
use processes::Proc;
pub use verdict::Checked;

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
    /// A second queue that the run's flows and batches span (see
    /// [`Run::spread`]); `None`: one queue.
    pub far: Option<String>,
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
        let queue = Run::queue_name(label);
        Run::named(bins, url, &queue, &std::env::temp_dir())
    }

    /// A queue name for `label`, unique per run (`label-PID-N`).
    pub fn queue_name(label: &str) -> String {
        let n = RUNS.fetch_add(1, Ordering::Relaxed);
        format!("{label}-{}-{n}", std::process::id())
    }

    /// A run of queue `queue` against `url` (one server, or a cluster's
    /// seeds separated by commas), its histories in `under/echomq-fault-QUEUE`.
    pub fn named(bins: &Bins, url: &str, queue: &str, under: &std::path::Path) -> Run {
        let queue = queue.to_owned();
        let dir = under.join(format!("echomq-fault-{queue}"));
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
            far: None,
            driver,
            bins: bins.clone(),
            procs: BTreeMap::new(),
            next: 1,
            keep: false,
        }
    }

    /// Gives the run a second queue, `QUEUE-far`: the producers put some
    /// steps of their flows and members of their batches there, and the
    /// run drains, and is read and checked, over both queues. Its workers
    /// and reapers are started with [`WorkerOpts::queue`] and
    /// [`ReaperOpts::queue`]. Answers its name.
    pub fn spread(&mut self) -> String {
        let far = format!("{}-far", self.queue);
        self.spread_to(&far);
        far
    }

    /// [`spread`](Self::spread) to the queue named `far` (on a cluster,
    /// one whose slot another master serves).
    pub fn spread_to(&mut self, far: &str) {
        self.far = Some(far.to_owned());
    }

    /// The run's queues: its own, then [`far`](Self::far) if it has one.
    pub fn queues(&self) -> Vec<String> {
        std::iter::once(self.queue.clone()).chain(self.far.clone()).collect()
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
