//! The dashboard in an axum app, over a demo workload: a producer enqueues
//! a few jobs a second on two queues, a consumer runs them, and one job in
//! five fails on its first attempt (it has one attempt only, so it stays
//! failed until you press "retry" on its page; then it completes).
//!
//! Run: `cargo run -p echomq-dashboard --example demo` (it starts a private
//! server unless `ECHOMQ_URL` is set; a server binary is found as the
//! tests find one, or set `ECHOMQ_SERVER_BIN`) and open
//! <http://127.0.0.1:3000/admin/queues>. `PORT` picks the port (0: any
//! free one, printed as `dashboard at ...`). This demo has no auth: a real
//! app puts the dashboard behind its own. Ctrl-C shuts it down in order:
//! the live streams end (`Shutdown`), the HTTP server stops, then the
//! workers finish or release their running jobs.

use std::time::Duration;

use axum::Router;
use axum::response::Redirect;
use axum::routing::get;
use echomq::{Client, Consumer, EnqueueOptions, HandlerError, Job};
use echomq_dashboard::{DashboardOptions, Shutdown, Source};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Work {
    n: u64,
    flaky: bool,
}

/// Takes a little time, reports progress, and fails a flaky job's first attempt.
async fn handle(job: Job<Work>) -> Result<serde_json::Value, HandlerError> {
    job.progress(&serde_json::json!({"step": "working"})).await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    if job.payload().flaky && job.attempt() == 1 {
        return Err(HandlerError::retry(format!(
            "job {} is flaky: first attempt fails",
            job.payload().n
        )));
    }
    Ok(serde_json::json!({"doubled": job.payload().n * 2}))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = echomq::server::url_from_env_or_start()?;
    let client = Client::connect(&url).await?;
    let mut workers = Vec::new();
    for name in ["emails", "reports"] {
        let queue = client.queue(name).await?;
        workers.push(Consumer::new(queue.clone(), handle).spawn()?);
        tokio::spawn(async move {
            for n in 0u64.. {
                let flaky = n % 5 == 4;
                // One attempt: a failure is final, for the dashboard's retry button.
                let opts = EnqueueOptions::new().max_attempts(1);
                if let Err(e) = queue.enqueue_with(&Work { n, flaky }, &opts).await {
                    eprintln!("enqueue failed: {e}");
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
    }

    // Triggered by Ctrl-C: ends the dashboard's live streams, which an
    // open tab would otherwise hold open through the graceful shutdown.
    let stop = Shutdown::new();
    let app = Router::new()
        .route("/", get(|| async { "the dashboard is at /admin/queues\n" }))
        // `nest` does not route the slash form of the mount point.
        .route("/admin/queues/", get(|| async { Redirect::permanent("../queues") }))
        .nest(
            "/admin/queues",
            echomq_dashboard::router(
                Source::from(client.clone()),
                DashboardOptions::new().title("echomq demo").shutdown(&stop),
            ),
        );
    let port: u16 = std::env::var("PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("dashboard at http://{}/admin/queues", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.trigger();
        })
        .await?;
    // HTTP first, then the workers: their running jobs finish or are released.
    for w in workers {
        w.shutdown().await?;
    }
    println!("stopped");
    Ok(())
}
