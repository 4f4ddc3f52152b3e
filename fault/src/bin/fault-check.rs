//! The checker: reads every history (`DIR/*.jsonl`) of a run and the final
//! state of its queue (or two), checks the invariants I1–I11 (see
//! `echomq_fault::check`), prints a report and, as its last line, the
//! report as one JSON object. Exits 1 on any violation, 2 on bad input.
//!
//! ```text
//! fault-check --dir=DIR --url=redis://127.0.0.1:PORT/ --queue=Q [--not-drained] [--call-bound-ms=15000]
//!     [--lane-cap=C] [--global-cap=C] [--rate=N:W_MS] [--lane-rate=N:W_MS]
//!     [--loss-window-ms=MS] [--claim-loss-window-ms=MS] [--far-queue=Q2]
//! ```
//!
//! `--far-queue` names a second queue of the run (the flows' steps and
//! batches' members put there): the two queues' states are read and
//! checked as one.
//!
//! `--url` may be a cluster's seeds, comma-separated: the queue's state is
//! read from the master that serves its slot. `--loss-window-ms` is for a
//! queue enqueued without `WAIT` whose master was SIGKILLed: see
//! `CheckOptions::loss_window_ms`; `--claim-loss-window-ms` for any queue
//! whose master was (claims are never confirmed): see
//! `CheckOptions::claim_loss_window_ms`.

use std::path::PathBuf;

use echomq_fault::args::Args;
use echomq_fault::check::{CheckOptions, check};
use echomq_fault::{history, state};

/// A rate limit argument "N:W_MS".
fn rate_arg(s: &str, name: &str) -> (u64, u64) {
    let (n, w) = s.split_once(':').unwrap_or_else(|| panic!("{name} takes N:W_MS"));
    (n.parse().expect(name), w.parse().expect(name))
}

/// Violations printed in the text part (all of them go into the JSON line).
const SHOWN: usize = 40;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a = Args::from_env();
    let dir = PathBuf::from(a.req("dir"));
    let (records, torn) = match history::read_dir(&dir) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("fault-check: cannot read {}: {e}", dir.display());
            std::process::exit(2);
        }
    };
    // A run whose flows and batches span a second queue checks both as one.
    let queues: Vec<String> = std::iter::once(a.req("queue")).chain(a.opt("far-queue")).collect();
    let st = match state::read_all(&a.req("url"), &queues).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fault-check: cannot read the server state: {e}");
            std::process::exit(2);
        }
    };
    let opts = CheckOptions {
        drained: !a.get("not-drained", false),
        call_bound_ms: a.get("call-bound-ms", CheckOptions::default().call_bound_ms),
        lane_cap: a.opt("lane-cap").map(|c| c.parse().expect("--lane-cap")),
        global_cap: a.opt("global-cap").map(|c| c.parse().expect("--global-cap")),
        rate: a.opt("rate").map(|r| rate_arg(&r, "--rate")),
        lane_rate: a.opt("lane-rate").map(|r| rate_arg(&r, "--lane-rate")),
        loss_window_ms: a.opt("loss-window-ms").map(|w| w.parse().expect("--loss-window-ms")),
        claim_loss_window_ms: a
            .opt("claim-loss-window-ms")
            .map(|w| w.parse().expect("--claim-loss-window-ms")),
    };
    let mut report = check(&records, &st, &opts);
    report.torn_lines = torn;

    println!("fault-check: {} history records from {}", records.len(), dir.display());
    println!(
        "jobs {} (completed {}, failed {}, pending {}, delayed {}, active {}); enqueues acked {}, unknown {}",
        report.jobs,
        report.completed,
        report.failed,
        report.pending,
        report.delayed,
        report.active,
        report.enqueues_acked,
        report.enqueues_unknown
    );
    println!(
        "faults: worker kills {}, worker pauses {}, server kills {}, restarts {}, partitions {}, connection drops {}, script flushes {}, graceful stops {}",
        report.worker_kills,
        report.worker_pauses,
        report.server_kills,
        report.server_restarts,
        report.partitions,
        report.connection_drops,
        report.script_flushes,
        report.graceful_stops
    );
    println!(
        "claims {}, redeliveries {}, stalls {}, reap records {}, max redelivery gap {} ms, max call {} ms",
        report.claims,
        report.redeliveries,
        report.stalls,
        report.reaps,
        report.max_redelivery_gap_ms,
        report.max_call_ms
    );
    println!(
        "duplicate effects {} explained by {:?}; guarded effects {} (duplicates {})",
        report.duplicate_effects, report.duplicate_explained, report.guarded_effects, report.guarded_duplicates
    );
    println!(
        "stale settles rejected {}, stale heartbeats rejected {}, already-settled answers {}, lost {} (unconfirmed, within the failover window: {})",
        report.stale_settles_rejected,
        report.stale_heartbeats_rejected,
        report.already_settled,
        report.lost,
        report.lost_unconfirmed
    );
    if opts.global_cap.is_some() || opts.rate.is_some() || opts.lane_rate.is_some() {
        println!(
            "most surely active at once {}, most claims in one window {} (per lane {:?})",
            report.max_active, report.max_claims_per_window, report.lane_max_claims_per_window
        );
    }
    if report.lane_claims > 0 {
        println!(
            "lane claims {}, most surely active at once per lane {:?}",
            report.lane_claims, report.lane_max_active
        );
    }
    for (inv, how) in &report.invariants {
        println!("  {inv}: {how}");
    }
    if report.ok {
        println!("OK: no violation");
    } else {
        println!("VIOLATIONS: {}", report.violations.len());
        for v in report.violations.iter().take(SHOWN) {
            println!("  {v}");
        }
    }
    println!("{}", serde_json::to_string(&report).expect("report serialises"));
    std::process::exit(if report.ok { 0 } else { 1 });
}
