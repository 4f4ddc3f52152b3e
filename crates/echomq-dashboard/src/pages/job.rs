//! `/{queue}/jobs/{id}`: a job's record, timeline and actions.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use echomq::{JobInfo, JobState};

use super::{Done, Failure, base_of, html, job_buttons, notice, open};
use crate::Shared;
use crate::feed::FeedEvent;
use crate::html::{escape, excerpt, page, pretty, queue_path, segment, time};

/// `/{queue}/jobs/{id}`: a job's record.
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
    let qlink = format!("{up}{}", queue_path(&name));
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
        // A completed job's error is an earlier attempt's: not shown as a fault.
        if job.state == echomq::JobState::Completed {
            item("earlier error", format!("<span class=\"past\">{}</span>", escape(err)));
        } else {
            item("last error", format!("<span class=\"err\">{}</span>", escape(err)));
        }
    }
    out.push_str("</dl>");
    if let Some(p) = &job.progress {
        let _ = write!(
            out,
            "<h2>Progress</h2><pre id=\"job-progress\">{}</pre>",
            pretty(p.to_string().as_bytes())
        );
    }
    if let Some(c) = &job.checkpoint {
        let _ = write!(
            out,
            "<h2>Checkpoint</h2><p class=\"hint\">Where the next attempt resumes.</p><pre id=\"job-checkpoint\">{}</pre>",
            pretty(c.to_string().as_bytes())
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
    // the expiry matters until the job finished (then its state says it)
    if let Some(ms) = job.expires_at_ms.filter(|_| !job.state.is_terminal()) {
        t.push((ms, "expires unless started".into()));
    }
    match (job.state, job.deadline_ms) {
        (JobState::Active, Some(ms)) => t.push((ms, "lease deadline".into())),
        (JobState::Delayed, Some(ms)) => t.push((ms, "due".into())),
        _ => {}
    }
    t.sort_by_key(|(ms, _)| *ms);
    t
}
