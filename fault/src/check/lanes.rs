//! L1 (a lane's cap holds), L2 (every lane slot given back) and G1 (the
//! global cap holds), from the intervals each attempt was surely active.

use std::collections::{BTreeMap, HashMap};

use super::histories::{JobHist, forgotten_by};
use super::{CheckOptions, Report};
use crate::state::ServerState;

/// L1, L2 and G1 (see the module docs).
pub(super) fn check_lanes(
    jobs: &BTreeMap<&str, JobHist>,
    lease_of: &HashMap<&str, u64>,
    kills: &[u64],
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
            let mut end = match (settled, reaped) {
                (Some(s), Some(rt)) => s.min(rt),
                (Some(s), None) => s,
                (None, Some(rt)) => rt,
                // Surely active until it was last seen holding the lease.
                (None, None) => seen,
            };
            // A claim a master SIGKILL took with it holds no lease on the
            // new master: counted until the kill (its time on the server's
            // clock, from the claim's), not while its worker runs on.
            if let (Some(k), Some(c)) = (forgotten_by(a, kills, opts.claim_loss_window_ms), a.claimed_t) {
                end = end.min(start + (k - c));
            }
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
