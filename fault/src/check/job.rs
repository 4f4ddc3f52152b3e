//! The invariants of each job's attempts: I4 (one terminal settlement, by
//! the highest token), I5 (a stale token changes nothing), I6 (the server
//! clock decides), I7 (every duplicate effect explained), I8 (guarded
//! effects once), I9 (one stall per expired lease).

use std::collections::{BTreeSet, HashMap};

use super::Report;
use super::histories::{Attempt, Histories, JobHist, forgotten_by};
use crate::state::ServerState;

/// I4–I9 over every job of the final state.
pub(super) fn check_jobs(
    hs: &Histories,
    state: &ServerState,
    loss_window_ms: Option<u64>,
    r: &mut Report,
    v: &mut Vec<String>,
) {
    let (reap_unknown, reaper_killed) = (hs.reap_unknown, hs.reaper_killed);
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
        let h = hs.jobs.get(id).unwrap_or(&empty);
        let forgotten = |t: u64| {
            h.attempts
                .get(&t)
                .and_then(|a| forgotten_by(a, &hs.server_kill_times, loss_window_ms))
                .is_some()
        };
        check_job(
            id,
            rec,
            h,
            &forgotten,
            state,
            hs.min_lease,
            &hs.lease_of,
            &hs.killed,
            hs.guarded_on,
            reaps_exact,
            r,
            v,
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
    if !hs.guarded_on {
        r.invariants
            .insert("I8".into(), "skipped: no worker ran the guarded effect".into());
    } else {
        r.invariants.entry("I8".into()).or_insert_with(|| "full".into());
    }
    if reaps_exact {
        r.invariants.entry("I9".into()).or_insert_with(|| "full".into());
    }
}

#[allow(clippy::too_many_arguments)]
fn check_job(
    id: &str,
    rec: &crate::state::JobRecord,
    h: &JobHist,
    forgotten: &dyn Fn(u64) -> bool,
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
    // number (one claim per delivery number). A claim a master SIGKILL may
    // have taken with it (`forgotten`) is claimed again with its delivery
    // number, and is counted, not a violation.
    let mut lost: BTreeSet<u64> = BTreeSet::new();
    if let Some(t) = h
        .attempts
        .iter()
        .filter(|(_, a)| a.claim.is_some())
        .map(|(t, _)| *t)
        .max()
        && t > rec.token
    {
        if forgotten(t) {
            lost.insert(t);
        } else {
            v.push(format!(
                "I4 job {id}: token {t} was claimed, above the job's current token {}",
                rec.token
            ));
        }
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
            // the older claim of the two, forgotten and made again
            let older = t1.min(t2);
            if forgotten(older) {
                lost.insert(older);
                continue;
            }
            v.push(format!(
                "I4 job {id}: delivery {d2} has token {t2}, not above delivery {d1}'s token {t1}"
            ));
        }
    }
    if let Some(&(d, t)) = deliveries.last()
        && d > rec.attempts
        && !forgotten(t)
    {
        v.push(format!(
            "I4 job {id}: delivery {d} was claimed, but the job counts {} claims",
            rec.attempts
        ));
    }
    r.claims_lost_unconfirmed += lost.len();
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
