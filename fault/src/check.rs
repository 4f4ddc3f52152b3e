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
//!   and the producers' histories.
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
//!   reaper). The most seen at once per lane is reported.
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

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::history::{Ev, Record};
use crate::state::ServerState;

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
    /// Acknowledged enqueues whose job is missing.
    pub lost: usize,
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
    /// Invariant → "full", "partial: why" or "skipped: why".
    pub invariants: BTreeMap<String, String>,
    /// Every violation, prefixed with its invariant.
    pub violations: Vec<String>,
}

/// One attempt (token) of one job, as the histories saw it.
#[derive(Debug, Default, Clone)]
struct Attempt {
    src: Option<String>,
    /// (server_ms, deadline_ms) of the claim.
    claim: Option<(u64, u64)>,
    /// The delivery number of the claim (1 for the first), when recorded.
    delivery: Option<u64>,
    /// The job's lane, when it has one.
    lane: Option<String>,
    extends: Vec<u64>,
    lease_lost: Option<bool>,
    sent: Vec<String>,
    /// (op, outcome, server_ms) of answered settlements.
    settled: Vec<(String, String, u64)>,
    /// (op, lease_lost) of failed settlements.
    settle_failed: Vec<(String, bool)>,
    effect_begin: bool,
    effect_done: bool,
    effect_unknown: bool,
    handler: Option<String>,
}

impl Attempt {
    fn last_deadline(&self) -> Option<u64> {
        let c = self.claim?.1;
        Some(self.extends.iter().copied().fold(c, u64::max))
    }
    fn applied(&self, op: &str) -> bool {
        self.settled
            .iter()
            .any(|(o, out, _)| o == op && out != "already_settled")
    }
    /// The attempt handed the job back itself (retry or release), or may have.
    fn settled_back(&self) -> bool {
        self.sent.iter().any(|o| o == "retry" || o == "release")
    }
}

#[derive(Debug, Default)]
struct JobHist {
    invoked: bool,
    attempts: BTreeMap<u64, Attempt>,
    /// (server_ms, stalls, failed)
    reaps: Vec<(u64, u64, bool)>,
}

