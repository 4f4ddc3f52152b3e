//! echomq in a web application: an axum app whose `POST /signup` enqueues
//! a welcome job (the request's `Idempotency-Key` header makes a repeated
//! request one job, for a day) and answers 202 with the job id, whose
//! `GET /jobs/{id}` answers the job's state, progress and result as JSON, and
//! whose graceful shutdown stops the consumer too. Handlers return
//! `Result<_, echomq::Error>` (the `axum` feature makes the error a
//! response, its status from `Error::http_status`) and answer a job's
//! record as it serializes (`JobInfo`'s JSON shape, the CLI's too).
//!
//! Run: `cargo run --features local-server,axum --example web` (it starts a
//! private server unless `ECHOMQ_URL` is set) and try
//! `curl -i -XPOST -H 'Idempotency-Key: k1' -d '{"email":"ada@example.com"}' \
//!  -H 'content-type: application/json' localhost:3000/signup`.
//! `PORT` picks the port (0: any free one, printed as `listening on ...`).

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use echomq::{Client, Consumer, EnqueueOptions, HandlerError, Job, Queue};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Signup {
    email: String,
}

async fn signup(
    State(queue): State<Queue>,
    headers: HeaderMap,
    Json(body): Json<Signup>,
) -> Result<impl IntoResponse, echomq::Error> {
    let mut opts = EnqueueOptions::new();
    if let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) {
        // The same key, the same job, for a day of replays, whether or not
        // the job has run by then (the guide's "In a web application").
        opts = opts.dedup_for(format!("signup:{key}"), Duration::from_secs(24 * 3600));
    }
    let job = queue.enqueue_with(&body, &opts).await?;
    Ok((StatusCode::ACCEPTED, Json(serde_json::json!({"id": job.id}))))
}

async fn job(State(queue): State<Queue>, Path(id): Path<String>) -> Result<Json<echomq::JobInfo>, echomq::Error> {
    Ok(Json(queue.job(&id).await?))
}

/// What the welcome job returns, kept with the completed job.
#[derive(Serialize)]
struct Sent {
    to: String,
}

async fn welcome(job: Job<Signup>) -> Result<Sent, HandlerError> {
    job.progress(&serde_json::json!({"step": "rendering"})).await?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    println!("welcome mail to {}", job.payload().email);
    job.progress(&serde_json::json!({"step": "sent"})).await?;
    Ok(Sent {
        to: job.payload().email.clone(),
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = echomq::server::url_from_env_or_start()?;
    let client = Client::connect(&url).await?;
    let queue = client.queue("signups").await?;
    let worker = Consumer::new(queue.clone(), welcome).spawn()?;

    let app = Router::new()
        .route("/signup", post(signup))
        .route("/jobs/{id}", get(job))
        .with_state(queue);
    let port: u16 = std::env::var("PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    // The web server has stopped taking requests: stop the consumer too.
    worker.shutdown().await?;
    println!("stopped");
    Ok(())
}
