//! Metrics (feature `metrics`) recorded by a consumer and by
//! `Queue::record_metrics`, read back through a debugging recorder.

mod common;

use std::time::Duration;

use common::{eventually, setup};
use echomq::{Consumer, HandlerError, Job};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};

/// What the recorder holds (a snapshot drains it: take one per check).
type Snap = Vec<(
    CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// The value of metric `name` with (at least) the labels `labels`, if recorded.
fn value<'a>(snap: &'a Snap, kind: MetricKind, name: &str, labels: &[(&str, &str)]) -> Option<&'a DebugValue> {
    snap.iter()
        .find(|(k, _, _, _)| {
            k.kind() == kind
                && k.key().name() == name
                && labels
                    .iter()
                    .all(|(l, v)| k.key().labels().any(|kl| kl.key() == *l && kl.value() == *v))
        })
        .map(|(_, _, _, v)| v)
}

fn count(snap: &Snap, name: &str, labels: &[(&str, &str)]) -> u64 {
    match value(snap, MetricKind::Counter, name, labels) {
        Some(DebugValue::Counter(n)) => *n,
        _ => 0,
    }
}

// After three jobs (one retried once), the counters per transition, the
// wait and run histograms and the gauges say what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_histograms_and_gauges_follow_the_jobs() {
    let recorder = DebuggingRecorder::new();
    let snapshotter: Snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let (s, q) = setup("metrics").await;
    let c = Consumer::new(q.clone(), |job: Job<u32>| async move {
        if *job.payload() == 1 && job.attempt() == 1 {
            return Err(HandlerError::retry_after("once", Duration::ZERO));
        }
        Ok(())
    })
    .spawn()
    .unwrap();
    q.enqueue_bulk(&[0u32, 1, 2]).await.unwrap();
    let queue = [("queue", q.name())];
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.counts().await.unwrap().completed == 3
        })
        .await
    );
    c.shutdown().await.unwrap();
    let snap: Snap = snapshotter.snapshot().into_vec();
    assert_eq!(
        count(
            &snap,
            "echomq_jobs_settled_total",
            &[queue[0], ("outcome", "completed")]
        ),
        3
    );
    assert_eq!(count(&snap, "echomq_jobs_claimed_total", &queue), 4);
    assert_eq!(
        count(&snap, "echomq_jobs_settled_total", &[queue[0], ("outcome", "retried")]),
        1
    );
    assert_eq!(
        count(&snap, "echomq_handler_results_total", &[queue[0], ("result", "ok")]),
        3
    );
    assert_eq!(
        count(&snap, "echomq_handler_results_total", &[queue[0], ("result", "retry")]),
        1
    );
    for name in ["echomq_job_wait_seconds", "echomq_job_run_seconds"] {
        match value(&snap, MetricKind::Histogram, name, &queue) {
            Some(DebugValue::Histogram(v)) => assert_eq!(v.len(), 4, "{name}"),
            other => panic!("{name}: {other:?}"),
        }
    }
    q.enqueue(&9u32).await.unwrap();
    let counts = q.record_metrics().await.unwrap();
    assert_eq!(counts.completed, 3);
    let snap: Snap = snapshotter.snapshot().into_vec();
    let gauge = |state: &str| match value(&snap, MetricKind::Gauge, "echomq_jobs", &[queue[0], ("state", state)]) {
        Some(DebugValue::Gauge(g)) => g.into_inner(),
        other => panic!("{state}: {other:?}"),
    };
    assert_eq!(gauge("completed"), 3.0);
    assert_eq!(gauge("pending"), 1.0);
    assert!(value(&snap, MetricKind::Gauge, "echomq_queue_lag_seconds", &queue).is_some());
    match value(&snap, MetricKind::Gauge, "echomq_queue_backlog", &queue) {
        Some(DebugValue::Gauge(g)) => assert_eq!(g.into_inner(), 1.0),
        other => panic!("backlog: {other:?}"),
    }
    // Every metric has a help text (Prometheus's # HELP), and a unit where it has one.
    for name in [
        "echomq_jobs_claimed_total",
        "echomq_jobs_settled_total",
        "echomq_job_wait_seconds",
        "echomq_jobs",
        "echomq_queue_backlog",
        "echomq_queue_lag_seconds",
    ] {
        let (_, unit, help, _) = snap.iter().find(|(k, ..)| k.key().name() == name).unwrap();
        assert!(help.as_ref().is_some_and(|h| !h.is_empty()), "{name}");
        assert!(unit.is_some(), "{name}");
    }

    // A worker refreshes its queues' gauges itself (record_gauges_every):
    // a paused queue's backlog of 2 and its lag show without a call.
    let q2 = echomq::Queue::connect(&s.url(), "metrics-gauges").await.unwrap();
    q2.pause().await.unwrap();
    q2.enqueue_bulk(&[7u32, 8]).await.unwrap();
    let w = Consumer::new(q2.clone(), |_job: Job<u32>| async move { Ok(()) })
        .record_gauges_every(Duration::from_millis(100))
        .spawn()
        .unwrap();
    let on = [("queue", q2.name())];
    assert!(
        eventually(Duration::from_secs(10), || async {
            let snap: Snap = snapshotter.snapshot().into_vec();
            let backlog = matches!(value(&snap, MetricKind::Gauge, "echomq_queue_backlog", &on),
                Some(DebugValue::Gauge(g)) if g.into_inner() == 2.0);
            let lag = matches!(value(&snap, MetricKind::Gauge, "echomq_queue_lag_seconds", &on),
                Some(DebugValue::Gauge(g)) if g.into_inner() > 0.0);
            backlog && lag
        })
        .await
    );
    w.shutdown().await.unwrap();
    assert!(
        Consumer::new(q2.clone(), |_job: Job<u32>| async move { Ok(()) })
            .record_gauges_every(Duration::from_millis(10))
            .spawn()
            .is_err()
    );
}