/// Checks `records` (all histories of a run) against `state` (the final
/// server state of the run's queue).
pub fn check(records: &[Record], state: &ServerState, opts: &CheckOptions) -> Report {
    let mut r = Report::default();
    let mut v: Vec<String> = Vec::new();

    // ---- index the histories ----
    let mut lease_of: HashMap<&str, u64> = HashMap::new();
    let mut role_of: HashMap<&str, &str> = HashMap::new();
    let mut guarded_on = false;
    let mut killed: BTreeSet<&str> = BTreeSet::new();
    let mut paused: BTreeSet<&str> = BTreeSet::new();
    let mut jobs: BTreeMap<&str, JobHist> = BTreeMap::new();
    let mut acked: Vec<(&str, &str, &str)> = Vec::new(); // (id, status, job)
    let mut invoked_dedup: HashMap<&str, &str> = HashMap::new();
    let mut reap_unknown = 0usize;
    let mut reaper_killed = false;
    let mut call_ms: Vec<(String, u64)> = Vec::new();
    // (src, id, token, op) → t of the first send, for I11
    let mut settle_started: HashMap<(&str, &str, u64, &str), u64> = HashMap::new();
    let mut settle_durations: Vec<(&str, String, u64)> = Vec::new();

    for rec in records {
        let src = rec.src.as_str();
        match &rec.ev {
            Ev::Start {
                role,
                lease_ms,
                guarded,
                ..
            } => {
                role_of.insert(src, role);
                if *lease_ms > 0 {
                    lease_of.insert(src, *lease_ms);
                }
                guarded_on |= *guarded;
            }
            Ev::Fault { kind, target, .. } => match kind.as_str() {
                "kill_worker" => {
                    r.worker_kills += 1;
                    killed.insert(target);
                }
                "stop_worker" => {
                    r.worker_pauses += 1;
                    paused.insert(target);
                }
                "term_worker" => r.graceful_stops += 1,
                "kill_server" => r.server_kills += 1,
                "restart_server" => r.server_restarts += 1,
                "torn_aof_tail" => r.torn_tails += 1,
                "clock_step" => r.clock_steps += 1,
                "partition" => r.partitions += 1,
                "drop_connections" | "client_kill" | "cut_ack" => r.connection_drops += 1,
                "script_flush" => r.script_flushes += 1,
                _ => {}
            },
            Ev::EnqueueInvoke { id, dedup } => {
                jobs.entry(id).or_default().invoked = true;
                if let Some(d) = dedup {
                    invoked_dedup.insert(id, d);
                }
            }
            Ev::EnqueueOk { id, status, job, ms } => {
                r.enqueues_acked += 1;
                acked.push((id, status, job));
                call_ms.push((format!("enqueue {id}"), *ms));
            }
            Ev::EnqueueFail { id, definite, ms, .. } => {
                if !definite {
                    r.enqueues_unknown += 1;
                }
                call_ms.push((format!("enqueue {id} (failed)"), *ms));
            }
            Ev::Claimed {
                id,
                token,
                attempt,
                deadline_ms,
                server_ms,
                lane,
            } => {
                let a = jobs.entry(id).or_default().attempts.entry(*token).or_default();
                a.src = Some(src.to_owned());
                a.claim = Some((*server_ms, *deadline_ms));
                a.delivery = (*attempt > 0).then_some(*attempt);
                a.lane = lane.clone();
            }
            Ev::Extended { id, token, deadline_ms } => {
                let a = jobs.entry(id).or_default().attempts.entry(*token).or_default();
                a.extends.push(*deadline_ms);
            }
            Ev::LeaseLost { id, token, confirmed } => {
                if *confirmed {
                    r.stale_heartbeats_rejected += 1;
                }
                let a = jobs.entry(id).or_default().attempts.entry(*token).or_default();
                a.lease_lost = Some(*confirmed);
            }
            Ev::HandlerDone { id, token, result } => {
                let a = jobs.entry(id).or_default().attempts.entry(*token).or_default();
                a.handler = Some(result.clone());
            }
            Ev::SettleSent { id, token, op } => {
                let a = jobs.entry(id).or_default().attempts.entry(*token).or_default();
                a.sent.push(op.clone());
                settle_started.entry((src, id, *token, op)).or_insert(rec.t);
            }
            Ev::Settled {
                id,
                token,
                op,
                outcome,
                server_ms,
            } => {
                if outcome == "already_settled" {
                    r.already_settled += 1;
                }
                let a = jobs.entry(id).or_default().attempts.entry(*token).or_default();
                a.settled.push((op.clone(), outcome.clone(), *server_ms));
                if let Some(t0) = settle_started.remove(&(src, id, *token, op)) {
                    settle_durations.push((src, format!("{op} {id}/{token}"), rec.t.saturating_sub(t0)));
                }
            }
            Ev::SettleFailed {
                id,
                token,
                op,
                lease_lost,
                ..
            } => {
                if *lease_lost {
                    r.stale_settles_rejected += 1;
                }
                let a = jobs.entry(id).or_default().attempts.entry(*token).or_default();
                a.settle_failed.push((op.clone(), *lease_lost));
                if let Some(t0) = settle_started.remove(&(src, id, *token, op)) {
                    settle_durations.push((src, format!("{op} {id}/{token} (failed)"), rec.t.saturating_sub(t0)));
                }
            }
            Ev::EffectBegin { id, token } => {
                jobs.entry(id)
                    .or_default()
                    .attempts
                    .entry(*token)
                    .or_default()
                    .effect_begin = true;
            }
            Ev::EffectDone { id, token, .. } => {
                jobs.entry(id)
                    .or_default()
                    .attempts
                    .entry(*token)
                    .or_default()
                    .effect_done = true;
            }
            Ev::EffectUnknown { id, token, .. } => {
                jobs.entry(id)
                    .or_default()
                    .attempts
                    .entry(*token)
                    .or_default()
                    .effect_unknown = true;
            }
            Ev::Reap {
                server_ms,
                requeued,
                failed,
                ms,
            } => {
                r.reaps += 1;
                call_ms.push(("reap".into(), *ms));
                for (id, stalls) in requeued {
                    jobs.entry(id).or_default().reaps.push((*server_ms, *stalls, false));
                }
                for (id, stalls) in failed {
                    jobs.entry(id).or_default().reaps.push((*server_ms, *stalls, true));
                }
            }
            Ev::ReapFailed { ms, .. } => {
                reap_unknown += 1;
                call_ms.push(("reap (failed)".into(), *ms));
            }
            Ev::Stop { .. } | Ev::Guarded { .. } | Ev::PausedAt { .. } => {}
        }
    }
    for k in &killed {
        if role_of.get(k) == Some(&"reaper") {
            reaper_killed = true;
        }
    }
    let min_lease = lease_of.values().copied().min().unwrap_or(0);

    // ---- final state figures ----
    r.jobs = state.jobs.len();
    for j in state.jobs.values() {
        match j.state.as_str() {
            "completed" => r.completed += 1,
            "failed" => r.failed += 1,
            "pending" => r.pending += 1,
            "delayed" => r.delayed += 1,
            "active" => r.active += 1,
            _ => {}
        }
        r.claims += j.attempts;
        r.redeliveries += j.attempts.saturating_sub(1);
        r.stalls += j.stalls;
    }

    // ---- I1: no acknowledged enqueue lost ----
    for (id, _status, job) in &acked {
        if !state.jobs.contains_key(*job) {
            r.lost += 1;
            v.push(format!(
                "I1 enqueue of {id} was acknowledged (job {job}) but the job is gone"
            ));
        }
    }
    r.invariants.insert("I1".into(), "full".into());

    // ---- I2: no job that was never enqueued ----
    for id in state.jobs.keys() {
        if !jobs.get(id.as_str()).is_some_and(|j| j.invoked) {
            v.push(format!("I2 job {id} exists but was never enqueued"));
        }
    }
    for (id, j) in &jobs {
        if !j.invoked && !j.attempts.is_empty() {
            v.push(format!("I2 job {id} was claimed but never enqueued"));
        }
    }
    r.invariants.insert("I2".into(), "full".into());

    // ---- I3: each job's state agrees with the one set that holds it ----
    for (id, j) in &state.jobs {
        let holders: Vec<&str> = state
            .sets
            .iter()
            .filter(|(_, m)| m.contains_key(id))
            .map(|(s, _)| s.as_str())
            .collect();
        if holders != [j.state.as_str()] {
            v.push(format!(
                "I3 job {id} has state {:?} but is held by {holders:?}",
                j.state
            ));
        }
        if opts.drained && j.state == "active" {
            v.push(format!("I3 job {id} is still active after the drain"));
        }
    }
    for (set, members) in &state.sets {
        for id in members.keys() {
            if !state.jobs.contains_key(id) {
                v.push(format!("I3 {set} holds {id}, which has no job record"));
            }
        }
    }
    r.invariants.insert("I3".into(), "full".into());

    // ---- per job: I4, I5, I6, I7, I8, I9 ----
    let reaps_exact = reap_unknown == 0 && !reaper_killed;
    if !reaps_exact {
        r.invariants.insert(
            "I9".into(),
            format!(
                "partial: {reap_unknown} reaper passes with unknown outcome{}",
                if reaper_killed { ", a reaper was killed" } else { "" }
            ),
        );
    }
    let empty = JobHist::default();
    for (id, rec) in &state.jobs {
        let id = id.as_str();
        let h = jobs.get(id).unwrap_or(&empty);
        check_job(
            id,
            rec,
            h,
            state,
            min_lease,
            &lease_of,
            &killed,
            guarded_on,
            reaps_exact,
            &mut r,
            &mut v,
        );
    }
    r.invariants.entry("I4".into()).or_insert_with(|| "full".into());
    r.invariants.entry("I5".into()).or_insert_with(|| {
        "full for every settlement whose reply was recorded; others through I3/I4 on the final state".into()
    });
    r.invariants.entry("I6".into()).or_insert_with(|| {
        "full for deadlines and order; the reaper-interval bound is asserted by the scenarios".into()
    });
    r.invariants.entry("I7".into()).or_insert_with(|| "full".into());
    if !guarded_on {
        r.invariants
            .insert("I8".into(), "skipped: no worker ran the guarded effect".into());
    } else {
        r.invariants.entry("I8".into()).or_insert_with(|| "full".into());
    }
    if reaps_exact {
        r.invariants.entry("I9".into()).or_insert_with(|| "full".into());
    }

    // ---- I10: one job per dedup id at a time ----
    // dedup id → (job, created, finished)
    type Holder<'a> = (&'a str, u64, Option<u64>);
    let mut by_dedup: BTreeMap<&str, Vec<Holder>> = BTreeMap::new();
    for (id, j) in &state.jobs {
        if let Some(d) = &j.dedup {
            by_dedup.entry(d).or_default().push((id, j.created_ms, j.finished_ms));
        }
    }
    for (d, mut js) in by_dedup {
        js.sort_by_key(|&(_, ct, _)| ct);
        for w in js.windows(2) {
            let (a, _, a_ft) = w[0];
            let (b, b_ct, _) = w[1];
            match a_ft {
                Some(ft) if ft <= b_ct => {}
                _ => v.push(format!(
                    "I10 dedup id {d}: job {b} was created while job {a} still held it"
                )),
            }
        }
    }
    for (id, _, job) in &acked {
        if let Some(d) = invoked_dedup.get(id) {
            match state.jobs.get(*job) {
                Some(j) if j.dedup.as_deref() == Some(*d) => {}
                Some(j) => v.push(format!(
                    "I10 enqueue {id} with dedup id {d} was answered by job {job}, which holds {:?}",
                    j.dedup
                )),
                None => {} // I1 reports it
            }
        }
    }
    // Every marker (the producers set no TTL) must be held by a live job
    // that names it: any other would answer "deduplicated" forever.
    for (d, holder) in &state.dedup_markers {
        match state.jobs.get(holder) {
            Some(j) if matches!(j.state.as_str(), "completed" | "failed" | "cancelled") => {
                v.push(format!("I10 dedup marker {d} still stands for finished job {holder}"));
            }
            Some(j) if j.dedup.as_deref() != Some(d.as_str()) => v.push(format!(
                "I10 dedup marker {d} stands for job {holder}, which holds {:?}",
                j.dedup
            )),
            Some(_) => {}
            None => v.push(format!(
                "I10 dedup marker {d} stands for job {holder}, which does not exist"
            )),
        }
    }
    r.invariants.insert("I10".into(), "full".into());

    // ---- L1: a lane's cap holds; L2: every slot given back ----
    check_lanes(&jobs, &lease_of, opts, state, &mut r, &mut v);
    // ---- R1, R2: rate limits ----
    check_rates(&jobs, opts, &mut r, &mut v);

    // ---- I11: no call hangs past its bound ----
    for (what, ms) in &call_ms {
        r.max_call_ms = r.max_call_ms.max(*ms);
        if *ms > opts.call_bound_ms {
            v.push(format!("I11 {what} took {ms} ms (bound {} ms)", opts.call_bound_ms));
        }
    }
    for (src, what, ms) in &settle_durations {
        if paused.contains(src) {
            continue;
        }
        r.max_call_ms = r.max_call_ms.max(*ms);
        let bound = opts.call_bound_ms + lease_of.get(src).copied().unwrap_or(0);
        if *ms > bound {
            v.push(format!("I11 {src}: settle {what} took {ms} ms (bound {bound} ms)"));
        }
    }
    r.invariants.insert(
        "I11".into(),
        "full for enqueues, reaper passes and settlements (SIGSTOPped processes excluded)".into(),
    );

    r.ok = v.is_empty();
    r.violations = v;
    r
}

