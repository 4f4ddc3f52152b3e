//! Faults of the server: SIGKILL and restart (with torn append-only-file
//! tails), its clock stepped forward, its function library flushed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use echomq::server::LocalServer;
use serde_json::json;

use super::{Ctx, Outcome, finish};
use crate::harness::{ProducerOpts, Run, WorkerOpts};

/// The server (append-only, `appendfsync always`) is SIGKILLed and
/// restarted `restarts` times while producers and workers run.
pub fn server_restarts(ctx: &Ctx, jobs: u64, restarts: usize, limit: Duration) -> Outcome {
    restarts_run(ctx, "restarts", jobs, restarts, false, limit)
}

/// [`server_restarts`], with a torn tail on the append-only file at every
/// kill: before each restart the newest incremental AOF gets the first
/// bytes of one of its own transactions (`aof::tear`), as a crash in the
/// middle of a write leaves it, so every restart loads a torn tail. The
/// producers use dedup ids, so dedup markers are among the writes torn.
/// On Redis 7.0 the cut falls inside the transaction's `MULTI`
/// (`aof::Cut::InMulti`): its loader applies a transaction torn later
/// than that in part (`ECHOMQ_FAULT_TORN_CUT=anywhere` cuts anywhere
/// there too). Notes: `cut`, `tears` (what was appended each time),
/// `tails_dropped` (times the server's log says it dropped a torn tail
/// while loading).
pub fn torn_aof_tails(ctx: &Ctx, jobs: u64, restarts: usize, limit: Duration) -> Outcome {
    restarts_run(ctx, "torn", jobs, restarts, true, limit)
}

fn restarts_run(ctx: &Ctx, label: &str, jobs: u64, restarts: usize, torn: bool, limit: Duration) -> Outcome {
    let mut server = ctx.server(true);
    let mut run = Run::new(&ctx.bins, &server.url(), label);
    run.reaper(100, 1000, false);
    run.producer(&ProducerOpts {
        count: jobs,
        concurrency: 8,
        dedup_every: 89,
        pace_ms: 3,
        ..ProducerOpts::default()
    });
    for _ in 0..3 {
        run.worker(&WorkerOpts {
            lease_ms: 2000,
            ..WorkerOpts::default()
        });
    }
    let mut done = 0;
    let mut next = Instant::now() + Duration::from_millis(300);
    let mut restarter = Restarter::new(&mut run, torn);
    let mut under_load = 0;
    let mut drained = run.drive(limit, |run| {
        if done < restarts && Instant::now() >= next {
            if !run.live("producer").is_empty() {
                under_load += 1;
            }
            restarter.restart(run, &mut server);
            done += 1;
            next = Instant::now() + Duration::from_millis(fastrand::u64(400..900));
        }
    });
    // Should the queue drain first (a fast machine), the rest still happen.
    while done < restarts {
        restarter.restart(&mut run, &mut server);
        done += 1;
        drained = run.drive(limit, |_| {});
    }
    let mut notes = BTreeMap::new();
    notes.insert("restarts".into(), json!(done));
    notes.insert("restarts_while_producing".into(), json!(under_load));
    restarter.notes(&server, &mut notes);
    finish(run, drained, notes)
}

/// SIGKILLs and restarts a run's server (append-only), with a torn tail
/// on its append-only file before each restart when `torn` (see
/// [`torn_aof_tails`]), and notes what it did.
pub(super) struct Restarter {
    torn: bool,
    cut: crate::aof::Cut,
    tears: Vec<serde_json::Value>,
    restart_error: Option<String>,
}

impl Restarter {
    /// A restarter for `run`'s server, whose version decides the cut.
    pub(super) fn new(run: &mut Run, torn: bool) -> Restarter {
        // ECHOMQ_FAULT_TORN_CUT=anywhere cuts anywhere on Redis 7.0 too, to
        // show what its loader then applies.
        let anywhere = std::env::var("ECHOMQ_FAULT_TORN_CUT").is_ok_and(|v| v == "anywhere");
        let cut = if torn && !anywhere && redis_7_0(run) {
            crate::aof::Cut::InMulti
        } else {
            crate::aof::Cut::Anywhere
        };
        Restarter {
            torn,
            cut,
            tears: Vec::new(),
            restart_error: None,
        }
    }

    /// SIGKILLs `server`, tears its append-only file's tail if asked, and
    /// restarts it 50–300 ms later, recording each step in `run`.
    pub(super) fn restart(&mut self, run: &mut Run, server: &mut LocalServer) {
        run.fault("kill_server", "server", "SIGKILL");
        server.kill();
        if self.torn {
            match crate::aof::tear(server.dir(), self.cut) {
                Ok(t) => {
                    let detail = format!(
                        "{}: {} of {} bytes of a transaction, {} whole commands, {}",
                        t.file,
                        t.bytes,
                        t.of,
                        t.whole_commands,
                        if t.at_boundary {
                            "at a command boundary"
                        } else {
                            "inside a command"
                        }
                    );
                    run.fault("torn_aof_tail", "server", &detail);
                    self.tears.push(json!(detail));
                }
                Err(e) => self.tears.push(json!(format!("not torn: {e}"))),
            }
        }
        std::thread::sleep(Duration::from_millis(fastrand::u64(50..300)));
        if let Err(e) = server.restart() {
            self.restart_error = Some(e.to_string());
        }
        run.fault("restart_server", "server", "");
    }

