//! Negative controls: the suite must notice a broken guarantee.
//!
//! The library has test-only breakages behind `--cfg echomq_faults` (see
//! `src/faults.rs`), selected at run time by `ECHOMQ_FAULT`:
//! `no-token-check`, `client-clock`, `two-step-reaper`,
//! `no-stall-increment`, `per-job-token`, `no-lane-cap`, `no-global-cap`,
//! `no-rate-limit`, `tick-twice`, `cancel-keeps-waiting`, `flow-release-early`,
//! `batch-end-early`, `remote-end-twice`. This test builds the fault
//! binaries and the library's core and lane tests (this crate's
//! `guarantees` target) once each with that cfg (into `target/faults`, so
//! the normal build is untouched; about a minute and a half on 2 cores),
//! then for each control runs the scenario that exposes it and
//! asserts that the checker **fails**, and that the deterministic core
//! test for the same guarantee **fails** too. Without a control, the same
//! build passes both (so a failure is the control's doing, not the
//! build's).
//!
//! `per-job-token` (0.1's tokens: the job's own attempt count, which
//! starts again at 1 when a deleted job's id is enqueued again) is caught
//! by the deterministic core test alone: a stale lease of the deleted job
//! then carries the same token as the new job's lease, and its complete
//! must still be refused.
//!
//! `settler-panic` is a fault of the library's own task, not a broken
//! guarantee: with it, the core test `a_dead_settler_stops_the_consumer_and_reports`
//! must *pass* (the consumer stops, reports, and loses nothing).
//!
//! `client-clock` needs libfaketime (the server's clock an hour ahead, so
//! a client clock is visibly wrong); `scripts/test` installs it, and the
//! control fails, saying what is missing, where it is not installed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use echomq_fault::harness::Bins;
use echomq_fault::scenarios::{self, Ctx, Outcome, Stale};

static SERIAL: Mutex<()> = Mutex::new(());
static BINS_BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
static LIBRARY_BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn target() -> PathBuf {
    root().join("target").join("faults")
}

fn cargo(args: &[&str], fault: Option<&str>) -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    let flags = match std::env::var("RUSTFLAGS") {
        Ok(f) if !f.is_empty() => format!("{f} --cfg echomq_faults"),
        _ => "--cfg echomq_faults".into(),
    };
    // `--target-dir` goes before a `--` that hands the rest to the test binary.
    let (cargo_args, test_args) = match args.iter().position(|a| *a == "--") {
        Some(i) => args.split_at(i),
        None => (args, &[][..]),
    };
    c.current_dir(root())
        .args(cargo_args)
        .arg("--target-dir")
        .arg(target())
        .args(test_args)
        .env("RUSTFLAGS", flags)
        // A build of its own, run a few times: no debug info and no
        // incremental state to write (a third off the build's time).
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .env("CARGO_PROFILE_TEST_DEBUG", "0")
        .env("CARGO_INCREMENTAL", "0")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    match fault {
        Some(f) => c.env("ECHOMQ_FAULT", f),
        None => c.env_remove("ECHOMQ_FAULT"),
    };
    c
}

/// Runs one `cargo` build with `--cfg echomq_faults`, once per `cell`.
fn build_once(cell: &'static OnceLock<Result<PathBuf, String>>, what: &str, args: &[&str]) -> PathBuf {
    cell.get_or_init(|| {
        let t0 = std::time::Instant::now();
        let out = cargo(args, None).output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "cargo {} failed:\n{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        println!("negative-control build of {what} took {:?}", t0.elapsed());
        Ok(target().join("debug"))
    })
    .clone()
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Builds the fault binaries with `--cfg echomq_faults`, once.
fn faults_build() -> PathBuf {
    build_once(
        &BINS_BUILT,
        "the fault binaries",
        &["build", "-p", "echomq-fault", "--bins"],
    )
}

/// Builds the library's core and lane tests with `--cfg echomq_faults`,
/// once (as this crate's `guarantees` target: see `library/guarantees.rs`).
fn library_build() {
    build_once(
        &LIBRARY_BUILT,
        "the library's core and lane tests",
        &["test", "-p", "echomq-fault", "--test", "guarantees", "--no-run"],
    );
}

/// The faults build's binaries with `ECHOMQ_FAULT` set to `fault` (or unset).
fn ctx(fault: Option<&str>) -> Ctx {
    let dir = faults_build();
    let mut bins = Bins {
        worker: dir.join("fault-worker"),
        producer: dir.join("fault-producer"),
        // The checker does not depend on the library's guarantees.
        check: env!("CARGO_BIN_EXE_fault-check").into(),
        env: Vec::new(),
    };
    if let Some(f) = fault {
        bins = bins.with_env("ECHOMQ_FAULT", f);
    }
    Ctx::new(bins)
}

/// Runs one core test of the faults build; true when it passed.
fn core_test(name: &str, fault: Option<&str>) -> bool {
    test_of(&format!("core::{name}"), fault)
}

/// Runs one lane test of the faults build; true when it passed.
fn lanes_test(name: &str, fault: Option<&str>) -> bool {
    test_of(&format!("lanes::{name}"), fault)
}

/// Runs test `name` (`core::…`, `lanes::…` or `flows::…`) of the faults build.
fn test_of(name: &str, fault: Option<&str>) -> bool {
    library_build();
    let out = cargo(
        &[
            "test",
            "-p",
            "echomq-fault",
            "--test",
            "guarantees",
            "--",
            "--exact",
            name,
        ],
        fault,
    )
    .output()
    .expect("run cargo test");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("running 1 test"),
        "test {name} did not run:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.status.success()
}

fn faketime() -> Option<&'static str> {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
}