#[allow(clippy::too_many_arguments)]
fn check_job(
    id: &str,
    rec: &crate::state::JobRecord,
    h: &JobHist,
    state: &ServerState,
    min_lease: u64,
    lease_of: &HashMap<&str, u64>,
    killed: &BTreeSet<&str>,
    guarded_on: bool,
    reaps_exact: bool,
    r: &mut Report,
    v: &mut Vec<String>,
) {
    // ---- I4: at most one terminal settlement, by the highest token ----
    let mut terminal: Vec<(u64, &str)> = Vec::new();
    for (t, a) in &h.attempts {
        for (op, outcome, _) in &a.settled {
            if outcome == "completed" || outcome == "failed" {
                terminal.push((*t, op));
            }
        }
    }
    let reap_failures = h.reaps.iter().filter(|x| x.2).count();
    if terminal.len() + reap_failures > 1 {
        v.push(format!(
            "I4 job {id} was settled terminally {} times: {terminal:?}, stalled-out {reap_failures}",
            terminal.len() + reap_failures
        ));
    }
    for (t, op) in &terminal {
        if *t != rec.token {
            v.push(format!(
                "I4 job {id} was settled ({op}) with token {t}, but its last claim has token {}",
                rec.token
            ));
        }
    }
    if rec.state == "completed" && rec.last_op.as_deref() != Some(&format!("c:{}", rec.token)) {
        v.push(format!(
            "I4 job {id} is completed by {:?}, not by its highest token {}",
            rec.last_op, rec.token
        ));
    }
    // The highest token is the newest claim: no claim recorded above the
    // job's current token, and tokens rise strictly with the delivery
    // number (one claim per delivery number).
    if let Some(t) = h
        .attempts
        .iter()
        .filter(|(_, a)| a.claim.is_some())
        .map(|(t, _)| *t)
        .max()
        && t > rec.token
    {
        v.push(format!(
            "I4 job {id}: token {t} was claimed, above the job's current token {}",
            rec.token
        ));
    }
    let mut deliveries: Vec<(u64, u64)> = h
        .attempts
        .iter()
        .filter_map(|(t, a)| a.delivery.map(|d| (d, *t)))
        .collect();
    deliveries.sort();
    for w in deliveries.windows(2) {
        let ((d1, t1), (d2, t2)) = (w[0], w[1]);
        if d1 == d2 || t2 <= t1 {
            v.push(format!(
                "I4 job {id}: delivery {d2} has token {t2}, not above delivery {d1}'s token {t1}"
            ));
        }
    }
    if let Some(&(d, _)) = deliveries.last()
        && d > rec.attempts
    {
        v.push(format!(
            "I4 job {id}: delivery {d} was claimed, but the job counts {} claims",
            rec.attempts
        ));
    }
    for (t, a) in &h.attempts {
        if a.attempts_already_settled_complete() && rec.last_op.as_deref() != Some(&format!("c:{t}")) {
            v.push(format!(
                "I4 job {id}: token {t} was told 'already completed' but the job's last settlement is {:?}",
                rec.last_op
            ));
        }
    }

    // ---- I5: no stale token changes state ----
    let claims: Vec<(u64, u64)> = h
        .attempts
        .iter()
        .filter_map(|(t, a)| a.claim.map(|c| (*t, c.0)))
        .collect();
    for (t, a) in &h.attempts {
        let Some((claimed_at, _)) = a.claim else { continue };
        let lease = a.src.as_deref().and_then(|s| lease_of.get(s)).copied().unwrap_or(0);
        let mut applied: Vec<(String, u64)> = a
            .settled
            .iter()
            .filter(|(_, out, _)| out != "already_settled")
            .map(|(op, _, s)| (op.clone(), *s))
            .collect();
        if lease > 0 {
            applied.extend(a.extends.iter().map(|d| ("extend".to_owned(), d.saturating_sub(lease))));
        }
        for (op, s) in applied {
            if let Some((t2, c2)) = claims.iter().find(|(t2, c2)| t2 > t && *c2 < s) {
                v.push(format!(
                    "I5 job {id}: {op} with stale token {t} applied at {s}, after token {t2} was claimed at {c2}"
                ));
            }
            if let Some((rt, _, _)) = h.reaps.iter().find(|(rt, _, _)| *rt > claimed_at && *rt < s) {
                v.push(format!(
                    "I5 job {id}: {op} with token {t} applied at {s}, after its lease was reaped at {rt}"
                ));
            }
        }
    }

    // ---- I6: the server clock decides; no redelivery before the deadline ----
    for (t, a) in &h.attempts {
        let Some((at, deadline)) = a.claim else { continue };
        let lease = a.src.as_deref().and_then(|s| lease_of.get(s)).copied();
        if let Some(lease) = lease
            && deadline != at + lease
        {
            v.push(format!(
                "I6 job {id} token {t}: deadline {deadline} is not the claim's server time {at} + lease {lease}"
            ));
        }
        if let Some(lease) = lease {
            for d in &a.extends {
                if *d < at + lease {
                    v.push(format!(
                        "I6 job {id} token {t}: heartbeat deadline {d} is before the claim's deadline {}",
                        at + lease
                    ));
                }
            }
        }
        // The next delivery: the claim numbered one more (its token is
        // higher, but not necessarily t + 1).
        if let Some(d) = a.delivery
            && let Some((t2, next)) = h.attempts.iter().find(|(_, n)| n.delivery == Some(d + 1))
            && let Some((next_at, _)) = next.claim
            && !a.settled_back()
        {
            let last = a.last_deadline().unwrap_or(deadline);
            if next_at <= last {
                v.push(format!(
                    "I6 job {id}: token {t2} (delivery {}) claimed at {next_at}, before token {t}'s lease ended at {last}",
                    d + 1
                ));
            } else {
                r.max_redelivery_gap_ms = r.max_redelivery_gap_ms.max(next_at - last);
            }
        }
    }
    for (rt, _, _) in &h.reaps {
        // The attempt it reaped: the newest claimed before the reap.
        if let Some((t, a)) = h
            .attempts
            .iter()
            // A claim in the same millisecond as the reap came after it
            // (its deadline lies a lease ahead): only earlier claims count.
            .filter(|(_, a)| a.claim.is_some_and(|c| c.0 < *rt))
            .max_by_key(|(t, _)| **t)
            && let Some(last) = a.last_deadline()
            && *rt <= last
        {
            v.push(format!(
                "I6 job {id}: reaped at {rt}, before token {t}'s lease ended at {last}"
            ));
        }
    }

    // ---- I7: every duplicate effect explained ----
    let count = state.effects.get(id).copied().unwrap_or(0).max(0) as u64;
    let completing = rec
        .last_op
        .as_deref()
        .and_then(|lo| lo.strip_prefix("c:"))
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|_| rec.state == "completed");
    let begun = h.attempts.values().filter(|a| a.effect_begin).count() as u64;
    if count > begun {
        v.push(format!(
            "I7 job {id}: {count} effects applied but only {begun} attempts began one"
        ));
    }
    if let Some(t) = completing
        && let Some(a) = h.attempts.get(&t)
        && a.claim.is_some()
        && !a.effect_done
    {
        v.push(format!(
            "I7 job {id}: completed by token {t}, which did not finish its effect"
        ));
    }
    let dup = count.saturating_sub(1);
    if dup > 0 {
        r.duplicate_effects += dup;
        // Attempts that did (or may have done) the effect and did not complete the job.
        let mut reasons: Vec<(bool, &'static str)> = Vec::new();
        let mut unexplained = Vec::new();
        for (t, a) in &h.attempts {
            if !a.effect_begin || Some(*t) == completing {
                continue;
            }
            let was_killed = a.src.as_deref().is_some_and(|s| killed.contains(s));
            match end_reason(a, was_killed) {
                Some(why) => reasons.push((a.effect_done, why)),
                None => unexplained.push(*t),
            }
        }
        // Attempts known to have applied the effect first.
        reasons.sort_by_key(|(done, _)| !*done);
        let explained = (reasons.len() as u64).min(dup);
        for (_, why) in reasons.iter().take(explained as usize) {
            *r.duplicate_explained.entry((*why).to_owned()).or_default() += 1;
        }
        if explained < dup {
            v.push(format!(
                "I7 job {id}: {dup} duplicate effects, only {explained} explained (attempts without a reason: {unexplained:?})"
            ));
        }
    }

    // ---- I8: guarded effects exactly once per completed job ----
    if guarded_on {
        let g = state.guarded.get(id).copied().unwrap_or(0);
        r.guarded_effects += g;
        if g > 1 {
            r.guarded_duplicates += g - 1;
        }
        if rec.state == "completed" && g != 1 {
            v.push(format!(
                "I8 job {id} completed with its guarded effect applied {g} times"
            ));
        } else if g > 1 {
            v.push(format!("I8 job {id}: guarded effect applied {g} times"));
        }
    }

    // ---- I9: one stall per expired lease ----
    let mut reaps = h.reaps.clone();
    reaps.sort_by_key(|x| x.0);
    for (k, (rt, stalls, _)) in reaps.iter().enumerate() {
        if reaps_exact && *stalls != k as u64 + 1 {
            v.push(format!("I9 job {id}: reap {} at {rt} reports {stalls} stalls", k + 1));
        }
        if k > 0 {
            let (prev_t, prev_s, _) = reaps[k - 1];
            if *stalls <= prev_s {
                v.push(format!(
                    "I9 job {id}: stalls went from {prev_s} to {stalls} between reaps at {prev_t} and {rt}"
                ));
            }
            if min_lease > 0 && rt - prev_t < min_lease {
                v.push(format!(
                    "I9 job {id}: reaped at {prev_t} and again at {rt}, less than a lease ({min_lease} ms) apart"
                ));
            }
        }
    }
    if reaps_exact && rec.stalls != reaps.len() as u64 {
        v.push(format!(
            "I9 job {id} counts {} stalls but was reaped {} times",
            rec.stalls,
            reaps.len()
        ));
    } else if !reaps_exact && rec.stalls < reaps.len() as u64 {
        v.push(format!(
            "I9 job {id} counts {} stalls but was reaped at least {} times",
            rec.stalls,
            reaps.len()
        ));
    }
}

