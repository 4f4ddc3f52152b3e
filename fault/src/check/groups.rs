//! The invariants of flows and batches (`crate::groups` adds them): F1–F3
//! and B1–B2, from the producers' records, the workers' claims and the
//! final state (job records, flow and batch hashes, the outbox, and each
//! job's `enqueued` events in the queue's stream).

use super::histories::Histories;
use super::{CheckOptions, Report};
use crate::state::{JobRecord, ServerState};

/// F1–F3 and B1–B2.
pub(super) fn check_groups(
    h: &Histories,
    state: &ServerState,
    opts: &CheckOptions,
    r: &mut Report,
    v: &mut Vec<String>,
) {
    if h.flows.is_empty() && h.batches.is_empty() {
        return;
    }
    let enqueued = state.enqueued.as_ref();
    let once = |job: &str, what: &str, v: &mut Vec<String>| {
        if let Some(n) = enqueued.map(|e| e.get(job).copied().unwrap_or(0))
            && n != 1
        {
            v.push(format!("{what} job {job} was enqueued {n} times (event stream)"));
        }
    };
    let finished = |id: &str| state.jobs.get(id).and_then(|j| j.finished_ms);
    flows(h, state, opts, r, v, &once, &finished);
    batches(h, state, opts, r, v, &once, &finished);
    let how = if enqueued.is_some() {
        "full"
    } else {
        "partial: the event stream could not be read, so creations are not counted"
    };
    for inv in ["F1", "F2", "B1"] {
        r.invariants.insert(inv.into(), how.into());
    }
    r.invariants.insert("F3".into(), "full".into());
    r.invariants.insert("B2".into(), "full".into());
}

/// F1: no step is created or started before every step it waits on has
/// ended (its record's `ct` and `fs`, and every claim recorded, at or
/// after each child's `ft`). F2: after a drain every step of every flow
/// added exists, completed, created once. F3: after a drain each such
/// flow's record is whole: every step ended once, completed, nothing left
/// to count, no spec or wait left, no edge to a step it does not hold;
/// the outbox is empty.
fn flows(
    h: &Histories,
    state: &ServerState,
    opts: &CheckOptions,
    r: &mut Report,
    v: &mut Vec<String>,
    once: &dyn Fn(&str, &str, &mut Vec<String>),
    finished: &dyn Fn(&str) -> Option<u64>,
) {
    for (flow, f) in &h.flows {
        r.flows += 1;
        for (job, after) in &f.steps {
            let Some(rec) = state.jobs.get(*job) else {
                if opts.drained && f.added {
                    v.push(format!("F2 step {job} of flow {flow} never became a job"));
                }
                continue;
            };
            let claims: Vec<u64> = h
                .jobs
                .get(job)
                .map(|j| j.attempts.values().filter_map(|a| a.claim.map(|c| c.0)).collect())
                .unwrap_or_default();
            for child in after {
                let Some(done) = finished(child) else {
                    v.push(format!(
                        "F1 {job} of flow {flow} exists, but {child}, which it waits on, has not ended"
                    ));
                    continue;
                };
                let starts = rec.first_started_ms.into_iter().chain(claims.iter().copied());
                if rec.created_ms < done {
                    v.push(format!(
                        "F1 {job} was created at {}, before {child} ended at {done}",
                        rec.created_ms
                    ));
                }
                if let Some(s) = starts.filter(|&s| s < done).min() {
                    v.push(format!("F1 {job} started at {s}, before {child} ended at {done}"));
                }
            }
            if opts.drained && f.added {
                if rec.state != "completed" {
                    v.push(format!("F2 step {job} of flow {flow} ended {}", rec.state));
                }
                once(job, "F2", v);
            }
        }
        if opts.drained && f.added {
            flow_record(flow, state, v);
        }
    }
    if opts.drained && state.outbox > 0 {
        v.push(format!("F3 {} messages are left on the outbox", state.outbox));
    }
}

