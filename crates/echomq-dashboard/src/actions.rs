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
use crate::html::segment;
use crate::pages::{Failure, base_of, open};

/// The form every action posts.
#[derive(Deserialize)]
pub(crate) struct Token {
    csrf: Option<String>,
}

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
    let loc = format!("{up}{to}?done={done}");
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(&loc) {
        r.headers_mut().insert(LOCATION, v);
    }
    r
}

/// `POST /queues/{queue}/{action}`: pause, resume.
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
        other => return Err(Failure::NotFound(format!("no action {other}"))),
    };
    tracing::info!(queue = %name, outcome = done, "queue action from the dashboard");
    Ok(back(
        &base_of(&uri, &original).up,
        &format!("queues/{}", segment(&name)),
        done,
    ))
}

fn moved(m: &Moved, done: &'static str) -> &'static str {
    match m {
        Moved::Done => done,
        Moved::NotFound => "not-found",
        Moved::DedupHeld => "dedup-held",
        _ => "wrong-state",
    }
}

/// `POST /queues/{queue}/jobs/{id}/{action}`: retry, remove, cancel, promote.
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
    let qpath = format!("queues/{}", segment(&name));
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
