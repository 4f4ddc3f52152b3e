//! OpenTelemetry trace propagation (feature `otel`): a job runs in the
//! trace of the request that enqueued it.
//!
//! With the feature on, and the application's `tracing` subscriber holding
//! a [`tracing-opentelemetry`](https://docs.rs/tracing-opentelemetry) layer:
//!
//! - **Enqueue.** Every enqueue ([`Queue::enqueue`](crate::Queue::enqueue),
//!   `enqueue_with`, `enqueue_bulk`, `enqueue_bulk_with`, `enqueue_job` and
//!   its siblings) that was not given a
//!   [`traceparent`](crate::EnqueueOptions::traceparent) takes the
//!   OpenTelemetry context of the current `tracing` span and, if it holds a
//!   valid span context (sampled or not), stores it with the job as a W3C
//!   traceparent. echomq formats it itself (version `00`, the trace id, the
//!   span id and the sampled flag), so no global propagator has to be
//!   installed; `tracestate` is not carried. An explicit `traceparent`
//!   wins. Cron jobs are enqueued by the workers' maintenance, not by a
//!   request, and carry none.
//! - **Worker.** A [`Consumer`](crate::Consumer) or
//!   [`Worker`](crate::Worker) makes the span `job` of a job that carries a
//!   traceparent (whoever set it) a child of that remote span context, so
//!   the handler's spans, and everything under them, belong to the
//!   request's trace. The span that reports the job's settlement is
//!   parented the same way. A handler's own enqueue happens inside the job
//!   span, so a follow-up job joins the same trace, one level down.
//!
//! **Parent, not link.** One trace from the request through the job is
//! what users of the Sidekiq and BullMQ OpenTelemetry integrations get, and
//! what a trace viewer shows as one waterfall (the queue wait is the gap
//! between the enqueue and the job span). Its cost: a job that runs much
//! later, or many times, stretches the request's trace. A link (a trace of
//! its own per attempt that points back to the request) is possible too:
//! the handler opens a root span and links it to the job's traceparent
//! (the job span itself stays in the request's trace):
//!
//! ```
//! use tracing_opentelemetry::OpenTelemetrySpanExt;
//!
//! fn linked_span(job: &echomq::Job<String>) -> tracing::Span {
//!     let span = tracing::info_span!(parent: None, "send_email");
//!     if let Some(request) = job.traceparent().and_then(echomq::otel::span_context) {
//!         span.add_link(request);
//!     }
//!     span
//! }
//! ```
//!
//! **Nothing to install but your own layer.** The feature reads and sets
//! span contexts through tracing-opentelemetry's `OpenTelemetrySpanExt`;
//! it needs no global tracer provider or propagator. Without a
//! tracing-opentelemetry layer (or with the spans filtered out), an
//! enqueue stores no traceparent and the worker's calls do nothing: no
//! error, no panic. The layer must come from the tracing-opentelemetry
//! version echomq is built with (0.34, over opentelemetry 0.33): a layer of
//! another version is a different type, which echomq cannot see, so it
//! would behave as if there were none.
//!
//! Without the feature none of this happens and the crates are not built;
//! [`EnqueueOptions::traceparent`](crate::EnqueueOptions::traceparent) and
//! [`Job::traceparent`](crate::Job::traceparent) work the same either way.

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C traceparent of the current `tracing` span's OpenTelemetry
/// context, if there is a valid one (none without an OpenTelemetry layer,
/// outside any span, or in a span the layer does not see).
pub(crate) fn current_traceparent() -> Option<String> {
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return None;
    }
    // Only the sampled bit is defined by the W3C format version 00.
    let flags = sc.trace_flags().to_u8() & TraceFlags::SAMPLED.to_u8();
    Some(format!("00-{}-{}-{flags:02x}", sc.trace_id(), sc.span_id()))
}

/// Makes `span` a child of the remote span context in `traceparent` (a
/// checked W3C traceparent, as every stored one is). `span` must not have
/// been entered yet. Does nothing without an OpenTelemetry layer, or when
/// the span is filtered out.
pub(crate) fn set_parent(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(cx) = traceparent.and_then(remote_context) else {
        return;
    };
    // The errors all mean "no OpenTelemetry span here" (no layer, the span
    // disabled): nothing to join, and nothing the job should fail for.
    let _ = span.set_parent(cx);
}

/// The context of a remote parent span, from a W3C traceparent.
fn remote_context(traceparent: &str) -> Option<Context> {
    span_context(traceparent).map(|sc| Context::new().with_remote_span_context(sc))
}

/// The remote span context a W3C traceparent names (a job's
/// [`Job::traceparent`](crate::Job::traceparent)), to link a span to or to
/// parent one on. `None` for anything but a valid version `00` traceparent.
/// Only the sampled flag is kept; the trace state is empty (echomq does not
/// carry `tracestate`).
///
/// ```
/// let sc = echomq::otel::span_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
/// assert!(sc.is_remote() && sc.is_sampled());
/// assert!(echomq::otel::span_context("00-abc-def-01").is_none());
/// ```
pub fn span_context(traceparent: &str) -> Option<SpanContext> {
    // The same check an enqueue makes (lengths, lowercase), which the
    // parsers below are laxer about.
    crate::validate::traceparent(traceparent).ok()?;
    let mut parts = traceparent.split('-');
    let (Some("00"), Some(trace), Some(span), Some(flags), None) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let sc = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(flags & TraceFlags::SAMPLED.to_u8()),
        true,
        TraceState::default(),
    );
    sc.is_valid().then_some(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A stored traceparent becomes a remote parent with the same ids and flag.
    #[test]
    fn a_traceparent_becomes_a_remote_context() {
        let cx = remote_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        let span = cx.span();
        let sc = span.span_context();
        assert!(sc.is_remote() && sc.is_sampled());
        assert_eq!(sc.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(remote_context("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none());
        assert!(remote_context("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").is_none());
        assert!(remote_context("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01").is_none());
        assert!(remote_context("00-abc-00f067aa0ba902b7-01").is_none());
    }

    // Without an OpenTelemetry layer, an enqueue finds no context to store.
    #[test]
    fn no_layer_no_traceparent() {
        let _span = tracing::info_span!("request").entered();
        assert_eq!(current_traceparent(), None);
    }
}
