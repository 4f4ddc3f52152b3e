//! `/{queue}/lanes`: the queue's lanes, a page at a time, with
//! their pending and active jobs, caps, weights and place in the turn,
//! and the queue's throttles (global cap, rate limits, a handler's hold).

use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::Arc;

use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use echomq::lanes::{LaneCursor, LaneState};
use serde::Deserialize;

use super::{Failure, base_of, html, open};
use crate::Shared;
use crate::html::{escape, page, queue_path, segment, time};

/// The query of the lanes page.
#[derive(Deserialize)]
pub(crate) struct Paging {
    after: Option<String>,
}

fn rate(r: Option<echomq::throttle::RateLimit>) -> String {
    r.map_or_else(|| "none".into(), |r| format!("{} per {:?}", r.jobs(), r.per()))
}

/// `GET /{queue}/lanes`.
pub(crate) async fn lanes(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    uri: Uri,
    original: OriginalUri,
    Query(q): Query<Paging>,
) -> Result<Response, Failure> {
    let base = base_of(&uri, &original);
    let queue = open(&shared, &name).await?;
    let after = match q.after.as_deref() {
        None | Some("") => None,
        Some(a) => Some(LaneCursor::from_str(a)?),
    };
    let lanes = queue.lanes(after.as_ref(), shared.opts.page_size).await?;
    let throttles = queue.throttles().await?;
    let here = format!("{}{}", base.up, queue_path(&name));
    let mut rows = String::new();
    let mut sorted = lanes.lanes.clone();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for l in &sorted {
        let state = match l.state {
            LaneState::Ready => "ready",
            LaneState::Blocked => "at its cap",
            LaneState::Idle => "running, none waiting",
            _ => "no jobs",
        };
        let _ = write!(
            rows,
            "<tr data-lane=\"{n}\"><td>{n}</td><td class=\"num\">{p}</td><td class=\"num\">{a}</td>\
             <td class=\"num\">{cap}</td><td class=\"num\">{w}</td><td>{state}</td></tr>",
            n = escape(&l.name),
            p = l.pending,
            a = l.active,
            cap = l.cap.map_or_else(|| "none".into(), |c| c.to_string()),
            w = l.weight,
        );
    }
    if rows.is_empty() {
        rows =
            "<tr><td colspan=\"6\" class=\"empty\">No lanes (EnqueueOptions::lane puts a job in one).</td></tr>".into();
    }
    let next = lanes.next.as_ref().map_or_else(String::new, |n| {
        format!(
            "<p class=\"paging\"><a href=\"{here}/lanes?after={}\" rel=\"next\">next page</a></p>",
            segment(&n.to_string())
        )
    });
    let d = &lanes.defaults;
    let body = format!(
        "<h1>{n}: lanes and throttles</h1>\
         <dl class=\"record\"><dt>global cap</dt><dd>{max}</dd><dt>rate limit</dt><dd>{rate}</dd>\
         <dt>default lane rate limit</dt><dd>{lrate}</dd><dt>held by a handler until</dt><dd>{hold}</dd>\
         <dt>lane cap, weight (defaults)</dt><dd>{dcap}, {dw}</dd></dl>\
         <table id=\"lanes\"><thead><tr><th scope=\"col\">lane</th><th scope=\"col\" class=\"num\">pending</th>\
         <th scope=\"col\" class=\"num\">active</th><th scope=\"col\" class=\"num\">cap</th>\
         <th scope=\"col\" class=\"num\">weight</th><th scope=\"col\">turn</th></tr></thead><tbody>{rows}</tbody></table>{next}",
        n = escape(&name),
        max = throttles.max_active.map_or_else(|| "none".into(), |m| m.to_string()),
        rate = rate(throttles.rate),
        lrate = rate(throttles.lane_default_rate),
        hold = throttles.held_until_ms.map_or_else(|| "not held".into(), time),
        dcap = d.cap.map_or_else(|| "none".into(), |c| c.to_string()),
        dw = d.weight,
    );
    let crumbs = format!(
        " / <a href=\"{here}\">{}</a> / <a href=\"{here}/lanes\">lanes</a>",
        escape(&name)
    );
    Ok(html(
        StatusCode::OK,
        page(&shared.opts.title, &base, &crumbs, "", &body),
    ))
}
