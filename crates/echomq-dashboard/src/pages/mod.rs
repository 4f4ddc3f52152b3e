//! The pages: queues, a queue's jobs per state, a job.
//!
//! One file per page: `queues.rs` (the index), `queue.rs`, `job.rs`,
//! `flow.rs`, `schedules.rs`, `lanes.rs`, `workers.rs`; what
//! they share (the response, failures, forms, the assets) is here.

mod flow;
mod job;
mod lanes;
mod queue;
mod queues;
mod schedules;
mod workers;

use axum::extract::OriginalUri;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use echomq::{JobState, Queue};
use serde::Deserialize;

use crate::Shared;
use crate::html::{Base, base, escape};
pub(crate) use flow::flow;
pub(crate) use job::job;
pub(crate) use lanes::lanes;
pub(crate) use queue::{find, queue, search};
pub(crate) use queues::index;
pub(crate) use schedules::schedules;
pub(crate) use workers::workers;

/// The states, in the order tabs and columns show them.
pub(crate) const STATES: [JobState; 7] = JobState::ALL;

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
        Some("promoted") => "Moved to pending: it runs at the next free slot.",
        Some("paused") => "Paused: no new claims until resumed.",
        Some("resumed") => "Resumed.",
        Some("not-found") => "No such job any more.",
        Some("no-match") => "No job has that id, and no job holds that dedup id.",
        Some("schedule-paused") => "Paused: the schedule makes no job until resumed.",
        Some("schedule-resumed") => "Resumed: the ticks that passed while paused are skipped.",
        Some("schedule-run") => "Its job is enqueued now.",
        Some("no-schedule") => "No such schedule any more.",
        Some("wrong-state") => "Nothing done: the job is not in a state this acts on.",
        Some("dedup-held") => "Not retried: another job holds its dedup id now; retry it once that job has finished.",
        Some("finished") => "Nothing done: the job has already finished.",
        Some("active") => "Nothing done: the job is running (cancel it first).",
        _ => return String::new(),
    };
    format!("<p class=\"notice\" role=\"status\">{text}</p>")
}

/// The hidden CSRF field of every form.
pub(super) fn token_field(shared: &Shared) -> String {
    format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        escape(shared.csrf.token())
    )
}

/// A one-button POST form.
fn button(shared: &Shared, action: &str, label: &str, class: &str) -> String {
    button_as(shared, action, label, label, class)
}

/// A one-button POST form whose button says `label` and is named `name`
/// (its `data-action`).
pub(super) fn button_as(shared: &Shared, action: &str, label: &str, name: &str, class: &str) -> String {
    format!(
        "<form method=\"post\" action=\"{action}\" class=\"inline\">{}\
         <button type=\"submit\" class=\"{class}\" data-action=\"{name}\">{label}</button></form>",
        token_field(shared)
    )
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
        // "promote" is the API's word; the page says what it does
        let label = if *a == "promote" { "run now" } else { a };
        out.push_str(&button_as(shared, &format!("{link}/{a}"), label, a, class));
    }
    out
}

/// The notice query every page takes.
#[derive(Deserialize)]
pub(crate) struct Done {
    pub(super) done: Option<String>,
}

/// The stylesheet.
pub(crate) async fn css() -> Response {
    asset("text/css; charset=utf-8", include_str!("../../assets/dashboard.css"))
}

/// The script: live counts, the charts, following a job.
pub(crate) async fn js() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("../../assets/dashboard.js"),
    )
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
