//! Effects under `kill -9`: worker processes running a consumer are
//! SIGKILLed at random moments while they work through a few hundred jobs,
//! whose effect lives *outside* Valkey (a line appended to a file, standing
//! for a payment provider). Counts how often each job's effect happened.
//!
//! Run: `cargo run --example effect_worker --features local-server`
//! (options: `--jobs N`, `--workers N`, `--seed N`). Connects to
//! `ECHOMQ_URL` when set; otherwise starts a private server. The last line,
//! `readout: {json}`, is what `tests/effects/examples.rs` asserts. The same
//! binary run as `effect_worker worker URL QUEUE MODE FILE` is one worker
//! process.
//!
//! Two runs, same kills:
//!
//! - `unguarded`: the handler appends its line and returns. A kill after
//!   the append and before the consumer's `complete` reaches the server
//!   redelivers the job, and the line is appended again.
//! - `guarded`: the handler uses an effect marker (`EffectMarker::once`).
//!   A kill after "done" is skipped on redelivery. A kill between the
//!   append and "done" leaves the marker orphaned (held by a dead
//!   attempt); the next attempt then asks the "provider" (greps the file
//!   for the effect's idempotency key) before appending. Every job's
//!   effect must appear exactly once.
//!
//! Each worker's handler sleeps a little between its steps, so that kills
//! land in every window: before the marker, between marker and effect,
//! between effect and done, between done and the acknowledgement.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use echomq::limits::MAX_LIMIT;
use echomq::{Backoff, Client, Consumer, EffectMarker, HandlerError, Job, MarkerState, OnceError, Queue, QueueOptions};
use serde::Serialize;

/// Worker lease: long against a handler's ~80 ms of work, so a live worker
/// never loses a lease; only kills cause redeliveries.
const LEASE: Duration = Duration::from_millis(1000);
/// Handlers per worker process.
const CONCURRENCY: usize = 2;
/// Give up if the jobs are not all completed by then.
const DEADLINE: Duration = Duration::from_secs(120);

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A tiny xorshift generator: the kill schedule, reproducible by seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ---------------------------------------------------------------- worker --

/// The external effect: append `key` to the provider's file in one write.
fn append(file: &Path, key: &str) -> std::io::Result<()> {
    let mut f = OpenOptions::new().create(true).append(true).open(file)?;
    f.write_all(format!("{key}\n").as_bytes())
}

