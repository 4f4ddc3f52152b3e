//! Metrics served to Prometheus: a consumer runs jobs, the `metrics`
//! facade records them, and `GET /metrics` on 127.0.0.1:9464 answers in
//! Prometheus's text format (scrape it, or `curl` it while this runs).
//!
//! Run: `cargo run --example metrics --features local-server,metrics`.
//! Connects to `ECHOMQ_URL` when set; otherwise starts a private server.
//! Stops after a minute.

use std::time::Duration;

use axum::routing::get;
use echomq::{Consumer, HandlerError, Job, Queue};
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("echomq=info").init();
    // The recorder every `metrics` call in the process reports to; the
    // handle renders what it holds.
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let (url, _server) = echomq::server::url_from_env_or_start()?;
    let queue = Queue::connect(&url, "metrics-demo").await?;

    // Jobs: one in five fails its first attempt, so retries show too. The
    // gauges (counts, backlog, lag) come from the server: the worker
    // refreshes them every 5 s.
    let consumer = Consumer::new(queue.clone(), |job: Job<u32>| async move {
        tokio::time::sleep(Duration::from_millis(u64::from(*job.payload() % 50))).await;
        if job.payload().is_multiple_of(5) && job.attempt() == 1 {
            return Err(HandlerError::retry_after("flaky", Duration::from_millis(100)));
        }
        Ok(())
    })
    .concurrency(8)
    .record_gauges_every(Duration::from_secs(5))
    .spawn()?;

    let producer = {
        let queue = queue.clone();
        tokio::spawn(async move {
            for i in 0..600u32 {
                let _ = queue.enqueue(&i).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let app = axum::Router::new().route("/metrics", get(move || std::future::ready(prometheus.render())));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:9464").await?;
    println!("serving http://127.0.0.1:9464/metrics for a minute");
    tokio::select! {
        r = axum::serve(listener, app) => r?,
        () = tokio::time::sleep(Duration::from_secs(60)) => {}
    }
    producer.abort();
    consumer.shutdown().await?;
    Ok(())
}
