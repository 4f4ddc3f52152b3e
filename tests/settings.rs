//! Every builder checks its values when the thing is built and answers a
//! bad one with `Error::InvalidOption` (or `InvalidId`): no panic, no
//! silent clamp, no magic zero, no arithmetic overflow later on.

mod common;

use std::time::Duration;

use common::setup;
use echomq::limits::MAX_DELAY;
use echomq::{
    Backoff, Client, ClientOptions, Consumer, EnqueueOptions, Error, Job, Queue, QueueOptions, Reaper, Retention,
};

fn invalid<T: std::fmt::Debug>(what: &str, r: Result<T, Error>) {
    match r {
        Err(Error::InvalidOption { .. } | Error::InvalidId { .. }) => {}
        other => panic!("{what}: expected a typed refusal, got {other:?}"),
    }
}

// Consumer settings out of range are refused at spawn and at run, before anything runs.
#[tokio::test]
async fn consumer_settings_are_checked_at_start() {
    let (_s, q) = setup("settings").await;
    let c = || Consumer::new(q.clone(), |_job: Job<u32>| async { Ok(()) });
    let cases: Vec<(&str, echomq::Worker)> = vec![
        ("concurrency 0", c().concurrency(0)),
        ("concurrency usize::MAX", c().concurrency(usize::MAX)),
        ("prefetch too large", c().prefetch(usize::MAX)),
        ("lease MAX", c().lease(Duration::MAX)),
        ("lease 1 ms", c().lease(Duration::from_millis(1))),
        ("heartbeat 0", c().heartbeat(Duration::ZERO)),
        (
            "heartbeat = lease",
            c().lease(Duration::from_secs(1)).heartbeat(Duration::from_secs(1)),
        ),
        ("poll_interval MAX", c().poll_interval(Duration::MAX)),
        ("poll_interval 0", c().poll_interval(Duration::ZERO)),
        ("shutdown_timeout MAX", c().shutdown_timeout(Duration::MAX)),
        ("reap_interval MAX", c().reap_interval(Duration::MAX)),
        ("reap_interval 0", c().reap_interval(Duration::ZERO)),
    ];
    for (what, consumer) in cases {
        invalid(what, consumer.spawn().map(drop));
    }
    invalid("run with lease MAX", c().lease(Duration::MAX).run(async {}).await);
    // Nothing was claimed by any of them.
    q.enqueue(&1).await.unwrap();
    assert_eq!(q.counts().await.unwrap().pending, 1);
    // The edges of the ranges are accepted and work.
    let ok = c()
        .concurrency(1)
        .lease(Duration::from_millis(10))
        .heartbeat(Duration::from_millis(5))
        .poll_interval(Duration::from_millis(10))
        .shutdown_timeout(Duration::ZERO)
        .spawn()
        .unwrap();
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            q.counts().await.unwrap().completed == 1
        })
        .await
    );
    ok.shutdown().await.unwrap();
}

// Client, queue, reaper and enqueue options out of range are refused with a typed error.
#[tokio::test]
async fn other_settings_are_checked() {
    let (s, q) = setup("settings2").await;
    let url = s.url();
    invalid(
        "response_timeout 0",
        Client::connect_with(&url, ClientOptions::new().response_timeout(Duration::ZERO)).await,
    );
    invalid(
        "connection_timeout MAX",
        Client::connect_with(&url, ClientOptions::new().connection_timeout(Duration::MAX)).await,
    );
    let name = common::unique("opts");
    for (what, opts) in [
        ("max_payload_bytes 0", QueueOptions::new().max_payload_bytes(0)),
        (
            "max_payload_bytes MAX",
            QueueOptions::new().max_payload_bytes(usize::MAX),
        ),
        (
            "keep Newest(0)",
            QueueOptions::new().keep_completed(Retention::Newest(0)),
        ),
        ("max_attempts 0", QueueOptions::new().max_attempts(0)),
        (
            "backoff MAX",
            QueueOptions::new().backoff(Backoff::Fixed(Duration::MAX)),
        ),
    ] {
        invalid(what, Queue::connect_with(&url, &name, opts).await);
    }
    invalid(
        "reaper interval MAX",
        Reaper::new(q.clone()).interval(Duration::MAX).spawn(),
    );
    invalid("reaper batch 0", Reaper::new(q.clone()).batch(0).run_once().await);
    for (what, opts) in [
        ("delay MAX", EnqueueOptions::new().delay(Duration::MAX)),
        (
            "delay past MAX_DELAY",
            EnqueueOptions::new().delay(MAX_DELAY + Duration::from_secs(1)),
        ),
        ("dedup ttl 0", EnqueueOptions::new().dedup_for("d", Duration::ZERO)),
        (
            "dedup ttl 500 µs",
            EnqueueOptions::new().dedup_for("d", Duration::from_micros(500)),
        ),
        ("max_attempts 0", EnqueueOptions::new().max_attempts(0)),
        (
            "exponential backoff max MAX",
            EnqueueOptions::new().backoff(Backoff::Exponential {
                base: Duration::from_secs(1),
                max: Duration::MAX,
            }),
        ),
    ] {
        invalid(what, q.enqueue_with(&1, &opts).await);
    }
    invalid("claim lease 0", q.claim(1, Duration::ZERO).await);
    invalid("claim lease MAX", q.claim(1, Duration::MAX).await);
    assert_eq!(
        q.counts().await.unwrap(),
        echomq::Counts::default(),
        "a refused call wrote something"
    );
}