/// The provider's own record: was `key` applied?
fn applied(file: &Path, key: &str) -> std::io::Result<bool> {
    match std::fs::read_to_string(file) {
        Ok(text) => Ok(text.lines().any(|l| l == key)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sleeps 0-40 ms, so kills can land between the handler's steps.
async fn pause(seed: &mut u64) {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    tokio::time::sleep(Duration::from_millis((*seed >> 33) % 40)).await;
}

/// One worker process: a consumer whose handler performs the effect,
/// guarded by a marker or not. Runs until killed.
async fn worker(url: &str, queue: &str, guarded: bool, file: PathBuf) -> Result<(), Error> {
    let queue = Queue::connect(url, queue).await?;
    let states = file.with_extension("states");
    let q = queue.clone();
    let consumer = Consumer::new(queue, move |job: Job<u32>| {
        let (q, file, states) = (q.clone(), file.clone(), states.clone());
        async move {
            let mut seed = u64::from(std::process::id()) ^ u64::from(*job.payload()) << 20 ^ job.attempt();
            pause(&mut seed).await;
            if !guarded {
                append(&file, &job.idempotency_key())?;
                pause(&mut seed).await;
                return Ok(());
            }
            let marker = EffectMarker::for_job(&q, &job, "append")?;
            let key = marker.idempotency_key();
            let outcome = marker
                .once(|state| {
                    let (seed, job, file, key, states) = (&mut seed, &job, &file, &key, &states);
                    async move {
                        pause(seed).await;
                        if job.is_cancelled() {
                            return Err(HandlerError::from("cancelled before the effect"));
                        }
                        // Orphaned: an attempt died holding the marker. Ask the provider.
                        let orphaned = matches!(state, MarkerState::Orphaned { .. });
                        let applied = orphaned && applied(file, key)?;
                        if !applied {
                            append(file, key)?;
                        }
                        // What the marker said, for the readout.
                        let seen = match (orphaned, applied) {
                            (false, _) => "fresh",
                            (true, false) => "orphaned",
                            (true, true) => "orphaned-applied",
                        };
                        append(states, seen)?;
                        pause(seed).await;
                        Ok(())
                    }
                })
                .await;
            match outcome {
                Ok(echomq::Once::Skipped { .. }) => append(&states, "done")?,
                Ok(_) => {}
                Err(OnceError::Effect(e)) => return Err(e),
                Err(e) => return Err(e.into()),
            }
            pause(&mut seed).await;
            Ok(())
        }
    })
    .concurrency(CONCURRENCY)
    .lease(LEASE)
    .reap_interval(Duration::from_millis(100))
    .spawn()?;
    // Runs until SIGKILL; a clean stop is never asked for.
    std::future::pending::<()>().await;
    consumer.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------- orchestrator --

/// One run (guarded or not), as counted from the provider's file.
#[derive(Debug, Serialize)]
struct Run {
    mode: &'static str,
    jobs: usize,
    completed: u64,
    kills: u32,
    /// Lines in the provider's file.
    effects: usize,
    /// Jobs whose effect appears 0 times, exactly once, more than once.
    missing: usize,
    once: usize,
    duplicated: usize,
    max_per_job: usize,
    /// Guarded only: what the marker told the attempts that got past `claim`.
    fresh: usize,
    orphaned_redone: usize,
    orphaned_already_applied: usize,
    done_skipped: usize,
}

fn spawn_worker(exe: &Path, url: &str, queue: &str, mode: &str, file: &Path) -> std::io::Result<Child> {
    Command::new(exe)
        .arg("worker")
        .args([url, queue, mode])
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
}

async fn run(
    client: &Client,
    url: &str,
    mode: &'static str,
    jobs: usize,
    workers: usize,
    seed: u64,
    dir: &Path,
) -> Result<Run, Error> {
    let exe = std::env::current_exe()?;
    let name = format!(
        "effect-worker-{mode}-{}",
        dir.file_name().unwrap_or_default().to_string_lossy()
    );
    // The jobs' limits, fixed at enqueue: kills cost stalls and failed
    // handler attempts, so let every job survive as many as it meets.
    let limits = QueueOptions::new()
        .backoff(Backoff::Fixed(Duration::from_millis(10)))
        .max_attempts(MAX_LIMIT)
        .max_stalls(MAX_LIMIT);
    let queue = client.queue_with(&name, limits).await?;
    let file = dir.join(format!("{mode}.effects"));
    let ids = queue.enqueue_bulk(&(0..jobs as u32).collect::<Vec<_>>()).await?;
    let mut rng = Rng(seed | 1);
    let mut children = (0..workers)
        .map(|_| spawn_worker(&exe, url, &name, mode, &file))
        .collect::<std::io::Result<Vec<_>>>()?;
    let started = Instant::now();
    let mut kills = 0;
    let completed = loop {
        let completed = queue.counts().await?.completed;
        if completed as usize >= jobs || started.elapsed() > DEADLINE {
            break completed;
        }
        tokio::time::sleep(Duration::from_millis(150 + rng.below(250))).await;
        let victim = rng.below(workers as u64) as usize;
        children[victim].kill()?; // SIGKILL
        children[victim].wait()?;
        kills += 1;
        children[victim] = spawn_worker(&exe, url, &name, mode, &file)?;
    };
    for mut c in children {
        c.kill()?;
        c.wait()?;
    }
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let mut per_job = std::collections::HashMap::<&str, usize>::new();
    for line in text.lines() {
        *per_job.entry(line).or_default() += 1;
    }
    // Each job's line: its idempotency key (guarded: the effect's key).
    let count = |n: usize| {
        ids.iter()
            .filter(|id| {
                let key = match mode {
                    "guarded" => format!("{}:append", queue.idempotency_key(id)),
                    _ => queue.idempotency_key(id),
                };
                let got = per_job.get(key.as_str()).copied().unwrap_or(0);
                if n == 2 { got >= 2 } else { got == n }
            })
            .count()
    };
    let states = std::fs::read_to_string(file.with_extension("states")).unwrap_or_default();
    let state = |s: &str| states.lines().filter(|l| *l == s).count();
    Ok(Run {
        mode,
        jobs,
        completed,
        kills,
        effects: text.lines().count(),
        missing: count(0),
        once: count(1),
        duplicated: count(2),
        max_per_job: per_job.values().copied().max().unwrap_or(0),
        fresh: state("fresh"),
        orphaned_redone: state("orphaned"),
        orphaned_already_applied: state("orphaned-applied"),
        done_skipped: state("done"),
    })
}

fn arg(args: &[String], name: &str, default: u64) -> Result<u64, Error> {
    match args.iter().position(|a| a == name) {
        Some(i) => Ok(args.get(i + 1).ok_or(format!("{name} needs a value"))?.parse()?),
        None => Ok(default),
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("worker") {
        let [_, url, queue, mode, file] = &args[..] else {
            return Err("usage: effect_worker worker URL QUEUE guarded|unguarded FILE".into());
        };
        return worker(url, queue, mode == "guarded", PathBuf::from(file)).await;
    }
    let jobs = arg(&args, "--jobs", 300)? as usize;
    let workers = arg(&args, "--workers", 3)?.max(1) as usize;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
    let seed = arg(&args, "--seed", now.as_nanos() as u64)?;

    // Keep the server (if we started one) alive until the end of main.
    let (url, _server) = echomq::server::url_from_env_or_start()?;
    let dir = std::env::temp_dir().join(format!(
        "echomq-effect-worker-{}-{}",
        std::process::id(),
        now.as_nanos()
    ));
    std::fs::create_dir_all(&dir)?;
    println!("{jobs} jobs, {workers} worker processes, one SIGKILL every 150-400 ms (seed {seed})\n");
    let client = Client::connect(&url).await?;
    let mut runs = Vec::new();
    for mode in ["unguarded", "guarded"] {
        runs.push(run(&client, &url, mode, jobs, workers, seed, &dir).await?);
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{:<10} {:>5} {:>9} {:>5} {:>7} {:>7} {:>5} {:>10} {:>7}",
        "mode", "jobs", "completed", "kills", "effects", "missing", "once", "duplicated", "max/job"
    );
    for r in &runs {
        println!(
            "{:<10} {:>5} {:>9} {:>5} {:>7} {:>7} {:>5} {:>10} {:>7}",
            r.mode, r.jobs, r.completed, r.kills, r.effects, r.missing, r.once, r.duplicated, r.max_per_job
        );
    }
    let g = &runs[1];
    println!(
        "\nguarded: the marker said fresh {} times, done (skipped) {} times, orphaned {} times\n\
         (the provider had applied {} of those already; {} were performed by the new attempt)",
        g.fresh,
        g.done_skipped,
        g.orphaned_redone + g.orphaned_already_applied,
        g.orphaned_already_applied,
        g.orphaned_redone
    );
    println!("readout: {}", serde_json::json!({ "seed": seed, "runs": runs }));
    Ok(())
}
