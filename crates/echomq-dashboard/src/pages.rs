//! The pages: queues, a queue's jobs per state, a job.

use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::Arc;

use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use echomq::admin::ListCursor;
use echomq::{Counts, JobInfo, JobState, Queue};
use serde::Deserialize;

use crate::Shared;
use crate::feed::{BUCKETS, FeedEvent, Throughput};
use crate::html::{Base, base, escape, excerpt, page, pretty, segment, time};

/// The states, in the order tabs and columns show them.
pub(crate) const STATES: [JobState; 6] = [
    JobState::Pending,
    JobState::Delayed,
    JobState::Active,
    JobState::Completed,
    JobState::Failed,
    JobState::Cancelled,
];

/// The policy every page is sent with: only the dashboard's own script and
/// style, no framing, forms post only back here.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// An HTML response with the security headers.
pub(crate) fn html(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert("content-security-policy", HeaderValue::from_static(CSP));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A failed request, shown as a small page.
pub(crate) enum Failure {
    /// No such queue (or one the dashboard does not show) or job.
    NotFound(String),
    /// A query parameter that is not one of ours.
    BadRequest(String),
    /// The library said no.
    Echomq(echomq::Error),
}

impl From<echomq::Error> for Failure {
    fn from(e: echomq::Error) -> Self {
        Failure::Echomq(e)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let (status, text) = match self {
            Failure::NotFound(what) => (StatusCode::NOT_FOUND, what),
            Failure::BadRequest(what) => (StatusCode::BAD_REQUEST, what),
            Failure::Echomq(e) => {
                let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                if status.is_server_error() {
                    tracing::warn!(error = %e, "dashboard request failed");
                }
                (status, e.to_string())
            }
        };
        let body = format!(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{status}</title></head>\
             <body><h1>{status}</h1><p class=\"error\">{}</p></body></html>\n",
            escape(&text)
        );
        html(status, body)
    }
}

/// The way back to the dashboard's root from this request.
pub(crate) fn base_of(uri: &Uri, original: &OriginalUri) -> Base {
    base(uri.path(), original.0.path())
}

/// The queue behind a URL's name, or a 404.
pub(crate) async fn open(shared: &Shared, name: &str) -> Result<Queue, Failure> {
    shared
        .queue(name)
        .await?
        .ok_or_else(|| Failure::NotFound(format!("no queue {name}")))
}

/// What an action did, shown once on the page it leads back to. Only
/// these fixed texts are shown, whatever the query says.
fn notice(done: Option<&str>) -> String {
    let text = match done {
        Some("retried") => "Moved back to pending: it runs again.",
        Some("removed") => "Removed.",
        Some("cancelled") => "Cancelled: it will not run.",
        Some("cancel-requested") => "Cancel requested: its handler is told to stop.",
        Some("promoted") => "Promoted: it is pending now.",
        Some("paused") => "Paused: no new claims until resumed.",
        Some("resumed") => "Resumed.",
        Some("not-found") => "No such job any more.",
        Some("wrong-state") => "Nothing done: the job is not in a state this acts on.",
        Some("finished") => "Nothing done: the job has already finished.",
        Some("active") => "Nothing done: the job is running (cancel it first).",
        _ => return String::new(),
    };
    format!("<p class=\"notice\" role=\"status\">{text}</p>")
}

/// The hidden CSRF field of every form.
fn token_field(shared: &Shared) -> String {
    format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        escape(shared.csrf.token())
    )
}

/// A one-button POST form.
fn button(shared: &Shared, action: &str, label: &str, class: &str) -> String {
    format!(
        "<form method=\"post\" action=\"{action}\" class=\"inline\">{}\
         <button type=\"submit\" class=\"{class}\" data-action=\"{label}\">{label}</button></form>",
        token_field(shared)
    )
}

fn count(c: &Counts, s: JobState) -> u64 {
    match s {
        JobState::Pending => c.pending,
        JobState::Delayed => c.delayed,
        JobState::Active => c.active,
        JobState::Completed => c.completed,
        JobState::Failed => c.failed,
        JobState::Cancelled => c.cancelled,
        _ => 0,
    }
}