/// F3 for one flow's record.
fn flow_record(flow: &str, state: &ServerState, v: &mut Vec<String>) {
    let Some(rec) = state.flows.get(flow) else {
        v.push(format!("F3 flow {flow}'s record is gone"));
        return;
    };
    let nodes: Vec<&str> = rec.get("nodes").map(|n| n.split('\x1f').collect()).unwrap_or_default();
    if rec.get("left").map(String::as_str) != Some("0") {
        v.push(format!("F3 flow {flow} has steps left to count: {:?}", rec.get("left")));
    }
    for name in &nodes {
        if !rec.get(&format!("r:{name}")).is_some_and(|e| e.starts_with('c')) {
            v.push(format!(
                "F3 step {name} of flow {flow} has no completed end: {:?}",
                rec.get(&format!("r:{name}"))
            ));
        }
        for left in ["w:", "sp:", "so:"] {
            if rec.contains_key(&format!("{left}{name}")) {
                v.push(format!("F3 flow {flow} still holds {left}{name}"));
            }
        }
        if let Some(kids) = rec.get(&format!("k:{name}")) {
            for edge in kids.split('\x1e') {
                let kid = edge.split('\x1f').next().unwrap_or_default();
                if !nodes.contains(&kid) {
                    v.push(format!("F3 flow {flow}: dangling edge {name} -> {kid}"));
                }
            }
        }
    }
}

/// B1: a closed batch's callbacks are enqueued once each, after every
/// member ended, and only as its members' ends say (success only when
/// every one completed; complete once all ended); no callback of a batch
/// that was not closed. B2: after a drain its record counts every
/// member once (`n` members; `c`, `f`, `x` summing to `n`, `c` the
/// completed), says it ended (`fin`), and waits on no member of another
/// queue (no `m:NUMBER` left).
fn batches(
    h: &Histories,
    state: &ServerState,
    opts: &CheckOptions,
    r: &mut Report,
    v: &mut Vec<String>,
    once: &dyn Fn(&str, &str, &mut Vec<String>),
    finished: &dyn Fn(&str) -> Option<u64>,
) {
    for (batch, b) in &h.batches {
        r.batches += 1;
        let Some(members) = &b.closed else {
            for cb in &b.callbacks {
                if state.jobs.contains_key(*cb) {
                    v.push(format!("B1 callback {cb} exists, but batch {batch} was never closed"));
                }
            }
            continue;
        };
        let ends: Vec<Option<u64>> = members.iter().map(|m| finished(m)).collect();
        let all_ended = ends.iter().all(Option::is_some);
        let last_end = ends.iter().flatten().copied().max().unwrap_or(0);
        let member_states: Vec<Option<&JobRecord>> = members.iter().map(|m| state.jobs.get(*m)).collect();
        let all_completed = member_states.iter().all(|j| j.is_some_and(|j| j.state == "completed"));
        for cb in &b.callbacks {
            let Some(rec) = state.jobs.get(*cb) else {
                let expected = if cb.ends_with(":success") {
                    all_completed
                } else {
                    all_ended
                };
                if opts.drained && expected {
                    v.push(format!("B1 callback {cb} of batch {batch} was never enqueued"));
                }
                continue;
            };
            r.batch_callbacks += 1;
            if !all_ended {
                v.push(format!(
                    "B1 callback {cb} exists while a member of batch {batch} has not ended"
                ));
            } else if rec.created_ms < last_end {
                v.push(format!(
                    "B1 callback {cb} was enqueued at {}, before the last member of batch {batch} ended at {last_end}",
                    rec.created_ms
                ));
            }
            if cb.ends_with(":success") && !all_completed {
                v.push(format!(
                    "B1 callback {cb} exists, but a member of batch {batch} did not complete"
                ));
            }
            once(cb, "B1", v);
        }
        if opts.drained {
            batch_record(batch, members, &member_states, state, v);
        }
    }
}

/// B2 for one closed batch's record.
fn batch_record(
    batch: &str,
    members: &[&str],
    states: &[Option<&JobRecord>],
    state: &ServerState,
    v: &mut Vec<String>,
) {
    let Some(rec) = state.batches.get(batch) else {
        v.push(format!("B2 batch {batch}'s record is gone"));
        return;
    };
    let num = |f: &str| rec.get(f).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    let (n, c, f, x) = (num("n"), num("c"), num("f"), num("x"));
    if n != members.len() as u64 || c + f + x != n {
        v.push(format!(
            "B2 batch {batch} counts n={n} c={c} f={f} x={x} for {} members",
            members.len()
        ));
    }
    let completed = states
        .iter()
        .filter(|j| j.is_some_and(|j| j.state == "completed"))
        .count() as u64;
    if c != completed {
        v.push(format!(
            "B2 batch {batch} counts {c} completed, its members show {completed}"
        ));
    }
    if !rec.contains_key("fin") {
        v.push(format!("B2 batch {batch} never ended"));
    }
    // a member on another queue whose end was never counted home
    for f in rec.keys().filter(|f| f.starts_with("m:")) {
        v.push(format!("B2 batch {batch} still waits on {f}: {:?}", rec[f]));
    }
}
