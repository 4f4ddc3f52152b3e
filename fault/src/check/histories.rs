//! The histories of a run indexed per job and attempt (by fencing token),
//! with the figures the records alone give (faults, enqueues, reaps).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::Report;
use crate::history::{Ev, Record};

/// One attempt (token) of one job, as the histories saw it.
#[derive(Debug, Default, Clone)]
pub(super) struct Attempt {
    pub(super) src: Option<String>,
    /// (server_ms, deadline_ms) of the claim.
    pub(super) claim: Option<(u64, u64)>,
    /// When the worker recorded the claim (its clock, as the driver's
    /// fault records), for [`forgotten_by`].
    pub(super) claimed_t: Option<u64>,
    /// The delivery number of the claim (1 for the first), when recorded.
    pub(super) delivery: Option<u64>,
    /// The job's lane, when it has one.
    pub(super) lane: Option<String>,
    pub(super) extends: Vec<u64>,
    pub(super) lease_lost: Option<bool>,
    pub(super) sent: Vec<String>,
    /// (op, outcome, server_ms) of answered settlements.
    pub(super) settled: Vec<(String, String, u64)>,
    /// (op, lease_lost) of failed settlements.
    pub(super) settle_failed: Vec<(String, bool)>,
    pub(super) effect_begin: bool,
    pub(super) effect_done: bool,
    pub(super) effect_unknown: bool,
    pub(super) handler: Option<String>,
}

/// The master SIGKILL that may have taken attempt `a`'s claim with it:
/// the first within `window` ms after the claim was recorded, when no
/// settlement of the attempt was applied. A claim is not confirmed with
/// `WAIT` (docs: the durability module), so a failover within the
/// replication lag of a claim may promote a replica that never had it:
/// the job is claimed again with the same delivery number, and the lost
/// lease counts on no server after the kill. `None` without a window.
pub(super) fn forgotten_by(a: &Attempt, kills: &[u64], window: Option<u64>) -> Option<u64> {
    let (window, c) = (window?, a.claimed_t?);
    if a.settled.iter().any(|(_, out, _)| out != "already_settled") {
        return None;
    }
    kills.iter().copied().filter(|&k| k >= c && k - c <= window).min()
}

impl Attempt {
    pub(super) fn last_deadline(&self) -> Option<u64> {
        let c = self.claim?.1;
        Some(self.extends.iter().copied().fold(c, u64::max))
    }
    pub(super) fn applied(&self, op: &str) -> bool {
        self.settled
            .iter()
            .any(|(o, out, _)| o == op && out != "already_settled")
    }
    /// The attempt handed the job back itself (retry or release), or may have.
    pub(super) fn settled_back(&self) -> bool {
        self.sent.iter().any(|o| o == "retry" || o == "release")
    }
    pub(super) fn attempts_already_settled_complete(&self) -> bool {
        self.settled
            .iter()
            .any(|(op, out, _)| op == "complete" && out == "already_settled")
            && !self.applied("complete")
    }
}

/// The stall count of a reap whose record gave none (filled in once every
/// record is read).
const STALLS_UNREPORTED: u64 = u64::MAX;

#[derive(Debug, Default)]
pub(super) struct JobHist {
    pub(super) invoked: bool,
    pub(super) attempts: BTreeMap<u64, Attempt>,
    /// (server_ms, stalls, failed)
    pub(super) reaps: Vec<(u64, u64, bool)>,
    /// (writer's wall time, answer) of each cancel asked for it.
    pub(super) cancels: Vec<(u64, &'static str)>,
    /// A reaper cancelled it (its lease lapsed with a cancel request).
    pub(super) reaped_cancelled: bool,
}

/// A flow a producer added (or tried to: its outcome may be unknown).
#[derive(Debug, Default)]
pub(super) struct FlowHist<'a> {
    /// (job id, the job ids it waits on) of every step.
    pub(super) steps: Vec<(&'a str, Vec<&'a str>)>,
    /// The add was answered (created, or found by a retry).
    pub(super) added: bool,
}

/// A batch a producer opened (or tried to).
#[derive(Debug, Default)]
pub(super) struct BatchHist<'a> {
    /// The job ids of its callbacks.
    pub(super) callbacks: Vec<&'a str>,
    /// Its members, once its close was answered.
    pub(super) closed: Option<Vec<&'a str>>,
}

