//! Feature `otel`: the enqueuing span's OpenTelemetry context travels with
//! the job, and the handler runs in that trace.
//!
//! One tracer provider for the whole test binary, its spans collected in
//! memory by a small exporter, behind a tracing-opentelemetry layer set as
//! the global default subscriber: the consumer's tasks run on whatever
//! runtime thread, and must reach the layer from every one of them. Each
//! test finds its own spans by trace id.
#![cfg(feature = "otel")]

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{eventually, raw, setup};
use echomq::{Consumer, EnqueueOptions, Job};
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing::{Instrument, info_span};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// Every span the provider has ended, in the order they ended.
#[derive(Debug, Clone, Default)]
struct Collected(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Collected {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

impl Collected {
    /// The ended spans of one trace.
    fn trace(&self, trace: TraceId) -> Vec<SpanData> {
        let spans = self.0.lock().unwrap();
        spans
            .iter()
            .filter(|s| s.span_context.trace_id() == trace)
            .cloned()
            .collect()
    }
}

/// Installs the OpenTelemetry layer once for this binary; returns the spans.
fn collected() -> &'static Collected {
    static SPANS: OnceLock<Collected> = OnceLock::new();
    SPANS.get_or_init(|| {
        let spans = Collected::default();
        // The simple processor exports each span as it ends: no flush to wait for.
        let provider = SdkTracerProvider::builder().with_simple_exporter(spans.clone()).build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("echomq-test"));
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer)).unwrap();
        spans
    })
}

/// The `tp` field of job `id` as stored, read with a raw connection.
async fn stored_tp(server: &echomq::server::LocalServer, queue: &str, id: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(format!("emq:{{{queue}}}:job:{id}"))
        .arg("tp")
        .query_async(&mut raw(server).await)
        .await
        .unwrap()
}

/// Runs a consumer whose handler works in a span `handler_work` until a
/// handler span of `trace` and its parents up to `top` (the parent the
/// chain must end at) have ended (at most 10 s); returns the trace's spans.
async fn run_handler(queue: &echomq::Queue, spans: &Collected, trace: TraceId, top: SpanId) -> Vec<SpanData> {
    let c = Consumer::new(queue.clone(), |_job: Job<u32>| {
        async { Ok(()) }.instrument(info_span!("handler_work"))
    })
    .spawn()
    .unwrap();
    let ended = || chain_of(&spans.trace(trace), "handler_work").is_some_and(|(_, end)| end == top);
    let done = eventually(Duration::from_secs(10), || async { ended() }).await;
    c.shutdown().await.unwrap();
    assert!(done, "no handler span chained to {top} in: {:#?}", spans.trace(trace));
    spans.trace(trace)
}

/// The names of the spans from the first one called `name` up its parents
/// within `spans`, and the parent id where the chain leaves them.
fn chain_of(spans: &[SpanData], name: &str) -> Option<(Vec<String>, SpanId)> {
    Some(chain(spans, spans.iter().find(|s| s.name == name)?))
}

/// The names of the spans from `span` up its parents within `spans`, and
/// the parent id where the chain leaves them.
fn chain<'a>(spans: &'a [SpanData], mut span: &'a SpanData) -> (Vec<String>, SpanId) {
    let mut names = vec![span.name.to_string()];
    loop {
        let parent = span.parent_span_id;
        match spans.iter().find(|s| s.span_context.span_id() == parent) {
            Some(p) => {
                names.push(p.name.to_string());
                span = p;
            }
            None => return (names, parent),
        }
    }
}