/// The most of `times` (ms) in one half-open window of `w` ms, and the
/// start of that window.
fn most_in_window(times: &mut [u64], w: u64) -> (u64, u64) {
    times.sort_unstable();
    let (mut j, mut most, mut at) = (0, 0, 0);
    for i in 0..times.len() {
        while times[i] - times[j] >= w {
            j += 1;
        }
        if i - j + 1 > most {
            (most, at) = (i - j + 1, times[j]);
        }
    }
    (most as u64, at)
}

/// The most of `edges` ((time, +1 start / -1 end) of half-open intervals)
/// at once, and when.
fn most_at_once(mut e: Vec<(u64, i64)>) -> (u64, u64) {
    // At one instant ends come before starts.
    e.sort();
    let (mut now, mut most, mut at) = (0i64, 0i64, 0u64);
    for (t, d) in e {
        now += d;
        if now > most {
            (most, at) = (now, t);
        }
    }
    (most as u64, at)
}

/// R1 and R2 (see the module docs).
fn check_rates(jobs: &BTreeMap<&str, JobHist>, opts: &CheckOptions, r: &mut Report, v: &mut Vec<String>) {
    let mut all = Vec::new();
    let mut by_lane: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for h in jobs.values() {
        for a in h.attempts.values() {
            let Some((at, _)) = a.claim else { continue };
            all.push(at);
            if let Some(l) = a.lane.as_deref() {
                by_lane.entry(l).or_default().push(at);
            }
        }
    }
    match opts.rate {
        Some((n, w)) => {
            let (most, at) = most_in_window(&mut all, w);
            r.max_claims_per_window = most;
            if most > n {
                v.push(format!(
                    "R1 {most} claims in the {w} ms from {at}, over the queue's rate limit of {n}"
                ));
            }
            r.invariants.insert(
                "R1".into(),
                "full for the claims recorded (unrecorded ones count for none)".into(),
            );
        }
        None => {
            r.invariants.insert("R1".into(), "skipped: no rate limit given".into());
        }
    }
    match opts.lane_rate {
        Some((n, w)) => {
            for (lane, mut times) in by_lane {
                let (most, at) = most_in_window(&mut times, w);
                r.lane_max_claims_per_window.insert(lane.to_owned(), most);
                if most > n {
                    v.push(format!(
                        "R2 lane {lane} had {most} claims in the {w} ms from {at}, over its rate limit of {n}"
                    ));
                }
            }
            r.invariants.insert(
                "R2".into(),
                "full for the claims recorded (unrecorded ones count for none)".into(),
            );
        }
        None => {
            r.invariants
                .insert("R2".into(), "skipped: no lane rate limit given".into());
        }
    }
}

