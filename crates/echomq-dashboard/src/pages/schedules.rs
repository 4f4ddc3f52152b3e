//! `/{queue}/schedules`: the queue's cron schedules (next tick,
//! last tick done, jobs made, paused), each with pause or resume and run
//! now.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;

use super::{Done, Failure, base_of, button_as, html, notice, open};
use crate::Shared;
use crate::html::{escape, page, queue_path, segment, time};

/// `GET /{queue}/schedules`.
pub(crate) async fn schedules(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    uri: Uri,
    original: OriginalUri,
    Query(q): Query<Done>,
) -> Result<Response, Failure> {
    let base = base_of(&uri, &original);
    let queue = open(&shared, &name).await?;
    let list = queue.schedules().await?;
    let here = format!("{}{}", base.up, queue_path(&name));
    let mut rows = String::new();
    for s in &list {
        let link = format!("{here}/schedules/{}", segment(&s.name));
        let (state, toggle) = if s.paused_ms.is_some() {
            (
                "paused",
                button_as(&shared, &format!("{link}/resume"), "resume", "resume", ""),
            )
        } else {
            (
                "running",
                button_as(&shared, &format!("{link}/pause"), "pause", "pause", ""),
            )
        };
        let next = match (s.paused_ms, s.next_tick_ms) {
            (Some(at), _) => format!("paused since {}", time(at)),
            (None, Some(t)) => time(t),
            (None, None) => "none".into(),
        };
        let _ = write!(
            rows,
            "<tr data-schedule=\"{n}\" data-state=\"{state}\"><td>{n}</td><td><code>{cron}</code></td><td>{tz}</td>\
             <td>{next}</td><td>{done}</td><td class=\"num\">{jobs}</td><td>{missed}</td><td class=\"actions\">{toggle}{run}</td></tr>",
            n = escape(&s.name),
            cron = escape(&s.cron),
            tz = escape(&s.time_zone),
            done = time(s.done_through_ms),
            jobs = s.jobs,
            missed = s.last_missed_ms.map(time).unwrap_or_default(),
            run = button_as(&shared, &format!("{link}/run"), "run now", "run", ""),
        );
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=\"8\" class=\"empty\">No schedules (Queue::upsert_schedule adds one).</td></tr>".into();
    }
    let body = format!(
        "{notice}<h1>{n}: schedules</h1><table id=\"schedules\"><thead><tr><th scope=\"col\">name</th>\
         <th scope=\"col\">cron</th><th scope=\"col\">zone</th><th scope=\"col\">next tick</th>\
         <th scope=\"col\">done through</th><th scope=\"col\" class=\"num\">jobs made</th>\
         <th scope=\"col\">last missed</th><th scope=\"col\"></th></tr></thead><tbody>{rows}</tbody></table>",
        notice = notice(q.done.as_deref()),
        n = escape(&name),
    );
    let crumbs = format!(
        " / <a href=\"{here}\">{}</a> / <a href=\"{here}/schedules\">schedules</a>",
        escape(&name)
    );
    Ok(html(
        StatusCode::OK,
        page(&shared.opts.title, &base, &crumbs, "", &body),
    ))
}
