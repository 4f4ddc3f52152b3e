//! The invariants read off the final state, against the producers'
//! histories: I1 (no acknowledged enqueue lost), I2 (no job never
//! enqueued), I3 (states agree with sets), I10 (one job per dedup id).

use std::collections::BTreeMap;

use super::histories::Histories;
use super::{CheckOptions, Report};
use crate::state::ServerState;

/// The final state's figures: jobs per state, claims, redeliveries, stalls.
pub(super) fn figures(state: &ServerState, r: &mut Report) {
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
}

/// I1, I2, I3, C1 and C2.
pub(super) fn check_records(
    h: &Histories,
    state: &ServerState,
    opts: &CheckOptions,
    r: &mut Report,
    v: &mut Vec<String>,
) {
    // ---- I1: no acknowledged enqueue lost ----
    for (id, _status, job) in &h.acked {
        if !state.jobs.contains_key(*job) {
            if let Some(window) = opts.loss_window_ms {
                let at = h.acked_at.get(*job).copied().unwrap_or(0);
                if h.server_kill_times.iter().any(|&k| k >= at && k - at <= window) {
                    r.lost_unconfirmed += 1;
                    continue;
                }
            }
            r.lost += 1;
            v.push(format!(
                "I1 enqueue of {id} was acknowledged (job {job}) but the job is gone"
            ));
        }
    }
    r.invariants.insert("I1".into(), "full".into());

    // ---- I2: no job that was never enqueued ----
    for id in state.jobs.keys() {
        let of_schedule = echomq::schedule::tick_of(id).is_some_and(|(s, _)| h.schedules.contains(s));
        let recorded = h.jobs.get(id.as_str()).is_some_and(|j| j.invoked);
        if of_schedule && !recorded {
            r.cron_jobs_unrecorded += 1;
            continue;
        }
        if !recorded {
            v.push(format!("I2 job {id} exists but was never enqueued"));
        }
    }
    for (id, j) in &h.jobs {
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

    // ---- C1: only a job asked to be cancelled ends cancelled; C2: one
    // cancelled while it waited stays cancelled ----
    let none = Vec::new();
    for (id, j) in &state.jobs {
        let asked = h.jobs.get(id.as_str()).map_or(&none, |x| &x.cancels);
        if j.state == "cancelled" {
            r.cancelled += 1;
            if asked.is_empty() {
                v.push(format!("C1 job {id} is cancelled, but no cancel was asked for it"));
            }
        }
        if let Some(&(at, _)) = asked.iter().find(|(_, a)| *a == "cancelled")
            && j.state != "cancelled"
        {
            let in_window = opts
                .loss_window_ms
                .is_some_and(|w| h.server_kill_times.iter().any(|&k| k >= at && k - at <= w));
            if in_window {
                r.cancels_lost_unconfirmed += 1;
            } else {
                v.push(format!(
                    "C2 job {id} was cancelled while it waited, but ended {}",
                    j.state
                ));
            }
        }
    }
    r.invariants.insert("C1".into(), "full".into());

    // ---- K1: one job per schedule tick ----
    for (id, times) in &h.tick_created {
        for w in times.windows(2) {
            let (first, again) = (w[0], w[1]);
            let lost_between = opts.loss_window_ms.is_some_and(|win| {
                h.server_kill_times
                    .iter()
                    .any(|&k| k >= first && k - first <= win && k <= again)
            });
            if !lost_between {
                v.push(format!(
                    "K1 the tick of job {id} was taken twice (passes answered at {first} and {again})"
                ));
            }
        }
    }
    if !h.schedules.is_empty() {
        r.invariants.insert("K1".into(), "full".into());
    }
    r.invariants.insert("C2".into(), "full".into());
}

/// I10: one job per dedup id at a time.
pub(super) fn check_dedup(h: &Histories, state: &ServerState, r: &mut Report, v: &mut Vec<String>) {
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
    for (id, _, job) in &h.acked {
        if let Some(d) = h.invoked_dedup.get(id) {
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
            Some(j) if matches!(j.state.as_str(), "completed" | "failed" | "cancelled" | "expired") => {
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
}