/// L1, L2 and G1 (see the module docs).
fn check_lanes(
    jobs: &BTreeMap<&str, JobHist>,
    lease_of: &HashMap<&str, u64>,
    opts: &CheckOptions,
    state: &ServerState,
    r: &mut Report,
    v: &mut Vec<String>,
) {
    // lane → (time, +1 start / -1 end) of each surely active interval
    let mut edges: BTreeMap<&str, Vec<(u64, i64)>> = BTreeMap::new();
    // the same over every attempt of the queue (G1)
    let mut queue_edges: Vec<(u64, i64)> = Vec::new();
    for (id, h) in jobs {
        let deliveries = state.jobs.get(*id).map_or(0, |j| j.attempts);
        for a in h.attempts.values() {
            let Some((start, _)) = a.claim else {
                continue;
            };
            let lane = a.lane.as_deref();
            if lane.is_some() {
                r.lane_claims += 1;
            }
            // The end of this lease, when recorded: the settlement that
            // applied, or the reap that took it. A reap takes this lease
            // only if it ran before the next delivery's claim; when that
            // claim went unrecorded (a worker killed as it leased), the
            // reap may have taken it instead, so it is not counted.
            let settled = a
                .settled
                .iter()
                .filter(|(_, out, _)| out != "already_settled")
                .map(|(_, _, s)| *s)
                .min();
            let next_claim = a.delivery.and_then(|d| {
                if d >= deliveries {
                    Some(u64::MAX)
                } else {
                    h.attempts
                        .values()
                        .find(|b| b.delivery == Some(d + 1))
                        .and_then(|b| b.claim.map(|c| c.0))
                }
            });
            let reaped = next_claim.and_then(|next| {
                h.reaps
                    .iter()
                    .map(|(rt, _, _)| *rt)
                    .filter(|rt| *rt > start && *rt < next)
                    .min()
            });
            let lease = a.src.as_deref().and_then(|s| lease_of.get(s)).copied().unwrap_or(0);
            let seen = a.extends.iter().map(|d| d.saturating_sub(lease)).fold(start, u64::max);
            let end = match (settled, reaped) {
                (Some(s), Some(rt)) => s.min(rt),
                (Some(s), None) => s,
                (None, Some(rt)) => rt,
                // Surely active until it was last seen holding the lease.
                (None, None) => seen,
            };
            if end > start {
                queue_edges.push((start, 1));
                queue_edges.push((end, -1));
                if let Some(lane) = lane {
                    let e = edges.entry(lane).or_default();
                    e.push((start, 1));
                    e.push((end, -1));
                }
            }
        }
    }
    let (most, at) = most_at_once(queue_edges);
    r.max_active = most;
    match opts.global_cap {
        Some(cap) => {
            if most > cap {
                v.push(format!(
                    "G1 {most} jobs surely active at once (at {at}), over the queue's cap of {cap}"
                ));
            }
            r.invariants.insert(
                "G1".into(),
                "full for every lease whose end was recorded; others for as long as they were seen".into(),
            );
        }
        None => {
            r.invariants.insert("G1".into(), "skipped: no global cap given".into());
        }
    }
    for (lane, e) in edges {
        let (most, at) = most_at_once(e);
        r.lane_max_active.insert(lane.to_owned(), most);
        if let Some(cap) = opts.lane_cap
            && most > cap
        {
            v.push(format!(
                "L1 lane {lane} had {most} jobs surely active at once (at {at}), over its cap of {cap}"
            ));
        }
    }
    r.invariants.insert(
        "L1".into(),
        match opts.lane_cap {
            Some(_) => "full for every lease whose end was recorded; others for as long as they were seen".into(),
            None => "skipped: no lane cap given".into(),
        },
    );
    if opts.drained {
        for m in &state.lane_slots {
            v.push(format!("L2 slot {:?} still held after the drain", m.replace('\0', "/")));
        }
        for (lane, n) in &state.lane_pending {
            if *n > 0 {
                v.push(format!("L2 lane {lane} has {n} pending jobs after the drain"));
            }
        }
        for lane in state.lane_ring.keys() {
            if !lane.is_empty() {
                v.push(format!("L2 lane {lane} is still in the ring after the drain"));
            }
        }
        r.invariants.insert("L2".into(), "full".into());
    } else {
        r.invariants
            .insert("L2".into(), "skipped: the run did not drain".into());
    }
}

impl Attempt {
    fn attempts_already_settled_complete(&self) -> bool {
        self.settled
            .iter()
            .any(|(op, out, _)| op == "complete" && out == "already_settled")
            && !self.applied("complete")
    }
}

