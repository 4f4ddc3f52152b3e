//! Checking a flow's graph and its steps' options before anything is sent.

use std::collections::{HashMap, VecDeque};

use super::{MAX_STEPS, Step};
use crate::error::{Error, Result};
use crate::validate;

/// Checks a flow's graph: step names valid and unique, every edge to a
/// step of the flow and at most once per pair, no cycle. Answers, per step
/// in order, its children's and its parents' edges as the script takes them.
/// `id_len` is the length of the flow's id (for a minted one, the longest
/// it can be).
pub(super) fn check_graph(id_len: usize, steps: &[Step]) -> Result<Vec<(String, String)>> {
    let bad = |s: String| Err(Error::InvalidFlow(s));
    if steps.is_empty() {
        return bad("a flow needs at least one step".into());
    }
    if steps.len() > MAX_STEPS {
        return bad(format!(
            "{} steps; a flow holds at most {MAX_STEPS} (flow::MAX_STEPS)",
            steps.len()
        ));
    }
    let mut at: HashMap<&str, usize> = HashMap::with_capacity(steps.len());
    for (i, s) in steps.iter().enumerate() {
        validate::id("flow step name", &s.name)?;
        if id_len + 1 + s.name.len() > validate::MAX_ID_BYTES {
            return Err(Error::InvalidId {
                what: "flow step name",
                value: s.name.chars().take(64).collect(),
                reason: "with its flow's id and ':' makes a job id longer than 256 bytes",
            });
        }
        if at.insert(&s.name, i).is_some() {
            return bad(format!("two steps are named {:?}", s.name));
        }
    }
    let mut children: Vec<Vec<String>> = vec![Vec::new(); steps.len()];
    let mut parents: Vec<Vec<String>> = vec![Vec::new(); steps.len()];
    // Kahn's order: a step is placed once every step it runs after is.
    let mut waits = vec![0usize; steps.len()];
    let mut after_me: Vec<Vec<usize>> = vec![Vec::new(); steps.len()];
    for (p, s) in steps.iter().enumerate() {
        let mut seen = std::collections::HashSet::new();
        for (child, policy) in &s.after {
            let Some(&c) = at.get(child.as_str()) else {
                return bad(format!(
                    "step {:?} runs after {child:?}, which is not a step of the flow",
                    s.name
                ));
            };
            if !seen.insert(c) {
                return bad(format!("step {:?} runs after {child:?} twice", s.name));
            }
            children[p].push(format!("{child}\x1f{}", policy.letter()));
            parents[c].push(format!("{}\x1f{}", s.name, policy.letter()));
            waits[p] += 1;
            after_me[c].push(p);
        }
    }
    let mut ready: VecDeque<usize> = (0..steps.len()).filter(|&i| waits[i] == 0).collect();
    let mut placed = 0;
    while let Some(i) = ready.pop_front() {
        placed += 1;
        for &p in &after_me[i] {
            waits[p] -= 1;
            if waits[p] == 0 {
                ready.push_back(p);
            }
        }
    }
    if placed < steps.len() {
        let stuck: Vec<&str> = (0..steps.len())
            .filter(|&i| waits[i] > 0)
            .take(8)
            .map(|i| steps[i].name.as_str())
            .collect();
        return bad(format!("the steps run after each other in a cycle (among {stuck:?})"));
    }
    Ok(children
        .into_iter()
        .zip(parents)
        .map(|(c, p)| (c.join("\x1e"), p.join("\x1e")))
        .collect())
}

/// Refuses the options a step cannot take.
pub(super) fn check_options(step: &Step) -> Result<()> {
    let o = &step.options;
    let refused = if o.id.is_some() {
        Some("an id (its job id is FLOW_ID:NAME)")
    } else if o.when()? != "0" {
        Some("a delay or run-at time")
    } else if o.dedup.is_some() {
        Some("a dedup id")
    } else if !o.expires()?.is_empty() {
        Some("an expiry")
    } else if o.sequence.is_some() {
        Some("a sequence key")
    } else {
        None
    };
    match refused {
        Some(what) => Err(Error::InvalidFlow(format!(
            "step {:?} has {what}, which a flow step cannot take",
            step.name
        ))),
        None => Ok(()),
    }
}