/// The notice query every page takes.
#[derive(Deserialize)]
pub(crate) struct Done {
    done: Option<String>,
}

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
            "<tr data-queue=\"{n}\"><th scope=\"row\"><a href=\"{up}queues/{s}\">{n}</a> \
             <span class=\"badge paused\"{hidden}>paused</span></th>",
            n = escape(&name),
            s = segment(&name),
            hidden = if c.paused { "" } else { " hidden" },
        );
        for st in STATES {
            let _ = write!(
                rows,
                "<td class=\"num\" data-count=\"{}\">{}</td>",
                st.as_str(),
                count(&c, st)
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

/// The queue page's feed of latest events; `jobs` is the URL prefix of
/// the queue's job pages.
fn feed_table(events: Option<&[FeedEvent]>, events_on: bool, jobs: &str) -> String {
    let mut rows = String::new();
    for ev in events.unwrap_or_default() {
        rows.push_str(&feed_row(ev, jobs));
    }
    if rows.is_empty() {
        let why = if events.is_none() {
            "The queue's events could not be read."
        } else if events_on {
            "No events since the dashboard started watching this queue."
        } else {
            "Events are off for this queue (Queue::set_events)."
        };
        let _ = write!(
            rows,
            "<tr class=\"none\"><td colspan=\"5\" class=\"empty\">{why}</td></tr>"
        );
    }
    format!(
        "<h2>Latest events</h2><table id=\"feed\" data-jobs=\"{jobs}\"><thead><tr><th scope=\"col\">time</th>\
         <th scope=\"col\">event</th><th scope=\"col\">job</th><th scope=\"col\" class=\"num\">attempt</th>\
         <th scope=\"col\">error</th></tr></thead><tbody>{rows}</tbody></table>"
    )
}

/// One event of the feed (dashboard.js builds the same row from the live
/// stream).
fn feed_row(ev: &FeedEvent, jobs: &str) -> String {
    let job = match &ev.job_id {
        Some(id) => format!("<a href=\"{jobs}{}\">{}</a>", segment(id), escape(id)),
        None => String::new(),
    };
    format!(
        "<tr data-event=\"{id}\"><td><time>{at}</time></td><td class=\"event\" data-kind=\"{kind}\">{kind}</td>\
         <td>{job}</td><td class=\"num\">{attempt}</td><td class=\"err\">{err}</td></tr>",
        id = escape(&ev.id),
        at = time(ev.at_ms),
        kind = escape(&ev.kind),
        attempt = ev.attempt.map(|a| a.to_string()).unwrap_or_default(),
        err = escape(&excerpt(ev.error.as_deref().unwrap_or(""), 120)),
    )
}

/// The query of a queue's page.
#[derive(Deserialize)]
pub(crate) struct Listing {
    state: Option<String>,
    after: Option<String>,
    done: Option<String>,
}

/// `/queues/{queue}`: one state's jobs, a page at a time.
pub(crate) async fn queue(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    uri: Uri,
    original: OriginalUri,
    Query(q): Query<Listing>,
) -> Result<Response, Failure> {
    let base = base_of(&uri, &original);
    let up = &base.up;
    let queue = open(&shared, &name).await?;
    let state = match q.state.as_deref() {
        None | Some("") => JobState::Failed,
        Some(s) => STATES
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| Failure::BadRequest(format!("no state {s}")))?,
    };
    let after = match q.after.as_deref() {
        None | Some("") => None,
        Some(a) => Some(ListCursor::from_str(a)?),
    };
    let c = queue.counts().await?;
    let listing = queue.list(state, after.as_ref(), shared.opts.page_size).await?;
    let qs = segment(&name);
    let here = format!("{up}queues/{qs}");

    let mut tabs = String::from("<nav class=\"tabs\">");
    for st in STATES {
        let _ = write!(
            tabs,
            "<a href=\"{here}?state={s}\" data-state=\"{s}\"{cur}>{s} <span class=\"num\" data-count=\"{s}\">{n}</span></a>",
            s = st.as_str(),
            n = count(&c, st),
            cur = if st == state { " aria-current=\"page\"" } else { "" },
        );
    }
    tabs.push_str("</nav>");

    let mut rows = String::new();
    for job in &listing.jobs {
        let id = escape(&job.id);
        let link = format!("{here}/jobs/{}", segment(&job.id));
        let when = match state {
            JobState::Delayed | JobState::Active => job.deadline_ms.map(time),
            JobState::Pending => Some(time(job.created_ms)),
            _ => job.finished_ms.map(time),
        }
        .unwrap_or_default();
        let _ = write!(
            rows,
            "<tr data-job=\"{id}\"><td><a href=\"{link}\">{id}</a></td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td>{when}</td><td class=\"err\">{}</td><td class=\"actions\">",
            job.attempts,
            job.failures,
            escape(&excerpt(job.last_error.as_deref().unwrap_or(""), 120)),
        );
        rows.push_str(&job_buttons(&shared, &link, job.state));
        rows.push_str("</td></tr>");
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=\"6\" class=\"empty\">No jobs here.</td></tr>".into();
    }
    let when_head = match state {
        JobState::Delayed => "due",
        JobState::Active => "lease until",
        JobState::Pending => "enqueued",
        _ => "finished",
    };
    let mut paging = String::from("<p class=\"paging\">");
    if after.is_some() {
        let _ = write!(
            paging,
            "<a href=\"{here}?state={}\" rel=\"first\">first page</a> ",
            state.as_str()
        );
    }
    if let Some(next) = &listing.next {
        let _ = write!(
            paging,
            "<a href=\"{here}?state={}&amp;after={}\" rel=\"next\">next page</a>",
            state.as_str(),
            segment(&next.to_string())
        );
    }
    paging.push_str("</p>");
    let feed = match shared.feeds.snapshot(&queue, shared.opts.sample_every).await {
        Ok(snap) => feed_table(Some(&snap.latest), snap.throughput.events_on, &format!("{here}/jobs/")),
        Err(e) => {
            tracing::debug!(queue = %name, error = %e, "dashboard could not read the queue's events");
            feed_table(None, false, "")
        }
    };
    let control = if c.paused {
        button(&shared, &format!("{here}/resume"), "resume", "")
    } else {
        button(&shared, &format!("{here}/pause"), "pause", "")
    };
    let body = format!(
        "{notice}<h1>{n} <span class=\"badge paused\" data-paused{hidden}>paused</span> {control}</h1>{tabs}\
         <table id=\"jobs\" data-state=\"{st}\"><thead><tr><th scope=\"col\">id</th><th scope=\"col\" class=\"num\">attempts</th>\
         <th scope=\"col\" class=\"num\">failures</th><th scope=\"col\">{when_head}</th><th scope=\"col\">last error</th>\
         <th scope=\"col\"></th></tr></thead><tbody>{rows}</tbody></table>{paging}{feed}",
        notice = notice(q.done.as_deref()),
        n = escape(&name),
        hidden = if c.paused { "" } else { " hidden" },
        st = state.as_str(),
    );
    let crumbs = format!(" / <a href=\"{here}\">{}</a>", escape(&name));
    let live = format!("{up}events?queue={qs}");
    Ok(html(
        StatusCode::OK,
        page(&shared.opts.title, &base, &crumbs, &live, &body),
    ))
}

/// The action buttons that apply to a job in `state`; `link` is the job's URL.
fn job_buttons(shared: &Shared, link: &str, state: JobState) -> String {
    let mut out = String::new();
    let actions: &[&str] = match state {
        JobState::Failed => &["retry", "remove"],
        JobState::Delayed => &["promote", "cancel", "remove"],
        JobState::Pending => &["cancel", "remove"],
        JobState::Active => &["cancel"],
        _ => &["remove"],
    };
    for a in actions {
        let class = if matches!(*a, "remove" | "cancel") {
            "danger"
        } else {
            ""
        };
        out.push_str(&button(shared, &format!("{link}/{a}"), a, class));
    }
    out
}

/// `/queues/{queue}/jobs/{id}`: a job's record.
pub(crate) async fn job(
    State(shared): State<Arc<Shared>>,
    Path((name, id)): Path<(String, String)>,
    uri: Uri,
    original: OriginalUri,
    Query(q): Query<Done>,
) -> Result<Response, Failure> {
    let base = base_of(&uri, &original);
    let up = &base.up;
    let queue = open(&shared, &name).await?;
    let job = match queue.job(&id).await {
        Err(echomq::Error::JobNotFound(_)) => return Err(Failure::NotFound(format!("no job {id} in {name}"))),
        other => other?,
    };
    let events = match shared.feeds.of_job(&queue, shared.opts.sample_every, &id).await {
        Ok((_, events)) => events,
        Err(e) => {
            tracing::debug!(queue = %name, error = %e, "dashboard could not read the queue's events");
            Vec::new()
        }
    };
    let qlink = format!("{up}queues/{}", segment(&name));
    let link = format!("{qlink}/jobs/{}", segment(&id));
    let body = format!(
        "{}<h1>Job {}</h1><div class=\"actions\">{}</div>{}",
        notice(q.done.as_deref()),
        escape(&job.id),
        job_buttons(&shared, &link, job.state),
        record(&job, &events)
    );
    let crumbs = format!(
        " / <a href=\"{qlink}?state={}\">{}</a> / {}",
        job.state.as_str(),
        escape(&name),
        escape(&excerpt(&id, 40))
    );
    let live = format!("{up}events?queue={}&amp;job={}", segment(&name), segment(&id));
    Ok(html(
        StatusCode::OK,
        page(&shared.opts.title, &base, &crumbs, &live, &body),
    ))
}

/// A job's record as HTML; `events` are the job's lifecycle events the
/// dashboard has seen, oldest first (its timeline when there are some).
fn record(job: &JobInfo, events: &[FeedEvent]) -> String {
    let mut out = String::from("<dl class=\"record\">");
    let mut item = |k: &str, v: String| {
        let _ = write!(out, "<dt>{k}</dt><dd>{v}</dd>");
    };
    item(
        "state",
        format!(
            "<span id=\"job-state\" class=\"state {s}\" data-state=\"{s}\">{s}</span>",
            s = job.state.as_str()
        ),
    );
    item(
        "attempts",
        format!(
            "<span id=\"job-attempts\" data-attempts=\"{a}\">{a}</span> (failures {}, stalls {}, max attempts {})",
            job.failures,
            job.stalls,
            job.limits.max_attempts,
            a = job.attempts
        ),
    );
    if let Some(kind) = &job.kind {
        item("kind", escape(kind));
    }
    if let Some(lane) = &job.lane {
        item("lane", escape(lane));
    }
    if let Some(holder) = &job.holder {
        item("holder", escape(holder));
    }
    if let Some(err) = &job.last_error {
        item("last error", format!("<span class=\"err\">{}</span>", escape(err)));
    }
    out.push_str("</dl>");
    if let Some(p) = &job.progress {
        let _ = write!(
            out,
            "<h2>Progress</h2><pre id=\"job-progress\">{}</pre>",
            pretty(p.to_string().as_bytes())
        );
    }
    if let Some(r) = &job.result {
        let _ = write!(
            out,
            "<h2>Result</h2><pre id=\"job-result\">{}</pre>",
            pretty(r.to_string().as_bytes())
        );
    }
    let _ = write!(
        out,
        "<h2>Payload</h2><pre id=\"job-payload\">{}</pre>",
        pretty(&job.payload)
    );
    if !job.errors.is_empty() {
        out.push_str("<h2>Errors</h2><ol class=\"errors\">");
        for e in &job.errors {
            let _ = write!(
                out,
                "<li><time>{}</time> <span class=\"err\">{}</span></li>",
                time(e.at_ms),
                escape(&e.message)
            );
        }
        out.push_str("</ol>");
    }
    if events.is_empty() {
        out.push_str("<h2>Timeline</h2><ol class=\"timeline\" data-from=\"record\">");
        for (at, what) in timeline(job) {
            let _ = write!(out, "<li><time>{}</time> {}</li>", time(at), escape(&what));
        }
    } else {
        // Every transition the dashboard saw, where the record keeps only
        // the first start, the errors and the end. The feed may have begun
        // (or kept events) after the job was enqueued: what the record
        // says of earlier times comes first, and the deadline or due time
        // ahead last.
        out.push_str("<h2>Timeline</h2><ol class=\"timeline\" data-from=\"events\">");
        let first = events[0].at_ms;
        let record = timeline(job);
        let ahead = |what: &str| matches!(what, "lease deadline" | "due");
        for (at, what) in record.iter().filter(|(at, w)| *at < first && !ahead(w)) {
            let _ = write!(out, "<li><time>{}</time> {}</li>", time(*at), escape(what));
        }
        for ev in events {
            let _ = write!(
                out,
                "<li><time>{}</time> <span class=\"event\" data-kind=\"{k}\">{k}</span>",
                time(ev.at_ms),
                k = escape(&ev.kind)
            );
            if let Some(a) = ev.attempt {
                let _ = write!(out, " (attempt {a})");
            }
            if let Some(e) = &ev.error {
                let _ = write!(out, " <span class=\"err\">{}</span>", escape(&excerpt(e, 120)));
            }
            out.push_str("</li>");
        }
        for (at, what) in record.iter().filter(|(_, w)| ahead(w)) {
            let _ = write!(out, "<li><time>{}</time> {}</li>", time(*at), escape(what));
        }
    }
    out.push_str("</ol>");
    out
}

/// The record's timestamps in order: enqueued, first started, each error,
/// a cancel request, finished, and the lease deadline or due time ahead.
pub(crate) fn timeline(job: &JobInfo) -> Vec<(u64, String)> {
    let mut t = vec![(job.created_ms, "enqueued".to_owned())];
    if let Some(ms) = job.first_started_ms {
        t.push((ms, "first started".into()));
    }
    for e in &job.errors {
        t.push((e.at_ms, format!("error: {}", excerpt(&e.message, 80))));
    }
    if let Some(ms) = job.cancel_requested_ms {
        t.push((ms, "cancel requested".into()));
    }
    if let Some(ms) = job.finished_ms {
        t.push((ms, job.state.as_str().to_owned()));
    }
    match (job.state, job.deadline_ms) {
        (JobState::Active, Some(ms)) => t.push((ms, "lease deadline".into())),
        (JobState::Delayed, Some(ms)) => t.push((ms, "due".into())),
        _ => {}
    }
    t.sort_by_key(|(ms, _)| *ms);
    t
}

/// The stylesheet.
pub(crate) async fn css() -> Response {
    asset("text/css; charset=utf-8", include_str!("../assets/dashboard.css"))
}

/// The script: live counts, the charts, following a job.
pub(crate) async fn js() -> Response {
    asset("text/javascript; charset=utf-8", include_str!("../assets/dashboard.js"))
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    // Short: a new version of the crate must not meet an old script for long.
    h.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
    r
}
