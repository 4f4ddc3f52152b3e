//! R1 (the queue's rate limit holds) and R2 (each lane's), from the
//! claims' server times.

use std::collections::BTreeMap;

use super::histories::JobHist;
use super::{CheckOptions, Report};

/// R1 and R2 (see the module docs).
pub(super) fn check_rates(jobs: &BTreeMap<&str, JobHist>, opts: &CheckOptions, r: &mut Report, v: &mut Vec<String>) {
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
