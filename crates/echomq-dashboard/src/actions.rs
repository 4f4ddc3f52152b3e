//! The POST actions: each checks the CSRF token and the request's origin,
//! acts through the library's admin API, and redirects (303) back to a
//! page with a notice.

use std::sync::Arc;

use axum::Form;
use axum::extract::{OriginalUri, Path, State};
use axum::http::header::LOCATION;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use echomq::admin::{Cancel, Moved};
use serde::Deserialize;

use crate::Shared;
use crate::html::{queue_path, segment};
use crate::pages::{Failure, base_of, open};

/// The form every action posts (a bulk action on a state names it).
#[derive(Deserialize)]
pub(crate) struct Token {
    csrf: Option<String>,
    state: Option<String>,
}

/// The most jobs one bulk action on a state goes through (in pages of
/// BULK_PAGE): a bound on one request's work; press again for more.
const BULK_MAX: usize = 10_000;
const BULK_PAGE: usize = 500;

/// A 403 unless the CSRF checks pass.
fn refused(shared: &Shared, headers: &HeaderMap, form: &Token) -> Option<Response> {
    let why = shared.csrf.check(headers, form.csrf.as_deref()).err()?;
    tracing::warn!(?why, "dashboard refused a POST (CSRF check)");
    Some(
        (
            StatusCode::FORBIDDEN,
            "forbidden: cross-site request or missing token\n",
        )
            .into_response(),
    )
}

/// A 303 to `to` (relative to the dashboard's root, through `up`).
fn back(up: &str, to: &str, done: &str) -> Response {
    let sep = if to.contains('?') { '&' } else { '?' };
    let loc = format!("{up}{to}{sep}done={done}");
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(&loc) {
        r.headers_mut().insert(LOCATION, v);
    }
    r
}

/// `POST /{queue}/{action}`: pause, resume, and the bulk actions on
/// a state: `retry-all` (failed), `run-all` (delayed), `remove-all` and
/// `cancel-all` (of the form's `state`).
pub(crate) async fn queue(
    State(shared): State<Arc<Shared>>,
    Path((name, action)): Path<(String, String)>,
    uri: Uri,
    original: OriginalUri,
    headers: HeaderMap,
    Form(form): Form<Token>,
) -> Result<Response, Failure> {
    if let Some(r) = refused(&shared, &headers, &form) {
        return Ok(r);
    }
    let queue = open(&shared, &name).await?;
    let done = match action.as_str() {
        "pause" => {
            queue.pause().await?;
            "paused"
        }
        "resume" => {
            queue.resume().await?;
            "resumed"
        }
        "retry-all" => {
            let n = queue.retry_all_failed().await?;
            return Ok(bulk_back(&uri, &original, &name, "failed", "retried", n));
        }
        "run-all" => {
            let n = queue.promote_all().await?;
            return Ok(bulk_back(&uri, &original, &name, "delayed", "promoted", n));
        }
        "remove-all" | "cancel-all" => {
            let state = crate::pages::STATES
                .into_iter()
                .find(|s| Some(s.as_str()) == form.state.as_deref())
                .ok_or_else(|| Failure::BadRequest("no such state".into()))?;
            let cancel = action == "cancel-all";
            if state == echomq::JobState::Active && !cancel || cancel && state.is_terminal() {
                return Err(Failure::BadRequest(format!("no {action} for {} jobs", state.as_str())));
            }
            let n = bulk(&queue, state, cancel).await?;
            let done = if cancel { "cancelled" } else { "removed" };
            return Ok(bulk_back(&uri, &original, &name, state.as_str(), done, n));
        }
        other => return Err(Failure::NotFound(format!("no action {other}"))),
    };
    tracing::info!(queue = %name, outcome = done, "queue action from the dashboard");
    Ok(back(&base_of(&uri, &original).up, &queue_path(&name), done))
}

/// Removes (or cancels) the jobs in `state`, page by page, up to
/// BULK_MAX; answers how many it did.
async fn bulk(queue: &echomq::Queue, state: echomq::JobState, cancel: bool) -> Result<u64, Failure> {
    // Removed and cancelled waiting jobs leave the state's set, so each
    // page is its head again; an active job asked to cancel stays, so
    // those are paged through.
    let stays = state == echomq::JobState::Active;
    let mut done = 0u64;
    let mut seen = 0usize;
    let mut after = None;
    while seen < BULK_MAX {
        let page = queue.list(state, after.as_ref(), BULK_PAGE).await?;
        if page.jobs.is_empty() {
            break;
        }
        seen += page.jobs.len();
        let ids: Vec<&str> = page.jobs.iter().map(|j| j.id.as_str()).collect();
        let changed = apply(queue, &ids, if cancel { "cancel" } else { "remove" }).await?;
        done += changed;
        if stays {
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        } else if changed == 0 {
            // what is left there cannot be moved (it changed state meanwhile)
            break;
        }
    }
    Ok(done)
}

/// Applies `action` (retry, remove, cancel) to `ids`; answers how many it
/// changed (the others were in another state by then, or gone).
async fn apply(queue: &echomq::Queue, ids: &[&str], action: &str) -> Result<u64, Failure> {
    let n = match action {
        "retry" => queue
            .retry_failed(ids)
            .await?
            .iter()
            .filter(|(_, m)| matches!(m, Moved::Done))
            .count(),
        "remove" => queue
            .remove(ids)
            .await?
            .iter()
            .filter(|(_, r)| matches!(r, Ok(Moved::Done)))
            .count(),
        "cancel" => queue
            .cancel_many(ids)
            .await?
            .iter()
            .filter(|(_, r)| matches!(r, Ok(Cancel::Cancelled | Cancel::Requested)))
            .count(),
        other => return Err(Failure::NotFound(format!("no action {other}"))),
    };
    Ok(n as u64)
}

