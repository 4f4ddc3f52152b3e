//! A long-running worker process with graceful shutdown on SIGTERM and ctrl-c.
//!
//! Run: `ECHOMQ_URL=redis://127.0.0.1:6379/ cargo run --example worker -- emails`
//! then enqueue JSON jobs `{"to": "..."}` on queue `emails`. On SIGTERM or
//! ctrl-c the worker stops claiming, lets running handlers finish for up to
//! 10 s, and releases the rest so another worker takes them at once.

use std::time::Duration;

use echomq::{Consumer, HandlerError, Job, Queue};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Email {
    to: String,
}

/// Resolves on the first SIGTERM or ctrl-c.
async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("echomq=info").init();
    let url = std::env::var("ECHOMQ_URL").map_err(|_| "set ECHOMQ_URL, e.g. redis://127.0.0.1:6379/")?;
    let name = std::env::args().nth(1).unwrap_or_else(|| "emails".to_owned());
    let queue = Queue::connect(&url, &name).await?;
    println!("worker on queue {name}; SIGTERM or ctrl-c to stop");
    Consumer::new(queue, |job: Job<Email>| async move {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {
                println!("sent to {} (job {}, attempt {})", job.payload().to, job.id(), job.attempt());
                Ok(())
            }
            // Shutdown past its grace period, or a lost lease: stop early.
            _ = job.cancellation().cancelled() => Err(HandlerError::from("cancelled")),
        }
    })
    .concurrency(8)
    .shutdown_timeout(Duration::from_secs(10))
    .run(terminated())
    .await?;
    println!("worker stopped");
    Ok(())
}
