//! `/`: every queue with its counts, throughput and chart.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{OriginalUri, Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;

use super::{Done, Failure, STATES, base_of, html, notice};
use crate::Shared;
use crate::feed::{BUCKETS, Throughput};
use crate::html::{escape, page, queue_path, time};

/// `/`: every queue, its counts, throughput and chart.
pub(crate) async fn index(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    original: OriginalUri,
    Query(q): Query<Done>,
) -> Result<Response, Failure> {
    let base = base_of(&uri, &original);
    let up = &base.up;
    let mut rows = String::new();
    for name in shared.names().await? {
        let Some(queue) = shared.queue(&name).await? else {
            continue;
        };
        let c = queue.counts().await?;
        let _ = write!(
            rows,
            "<tr data-queue=\"{n}\"><th scope=\"row\"><a href=\"{up}{s}\">{n}</a> \
             <span class=\"badge paused\"{hidden}>paused</span></th>",
            n = escape(&name),
            s = queue_path(&name),
            hidden = if c.paused { "" } else { " hidden" },
        );
        for st in STATES {
            let _ = write!(
                rows,
                "<td class=\"num\" data-count=\"{}\">{}</td>",
                st.as_str(),
                c.of(st)
            );
        }
        let snap = match shared.feeds.snapshot(&queue, shared.opts.sample_every).await {
            Ok(snap) => Some(snap),
            Err(e) => {
                tracing::debug!(queue = %name, error = %e, "dashboard could not read the queue's events");
                None
            }
        };
        rows.push_str(&throughput_cells(snap.as_ref().map(|s| &s.throughput)));
        rows.push_str("</tr>");
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=\"10\" class=\"empty\">No queues yet.</td></tr>".into();
    }
    let mut head = String::from("<th scope=\"col\">queue</th>");
    for st in STATES {
        let _ = write!(head, "<th scope=\"col\" class=\"num\">{}</th>", st.as_str());
    }
    // The chart holds a bucket per sample period, a minute at the default one.
    let span = (BUCKETS as f64 * shared.opts.sample_every.as_secs_f64()).round();
    let _ = write!(
        head,
        "<th scope=\"col\" class=\"num\">completed/s</th><th scope=\"col\" class=\"num\">failed/s</th>\
         <th scope=\"col\">last {span} s</th>"
    );
    let body = format!(
        "{}<h1>Queues</h1><table id=\"queues\"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>",
        notice(q.done.as_deref())
    );
    Ok(html(
        StatusCode::OK,
        page(&shared.opts.title, &base, "", &format!("{up}events"), &body),
    ))
}

/// The points of a chart line (the same drawing as dashboard.js): a
/// value per bucket, the newest at the right, scaled to `max`.
fn points(values: &[u64], max: u64) -> String {
    let step = 120.0 / (BUCKETS as f64 - 1.0);
    let start = BUCKETS as usize - values.len().min(BUCKETS as usize);
    let mut out = String::new();
    for (i, v) in values.iter().enumerate() {
        let x = (start + i) as f64 * step;
        let y = 23.0 - (*v as f64 / max.max(1) as f64) * 22.0;
        let _ = write!(out, "{}{x:.1},{y:.1}", if i == 0 { "" } else { " " });
    }
    out
}

/// A queue row's rate cells and chart: from the queue's events, or (when
/// they are off, `None` or not enabled) left for the live stream to fill
/// from the counts, labelled as an estimate.
fn throughput_cells(t: Option<&Throughput>) -> String {
    let estimated = t.is_none_or(|t| !t.events_on);
    let (rate, failed, line, failed_line, max, totals, title) = match t {
        Some(t) if t.events_on => {
            let max = t.completed.iter().chain(&t.failed).copied().max().unwrap_or(0).max(1);
            let (done, bad) = (t.completed.iter().sum::<u64>(), t.failed.iter().sum::<u64>());
            (
                format!("{:.1}", t.completed_rate),
                format!("{:.1}", t.failed_rate),
                points(&t.completed, max),
                points(&t.failed, max),
                max,
                format!(
                    " data-completed=\"{done}\" data-failed=\"{bad}\" data-since=\"{}\"",
                    time(t.since_ms)
                ),
                format!(
                    "{done} completed, {bad} failed in the chart's window, from the queue's events \
                     (counted since {})",
                    time(t.since_ms)
                ),
            )
        }
        _ => (
            "–".to_owned(),
            "–".to_owned(),
            String::new(),
            String::new(),
            1,
            String::new(),
            "completed per second, estimated from the completed count".to_owned(),
        ),
    };
    let partial = t.is_some_and(|t| t.events_on && t.partial);
    format!(
        "<td class=\"num\" data-rate>{rate}</td><td class=\"num\" data-failed-rate>{failed}</td>\
         <td><svg class=\"spark\" viewBox=\"0 0 120 24\" preserveAspectRatio=\"none\" data-max=\"{max}\"{totals} \
         aria-label=\"{title}\"><title>{title}</title><line x1=\"0\" y1=\"23.5\" x2=\"120\" y2=\"23.5\"/>\
         <polyline class=\"completed\" points=\"{line}\"/><polyline class=\"failed\" points=\"{failed_line}\"/></svg>\
         <span class=\"note\" data-estimated{e}>events off: estimated from counts</span>\
         <span class=\"note\" data-partial{p}>at least: some events went unread</span></td>",
        e = if estimated { "" } else { " hidden" },
        p = if partial { "" } else { " hidden" },
    )
}