/// What the histories say, as the checks read it.
pub(super) struct Histories<'a> {
    /// Each process's lease (ms), from its start record.
    pub(super) lease_of: HashMap<&'a str, u64>,
    /// A worker ran the guarded effect (I8 is checked).
    pub(super) guarded_on: bool,
    /// Processes the driver SIGKILLed.
    pub(super) killed: BTreeSet<&'a str>,
    /// Processes the driver SIGSTOPped (their wall time stops: not in I11).
    pub(super) paused: BTreeSet<&'a str>,
    pub(super) jobs: BTreeMap<&'a str, JobHist>,
    /// (id, status, job) of every acknowledged enqueue.
    pub(super) acked: Vec<(&'a str, &'a str, &'a str)>,
    /// Writer's wall time of each acknowledged enqueue (the last, by job id).
    pub(super) acked_at: HashMap<&'a str, u64>,
    /// Wall times of the server (master) SIGKILLs the driver recorded.
    pub(super) server_kill_times: Vec<u64>,
    /// The dedup id each enqueue was invoked with.
    pub(super) invoked_dedup: HashMap<&'a str, &'a str>,
    /// Reaper passes whose outcome is unknown.
    pub(super) reap_unknown: usize,
    pub(super) reaper_killed: bool,
    /// (what, ms) of enqueues and reaper passes, for I11.
    pub(super) call_ms: Vec<(String, u64)>,
    /// (src, what, ms) of settlements, from the first send to the answer.
    pub(super) settle_durations: Vec<(&'a str, String, u64)>,
    /// The shortest lease of any process (0: none).
    pub(super) min_lease: u64,
    /// Schedules whose ticks a scheduler took.
    pub(super) schedules: BTreeSet<&'a str>,
    /// Writer's wall times of each pass that created a tick's job, by job id.
    pub(super) tick_created: BTreeMap<&'a str, Vec<u64>>,
    /// The flows the producers added, by id.
    pub(super) flows: BTreeMap<&'a str, FlowHist<'a>>,
    /// The batches the producers opened, by id.
    pub(super) batches: BTreeMap<&'a str, BatchHist<'a>>,
}

impl<'a> Histories<'a> {
    /// Indexes `records`, counting the faults, enqueues and reaps in `r`.
    pub(super) fn read(records: &'a [Record], r: &mut Report) -> Histories<'a> {
        let mut lease_of: HashMap<&str, u64> = HashMap::new();
        let mut role_of: HashMap<&str, &str> = HashMap::new();
        let mut guarded_on = false;
        let mut killed: BTreeSet<&str> = BTreeSet::new();
        let mut paused: BTreeSet<&str> = BTreeSet::new();
        let mut jobs: BTreeMap<&str, JobHist> = BTreeMap::new();
        let mut acked: Vec<(&str, &str, &str)> = Vec::new(); // (id, status, job)
        let mut invoked_dedup: HashMap<&str, &str> = HashMap::new();
        let mut acked_at: HashMap<&str, u64> = HashMap::new();
        let mut server_kill_times: Vec<u64> = Vec::new();
        let mut reap_unknown = 0usize;
        let mut reaper_killed = false;
        let mut call_ms: Vec<(String, u64)> = Vec::new();
        // (src, id, token, op) → t of the first send, for I11
        let mut settle_started: HashMap<(&str, &str, u64, &str), u64> = HashMap::new();
        let mut settle_durations: Vec<(&str, String, u64)> = Vec::new();
        let mut schedules: BTreeSet<&str> = BTreeSet::new();
        let mut tick_created: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        let mut flows: BTreeMap<&str, FlowHist> = BTreeMap::new();
        let mut batches: BTreeMap<&str, BatchHist> = BTreeMap::new();

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
                    "kill_server" => {
                        r.server_kills += 1;
                        server_kill_times.push(rec.t);
                    }
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
                    acked_at.insert(job, rec.t);
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
                    a.claimed_t = Some(rec.t);
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
                    cancelled,
                    ms,
                } => {
                    r.reaps += 1;
                    // A reap that cancels (its job had a cancel request)
                    // counts a stall too, and ends the job: a terminal
                    // reap. Its stall count is filled in below.
                    for id in cancelled {
                        let j = jobs.entry(id).or_default();
                        j.reaped_cancelled = true;
                        j.reaps.push((*server_ms, STALLS_UNREPORTED, true));
                    }
                    call_ms.push(("reap".into(), *ms));
                    for (id, stalls) in requeued {
                        jobs.entry(id).or_default().reaps.push((*server_ms, *stalls, false));
                    }
                    for (id, stalls) in failed {
                        jobs.entry(id).or_default().reaps.push((*server_ms, *stalls, true));
                    }
                }
                Ev::Fired {
                    schedule, jobs: fired, ..
                } => {
                    schedules.insert(schedule);
                    for (_, id, created) in fired {
                        if !*created {
                            continue;
                        }
                        // A tick's job is an enqueue the schedule made:
                        // acknowledged once the pass answered.
                        r.cron_jobs_created += 1;
                        jobs.entry(id).or_default().invoked = true;
                        acked.push((id, "created", id));
                        acked_at.insert(id, rec.t);
                        tick_created.entry(id).or_default().push(rec.t);
                    }
                }
                Ev::CancelAsked { id, answer, ms } => {
                    r.cancels_asked += 1;
                    // The answers the checks tell apart; any other (an
                    // error) may or may not have applied.
                    let kind = match answer.as_str() {
                        "cancelled" => "cancelled",
                        "requested" => "requested",
                        "not_found" => "not_found",
                        a if a.starts_with("finished:") => "finished",
                        _ => "unknown",
                    };
                    jobs.entry(id).or_default().cancels.push((rec.t, kind));
                    *r.cancel_answers.entry(kind.to_owned()).or_default() += 1;
                    call_ms.push((format!("cancel {id}"), *ms));
                }
                Ev::ReapFailed { ms, .. } => {
                    reap_unknown += 1;
                    call_ms.push(("reap (failed)".into(), *ms));
                }
                Ev::FlowInvoke { flow, steps } => {
                    // Its steps' jobs are enqueued by the flow (I2).
                    for (job, _) in steps {
                        jobs.entry(job).or_default().invoked = true;
                    }
                    flows.entry(flow).or_default().steps = steps
                        .iter()
                        .map(|(job, after)| (job.as_str(), after.iter().map(String::as_str).collect()))
                        .collect();
                }
                Ev::FlowOk { flow, ms, .. } => {
                    flows.entry(flow).or_default().added = true;
                    call_ms.push((format!("add flow {flow}"), *ms));
                }
                Ev::FlowFail { flow, ms, .. } => call_ms.push((format!("add flow {flow} (failed)"), *ms)),
                Ev::BatchInvoke { batch, callbacks } => {
                    // Its callbacks' jobs are enqueued by its end (I2).
                    for job in callbacks {
                        jobs.entry(job).or_default().invoked = true;
                    }
                    batches.entry(batch).or_default().callbacks = callbacks.iter().map(String::as_str).collect();
                }
                Ev::BatchClosed { batch, members, ms } => {
                    batches.entry(batch).or_default().closed = Some(members.iter().map(String::as_str).collect());
                    call_ms.push((format!("close batch {batch}"), *ms));
                }
                Ev::Stop { .. } | Ev::Guarded { .. } | Ev::PausedAt { .. } => {}
            }
        }
        // The reaper reports no stall count for the jobs it cancels; it
        // counted one more stall than the job's reap before (reap.lua
        // increments, then cancels).
        for j in jobs.values_mut() {
            j.reaps.sort_by_key(|x| x.0);
            let mut prev = 0;
            for r in &mut j.reaps {
                if r.1 == STALLS_UNREPORTED {
                    r.1 = prev + 1;
                }
                prev = r.1;
            }
        }
        for k in &killed {
            if role_of.get(k) == Some(&"reaper") {
                reaper_killed = true;
            }
        }
        let min_lease = lease_of.values().copied().min().unwrap_or(0);
        Histories {
            lease_of,
            guarded_on,
            killed,
            paused,
            jobs,
            acked,
            acked_at,
            server_kill_times,
            invoked_dedup,
            reap_unknown,
            reaper_killed,
            call_ms,
            settle_durations,
            min_lease,
            schedules,
            tick_created,
            flows,
            batches,
        }
    }
}