// Jobs enqueued inside a request span (single and bulk alike) carry its
// traceparent, and each handler's span lands in the request's trace, under
// the job span, under the request span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_runs_in_the_enqueuing_request_trace() {
    let spans = collected();
    let (server, q) = setup("otel-parent").await;
    let request = info_span!("web_request");
    let (id, bulk) = async {
        let id = q.enqueue(&1u32).await.unwrap();
        let bulk = q.enqueue_bulk(&[2u32, 3]).await.unwrap();
        (id, bulk)
    }
    .instrument(request.clone())
    .await;
    let sc = request.context().span().span_context().clone();
    let expected = format!("00-{}-{}-01", sc.trace_id(), sc.span_id());
    for job in std::iter::once(&id).chain(&bulk) {
        assert_eq!(
            stored_tp(&server, q.name(), job).await.as_deref(),
            Some(expected.as_str())
        );
    }
    drop(request);

    let trace = run_handler(&q, spans, sc.trace_id(), SpanId::INVALID).await;
    let (names, _) = chain_of(&trace, "handler_work").unwrap();
    assert_eq!(names, ["handler_work", "job", "web_request"], "{trace:#?}");
    let request_span = trace.iter().find(|s| s.name == "web_request").unwrap();
    assert_eq!(request_span.span_context.span_id(), sc.span_id());
    // All three jobs ran in the trace: a job span and a settlement span
    // (also named `job`) each, straight under the request.
    let under_request = || {
        let t = spans.trace(sc.trace_id());
        t.iter()
            .filter(|s| s.name == "job" && s.parent_span_id == sc.span_id())
            .count()
    };
    assert!(eventually(Duration::from_secs(10), || async { under_request() == 6 }).await);
}

// A job its handler enqueues joins the same trace, under that handler's span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_job_joins_the_trace() {
    let spans = collected();
    let (_server, q) = setup("otel-follow-up").await;
    let request = info_span!("web_request");
    q.enqueue(&1u32).instrument(request.clone()).await.unwrap();
    let sc = request.context().span().span_context().clone();
    drop(request);
    let producer = q.clone();
    let c = Consumer::new(q.clone(), move |job: Job<u32>| {
        let q = producer.clone();
        let name = if *job.payload() == 1 { "first" } else { "follow_up" };
        async move {
            if *job.payload() == 1 {
                q.enqueue(&2u32).await?;
            }
            Ok(())
        }
        .instrument(info_span!("handler", name))
    })
    .spawn()
    .unwrap();
    let follow_up = || {
        let trace = spans.trace(sc.trace_id());
        let second = trace.iter().find(|s| {
            s.name == "handler"
                && s.attributes
                    .iter()
                    .any(|kv| kv.key.as_str() == "name" && kv.value.as_str() == "follow_up")
        })?;
        Some(chain(&trace, second))
    };
    let done = eventually(Duration::from_secs(10), || async {
        follow_up().is_some_and(|(names, end)| names.len() == 5 && end == SpanId::INVALID)
    })
    .await;
    c.shutdown().await.unwrap();
    assert!(done, "{:#?}", spans.trace(sc.trace_id()));
    let (names, _) = follow_up().unwrap();
    assert_eq!(names, ["handler", "job", "handler", "job", "web_request"]);
}

// An explicit traceparent wins over the current span's, and the job span
// becomes a child of that remote parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_traceparent_wins() {
    let spans = collected();
    let (server, q) = setup("otel-explicit").await;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let request = info_span!("web_request");
    let id = q
        .enqueue_with(&1u32, &EnqueueOptions::new().traceparent(tp))
        .instrument(request.clone())
        .await
        .unwrap()
        .id;
    assert_eq!(stored_tp(&server, q.name(), &id).await.as_deref(), Some(tp));
    drop(request);

    let remote = SpanId::from_hex("00f067aa0ba902b7").unwrap();
    let trace = run_handler(
        &q,
        spans,
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
        remote,
    )
    .await;
    let (names, _) = chain_of(&trace, "handler_work").unwrap();
    assert_eq!(names, ["handler_work", "job"], "{trace:#?}");
}

// Without an OpenTelemetry layer an enqueue in a span stores no
// traceparent, and a job that carries one still runs and completes.
#[tokio::test]
async fn without_a_layer_nothing_is_stored_or_required() {
    // This thread's subscriber, in place of the global one; the
    // current-thread runtime keeps the consumer's tasks on this thread.
    let _plain = tracing::subscriber::set_default(tracing_subscriber::registry());
    let (server, q) = setup("otel-none").await;
    let id = q.enqueue(&1u32).instrument(info_span!("web_request")).await.unwrap();
    assert_eq!(stored_tp(&server, q.name(), &id).await, None);
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    q.enqueue_with(&2u32, &EnqueueOptions::new().traceparent(tp))
        .await
        .unwrap();
    assert!(common::complete_with_noop::<u32>(&q, 2).await);
}
