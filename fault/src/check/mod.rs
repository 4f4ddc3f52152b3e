//! The offline checker: reads every history of a run and the server's final
//! state, and checks the invariants I1–I11 of RELIABILITY.md.
//!
//! What each check can see, and so how strict it is:
//!
//! Attempts are keyed by their fencing token. Tokens come from a
//! queue-wide counter: unique in the queue, and each claim of a job gets a
//! higher one than the claim before, but they are not the delivery number
//! (`Claimed` records that separately) and successive claims of a job need
//! not have consecutive tokens. So "the highest token" is the newest
//! claim, and the delivery after delivery `n` is the claim numbered
//! `n + 1`, never "token + 1".
//!
//! - I1 (no acknowledged enqueue lost), I2 (no job never enqueued), I3
//!   (states agree with sets; terminal or pending after a drain), I4 (one
//!   terminal settlement, by the highest token, which is the job's current
//!   `tk`; and tokens rise with the delivery number), I8 (guarded effects once),
//!   I10 (one job per dedup id at a time): **full**, from the final state
//!   and the producers' histories. With a claim loss window, a claim recorded
//!   within it before a master SIGKILL and never settled may have been
//!   lost in the failover (a claim is not confirmed with `WAIT`): the job
//!   claimed again with the same delivery number is counted
//!   (`claims_lost_unconfirmed`), not an I4 violation.
//! - I5 (a stale token changes nothing): every settlement the server
//!   *applied* and answered is checked against the claims and reaps
//!   recorded before it. A settlement applied whose reply was lost (its
//!   worker was killed) is invisible to the histories, but then I4/I3 see
//!   its effect on the final state.
//! - I6 (server clock; no redelivery before the old deadline): every
//!   claim's deadline must be exactly its server time plus the lease asked
//!   for; every redelivery after an unsettled attempt must start after the
//!   last deadline recorded for it, and every reap after the deadline of
//!   the attempt it reaped. A heartbeat applied with its reply lost makes
//!   the recorded deadline a lower bound, so the check stays sound. The
//!   "within the reaper interval" half needs an idle consumer, so it is
//!   reported (`max_redelivery_gap_ms`) and asserted by the scenarios that
//!   arrange one.
//! - I7 (every duplicate effect explained): full for the unguarded effect.
//! - I9 (one stall per expired lease): exact (stalls = reaps, k-th reap
//!   reports k) when every reap's reply was recorded; otherwise partial
//!   (increasing, and never two reaps of one job less than a lease apart).
//! - I11 (no call hangs past its timeout): producers' enqueues, reaper
//!   passes and consumer settlements, against `call_bound_ms`. Processes
//!   the driver paused (SIGSTOP) are excluded: their wall time stops.
//! - L1 (a lane's cap holds: never more active jobs of a lane than its
//!   cap, `lane_cap`): each attempt of a laned job is *surely active* from
//!   its claim's server time until its lease's end when the histories
//!   record it (the settlement that applied, or the reap that took it),
//!   else until the last time it was seen holding the lease (its last
//!   heartbeat); a sweep over those intervals must never count more than
//!   the cap at once in one lane. An attempt whose end went unrecorded
//!   counts for less than it held, so the check never reports a false
//!   violation, and it is strict for every lease whose end was recorded
//!   (most of them: a killed worker's leases are reaped by a recording
//!   reaper). The most seen at once per lane is reported. A claim a
//!   master SIGKILL may have taken with it (see I4) counts until the kill:
//!   the new master holds no lease of it.
//! - L2 (every lane slot given back exactly once): after a drain, no slot
//!   is held (`lanes:active` is empty), no lane has pending jobs, and no
//!   lane is left in the ring: **full**, from the final state. A slot
//!   given back twice would show in L1 (the lane would take one job too
//!   many).
//! - G1 (the global cap holds: never more active jobs of the queue than
//!   its cap, `global_cap`): L1's sweep over the same surely-active
//!   intervals, over every attempt of the queue. As strict as L1.
//! - R1 (the queue's rate limit holds, `rate`: at most N claims in every
//!   half-open window [t, t + W) of server-clock ms) and R2 (each lane's,
//!   `lane_rate`): the claims' server times from the histories. A claim
//!   whose record died with its worker is not counted, so the check never
//!   reports a false violation; it is strict for the claims recorded
//!   (almost all: a worker records a claim as soon as its reply arrives).
//! - K1 (one job per schedule tick: no tick's job is created twice): the
//!   schedulers' `Fired` records; a second creation is explained only when
//!   the first was answered within the loss window before a master
//!   SIGKILL (its job lost in the failover, the tick taken again). A tick's
//!   job counts as an acknowledged enqueue for I1 and I2 (one whose pass's
//!   answer was lost is enqueued by its schedule, and counted).
//! - C1 (only a job asked to be cancelled ends cancelled) and C2 (a job
//!   whose cancel answered "cancelled", i.e. it was waiting, ends
//!   cancelled: it never ran to another end after that): **full**, from
//!   the producers' `CancelAsked` records and the final state. With a loss
//!   window, a C2 break whose cancel was answered within it before a
//!   master SIGKILL is counted (`cancels_lost_unconfirmed`), since a
//!   cancel is not confirmed with `WAIT`.
//!
//! - F1 (no step of a flow is created or starts before every step it
//!   waits on has ended): each step's record (`ct`, `fs`) and every claim
//!   recorded, against each child's `ft`: **full**. F2 (after a drain
//!   every step of every flow added ran and completed, created once) and
//!   B1 (a closed batch's callbacks are enqueued once each, after every
//!   member ended, success only when all completed; none for a batch
//!   never closed): **full** from the final state, the creations counted
//!   in the queue's event stream (`partial` when it cannot be read). F3
//!   (a flow's record is whole after a drain: every step ended once,
//!   nothing left to count, no spec left, no dangling edge; the outbox
//!   empty) and B2 (a batch's counters agree with its members and it
//!   ended): **full**, from the final state.
//!
//! The checks, one file per group: `histories.rs` indexes the records
//! per job and attempt; `final_state.rs` holds I1–I3, C1, C2 and I10, `job.rs`
//! I4–I9, `lanes.rs` L1, L2 and G1, `rates.rs` R1 and R2, `groups.rs` F1–F3, B1 and B2; I11 is here.

