//! `echomq::Error` as an axum response (feature `axum`).

use axum_core::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use super::Error;

/// The status of [`Error::http_status`] with a JSON body
/// `{"error": TEXT, "status": CODE}`, so a handler can return
/// `Result<_, echomq::Error>` and use `?` on every echomq call.
///
/// A client error (4xx: a bad id or option, a payload too large, a job not
/// found, a lease lost...) carries the error's text, which names what was
/// wrong. A server error (5xx) carries only `"internal error"`, or
/// `"unavailable"` with a `Retry-After: 1` for a transient one (the server
/// unreachable, a timeout, a failover in progress), so server addresses
/// and internals do not reach the client; the error itself is logged at
/// `error` level (`warn` for a transient one) with `tracing`.
///
/// ```
/// # #[cfg(feature = "axum")]
/// # fn demo() {
/// use axum_core::response::IntoResponse;
/// let resp = echomq::Error::JobNotFound("42".into()).into_response();
/// assert_eq!(resp.status(), 404);
/// # }
/// ```
impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let code = self.http_status();
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let transient = self.is_transient();
        let text = if status.is_server_error() {
            if transient {
                tracing::warn!(error = %self, status = code, "echomq call failed (transient)");
                "unavailable".to_owned()
            } else {
                tracing::error!(error = %self, status = code, "echomq call failed");
                "internal error".to_owned()
            }
        } else {
            self.to_string()
        };
        let body = serde_json::json!({"error": text, "status": code}).to_string();
        let mut resp = (status, body).into_response();
        let headers = resp.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if transient {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}
