//! The relay's metrics (feature `metrics`), read back through a debugging recorder.

mod common;

use std::time::Duration;

use common::{jobs, servers, wait_until};
use echomq_outbox::{JobOptions, Outbox, Relay, RelayOptions};
use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

// A running relay counts the rows it relayed and publishes the backlog
// gauges (rows waiting, age of the oldest, rows set aside).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_counts_rows_and_publishes_the_backlog() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let s = servers().await;
    let mut tx = s.pool.begin().await.unwrap();
    for i in 0..3 {
        Outbox::new()
            .enqueue(&mut tx, "measured", &i, &JobOptions::new())
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let relay = Relay::new(s.pool.clone(), s.client.clone(), RelayOptions::new())
        .unwrap()
        .spawn();
    let queue = s.client.queue("measured").await.unwrap();
    wait_until("the relayed rows", Duration::from_secs(10), || async {
        jobs(&queue).await == 3
    })
    .await;
    relay.shutdown().await;

    let snap = snapshotter.snapshot().into_vec();
    let find = |kind: MetricKind, name: &str| {
        snap.iter()
            .find(|(k, _, _, _)| k.kind() == kind && k.key().name() == name)
            .map(|(_, _, _, v)| v)
    };
    assert_eq!(
        find(MetricKind::Counter, "echomq_outbox_relayed_total"),
        Some(&DebugValue::Counter(3))
    );
    // The gauges were read before the first batch: three rows waiting.
    match find(MetricKind::Gauge, "echomq_outbox_backlog_rows") {
        Some(DebugValue::Gauge(v)) => assert_eq!(v.0, 3.0),
        other => panic!("no backlog gauge: {other:?}"),
    }
    assert!(find(MetricKind::Gauge, "echomq_outbox_oldest_age_seconds").is_some());
    assert!(find(MetricKind::Gauge, "echomq_outbox_failed_rows").is_some());
}
