//! `/{queue}/flows/{id}`: a flow's steps as a tree (`Flow::status`): each
//! step under the step that runs after it, with its state, linked to its
//! job once it is one; and the counts per state.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{OriginalUri, Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use echomq::flow::{FlowStatus, StepState};

use super::{Failure, base_of, html, open};
use crate::Shared;
use crate::html::{escape, page, queue_path, segment};

/// Nested lists, from the flow's ends (steps no other runs after) down to
/// its leaves; a step with several parents is shown under each.
/// `up` leads to the dashboard's root; a step's job is linked on its own
/// queue, and one on another queue than `home` says which.
fn tree(st: &FlowStatus, up: &str, home: &str) -> String {
    let by_name: HashMap<&str, usize> = st.steps.iter().enumerate().map(|(i, s)| (s.name.as_str(), i)).collect();
    let has_parent: HashSet<&str> = st
        .steps
        .iter()
        .flat_map(|s| s.after.iter().map(String::as_str))
        .collect();
    fn item(
        st: &FlowStatus,
        by_name: &HashMap<&str, usize>,
        i: usize,
        up: &str,
        home: &str,
        path: &mut Vec<usize>,
        out: &mut String,
    ) {
        let s = &st.steps[i];
        let state = s.state.as_str();
        let name = if s.state == StepState::Waiting || s.state == StepState::Gone {
            escape(&s.name)
        } else {
            let jobs = format!("{up}{}/jobs", queue_path(&s.queue));
            format!("<a href=\"{jobs}/{}\">{}</a>", segment(&s.job_id), escape(&s.name))
        };
        let on = if s.queue == home {
            String::new()
        } else {
            format!(" <span class=\"hint\">on {}</span>", escape(&s.queue))
        };
        let _ = write!(
            out,
            "<li data-step=\"{n}\">{name} <span class=\"state {state}\" data-state=\"{state}\">{state}</span>{on}",
            n = escape(&s.name)
        );
        if !s.after.is_empty() && !path.contains(&i) && path.len() < 64 {
            path.push(i);
            out.push_str("<ul>");
            for c in s.after.iter().filter_map(|n| by_name.get(n.as_str())) {
                item(st, by_name, *c, up, home, path, out);
            }
            out.push_str("</ul>");
            path.pop();
        }
        out.push_str("</li>");
    }
    let mut out = String::from("<ul class=\"flow\" id=\"flow\">");
    for (i, s) in st.steps.iter().enumerate() {
        if !has_parent.contains(s.name.as_str()) {
            item(st, &by_name, i, up, home, &mut Vec::new(), &mut out);
        }
    }
    out.push_str("</ul>");
    out
}

/// `GET /{queue}/flows/{id}`.
pub(crate) async fn flow(
    State(shared): State<Arc<Shared>>,
    Path((name, id)): Path<(String, String)>,
    uri: Uri,
    original: OriginalUri,
) -> Result<Response, Failure> {
    let base = base_of(&uri, &original);
    let queue = open(&shared, &name).await?;
    let not_found = || Failure::NotFound(format!("no flow {id} in {name}"));
    let st = match queue.flow(&id).map_err(|_| not_found())?.status().await {
        Ok(st) => st,
        Err(echomq::Error::FlowNotFound(_)) => return Err(not_found()),
        Err(e) => return Err(e.into()),
    };
    let here = format!("{}{}", base.up, queue_path(&name));
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for s in &st.steps {
        let n = s.state.as_str();
        match counts.iter_mut().find(|(k, _)| *k == n) {
            Some((_, c)) => *c += 1,
            None => counts.push((n, 1)),
        }
    }
    let summary: Vec<String> = counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let body = format!(
        "<h1>Flow {f}</h1><p id=\"flow-counts\">{n} steps: {summary}{ended}</p>\
         <p class=\"hint\">Each step is shown under the step that runs after it; a step runs once every \
         step beneath it has ended. A waiting step is no job yet.</p>{tree}",
        f = escape(&id),
        n = st.steps.len(),
        summary = escape(&summary.join(", ")),
        ended = if st.is_ended() { " (ended)" } else { "" },
        tree = tree(&st, &base.up, &name),
    );
    let crumbs = format!(" / <a href=\"{here}\">{}</a> / flow {}", escape(&name), escape(&id));
    Ok(html(
        StatusCode::OK,
        page(&shared.opts.title, &base, &crumbs, "", &body),
    ))
}