/// Back to the state's tab of the queue with how many jobs a bulk action changed.
fn bulk_back(uri: &Uri, original: &OriginalUri, name: &str, state: &str, done: &str, n: u64) -> Response {
    tracing::info!(queue = %name, outcome = done, jobs = n, "bulk action from the dashboard");
    back(
        &base_of(uri, original).up,
        &format!("{}?state={state}&n={n}", queue_path(name)),
        done,
    )
}

/// `POST /{queue}/selected`: `action` (retry, remove, cancel) on
/// the jobs ticked in the list (`id`, repeated).
pub(crate) async fn selected(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    uri: Uri,
    original: OriginalUri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, Failure> {
    let mut csrf = None;
    let mut action = String::new();
    let mut state = String::new();
    let mut ids = Vec::new();
    for (k, v) in form_urlencoded::parse(&body) {
        match &*k {
            "csrf" => csrf = Some(v.into_owned()),
            "action" => action = v.into_owned(),
            "state" => state = v.into_owned(),
            "id" => ids.push(v.into_owned()),
            _ => {}
        }
    }
    let token = Token { csrf, state: None };
    if let Some(r) = refused(&shared, &headers, &token) {
        return Ok(r);
    }
    if ids.len() > BULK_PAGE {
        return Err(Failure::BadRequest(format!("at most {BULK_PAGE} jobs at once")));
    }
    let queue = open(&shared, &name).await?;
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let n = if refs.is_empty() {
        0
    } else {
        apply(&queue, &refs, &action).await?
    };
    let done = match action.as_str() {
        "retry" => "retried",
        "remove" => "removed",
        _ => "cancelled",
    };
    let state = crate::pages::STATES
        .into_iter()
        .find(|s| s.as_str() == state)
        .map_or("failed", |s| s.as_str());
    Ok(bulk_back(&uri, &original, &name, state, done, n))
}

fn moved(m: &Moved, done: &'static str) -> &'static str {
    match m {
        Moved::Done => done,
        Moved::NotFound => "not-found",
        Moved::DedupHeld => "dedup-held",
        _ => "wrong-state",
    }
}

/// `POST /{queue}/jobs/{id}/{action}`: retry, remove, cancel, promote.
pub(crate) async fn job(
    State(shared): State<Arc<Shared>>,
    Path((name, id, action)): Path<(String, String, String)>,
    uri: Uri,
    original: OriginalUri,
    headers: HeaderMap,
    Form(form): Form<Token>,
) -> Result<Response, Failure> {
    if let Some(r) = refused(&shared, &headers, &form) {
        return Ok(r);
    }
    let queue = open(&shared, &name).await?;
    let base = base_of(&uri, &original);
    let up = &base.up;
    let qpath = queue_path(&name);
    let jpath = format!("{qpath}/jobs/{}", segment(&id));
    let first = |v: Vec<(String, Moved)>| v.into_iter().next().map(|(_, m)| m).unwrap_or(Moved::NotFound);
    let done = match action.as_str() {
        "retry" => moved(&first(queue.retry_failed(&[&id]).await?), "retried"),
        "promote" => moved(&first(queue.promote(&[&id]).await?), "promoted"),
        "cancel" => match queue.cancel(&id).await {
            Ok(Cancel::Cancelled) => "cancelled",
            Ok(Cancel::Requested) => "cancel-requested",
            Ok(_) => "finished",
            Err(echomq::Error::JobNotFound(_)) => "not-found",
            Err(e) => return Err(e.into()),
        },
        "remove" => {
            let r = queue.remove(&[&id]).await?.into_iter().next().map(|(_, r)| r);
            match r {
                Some(Ok(Moved::Done)) => {
                    tracing::info!(queue = %name, job_id = %id, "removed from the dashboard");
                    return Ok(back(up, &qpath, "removed"));
                }
                Some(Ok(m)) => moved(&m, "removed"),
                Some(Err(echomq::Error::JobActive(_))) => "active",
                Some(Err(e)) => return Err(e.into()),
                None => "not-found",
            }
        }
        other => return Err(Failure::NotFound(format!("no action {other}"))),
    };
    tracing::info!(queue = %name, job_id = %id, action = %action, outcome = done, "job action from the dashboard");
    Ok(back(up, &jpath, done))
}

/// `POST /{queue}/schedules/{name}/{action}`: pause, resume, run.
pub(crate) async fn schedule(
    State(shared): State<Arc<Shared>>,
    Path((queue_name, name, action)): Path<(String, String, String)>,
    uri: Uri,
    original: OriginalUri,
    headers: HeaderMap,
    Form(form): Form<Token>,
) -> Result<Response, Failure> {
    if let Some(r) = refused(&shared, &headers, &form) {
        return Ok(r);
    }
    let queue = open(&shared, &queue_name).await?;
    let r = match action.as_str() {
        "pause" => queue.pause_schedule(&name).await.map(|_| "schedule-paused"),
        "resume" => queue.resume_schedule(&name).await.map(|_| "schedule-resumed"),
        "run" => queue.run_schedule_now(&name).await.map(|_| "schedule-run"),
        other => return Err(Failure::NotFound(format!("no action {other}"))),
    };
    let done = match r {
        Ok(done) => done,
        Err(echomq::Error::InvalidOption { name: "schedule", .. }) => "no-schedule",
        Err(e) => return Err(e.into()),
    };
    tracing::info!(queue = %queue_name, schedule = %name, outcome = done, "schedule action from the dashboard");
    Ok(back(
        &base_of(&uri, &original).up,
        &format!("{}/schedules", queue_path(&queue_name)),
        done,
    ))
}