/// Why an attempt that did its effect did not complete the job.
fn end_reason(a: &Attempt, killed: bool) -> Option<&'static str> {
    if a.lease_lost.is_some() || a.settle_failed.iter().any(|(_, lost)| *lost) {
        return Some("lease lost");
    }
    let failed = matches!(a.handler.as_deref(), Some("retry" | "fail" | "panicked"));
    if a.effect_unknown || failed || a.sent.iter().any(|o| o == "retry") {
        return Some("handler retried");
    }
    if a.sent.iter().any(|o| o == "release") || a.handler.as_deref() == Some("stopped") {
        return Some("released at shutdown");
    }
    if killed {
        return Some("worker killed");
    }
    if a.sent.iter().any(|o| o == "complete") && !a.applied("complete") {
        return Some("ack lost");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::JobRecord;

    /// Tokens as the queue-wide counter mints them: large, and not
    /// consecutive for one job (other jobs' claims come in between).
    const T1: u64 = 1_764_590_000_000_001;
    const T2: u64 = 1_764_590_000_000_038;

    fn rec(src: &str, ev: Ev) -> Record {
        Record {
            src: src.into(),
            t: 0,
            ev,
        }
    }

    fn start(src: &str, role: &str, lease_ms: u64) -> Record {
        rec(
            src,
            Ev::Start {
                role: role.into(),
                pid: 1,
                lease_ms,
                guarded: role == "worker",
            },
        )
    }

    fn claimed(src: &str, id: &str, token: u64, attempt: u64, at: u64) -> Record {
        rec(
            src,
            Ev::Claimed {
                id: id.into(),
                token,
                attempt,
                deadline_ms: at + 1000,
                server_ms: at,
                lane: None,
            },
        )
    }

    fn effect(src: &str, id: &str, token: u64) -> Vec<Record> {
        vec![
            rec(src, Ev::EffectBegin { id: id.into(), token }),
            rec(
                src,
                Ev::EffectDone {
                    id: id.into(),
                    token,
                    count: 1,
                },
            ),
        ]
    }

    fn completed(src: &str, id: &str, token: u64, at: u64) -> Vec<Record> {
        vec![
            rec(
                src,
                Ev::SettleSent {
                    id: id.into(),
                    token,
                    op: "complete".into(),
                },
            ),
            rec(
                src,
                Ev::Settled {
                    id: id.into(),
                    token,
                    op: "complete".into(),
                    outcome: "completed".into(),
                    server_ms: at,
                },
            ),
        ]
    }

    fn enqueued(id: &str, dedup: Option<&str>, ms: u64) -> Vec<Record> {
        vec![
            rec(
                "p1",
                Ev::EnqueueInvoke {
                    id: id.into(),
                    dedup: dedup.map(Into::into),
                },
            ),
            rec(
                "p1",
                Ev::EnqueueOk {
                    id: id.into(),
                    status: "created".into(),
                    job: id.into(),
                    ms,
                },
            ),
        ]
    }

    fn reap(id: &str, at: u64, stalls: u64) -> Record {
        rec(
            "r1",
            Ev::Reap {
                server_ms: at,
                requeued: vec![(id.into(), stalls)],
                failed: vec![],
                ms: 1,
            },
        )
    }

    fn kill(target: &str) -> Record {
        rec(
            "driver",
            Ev::Fault {
                kind: "kill_worker".into(),
                target: target.into(),
                detail: String::new(),
            },
        )
    }

    /// j1 enqueued, claimed by w1 at 1000, effect, completed at 1500.
    fn good() -> (Vec<Record>, ServerState) {
        let mut h = vec![
            start("p1", "producer", 0),
            start("w1", "worker", 1000),
            start("w2", "worker", 1000),
        ];
        h.extend(enqueued("j1", None, 3));
        h.push(claimed("w1", "j1", T1, 1, 1000));
        h.extend(effect("w1", "j1", T1));
        h.extend(completed("w1", "j1", T1, 1500));
        let mut st = ServerState::default();
        st.jobs.insert(
            "j1".into(),
            JobRecord {
                state: "completed".into(),
                attempts: 1,
                token: T1,
                created_ms: 900,
                finished_ms: Some(1500),
                last_op: Some(format!("c:{T1}")),
                settlements: vec![format!("c:{T1}")],
                ..JobRecord::default()
            },
        );
        for s in crate::state::SETS {
            st.sets.insert(s.into(), BTreeMap::new());
        }
        st.sets.get_mut("completed").unwrap().insert("j1".into(), 1500.0);
        st.effects.insert("j1".into(), 1);
        st.guarded.insert("j1".into(), 1);
        (h, st)
    }

    /// j1's first attempt (w1) did its effect and died; w2 redid it after a reap.
    fn redelivered(killed: bool) -> (Vec<Record>, ServerState) {
        let (mut h, mut st) = good();
        h.retain(|r| !matches!(&r.ev, Ev::SettleSent { .. } | Ev::Settled { .. }));
        if killed {
            h.push(kill("w1"));
        }
        h.push(reap("j1", 2100, 1));
        h.push(claimed("w2", "j1", T2, 2, 2200));
        h.extend(effect("w2", "j1", T2));
        h.extend(completed("w2", "j1", T2, 2300));
        let j = st.jobs.get_mut("j1").unwrap();
        (j.attempts, j.token, j.stalls) = (2, T2, 1);
        j.last_op = Some(format!("c:{T2}"));
        j.settlements = vec![format!("c:{T2}")];
        st.effects.insert("j1".into(), 2);
        (h, st)
    }

    fn violations(h: &[Record], st: &ServerState) -> Vec<String> {
        check(h, st, &CheckOptions::default()).violations
    }

    fn assert_violates(h: &[Record], st: &ServerState, inv: &str) {
        let v = violations(h, st);
        assert!(
            v.iter().any(|x| x.starts_with(inv)),
            "expected a {inv} violation, got {v:?}"
        );
    }

    // A clean single delivery passes every invariant, with the figures it implies.
    #[test]
    fn clean_history_passes() {
        let (h, st) = good();
        let r = check(&h, &st, &CheckOptions::default());
        assert!(r.ok, "{:?}", r.violations);
        assert_eq!((r.jobs, r.completed, r.claims, r.redeliveries, r.lost), (1, 1, 1, 0, 0));
        assert_eq!(r.invariants["I1"], "full");
    }

    // I1: an acknowledged enqueue whose job is gone is a loss.
    #[test]
    fn i1_lost_job() {
        let (h, mut st) = good();
        st.jobs.clear();
        st.sets.get_mut("completed").unwrap().clear();
        let r = check(&h, &st, &CheckOptions::default());
        assert_eq!(r.lost, 1);
        assert!(r.violations.iter().any(|v| v.starts_with("I1")));
    }

    // I2: a job nobody enqueued is a violation.
    #[test]
    fn i2_job_never_enqueued() {
        let (h, mut st) = good();
        let j = st.jobs["j1"].clone();
        st.jobs.insert("j9".into(), j);
        st.sets.get_mut("completed").unwrap().insert("j9".into(), 1.0);
        assert_violates(&h, &st, "I2");
    }

    // I3: a job whose state disagrees with its set, or active after a drain, is a violation.
    #[test]
    fn i3_state_and_set_disagree() {
        let (h, mut st) = good();
        st.sets.get_mut("pending").unwrap().insert("j1".into(), 1.0);
        assert_violates(&h, &st, "I3");
        let (h, mut st) = good();
        st.jobs.get_mut("j1").unwrap().state = "active".into();
        st.sets.get_mut("completed").unwrap().clear();
        st.sets.get_mut("active").unwrap().insert("j1".into(), 1.0);
        assert_violates(&h, &st, "I3");
    }

    // I4: completion by a token other than the highest is a violation.
    #[test]
    fn i4_completed_by_a_stale_token() {
        let (h, mut st) = redelivered(true);
        assert!(violations(&h, &st).is_empty(), "{:?}", violations(&h, &st));
        st.jobs.get_mut("j1").unwrap().last_op = Some(format!("c:{T1}"));
        assert_violates(&h, &st, "I4");
    }

    // I4: the highest token is the newest claim; a token that does not rise with the delivery number is a violation.
    #[test]
    fn i4_tokens_rise_with_deliveries() {
        // The second delivery got a lower token than the first.
        let (mut h, mut st) = redelivered(true);
        let low = T1 - 5;
        for r in &mut h {
            match &mut r.ev {
                Ev::Claimed { token, .. }
                | Ev::EffectBegin { token, .. }
                | Ev::EffectDone { token, .. }
                | Ev::SettleSent { token, .. }
                | Ev::Settled { token, .. }
                    if *token == T2 =>
                {
                    *token = low
                }
                _ => {}
            }
        }
        let j = st.jobs.get_mut("j1").unwrap();
        j.token = low;
        j.last_op = Some(format!("c:{low}"));
        assert_violates(&h, &st, "I4");
        // Two claims with one delivery number (a claim not counted).
        let (mut h, st) = redelivered(true);
        for r in &mut h {
            if let Ev::Claimed { token: T2, attempt, .. } = &mut r.ev {
                *attempt = 1;
            }
        }
        assert_violates(&h, &st, "I4");
        // A claim above the job's current token.
        let (h, mut st) = redelivered(true);
        st.jobs.get_mut("j1").unwrap().token = T1;
        assert_violates(&h, &st, "I4");
    }

    // I5: a settlement applied with a token after a newer claim (or after its reap) is a violation.
    #[test]
    fn i5_stale_settle_applied() {
        let (mut h, st) = redelivered(true);
        h.extend(completed("w1", "j1", T1, 2250));
        assert_violates(&h, &st, "I5");
    }

    // I6: a deadline off the server clock, or a redelivery before the old deadline, is a violation.
    #[test]
    fn i6_deadline_and_early_redelivery() {
        let (mut h, st) = good();
        if let Ev::Claimed { deadline_ms, .. } =
            &mut h.iter_mut().find(|r| matches!(r.ev, Ev::Claimed { .. })).unwrap().ev
        {
            *deadline_ms += 3_600_000; // computed from a client clock an hour ahead
        }
        assert_violates(&h, &st, "I6");
        let (mut h, st) = redelivered(true);
        for r in &mut h {
            if let Ev::Claimed {
                token: T2,
                server_ms,
                deadline_ms,
                ..
            } = &mut r.ev
            {
                (*server_ms, *deadline_ms) = (1900, 2900); // before the first delivery's deadline at 2000
            }
        }
        assert_violates(&h, &st, "I6");
    }

    // I7: a duplicate effect needs a reason; a killed first attempt is one, no reason is a violation.
    #[test]
    fn i7_duplicate_effects_need_a_reason() {
        let (h, st) = redelivered(true);
        let r = check(&h, &st, &CheckOptions::default());
        assert!(r.ok, "{:?}", r.violations);
        assert_eq!(r.duplicate_effects, 1);
        assert_eq!(r.duplicate_explained["worker killed"], 1);
        let (h, st) = redelivered(false);
        assert_violates(&h, &st, "I7");
        let (h, mut st) = good();
        st.effects.insert("j1".into(), 2);
        assert_violates(&h, &st, "I7");
    }

    // I8: a guarded effect applied twice is a violation.
    #[test]
    fn i8_guarded_effect_twice() {
        let (h, mut st) = good();
        st.guarded.insert("j1".into(), 2);
        assert_violates(&h, &st, "I8");
    }

    // I9: a first reap must count one stall; two reaps of one lease (closer than a lease) are a violation.
    #[test]
    fn i9_stalls_count_once_per_expiry() {
        let (mut h, st) = redelivered(true);
        h.push(reap("j1", 2101, 2));
        assert_violates(&h, &st, "I9");
        let (mut h, mut st) = redelivered(true);
        for r in &mut h {
            if let Ev::Reap { requeued, .. } = &mut r.ev {
                requeued[0].1 = 0; // the stall was not counted
            }
        }
        st.jobs.get_mut("j1").unwrap().stalls = 0;
        assert_violates(&h, &st, "I9");
    }

    // I10: two jobs holding one dedup id at once is a violation; one after the other is fine.
    #[test]
    fn i10_one_job_per_dedup_id() {
        let (mut h, mut st) = good();
        h.extend(enqueued("j2", Some("g"), 2));
        let mut j2 = st.jobs["j1"].clone();
        j2.dedup = Some("g".into());
        j2.created_ms = 1600;
        st.jobs.get_mut("j1").unwrap().dedup = Some("g".into());
        st.jobs.insert("j2".into(), j2.clone());
        st.sets.get_mut("completed").unwrap().insert("j2".into(), 1.0);
        h.retain(|r| !matches!(&r.ev, Ev::EnqueueInvoke { id, .. } if id == "j1"));
        h.extend(enqueued("j1", Some("g"), 2));
        assert!(violations(&h, &st).iter().all(|v| !v.starts_with("I10")));
        st.jobs.get_mut("j2").unwrap().created_ms = 1200; // while j1 still held it
        assert_violates(&h, &st, "I10");
    }

    // I10: a marker standing for a job that does not exist, or does not name it, blocks its dedup id forever.
    #[test]
    fn i10_orphaned_markers() {
        let (h, mut st) = good();
        assert!(violations(&h, &st).iter().all(|v| !v.starts_with("I10")));
        st.dedup_markers.insert("lost".into(), "j9".into());
        assert_violates(&h, &st, "I10");
        st.dedup_markers.clear();
        st.dedup_markers.insert("other".into(), "j1".into()); // j1 holds no dedup id
        assert_violates(&h, &st, "I10");
    }

    /// Jobs j1..jn on lane "a", each claimed at `at(i)` and completed at
    /// `at(i) + 100`, all recorded.
    fn laned(n: u64, at: impl Fn(u64) -> u64) -> (Vec<Record>, ServerState) {
        let mut h = vec![start("p1", "producer", 0), start("w1", "worker", 1000)];
        let mut st = ServerState::default();
        for s in crate::state::SETS {
            st.sets.insert(s.into(), BTreeMap::new());
        }
        for i in 1..=n {
            let id = format!("j{i}");
            let t = T1 + i;
            h.extend(enqueued(&id, None, 1));
            h.push(rec(
                "w1",
                Ev::Claimed {
                    id: id.clone(),
                    token: t,
                    attempt: 1,
                    deadline_ms: at(i) + 1000,
                    server_ms: at(i),
                    lane: Some("a".into()),
                },
            ));
            h.extend(effect("w1", &id, t));
            h.extend(completed("w1", &id, t, at(i) + 100));
            st.jobs.insert(
                id.clone(),
                JobRecord {
                    state: "completed".into(),
                    attempts: 1,
                    token: t,
                    created_ms: 1,
                    finished_ms: Some(at(i) + 100),
                    last_op: Some(format!("c:{t}")),
                    settlements: vec![format!("c:{t}")],
                    ..JobRecord::default()
                },
            );
            st.sets.get_mut("completed").unwrap().insert(id.clone(), 1.0);
            st.effects.insert(id.clone(), 1);
            st.guarded.insert(id, 1);
        }
        (h, st)
    }

    fn capped(cap: u64) -> CheckOptions {
        CheckOptions {
            lane_cap: Some(cap),
            ..CheckOptions::default()
        }
    }

    // L1: three jobs of a lane active at once break a cap of 2, not a cap of 3; one after another keep a cap of 1.
    #[test]
    fn l1_lane_cap() {
        let (h, st) = laned(3, |i| 1000 + 10 * i);
        let r = check(&h, &st, &capped(2));
        assert!(r.violations.iter().any(|v| v.starts_with("L1")), "{:?}", r.violations);
        assert_eq!(r.lane_max_active["a"], 3);
        assert!(check(&h, &st, &capped(3)).ok);
        // Each completes (at +100) before the next claim (+100 later): never two at once.
        let (h, st) = laned(3, |i| 1000 + 100 * i);
        let r = check(&h, &st, &capped(1));
        assert!(r.ok, "{:?}", r.violations);
        assert_eq!((r.lane_claims, r.lane_max_active["a"]), (3, 1));
    }

    // G1: three jobs active at once break a global cap of 2, not of 3.
    #[test]
    fn g1_global_cap() {
        let (h, st) = laned(3, |i| 1000 + 10 * i);
        let cap = |c| CheckOptions {
            global_cap: Some(c),
            ..CheckOptions::default()
        };
        let r = check(&h, &st, &cap(2));
        assert!(r.violations.iter().any(|v| v.starts_with("G1")), "{:?}", r.violations);
        assert_eq!(r.max_active, 3);
        assert!(check(&h, &st, &cap(3)).ok);
    }

    // R1/R2: claims 40 ms apart put 3 in a 100 ms window (over a limit of 2), and 2 when 50 ms apart (a claim exactly a window later is in the next window).
    #[test]
    fn r1_r2_claims_per_window() {
        let rated = |n| CheckOptions {
            rate: Some((n, 100)),
            lane_rate: Some((n, 100)),
            ..CheckOptions::default()
        };
        let (h, st) = laned(4, |i| 1000 + 40 * i);
        let r = check(&h, &st, &rated(2));
        assert!(r.violations.iter().any(|v| v.starts_with("R1")), "{:?}", r.violations);
        assert!(r.violations.iter().any(|v| v.starts_with("R2")), "{:?}", r.violations);
        assert_eq!((r.max_claims_per_window, r.lane_max_claims_per_window["a"]), (3, 3));
        assert!(check(&h, &st, &rated(3)).ok);
        let (h, st) = laned(4, |i| 1000 + 50 * i);
        let r = check(&h, &st, &rated(2));
        assert!(r.ok, "{:?}", r.violations);
        assert_eq!(r.max_claims_per_window, 2);
    }

    // L1 never reports a lease whose end went unrecorded past the time it was last seen.
    #[test]
    fn l1_unrecorded_ends_count_until_last_seen() {
        let (mut h, st) = laned(3, |i| 1000 + 10 * i);
        // j1's completion reply was lost: it is surely active only at its claim.
        h.retain(|r| !matches!(&r.ev, Ev::Settled { id, .. } if id == "j1"));
        let r = check(&h, &st, &capped(2));
        assert!(r.violations.iter().all(|v| !v.starts_with("L1")), "{:?}", r.violations);
        // Seen by a heartbeat at 1050 (deadline 2050, lease 1000): active with j2 and j3 then.
        h.push(rec(
            "w1",
            Ev::Extended {
                id: "j1".into(),
                token: T1 + 1,
                deadline_ms: 2050,
            },
        ));
        assert!(
            check(&h, &st, &capped(2))
                .violations
                .iter()
                .any(|v| v.starts_with("L1"))
        );
    }

    // L2: a slot still held, a lane with pending jobs, or a lane left in the ring after a drain is a violation.
    #[test]
    fn l2_slots_given_back() {
        let (h, st) = laned(2, |i| 1000 + 100 * i);
        assert!(check(&h, &st, &CheckOptions::default()).ok);
        let mut leaked = st.clone();
        leaked.lane_slots.push("a\0j1".into());
        assert_violates(&h, &leaked, "L2");
        let mut ringed = st.clone();
        ringed.lane_ring.insert("a".into(), 2_251_799_813_685_248.0);
        assert_violates(&h, &ringed, "L2");
        let mut unlaned_turn = st;
        unlaned_turn.lane_ring.insert(String::new(), 3.0);
        assert!(check(&h, &unlaned_turn, &CheckOptions::default()).ok);
    }

    // I11: a call slower than the bound is a violation.
    #[test]
    fn i11_slow_call() {
        let (mut h, st) = good();
        h.extend(enqueued("j1", None, 60_000));
        assert_violates(&h, &st, "I11");
    }
}
