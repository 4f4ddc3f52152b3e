//! `/{queue}/workers`: the worker processes serving the queue, as
//! they announce themselves (`Queue::workers`): name, host, process,
//! queues, concurrency, handlers running, started, last heard from.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{OriginalUri, Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use echomq::admin::ANNOUNCE_EVERY;

use super::{Failure, base_of, html, open};
use crate::Shared;
use crate::html::{escape, page, queue_path, time};

/// `GET /{queue}/workers`.
pub(crate) async fn workers(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    uri: Uri,
    original: OriginalUri,
) -> Result<Response, Failure> {
    let base = base_of(&uri, &original);
    let queue = open(&shared, &name).await?;
    let list = queue.workers().await?;
    let now = queue.server_time_ms().await?;
    let here = format!("{}{}", base.up, queue_path(&name));
    let late = 2 * u64::try_from(ANNOUNCE_EVERY.as_millis()).unwrap_or(u64::MAX);
    let mut rows = String::new();
    for w in &list {
        let quiet = now.saturating_sub(w.last_seen_ms);
        let heard = if quiet > late {
            format!(
                "<span class=\"err\">{} (silent for {} s)</span>",
                time(w.last_seen_ms),
                quiet / 1000
            )
        } else {
            time(w.last_seen_ms)
        };
        let _ = write!(
            rows,
            "<tr data-worker=\"{n}\"><td>{n}</td><td>{host}</td><td class=\"num\">{pid}</td><td>{queues}</td>\
             <td class=\"num\">{running} of {conc}</td><td>{started}</td><td>{heard}</td></tr>",
            n = escape(&w.name),
            host = escape(&w.host),
            pid = w.pid,
            queues = escape(&w.queues.join(", ")),
            running = w.running,
            conc = w.concurrency,
            started = time(w.started_ms),
        );
    }
    if rows.is_empty() {
        rows =
            "<tr><td colspan=\"7\" class=\"empty\">No worker has announced itself in the last five minutes.</td></tr>"
                .into();
    }
    let body = format!(
        "<h1>{n}: workers</h1><p class=\"hint\">Each running worker announces itself every {every} s; one \
         silent for longer has stopped or lost the server, and leaves the list after five minutes.</p>\
         <table id=\"workers\"><thead><tr><th scope=\"col\">name</th><th scope=\"col\">host</th>\
         <th scope=\"col\" class=\"num\">pid</th><th scope=\"col\">queues</th><th scope=\"col\" class=\"num\">running</th>\
         <th scope=\"col\">started</th><th scope=\"col\">last heard from</th></tr></thead><tbody>{rows}</tbody></table>",
        n = escape(&name),
        every = ANNOUNCE_EVERY.as_secs(),
    );
    let crumbs = format!(
        " / <a href=\"{here}\">{}</a> / <a href=\"{here}/workers\">workers</a>",
        escape(&name)
    );
    Ok(html(
        StatusCode::OK,
        page(&shared.opts.title, &base, &crumbs, "", &body),
    ))
}