    /// Its notes: `restart_error`, and with torn tails `cut`, `tears`
    /// (what was appended each time) and `tails_dropped` (times the
    /// server's log says it dropped a torn tail while loading).
    pub(super) fn notes(self, server: &LocalServer, notes: &mut BTreeMap<String, serde_json::Value>) {
        notes.insert("restart_error".into(), json!(self.restart_error));
        if self.torn {
            notes.insert("cut".into(), json!(format!("{:?}", self.cut)));
            notes.insert("tears".into(), json!(self.tears));
            notes.insert("tails_dropped".into(), json!(crate::aof::tails_dropped(server.dir())));
        }
    }
}

/// Whether the server is Redis 7.0 (not Valkey), whose AOF loader can
/// apply part of a torn transaction (see `aof::Cut::InMulti`).
fn redis_7_0(run: &mut Run) -> bool {
    let info: String = run
        .conn()
        .and_then(|mut c| redis::cmd("INFO").arg("server").query(&mut c))
        .unwrap_or_default();
    !info.contains("valkey") && info.contains("redis_version:7.0.")
}

/// libfaketime's thread-safe build, to step a server's clock.
pub(super) fn faketime_mt() -> Option<&'static str> {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
}

/// The server's clock (libfaketime, offset read from a file at every
/// call; its monotonic clock left alone) steps forward `steps` times by
/// 3–30 s, past every lease, under load. Forward only: the checker's I6
/// compares server times across attempts, which a backward step would
/// reorder by design (`tests/clock.rs` covers backward steps). Handlers
/// take up to 200 ms, so every step finds leases held, and the recording
/// reaper runs single passes, which do not hold reaping after a step
/// (only `Reaper::run` and the maintenance task do): it reaps the held
/// leases its next pass finds before their workers renew them, the most
/// stalls and lost leases a step can cause. `Err` says why it cannot run
/// (no libfaketime, or a server that does not start under it: Debian's
/// jemalloc-linked Redis 7.0).
pub fn clock_steps(ctx: &Ctx, jobs: u64, steps: usize) -> Result<Outcome, String> {
    let lib = faketime_mt().ok_or("libfaketime is missing (libfaketimeMT.so.1)")?;
    let file = std::env::temp_dir().join(format!(
        "echomq-fault-clock-{}-{}.faketime",
        std::process::id(),
        fastrand::u64(..)
    ));
    let set = |offset_s: u64| std::fs::write(&file, format!("+{offset_s}\n"));
    set(0).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut b = LocalServer::builder()
        .env("LD_PRELOAD", lib)
        .env("FAKETIME_TIMESTAMP_FILE", &file.display().to_string())
        .env("FAKETIME_NO_CACHE", "1")
        .env("DONT_FAKE_MONOTONIC", "1");
    for (k, v) in &ctx.server_env {
        b = b.env(k, v);
    }
    let server = b
        .start()
        .map_err(|e| format!("this server binary does not start under libfaketime: {e}"))?;
    let mut run = Run::new(&ctx.bins, &server.url(), "clock");
    run.reaper(100, 1000, false);
    run.producer(&ProducerOpts {
        count: jobs,
        concurrency: 4,
        dedup_every: 97,
        pace_ms: 3,
        ..ProducerOpts::default()
    });
    for _ in 0..3 {
        run.worker(&WorkerOpts {
            lease_ms: 1000,
            work_ms: 200,
            ..WorkerOpts::default()
        });
    }
    let (mut done, mut offset) = (0, 0u64);
    let mut errors = Vec::new();
    let mut next = Instant::now() + Duration::from_millis(1000);
    let drained = run.drive(Duration::from_secs(120 + 5 * steps as u64), |run| {
        if done < steps && Instant::now() >= next {
            let by = fastrand::u64(3..=30);
            offset += by;
            match set(offset) {
                Ok(()) => run.fault("clock_step", "server", &format!("+{by} s")),
                Err(e) => errors.push(e.to_string()),
            }
            done += 1;
            next = Instant::now() + Duration::from_millis(fastrand::u64(1000..2000));
        }
    });
    // How far the server's clock is ahead of ours: the steps took hold.
    let ahead_s = run
        .conn()
        .and_then(|mut c| redis::cmd("TIME").query::<(u64, u64)>(&mut c))
        .ok()
        .and_then(|(s, _)| {
            let ours = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?;
            Some(s as i64 - ours.as_secs() as i64)
        });
    let mut notes = BTreeMap::new();
    notes.insert("steps".into(), json!(done));
    notes.insert("offset_s".into(), json!(offset));
    notes.insert("server_ahead_s".into(), json!(ahead_s));
    notes.insert("errors".into(), json!(errors));
    let out = finish(run, drained, notes);
    drop(server);
    let _ = std::fs::remove_file(&file);
    Ok(out)
}

/// `FUNCTION FLUSH` every 100 ms under load: the scripts' function
/// library reloads when a call finds it missing.
pub fn script_flush(ctx: &Ctx, jobs: u64) -> Outcome {
    let server = ctx.server(false);
    let mut run = Run::new(&ctx.bins, &server.url(), "flush");
    run.reaper(100, 1000, false);
    run.producer(&ProducerOpts {
        count: jobs,
        concurrency: 4,
        pace_ms: 2,
        ..ProducerOpts::default()
    });
    for _ in 0..2 {
        run.worker(&WorkerOpts::default());
    }
    let mut next = Instant::now();
    let mut flushes = 0;
    let drained = run.drive(Duration::from_secs(90), |run| {
        if Instant::now() >= next {
            if let Ok(mut c) = run.conn() {
                let _: redis::RedisResult<()> = redis::cmd("FUNCTION").arg("FLUSH").query(&mut c);
                run.fault("script_flush", "server", "");
                flushes += 1;
            }
            next = Instant::now() + Duration::from_millis(100);
        }
    });
    let mut notes = BTreeMap::new();
    notes.insert("flushes".into(), json!(flushes));
    finish(run, drained, notes)
}