mod final_state;
mod groups;
mod histories;
mod job;
mod lanes;
mod rates;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::history::Record;
use crate::state::ServerState;
use histories::Histories;

/// Settings of a check.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// The run drained: every worker stopped gracefully after all jobs
    /// settled, so no job may be left active.
    pub drained: bool,
    /// Longest a single library call may take (I11), ms.
    pub call_bound_ms: u64,
    /// The cap every lane of the run had (L1); `None`: not checked.
    pub lane_cap: Option<u64>,
    /// The queue's global cap (G1); `None`: not checked.
    pub global_cap: Option<u64>,
    /// The queue's rate limit (R1): (claims, window ms); `None`: not checked.
    pub rate: Option<(u64, u64)>,
    /// Every lane's rate limit (R2): (claims, window ms); `None`: not checked.
    pub lane_rate: Option<(u64, u64)>,
    /// Enqueues acknowledged without `WAIT` on a replicated server: an
    /// acknowledged job that is gone is counted (`lost_unconfirmed`), not a
    /// violation, when it was acknowledged at most this many ms before a
    /// master SIGKILL (the replication lag a failover can lose); gone
    /// otherwise, it is an I1 violation as ever. `None`: every loss is one.
    pub loss_window_ms: Option<u64>,
    /// Claims, which no durability setting confirms, on a replicated
    /// server: a claim recorded at most this many ms before a master
    /// SIGKILL and never settled may be lost in the failover, so its job's
    /// claim again with the same delivery number is counted
    /// (`claims_lost_unconfirmed`), not an I4 violation, and its lease
    /// counts until the kill only (L1, G1). `None`: no claim is lost.
    pub claim_loss_window_ms: Option<u64>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            drained: true,
            call_bound_ms: 15_000,
            lane_cap: None,
            global_cap: None,
            rate: None,
            lane_rate: None,
            loss_window_ms: None,
            claim_loss_window_ms: None,
        }
    }
}

