//! `flow ID` and `batch ID`: a flow's steps as a tree with their states,
//! and a batch's counts and callbacks.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use echomq::Error;
use echomq::flow::FlowStatus;
use serde_json::json;

use crate::ctx::{Ctx, Output};
use crate::exit::Failure;
use crate::render::when_opt;

/// The flow's steps as a tree: each step that no other runs after (the
/// flow's ends) at the left, the steps it runs after beneath it. A step
/// with several parents appears under each; a step already shown higher
/// on its own branch is not shown again (a flow has no cycle, but a
/// record might).
fn tree(st: &FlowStatus, home: &str) -> String {
    struct Tree<'a> {
        st: &'a FlowStatus,
        home: &'a str,
        by_name: HashMap<&'a str, usize>,
        width: usize,
        out: String,
        path: Vec<usize>,
    }
    impl Tree<'_> {
        fn walk(&mut self, i: usize, lead: &str, branch: &str) {
            let s = &self.st.steps[i];
            let label = format!("{lead}{branch}{}", s.name);
            let w = self.width + lead.chars().count();
            // a step on another queue than the flow's says which
            let on = if s.queue == self.home {
                String::new()
            } else {
                format!(" (on {})", s.queue)
            };
            let _ = writeln!(self.out, "{label:<w$} {}{on}", s.state.as_str());
            if self.path.contains(&i) || self.path.len() > 64 {
                return;
            }
            self.path.push(i);
            let kids: Vec<usize> = s
                .after
                .iter()
                .filter_map(|n| self.by_name.get(n.as_str()).copied())
                .collect();
            let next_lead = match branch {
                "" => lead.to_owned(),
                "└ " => format!("{lead}  "),
                _ => format!("{lead}│ "),
            };
            for (k, c) in kids.iter().enumerate() {
                self.walk(*c, &next_lead, if k + 1 == kids.len() { "└ " } else { "├ " });
            }
            self.path.pop();
        }
    }
    let has_parent: HashSet<&str> = st
        .steps
        .iter()
        .flat_map(|s| s.after.iter().map(String::as_str))
        .collect();
    let mut t = Tree {
        st,
        home,
        by_name: st.steps.iter().enumerate().map(|(i, s)| (s.name.as_str(), i)).collect(),
        width: st.steps.iter().map(|s| s.name.len()).max().unwrap_or(0) + 4,
        out: String::new(),
        path: Vec::new(),
    };
    for (i, s) in st.steps.iter().enumerate() {
        if !has_parent.contains(s.name.as_str()) {
            t.walk(i, "", "");
        }
    }
    t.out
}

/// Shows flow `id` of the queue: its steps as a tree, with their states
/// and counts per state.
///
/// # Errors
/// A [`Failure`]: no such queue or flow, a server error.
pub async fn flow(ctx: &Ctx, id: &str) -> Result<Output, Failure> {
    let q = ctx.open_given().await?;
    let f = q.flow(id).map_err(|e| ctx.err(e))?;
    let st = match f.status().await {
        Ok(st) => st,
        Err(Error::FlowNotFound(_)) => return Err(Failure::failed(format!("no flow {id:?} in queue {}", q.name()))),
        Err(e) => return Err(ctx.err(e)),
    };
    let mut counts = serde_json::Map::new();
    for s in &st.steps {
        let n = counts.entry(s.state.as_str()).or_insert(json!(0));
        *n = json!(n.as_u64().unwrap_or(0) + 1);
    }
    let json = json!({
        "queue": q.name(),
        "flow": id,
        "ended": st.is_ended(),
        "counts": counts,
        "steps": st.steps.iter().map(|s| json!({
            "name": s.name, "job_id": s.job_id, "queue": s.queue, "state": s.state.as_str(), "after": s.after,
        })).collect::<Vec<_>>(),
    });
    let summary: Vec<String> = counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let text = format!(
        "flow {id} of queue {}: {} steps, {}\n{}",
        q.name(),
        st.steps.len(),
        summary.join(", "),
        tree(&st, q.name())
    );
    Ok(Output::ok(json, text))
}

/// Shows batch `id` of the queue: its counts and when each callback was
/// enqueued.
///
/// # Errors
/// A [`Failure`]: no such queue or batch, a server error.
pub async fn batch(ctx: &Ctx, id: &str) -> Result<Output, Failure> {
    let q = ctx.open_given().await?;
    let b = q.batch(id).map_err(|e| ctx.err(e))?;
    let st = match b.status().await {
        Ok(st) => st,
        Err(Error::BatchNotFound(_)) => {
            return Err(Failure::failed(format!("no batch {id:?} in queue {}", q.name())));
        }
        Err(e) => return Err(ctx.err(e)),
    };
    let now = q.server_time_ms().await.map_err(|e| ctx.err(e))?;
    let json = json!({
        "queue": q.name(), "batch": id, "total": st.total, "completed": st.completed,
        "failed": st.failed, "other": st.other, "pending": st.pending(),
        "created_ms": st.created_at, "closed_ms": st.closed_at, "ended_ms": st.ended_at,
        "success_ms": st.success_at, "complete_ms": st.complete_at, "death_ms": st.death_at,
    });
    let text = format!(
        "batch {id} of queue {}: {} members, {} completed, {} failed, {} ended otherwise, {} not ended\n\
         closed {}, ended {}\ncallbacks: success {}, complete {}, death {}\n",
        q.name(),
        st.total,
        st.completed,
        st.failed,
        st.other,
        st.pending(),
        when_opt(st.closed_at, now),
        when_opt(st.ended_at, now),
        when_opt(st.success_at, now),
        when_opt(st.complete_at, now),
        when_opt(st.death_at, now),
    );
    Ok(Output::ok(json, text))
}