fn skewed(mut ctx: Ctx) -> Ctx {
    let lib = faketime().expect("libfaketime");
    ctx.server_env = vec![("LD_PRELOAD".into(), lib.into()), ("FAKETIME".into(), "+1h".into())];
    ctx
}

fn failed(name: &str, out: &Outcome) {
    println!("[{name}] {}", out.summary());
    let shown: Vec<&str> = out.check.report["violations"]
        .as_array()
        .map(|v| v.iter().take(3).filter_map(|s| s.as_str()).collect())
        .unwrap_or_default();
    println!("[{name}] first violations: {shown:?}");
    assert!(
        !out.check.ok,
        "[{name}] the checker did not notice the broken guarantee"
    );
}

fn passed(name: &str, out: &Outcome) {
    println!("[{name}] {}", out.summary());
    assert!(out.check.ok, "[{name}] fails without any control:\n{}", out.check.text);
}

// With no control, the faults build passes the scenarios and the core tests the controls break.
#[test]
fn without_a_control_the_faults_build_passes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = ctx(None);
    passed("none/takeover", &scenarios::paused_takeover(&c, Stale::Settle));
    passed("none/reapers", &scenarios::racing_reapers(&c, 1000, 4));
    passed("none/killpoint", &scenarios::kill_point(&c, "before_effect"));
    passed(
        "none/lanes",
        &scenarios::lane_caps(&c, 600, 3, 2, 400, std::time::Duration::from_secs(120)),
    );
    assert!(
        lanes_test("caps::a_cap_bounds_active_jobs", None),
        "the lane test fails without any control"
    );
    passed("none/groups", &scenarios::flows_and_batches(&c, &groups_plan(false)));
    passed("none/spread", &scenarios::flows_and_batches(&c, &groups_plan(true)));
    passed(
        "none/limits",
        &scenarios::limits(&c, scenarios::LimitsRun::short(), std::time::Duration::from_secs(90)),
    );
    if faketime().is_some() {
        passed(
            "none/skewed",
            &scenarios::kill_point(&skewed(c.clone()), "before_effect"),
        );
    }
    for t in [
        "fencing::stale_token_is_fenced",
        "fencing::racing_reapers_reap_each_job_once",
        "fencing::unsettled_lease_is_redelivered",
        "clock::skewed_server_clock_decides",
        "fencing::reused_id_cannot_be_settled_by_a_stale_token",
    ] {
        assert!(core_test(t, None), "core test {t} fails without any control");
    }
}

// no-token-check: a stale worker's settle completes the job; the checker (I4/I5) and stale_token_is_fenced fail.
#[test]
fn no_token_check_is_caught() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = scenarios::paused_takeover(&ctx(Some("no-token-check")), Stale::Settle);
    failed("no-token-check", &out);
    assert!(out.check.violates("I4") || out.check.violates("I5"));
    assert_eq!(out.notes["unchanged"], false, "the stale settle changed nothing");
    assert!(!core_test("fencing::stale_token_is_fenced", Some("no-token-check")));
}

// two-step-reaper: racing reapers count stalls twice; the checker (I9) and racing_reapers_reap_each_job_once fail.
#[test]
fn two_step_reaper_is_caught() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = scenarios::racing_reapers(&ctx(Some("two-step-reaper")), 1000, 4);
    failed("two-step-reaper", &out);
    assert!(out.check.violates("I9"));
    assert!(!core_test(
        "fencing::racing_reapers_reap_each_job_once",
        Some("two-step-reaper")
    ));
}

// settler-panic (not a broken guarantee: a fault of the library's own
// task): the consumer stops, settles or releases what it holds, reports
// Error::Internal, and loses nothing; the core test checks all of it.
#[test]
fn a_dead_settler_is_survived() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(core_test(
        "consumer::a_dead_settler_stops_the_consumer_and_reports",
        Some("settler-panic")
    ));
}

// no-stall-increment: an expired lease counts no stall; the checker (I9) and unsettled_lease_is_redelivered fail.
#[test]
fn no_stall_increment_is_caught() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = scenarios::kill_point(&ctx(Some("no-stall-increment")), "before_effect");
    failed("no-stall-increment", &out);
    assert!(out.check.violates("I9"));
    assert!(!core_test(
        "fencing::unsettled_lease_is_redelivered",
        Some("no-stall-increment")
    ));
}

