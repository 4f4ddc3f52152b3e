//! The old paths of queue pages, `/queues/{queue}/…`: a permanent
//! redirect (308, so a form posted to one posts again to the new one) to
//! the same page at `/{queue}/…`, relative like every link.

use axum::extract::{OriginalUri, Path};
use axum::http::header::LOCATION;
use axum::http::{HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use crate::html::queue_path;

/// `ANY /queues/{queue}/{*rest}`.
pub(crate) async fn moved(Path(params): Path<Vec<(String, String)>>, uri: Uri, original: OriginalUri) -> Response {
    let queue = params
        .iter()
        .find(|(k, _)| k == "queue")
        .map(|(_, v)| v.as_str())
        .unwrap_or_default();
    // The rest as sent, still encoded: a job id's `/` stays `%2F`.
    let raw = uri.path().strip_prefix("/queues/").unwrap_or_default();
    let rest = raw.split_once('/').map(|(_, r)| r);
    // From `…/queues/Q/a/b` the way back to the mount point climbs the
    // directories `queues/`, `Q/`, `a/`: one per segment after `queues`.
    let depth = raw.matches('/').count() + 1;
    let mut to = "../".repeat(depth);
    to.push_str(&queue_path(queue));
    if let Some(rest) = rest {
        to.push('/');
        to.push_str(rest);
    }
    if let Some(q) = original.query() {
        to.push('?');
        to.push_str(q);
    }
    let mut r = StatusCode::PERMANENT_REDIRECT.into_response();
    if let Ok(v) = HeaderValue::from_str(&to) {
        r.headers_mut().insert(LOCATION, v);
    }
    r
}