/// What a check found: the run's figures and every violation.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// No violation.
    pub ok: bool,
    /// Jobs in the final state.
    pub jobs: usize,
    /// Enqueue calls acknowledged.
    pub enqueues_acked: usize,
    /// Enqueue calls whose outcome was unknown (retried with the same id).
    pub enqueues_unknown: usize,
    /// Final states.
    pub completed: usize,
    /// Final states.
    pub failed: usize,
    /// Final states.
    pub pending: usize,
    /// Final states.
    pub delayed: usize,
    /// Final states.
    pub active: usize,
    /// Faults injected.
    pub worker_kills: usize,
    /// Workers paused with SIGSTOP.
    pub worker_pauses: usize,
    /// Server SIGKILLs.
    pub server_kills: usize,
    /// Server restarts.
    pub server_restarts: usize,
    /// Torn tails left on the append-only file before a restart.
    pub torn_tails: usize,
    /// Forward steps of the server's clock.
    pub clock_steps: usize,
    /// Network partitions (blackholes).
    pub partitions: usize,
    /// Connections dropped (proxy cuts, CLIENT KILL, acks cut in flight).
    pub connection_drops: usize,
    /// FUNCTION FLUSH calls (the scripts are one function library).
    pub script_flushes: usize,
    /// Workers stopped gracefully by SIGTERM.
    pub graceful_stops: usize,
    /// Claims (attempts) on the server, over all jobs.
    pub claims: u64,
    /// Claims beyond each job's first.
    pub redeliveries: u64,
    /// Expired leases counted on the server.
    pub stalls: u64,
    /// Reap records.
    pub reaps: usize,
    /// Unguarded effects applied beyond one per job.
    pub duplicate_effects: u64,
    /// What explains them: attempt end → count.
    pub duplicate_explained: BTreeMap<String, u64>,
    /// Guarded effects applied.
    pub guarded_effects: i64,
    /// Guarded effects beyond one per job.
    pub guarded_duplicates: i64,
    /// Settlements refused because the token was stale.
    pub stale_settles_rejected: usize,
    /// Heartbeats refused because the token was stale.
    pub stale_heartbeats_rejected: usize,
    /// Settlements answered "already settled" (a repeat after a lost reply).
    pub already_settled: usize,
    /// Acknowledged enqueues whose job is missing (violations of I1).
    pub lost: usize,
    /// Acknowledged enqueues without `WAIT` whose job is missing, each
    /// acknowledged within `loss_window_ms` before a master SIGKILL (the
    /// documented loss of a failover; not a violation).
    pub lost_unconfirmed: usize,
    /// Jobs of schedule ticks the schedulers' passes created (recorded).
    pub cron_jobs_created: usize,
    /// Jobs of schedule ticks in the final state that no recorded pass
    /// created (the pass's answer was lost).
    pub cron_jobs_unrecorded: usize,
    /// Cancel calls made (`CancelAsked`), by answer, and jobs left cancelled.
    pub cancels_asked: usize,
    pub cancel_answers: BTreeMap<String, usize>,
    pub cancelled: usize,
    /// Jobs whose cancel answered "cancelled" and that ran on all the
    /// same, each answered within `loss_window_ms` before a master SIGKILL
    /// (a cancel is not confirmed with `WAIT`; not a violation).
    pub cancels_lost_unconfirmed: usize,
    /// Claims a master SIGKILL within `loss_window_ms` after them took
    /// with it (a claim is not confirmed with `WAIT`): the job claimed
    /// again with the same delivery number (I4), the lost lease counted
    /// until the kill only (L1, G1). Not a violation.
    pub claims_lost_unconfirmed: usize,
    /// Longest gap from an expired deadline to the redelivery's claim.
    pub max_redelivery_gap_ms: u64,
    /// Longest library call seen (I11).
    pub max_call_ms: u64,
    /// Torn history lines skipped.
    pub torn_lines: usize,
    /// Claims of laned jobs.
    pub lane_claims: u64,
    /// The most attempts of each lane surely active at once (L1).
    pub lane_max_active: BTreeMap<String, u64>,
    /// The most attempts of the queue surely active at once (G1).
    pub max_active: u64,
    /// The most claims recorded in one window of the queue's rate limit (R1).
    pub max_claims_per_window: u64,
    /// The most claims recorded in one window of each lane's rate limit (R2).
    pub lane_max_claims_per_window: BTreeMap<String, u64>,
    /// Flows the producers added (or tried to).
    pub flows: usize,
    /// Batches the producers opened (or tried to).
    pub batches: usize,
    /// Batch callbacks in the final state.
    pub batch_callbacks: usize,
    /// Invariant → "full", "partial: why" or "skipped: why".
    pub invariants: BTreeMap<String, String>,
    /// Every violation, prefixed with its invariant.
    pub violations: Vec<String>,
}

/// Checks `records` (all histories of a run) against `state` (the final
/// server state of the run's queue).
pub fn check(records: &[Record], state: &ServerState, opts: &CheckOptions) -> Report {
    let mut r = Report::default();
    let mut v: Vec<String> = Vec::new();
    let h = Histories::read(records, &mut r);
    final_state::figures(state, &mut r);
    final_state::check_records(&h, state, opts, &mut r, &mut v);
    job::check_jobs(&h, state, opts.claim_loss_window_ms, &mut r, &mut v);
    final_state::check_dedup(&h, state, &mut r, &mut v);
    lanes::check_lanes(&h.jobs, &h.lease_of, &h.server_kill_times, opts, state, &mut r, &mut v);
    rates::check_rates(&h.jobs, opts, &mut r, &mut v);
    groups::check_groups(&h, state, opts, &mut r, &mut v);
    check_calls(&h, opts, &mut r, &mut v);
    r.ok = v.is_empty();
    r.violations = v;
    r
}

/// I11: no call hangs past its bound.
fn check_calls(h: &Histories, opts: &CheckOptions, r: &mut Report, v: &mut Vec<String>) {
    for (what, ms) in &h.call_ms {
        r.max_call_ms = r.max_call_ms.max(*ms);
        if *ms > opts.call_bound_ms {
            v.push(format!("I11 {what} took {ms} ms (bound {} ms)", opts.call_bound_ms));
        }
    }
    for (src, what, ms) in &h.settle_durations {
        if h.paused.contains(src) {
            continue;
        }
        r.max_call_ms = r.max_call_ms.max(*ms);
        let bound = opts.call_bound_ms + h.lease_of.get(src).copied().unwrap_or(0);
        if *ms > bound {
            v.push(format!("I11 {src}: settle {what} took {ms} ms (bound {bound} ms)"));
        }
    }
    r.invariants.insert(
        "I11".into(),
        "full for enqueues, reaper passes and settlements (SIGSTOPped processes excluded)".into(),
    );
}