// client-clock: leases counted from the worker's clock; with the server an hour ahead the checker (I6) and skewed_server_clock_decides fail.
#[test]
fn client_clock_is_caught() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        faketime().is_some(),
        "libfaketime is missing: apt-get install faketime (scripts/test installs it)"
    );
    let out = scenarios::kill_point(&skewed(ctx(Some("client-clock"))), "before_effect");
    failed("client-clock", &out);
    assert!(out.check.violates("I6"));
    assert!(!core_test("clock::skewed_server_clock_decides", Some("client-clock")));
}

// no-lane-cap: claims ignore lane caps; the checker (L1) and a_cap_bounds_active_jobs fail.
#[test]
fn no_lane_cap_is_caught() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = scenarios::lane_caps(
        &ctx(Some("no-lane-cap")),
        600,
        3,
        2,
        400,
        std::time::Duration::from_secs(120),
    );
    failed("no-lane-cap", &out);
    assert!(out.check.violates("L1"));
    assert!(!lanes_test("caps::a_cap_bounds_active_jobs", Some("no-lane-cap")));
}

// no-global-cap: claims ignore the queue's cap; the checker (G1) fails.
#[test]
fn no_global_cap_is_caught() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = scenarios::limits(
        &ctx(Some("no-global-cap")),
        scenarios::LimitsRun::short(),
        std::time::Duration::from_secs(90),
    );
    failed("no-global-cap", &out);
    assert!(out.check.violates("G1"));
}

// no-rate-limit: claims ignore every rate limit; the checker (R1 and R2) fails.
#[test]
fn no_rate_limit_is_caught() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = scenarios::limits(
        &ctx(Some("no-rate-limit")),
        scenarios::LimitsRun::short(),
        std::time::Duration::from_secs(90),
    );
    failed("no-rate-limit", &out);
    assert!(out.check.violates("R1") && out.check.violates("R2"));
}

// per-job-token: tokens restart at 1 for a reused id, so the deleted job's stale lease settles the new job; reused_id_cannot_be_settled_by_a_stale_token fails.
#[test]
fn per_job_token_is_caught() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(!core_test(
        "fencing::reused_id_cannot_be_settled_by_a_stale_token",
        Some("per-job-token")
    ));
}

// tick-twice: a schedule's passes take the same ticks again and make their
// jobs again; the checker (K1) fails. (600 jobs take about 3 s: passes
// come after the first tick; with 300 a run could end at its first tick.)
#[test]
fn tick_twice_is_caught() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = scenarios::cancels_and_schedules(&ctx(Some("tick-twice")), 600);
    failed("tick-twice", &out);
    assert!(out.check.violates("K1"));
}

/// A short run of flows and batches under worker kills (no restarts),
/// spread over a second queue or not.
fn groups_plan(spread: bool) -> scenarios::GroupsPlan {
    scenarios::GroupsPlan {
        flows: 30,
        batches: 8,
        jobs: 0,
        kill_every_ms: 600,
        restarts: 0,
        torn: false,
        limit: std::time::Duration::from_secs(120),
        spread,
    }
}

// flow-release-early: a flow's parent is enqueued when one child is still
// to end; the checker (F1: a step created before a step it waits on
// ended) fails, and so does the flows-under-crashes test (a parent
// created before its child finished), which passes without the control.
#[test]
fn flow_release_early_is_caught() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = scenarios::flows_and_batches(&ctx(Some("flow-release-early")), &groups_plan(false));
    failed("flow-release-early", &out);
    assert!(out.check.violates("F1"));
    let t = "flows::flows_and_batches_survive_crashes_and_a_restart";
    assert!(test_of(t, None), "{t} fails without any control");
    assert!(
        !test_of(t, Some("flow-release-early")),
        "{t} passed with flow-release-early"
    );
}

// batch-end-early: a closed batch ends when one member is still to end;
// the checker (B1: a callback enqueued before the last member ended)
// fails.
#[test]
fn batch_end_early_is_caught() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = scenarios::flows_and_batches(&ctx(Some("batch-end-early")), &groups_plan(false));
    failed("batch-end-early", &out);
    assert!(out.check.violates("B1"));
}

// remote-end-twice: the relay delivers every message twice (as relays that
// died before taking their messages off) and a batch counts each end of a
// member on another queue as often as it arrives; the checker fails (B1: a
// callback enqueued while a member was still running, or B2: a batch
// counting more ends than members), where the same run passes without it.
#[test]
fn remote_end_twice_is_caught() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = scenarios::flows_and_batches(&ctx(Some("remote-end-twice")), &groups_plan(true));
    failed("remote-end-twice", &out);
    assert!(out.check.violates("B1") || out.check.violates("B2"));
}

// cancel-keeps-waiting: a cancel answers "cancelled" and leaves the job to
// run; the checker (C2) fails.
#[test]
fn cancel_keeps_waiting_is_caught() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = scenarios::cancels_and_schedules(&ctx(Some("cancel-keeps-waiting")), 600);
    failed("cancel-keeps-waiting", &out);
    assert!(out.check.violates("C2"));
}
