//! The four handler outcomes: what a handler's `Result` does to its job.
//!
//! Run: `cargo run --example outcomes --features local-server`.
//! Connects to `ECHOMQ_URL` when set; otherwise starts a private server.
//!
//! | the handler returns          | the job                                              |
//! | ---------------------------- | ---------------------------------------------------- |
//! | `Ok(())`                     | completes                                            |
//! | any error, with `?`          | is retried after its backoff (a failure is counted)  |
//! | `HandlerError::fail(e)`      | fails for good at once, whatever attempts are left   |
//! | `HandlerError::snooze(delay)`| runs again after `delay`, no failure counted         |
//!
//! Four jobs ask a (simulated) warehouse to reserve stock, one per outcome.
//! Each job's final record is read back with `queue.job(id)`.

use std::time::Duration;

use echomq::{Backoff, Consumer, EnqueueOptions, HandlerError, Job, Outcome, Queue, QueueOptions, WorkerEvent};

/// Job id and payload (the quantity to reserve), one per outcome.
const JOBS: [(&str, &str); 4] = [
    // Completes on its first delivery.
    ("ok", "12"),
    // The warehouse times out twice: retried with backoff, then completes.
    ("flaky", "7"),
    // Not a quantity: no retry can fix that, so it fails at once.
    ("invalid", "a dozen"),
    // The warehouse is busy on the first delivery: snoozed, then completes.
    ("busy", "5"),
];

/// The warehouse: times out on the first two deliveries of job "flaky".
fn warehouse_reserve(id: &str, attempt: u64) -> std::io::Result<()> {
    if id == "flaky" && attempt <= 2 {
        return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "warehouse timed out"));
    }
    Ok(())
}

/// The handler: an `async fn` from a job to `Result<(), HandlerError>`.
async fn reserve(job: Job<String>) -> Result<(), HandlerError> {
    // A payload no retry can fix: fail for good now.
    let quantity: u32 = job.payload().parse().map_err(HandlerError::fail)?;
    // Not a failure: the resource is busy, come back later.
    if job.id() == "busy" && job.attempt() == 1 {
        return Err(HandlerError::snooze(Duration::from_millis(200)));
    }
    // A transient error: `?` converts the io::Error and the job is retried.
    warehouse_reserve(job.id(), job.attempt())?;
    println!("  {:<8} reserved {quantity} (delivery {})", job.id(), job.attempt());
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Keep the server (if we started one) alive until the end of main.
    let (url, _server) = echomq::server::url_from_env_or_start()?;
    // Limits belong to the jobs: up to 3 attempts, 100 ms between them.
    let opts = QueueOptions::new()
        .max_attempts(3)
        .backoff(Backoff::Fixed(Duration::from_millis(100)));
    let queue = Queue::connect_with(&url, "outcomes", opts).await?;
    for (id, quantity) in JOBS {
        queue.enqueue_with(&quantity, &EnqueueOptions::new().id(id)).await?;
    }

    // The observer shows each delivery's result and reports each job that
    // reached its end (completed or failed).
    let (ended_tx, mut ended) = tokio::sync::mpsc::unbounded_channel();
    let consumer = Consumer::new(queue.clone(), reserve)
        .concurrency(4)
        .observer(move |event| match event {
            WorkerEvent::HandlerDone { id, result, .. } => println!("  {id:<8} handler: {result:?}"),
            WorkerEvent::Settled {
                id,
                outcome: Outcome::Completed | Outcome::Failed,
                ..
            } => {
                let _ = ended_tx.send(id.to_string());
            }
            _ => {}
        })
        .spawn()?;
    for _ in JOBS {
        tokio::time::timeout(Duration::from_secs(10), ended.recv()).await?;
    }
    consumer.shutdown().await?;

    println!(
        "\n{:<8} {:<10} {:>8} {:>8}  last error",
        "job", "state", "attempts", "failures"
    );
    for (id, _) in JOBS {
        let job = queue.job(id).await?;
        println!(
            "{:<8} {:<10} {:>8} {:>8}  {}",
            job.id,
            job.state.as_str(),
            job.attempts,
            job.failures,
            job.last_error.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}
