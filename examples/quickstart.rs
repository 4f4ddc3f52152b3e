//! The quickstart: a simulated web handler enqueues jobs, a Consumer runs them.
//!
//! Run: `scripts/demo`, or `cargo run --example quickstart --features local-server`.
//! Connects to `ECHOMQ_URL` when set; otherwise starts a private server.

use std::time::Duration;

use echomq::{Backoff, Consumer, HandlerError, Job, Queue, QueueOptions};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct SendWelcomeEmail {
    user_id: u64,
    address: String,
}

/// What a web handler does: validate, enqueue, answer at once.
async fn signup_handler(queue: &Queue, user_id: u64) -> Result<String, echomq::Error> {
    let job = SendWelcomeEmail {
        user_id,
        address: format!("user{user_id}@example.com"),
    };
    let id = queue.enqueue(&job).await?;
    Ok(format!("202 Accepted (job {id})"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("echomq=info").init();
    // Keep the server (if we started one) alive until the end of main.
    let (url, _server) = echomq::server::url_from_env_or_start()?;
    // Retry limits belong to the jobs: this queue's jobs back off 100 ms between attempts.
    let opts = QueueOptions::new().backoff(Backoff::Fixed(Duration::from_millis(100)));
    let queue = Queue::connect_with(&url, "emails", opts).await?;

    for user_id in 1..=5 {
        println!(
            "POST /signup user {user_id} -> {}",
            signup_handler(&queue, user_id).await?
        );
    }

    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let consumer = Consumer::new(queue.clone(), move |job: Job<SendWelcomeEmail>| {
        let done = done_tx.clone();
        async move {
            let email = job.payload();
            // User 3's mail server is flaky: the first attempt fails, the retry succeeds.
            if email.user_id == 3 && job.attempt() == 1 {
                return Err(format!("smtp timeout sending to {}", email.address).into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            println!(
                "  sent welcome email to {} (job {}, attempt {})",
                email.address,
                job.id(),
                job.attempt()
            );
            let _ = done.send(());
            Ok::<(), HandlerError>(())
        }
    })
    .concurrency(4)
    .spawn()?;

    for _ in 0..5 {
        tokio::time::timeout(Duration::from_secs(10), done_rx.recv()).await?;
    }
    consumer.shutdown().await?;
    let counts = queue.counts().await?;
    println!(
        "done: {} completed, {} failed, {} pending",
        counts.completed, counts.failed, counts.pending
    );
    let flaky = queue.job("3").await?;
    println!(
        "job 3 took {} attempts; last error: {:?}",
        flaky.attempts, flaky.last_error
    );
    Ok(())
}
