//! `/{queue}`: the queue's history charts, one state's jobs a page at a
//! time, and the latest events; `/{queue}/find` and `/{queue}/search`.

use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::Arc;

use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use echomq::JobState;
use echomq::admin::{Filter, ListCursor, MAX_SEARCH_SCAN, Span};
use serde::Deserialize;

use super::{Failure, STATES, base_of, button, html, job_buttons, notice, open, token_field};
use crate::Shared;
use crate::feed::FeedEvent;
use crate::html::{escape, excerpt, page, queue_path, segment, time};

/// The query of a queue's page.
#[derive(Deserialize)]
pub(crate) struct Listing {
    state: Option<String>,
    after: Option<String>,
    done: Option<String>,
    /// How many jobs a bulk action changed.
    n: Option<u64>,
    /// The cursors of the pages before this one (for "previous page").
    prev: Option<String>,
    /// The history charts' span: `1h` (the default), `24h`, `7d`.
    span: Option<String>,
}

/// How many earlier pages a listing's "previous page" links remember (the
/// URL carries their cursors); further back, "first page" goes on.
const PREV_KEPT: usize = 20;

/// `/{queue}`: one state's jobs, a page at a time.
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
    let span = match q.span.as_deref() {
        None | Some("") => Span::Hour,
        Some(s) => s.parse::<Span>()?,
    };
    let c = queue.counts().await?;
    let listing = queue.list(state, after.as_ref(), shared.opts.page_size).await?;
    let qs = segment(&name);
    let here = format!("{up}{}", queue_path(&name));

    let mut tabs = String::from("<nav class=\"tabs\">");
    for st in STATES {
        let _ = write!(
            tabs,
            "<a href=\"{here}?state={s}\" data-state=\"{s}\"{cur}>{s} <span class=\"num\" data-count=\"{s}\">{n}</span></a>",
            s = st.as_str(),
            n = c.of(st),
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
            "<tr data-job=\"{id}\"><td class=\"pick\"><input type=\"checkbox\" name=\"id\" value=\"{id}\" form=\"bulk\" \
             aria-label=\"select {id}\"></td><td><a href=\"{link}\">{id}</a></td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td>{when}</td><td class=\"{}\">{}</td><td class=\"actions\">",
            job.attempts,
            job.failures,
            // a completed job's error is an earlier attempt's: not red
            if job.state == echomq::JobState::Completed {
                "past"
            } else {
                "err"
            },
            escape(&excerpt(job.last_error.as_deref().unwrap_or(""), 120)),
        );
        rows.push_str(&job_buttons(&shared, &link, job.state));
        rows.push_str("</td></tr>");
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=\"7\" class=\"empty\">No jobs here.</td></tr>".into();
    }
    let when_head = match state {
        JobState::Delayed => "due",
        JobState::Active => "lease until",
        JobState::Pending => "enqueued",
        _ => "finished",
    };
    // The pages before this one: their cursors, oldest first, joined by
    // newlines (ids hold no control characters), the last PREV_KEPT.
    let prev: Vec<&str> = q
        .prev
        .as_deref()
        .map_or_else(Vec::new, |p| p.split('\n').filter(|c| !c.is_empty()).collect());
    let link = |after: Option<&str>, prev: &[&str]| {
        let mut url = format!("{here}?state={}", state.as_str());
        if let Some(a) = after {
            let _ = write!(url, "&amp;after={}", segment(a));
        }
        let kept = &prev[prev.len().saturating_sub(PREV_KEPT)..];
        if !kept.is_empty() {
            let _ = write!(url, "&amp;prev={}", segment(&kept.join("\n")));
        }
        url
    };
    let mut paging = String::from("<p class=\"paging\">");
    if after.is_some() {
        let _ = write!(paging, "<a href=\"{}\" rel=\"first\">first page</a> ", link(None, &[]));
        let (back, rest) = match prev.split_last() {
            Some((last, rest)) => (Some(*last), rest),
            None => (None, &[][..]),
        };
        let _ = write!(
            paging,
            "<a href=\"{}\" rel=\"prev\">previous page</a> ",
            link(back, rest)
        );
    }
    if let Some(next) = &listing.next {
        let mut before = prev.clone();
        let here_after = q.after.clone().unwrap_or_default();
        if !here_after.is_empty() {
            before.push(&here_after);
        }
        let _ = write!(
            paging,
            "<a href=\"{}\" rel=\"next\">next page</a>",
            link(Some(&next.to_string()), &before)
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
    let bulk = bulk_forms(&shared, &here, state, listing.jobs.is_empty());
    let history = history(&queue, &here, state, span).await;
    let search = search_form(&here, state, &Searched::default());
    let notice = match (q.n, q.done.as_deref()) {
        (Some(n), Some(done)) => format!(
            "<p class=\"notice\" role=\"status\">{n} {} {}.</p>",
            if n == 1 { "job" } else { "jobs" },
            match done {
                "retried" => "moved back to pending",
                "promoted" => "moved to pending, to run now",
                "cancelled" => "cancelled (a running one by request)",
                _ => "removed",
            }
        ),
        _ => notice(q.done.as_deref()),
    };
    let body = format!(
        "{notice}<h1>{n} <span class=\"badge paused\" data-paused{hidden}>paused</span> {control}\
         <form method=\"get\" action=\"{here}/find\" class=\"find\"><input name=\"q\" placeholder=\"job, dedup or flow id\" \
         aria-label=\"find a job by id or dedup id, or a flow by id\"><button type=\"submit\">find</button></form></h1>{history}{tabs}{search}{bulk}\
         <table id=\"jobs\" data-state=\"{st}\"><thead><tr><th scope=\"col\" class=\"pick\"></th><th scope=\"col\">id</th><th scope=\"col\" class=\"num\">attempts</th>\
         <th scope=\"col\" class=\"num\">failures</th><th scope=\"col\">{when_head}</th><th scope=\"col\">last error</th>\
         <th scope=\"col\"></th></tr></thead><tbody>{rows}</tbody></table>{paging}{feed}",
        n = escape(&name),
        hidden = if c.paused { "" } else { " hidden" },
        st = state.as_str(),
    );
    let crumbs = format!(
        " / <a href=\"{here}\">{}</a> <a class=\"sub\" href=\"{here}/schedules\">schedules</a> \
         <a class=\"sub\" href=\"{here}/lanes\">lanes</a> <a class=\"sub\" href=\"{here}/workers\">workers</a>",
        escape(&name)
    );
    let live = format!("{up}events?queue={qs}");
    Ok(html(
        StatusCode::OK,
        page(&shared.opts.title, &base, &crumbs, &live, &body),
    ))
}

/// The history section: the span switches and the three charts. A
/// history that cannot be read is said so, the rest of the page shown.
async fn history(queue: &echomq::Queue, here: &str, state: JobState, span: Span) -> String {
    let mut out =
        String::from("<section id=\"history\"><h2>History</h2><nav class=\"spans\" aria-label=\"history span\">");
    for s in Span::ALL {
        let _ = write!(
            out,
            "<a href=\"{here}?state={st}&amp;span={s}\" data-span=\"{s}\"{cur}>{s}</a>",
            st = state.as_str(),
            cur = if s == span { " aria-current=\"page\"" } else { "" },
        );
    }
    out.push_str("</nav>");
    match queue.history(span).await {
        Ok(buckets) => {
            out.push_str("<div class=\"charts\">");
            out.push_str(&crate::chart::charts(span, &buckets));
            let _ = write!(
                out,
                "</div><p class=\"hint\">Counted by the queue's workers and written every {} s with their \
                 announcements (UTC).</p>",
                echomq::admin::ANNOUNCE_EVERY.as_secs()
            );
        }
        Err(e) => {
            tracing::debug!(queue = %queue.name(), error = %e, "dashboard could not read the queue's history");
            let _ = write!(
                out,
                "<p class=\"err\">The history could not be read: {}</p>",
                escape(&e.to_string())
            );
        }
    }
    out.push_str("</section>");
    out
}

/// Jobs one search request reads (`Queue::search`'s bound): a search of
/// a larger state goes on a page at a time.
pub(crate) const SEARCH_SCAN: usize = 1_000;
const _: () = assert!(SEARCH_SCAN <= MAX_SEARCH_SCAN);

/// The query of a search: the state searched, its conditions and where
/// it goes on from.
#[derive(Deserialize, Default)]
pub(crate) struct Searched {
    state: Option<String>,
    kind: Option<String>,
    lane: Option<String>,
    error: Option<String>,
    after: Option<String>,
}

impl Searched {
    /// A condition as typed, trimmed; `None` when left empty.
    fn field(v: &Option<String>) -> Option<&str> {
        v.as_deref().map(str::trim).filter(|v| !v.is_empty())
    }

    fn filter(&self) -> Filter {
        let mut f = Filter::new();
        if let Some(k) = Self::field(&self.kind) {
            f = f.kind(k);
        }
        if let Some(l) = Self::field(&self.lane) {
            f = f.lane(l);
        }
        if let Some(e) = Self::field(&self.error) {
            f = f.error(e);
        }
        f
    }

    /// The query string of this search (escaped for an attribute), from `after`.
    fn link(&self, state: JobState, after: Option<&str>) -> String {
        let mut url = format!("?state={}", state.as_str());
        for (k, v) in [("kind", &self.kind), ("lane", &self.lane), ("error", &self.error)] {
            if let Some(v) = Self::field(v) {
                let _ = write!(url, "&amp;{k}={}", segment(v));
            }
        }
        if let Some(a) = after {
            let _ = write!(url, "&amp;after={}", segment(a));
        }
        url
    }
}

/// The search form of a state's tab, filled with `s`'s conditions.
fn search_form(here: &str, state: JobState, s: &Searched) -> String {
    let val = |v: &Option<String>| escape(Searched::field(v).unwrap_or(""));
    format!(
        "<form method=\"get\" action=\"{here}/search\" class=\"search\" role=\"search\">\
         <input type=\"hidden\" name=\"state\" value=\"{st}\">\
         <input name=\"kind\" value=\"{k}\" placeholder=\"kind\" aria-label=\"kind\">\
         <input name=\"lane\" value=\"{l}\" placeholder=\"lane\" aria-label=\"lane\">\
         <input name=\"error\" value=\"{e}\" placeholder=\"error text\" aria-label=\"error text\">\
         <button type=\"submit\" data-action=\"search\">search {st}</button>\
         <span class=\"hint\">reads {SEARCH_SCAN} {st} jobs a page</span></form>",
        st = state.as_str(),
        k = val(&s.kind),
        l = val(&s.lane),
        e = val(&s.error),
    )
}

/// `GET /{queue}/search?state=&kind=&lane=&error=&after=`: the jobs of a
/// state that match, from the next [`SEARCH_SCAN`] of the state's jobs
/// (the server has no index of kinds, lanes or errors: a search reads
/// jobs), with a link to search the next ones.
pub(crate) async fn search(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    uri: Uri,
    original: OriginalUri,
    Query(s): Query<Searched>,
) -> Result<Response, Failure> {
    let base = base_of(&uri, &original);
    let queue = open(&shared, &name).await?;
    let state = match s.state.as_deref() {
        None | Some("") => JobState::Failed,
        Some(st) => STATES
            .into_iter()
            .find(|x| x.as_str() == st)
            .ok_or_else(|| Failure::BadRequest(format!("no state {st}")))?,
    };
    let after = match s.after.as_deref() {
        None | Some("") => None,
        Some(a) => Some(ListCursor::from_str(a)?),
    };
    let filter = s.filter();
    if filter.is_empty() {
        return Err(Failure::BadRequest(
            "give a kind, a lane or an error text to search for".into(),
        ));
    }
    let found = queue.search(state, &filter, after.as_ref(), SEARCH_SCAN).await?;
    let here = format!("{}{}", base.up, queue_path(&name));
    let mut rows = String::new();
    for job in &found.jobs {
        let link = format!("{here}/jobs/{}", segment(&job.id));
        let _ = write!(
            rows,
            "<tr data-job=\"{id}\"><td><a href=\"{link}\">{id}</a></td><td>{kind}</td><td>{lane}</td>\
             <td class=\"num\">{attempts}</td><td class=\"{class}\">{err}</td><td class=\"actions\">",
            id = escape(&job.id),
            kind = escape(job.kind.as_deref().unwrap_or("")),
            lane = escape(job.lane.as_deref().unwrap_or("")),
            attempts = job.attempts,
            class = if job.state == JobState::Completed {
                "past"
            } else {
                "err"
            },
            err = escape(&excerpt(job.last_error.as_deref().unwrap_or(""), 120)),
        );
        rows.push_str(&job_buttons(&shared, &link, job.state));
        rows.push_str("</td></tr>");
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=\"6\" class=\"empty\">No match among the jobs read.</td></tr>".into();
    }
    let from = if after.is_some() { "the next" } else { "the first" };
    let mut paging = String::from("<p class=\"paging\">");
    if after.is_some() {
        let _ = write!(
            paging,
            "<a href=\"{here}/search{}\" rel=\"first\">search from the start</a> ",
            s.link(state, None)
        );
    }
    if let Some(next) = &found.next {
        let _ = write!(
            paging,
            "<a href=\"{here}/search{}\" rel=\"next\">search the next {SEARCH_SCAN}</a>",
            s.link(state, Some(&next.to_string()))
        );
    }
    paging.push_str("</p>");
    let body = format!(
        "<h1>{n}: search</h1>{form}<p class=\"hint\" id=\"searched\" data-scanned=\"{scanned}\" data-found=\"{nf}\">\
         {nf} {matches} among {from} {scanned} {st} jobs read ({end}; at most {SEARCH_SCAN} per page, in the tab's order\
         as the tab lists them).</p><table id=\"found\"><thead><tr><th scope=\"col\">id</th><th scope=\"col\">kind</th>\
         <th scope=\"col\">lane</th><th scope=\"col\" class=\"num\">attempts</th><th scope=\"col\">last error</th>\
         <th scope=\"col\"></th></tr></thead><tbody>{rows}</tbody></table>{paging}",
        n = escape(&name),
        form = search_form(&here, state, &s),
        scanned = found.scanned,
        nf = found.jobs.len(),
        matches = if found.jobs.len() == 1 { "match" } else { "matches" },
        st = state.as_str(),
        end = if found.next.is_some() {
            "more to read"
        } else {
            "to the end of the state"
        },
    );
    let crumbs = format!(
        " / <a href=\"{here}?state={st}\">{}</a> / <a href=\"{here}/search{q}\">search</a>",
        escape(&name),
        st = state.as_str(),
        q = s.link(state, after.as_ref().map(ToString::to_string).as_deref()),
    );
    Ok(html(
        StatusCode::OK,
        page(&shared.opts.title, &base, &crumbs, "", &body),
    ))
}

/// The query of the find form.
#[derive(Deserialize)]
pub(crate) struct Find {
    q: Option<String>,
}

/// `GET /{queue}/find?q=`: the job whose id is `q`, else the job
/// that holds dedup id `q` (a 303 to its page), else the queue's page
/// with a notice. Searching by kind, lane or error text is [`search`]'s.
pub(crate) async fn find(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    uri: Uri,
    original: OriginalUri,
    Query(f): Query<Find>,
) -> Result<Response, Failure> {
    let base = base_of(&uri, &original);
    let queue = open(&shared, &name).await?;
    let q = f.q.unwrap_or_default();
    let q = q.trim();
    let here = format!("{}{}", base.up, queue_path(&name));
    let mut found = None;
    if !q.is_empty() {
        match queue.job(q).await {
            Ok(job) => found = Some(job.id),
            Err(echomq::Error::JobNotFound(_) | echomq::Error::InvalidId { .. }) => {
                found = queue.dedup_holder(q).await.ok().flatten();
            }
            Err(e) => return Err(e.into()),
        }
    }
    // not a job or a dedup id: perhaps a flow
    let flow = match (&found, queue.flow(q)) {
        (None, Ok(f)) if !q.is_empty() => f.status().await.is_ok(),
        _ => false,
    };
    let to = match found {
        Some(id) => format!("{here}/jobs/{}", segment(&id)),
        None if flow => format!("{here}/flows/{}", segment(q)),
        None => format!("{here}?done=no-match"),
    };
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = axum::http::HeaderValue::from_str(&to) {
        r.headers_mut().insert(axum::http::header::LOCATION, v);
    }
    Ok(r)
}

/// The bulk actions of a state's tab: on every job of the state (one
/// button each, a form naming the state), and on the jobs ticked in the
/// list (the `bulk` form the rows' checkboxes belong to).
fn bulk_forms(shared: &Shared, here: &str, state: JobState, empty: bool) -> String {
    if empty {
        return String::new();
    }
    let st = state.as_str();
    let all: &[(&str, &str, &str)] = match state {
        JobState::Failed => &[
            ("retry-all", "retry all failed", ""),
            ("remove-all", "remove all failed", "danger"),
        ],
        JobState::Delayed => &[
            ("run-all", "run all now", ""),
            ("cancel-all", "cancel all delayed", "danger"),
            ("remove-all", "remove all delayed", "danger"),
        ],
        JobState::Pending => &[
            ("cancel-all", "cancel all pending", "danger"),
            ("remove-all", "remove all pending", "danger"),
        ],
        JobState::Active => &[("cancel-all", "cancel all running", "danger")],
        JobState::Completed => &[("remove-all", "remove all completed", "danger")],
        JobState::Expired => &[("remove-all", "remove all expired", "danger")],
        _ => &[("remove-all", "remove all cancelled", "danger")],
    };
    let picked: &[&str] = match state {
        JobState::Failed => &["retry", "remove"],
        JobState::Delayed | JobState::Pending => &["cancel", "remove"],
        JobState::Active => &["cancel"],
        _ => &["remove"],
    };
    let mut out = String::from("<div class=\"bulk\">");
    for (action, label, class) in all {
        let _ = write!(
            out,
            "<form method=\"post\" action=\"{here}/{action}\" class=\"inline\">{}\
             <input type=\"hidden\" name=\"state\" value=\"{st}\">\
             <button type=\"submit\" class=\"{class}\" data-action=\"{action}\">{label}</button></form>",
            token_field(shared)
        );
    }
    let _ = write!(
        out,
        "<form id=\"bulk\" method=\"post\" action=\"{here}/selected\" class=\"inline\">{}\
         <input type=\"hidden\" name=\"state\" value=\"{st}\">",
        token_field(shared)
    );
    for a in picked {
        let class = if *a == "retry" { "" } else { "danger" };
        let _ = write!(
            out,
            "<button type=\"submit\" name=\"action\" value=\"{a}\" class=\"{class}\" data-action=\"{a}-selected\">{a} selected</button>"
        );
    }
    out.push_str("</form></div>");
    out
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
        "<tr data-event=\"{id}\"><td><time>{at}</time></td><td class=\"event\" data-kind=\"{kind}\">{words}</td>\
         <td>{job}</td><td class=\"num\">{attempt}</td><td class=\"err\">{err}</td></tr>",
        id = escape(&ev.id),
        at = time(ev.at_ms),
        kind = escape(&ev.kind),
        words = escape(crate::html::event_words(&ev.kind)),
        attempt = ev.attempt.map(|a| a.to_string()).unwrap_or_default(),
        err = escape(&excerpt(ev.error.as_deref().unwrap_or(""), 120)),
    )
}
