//! A signup handler whose user row and welcome-email job commit together
//! (axum 0.8 + sqlx + echomq-outbox), the relay and the email worker in the
//! same process.
//!
//! ```text
//! cargo run -p echomq-outbox --features local-postgres --example signup
//! curl -X POST localhost:3000/signup -H 'content-type: application/json' -d '{"email":"ada@example.com"}'
//! ```
//!
//! Uses `DATABASE_URL` and `ECHOMQ_URL` when set, else starts a private
//! Postgres and Valkey. `-- --self-test` serves on a free port, signs up
//! two users and one duplicate through HTTP, waits for the two welcome
//! emails, and exits.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use echomq::{Client, Consumer, HandlerError, Job};
use echomq_outbox::{JobOptions, Outbox, Relay, RelayOptions};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Deserialize)]
struct SignupForm {
    email: String,
}

#[derive(Serialize, Deserialize)]
struct WelcomeEmail {
    user_id: i64,
    email: String,
}

#[derive(Clone)]
struct App {
    pool: PgPool,
    outbox: Outbox,
}

/// The user row and its job in one transaction: a duplicate email rolls
/// both back, so no welcome email goes to a user who does not exist.
async fn signup(State(app): State<App>, Json(form): Json<SignupForm>) -> (StatusCode, Json<serde_json::Value>) {
    let result = async {
        let mut tx = app.pool.begin().await?;
        let inserted: Option<i64> =
            sqlx::query_scalar("INSERT INTO users (email) VALUES ($1) ON CONFLICT (email) DO NOTHING RETURNING id")
                .bind(&form.email)
                .fetch_optional(&mut *tx)
                .await?;
        let Some(user_id) = inserted else {
            tx.rollback().await?;
            return Ok(None);
        };
        let email = WelcomeEmail {
            user_id,
            email: form.email.clone(),
        };
        let opts = JobOptions::new().id(format!("welcome-{user_id}")).kind("welcome_email");
        let entry = app.outbox.enqueue(&mut tx, "emails", &email, &opts).await?;
        tx.commit().await?;
        Ok::<_, echomq_outbox::Error>(Some((user_id, entry.job_id)))
    };
    match result.await {
        Ok(Some((user_id, job_id))) => (
            StatusCode::CREATED,
            Json(serde_json::json!({"user_id": user_id, "job_id": job_id})),
        ),
        Ok(None) => (
            StatusCode::CONFLICT,
            Json(serde_json::json!({"error": "email already signed up"})),
        ),
        Err(e) => {
            tracing::error!(error = %e, "signup failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(serde_json::json!({"error": "try again"})),
            )
        }
    }
}

async fn send_welcome(job: Job<WelcomeEmail>) -> Result<(), HandlerError> {
    tracing::info!(user_id = job.payload().user_id, to = %job.payload().email, "welcome email sent");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    run(std::env::args().any(|a| a == "--self-test")).await
}

/// The app; with `self_test`, it signs up over HTTP, checks the emails and
/// stops (tests/signup_example.rs runs it so).
pub async fn run(self_test: bool) -> Result<(), Box<dyn std::error::Error>> {
    // Servers: the environment's, else private ones for the demo.
    let mut _pg = None;
    let database_url = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => _pg.insert(echomq_outbox::testing::LocalPostgres::start()?).url(),
    };
    let (valkey_url, _valkey) = echomq::server::url_from_env_or_start()?;

    let pool = PgPool::connect(&database_url).await?;
    let outbox = Outbox::new();
    outbox.migrate(&pool).await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS users (id bigserial PRIMARY KEY, email text NOT NULL UNIQUE)")
        .execute(&pool)
        .await?;

    let client = Client::connect(&valkey_url).await?;
    let emails = client.queue("emails").await?;
    let relay = Relay::new(pool.clone(), client.clone(), RelayOptions::new())?.spawn();
    let worker = Consumer::new(emails.clone(), send_welcome).spawn()?;

    let app = Router::new()
        .route("/signup", post(signup))
        .with_state(App { pool, outbox });
    let port = if self_test {
        0
    } else {
        std::env::var("PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(3000)
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "listening");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = stop_rx => {}
                }
            })
            .await
    });

    if self_test {
        let ada = post_signup(addr, "ada@example.com").await?;
        let grace = post_signup(addr, "grace@example.com").await?;
        let again = post_signup(addr, "ada@example.com").await?;
        assert!(
            ada.starts_with("HTTP/1.1 201") && grace.starts_with("HTTP/1.1 201"),
            "{ada}\n{grace}"
        );
        assert!(again.starts_with("HTTP/1.1 409"), "{again}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let c = emails.counts().await?;
            if c.completed == 2 {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "welcome emails not sent: {c:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(emails.counts().await?.completed, 2, "the duplicate signup made no job");
        tracing::info!("self-test passed: two signups, two welcome emails, the duplicate none");
        let _ = stop_tx.send(());
    }
    server.await??;
    relay.shutdown().await;
    worker.shutdown().await?;
    Ok(())
}

/// One POST /signup over a plain TCP connection (no HTTP client needed).
async fn post_signup(addr: std::net::SocketAddr, email: &str) -> std::io::Result<String> {
    let body = serde_json::json!({ "email": email }).to_string();
    let mut conn = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "POST /signup HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    conn.read_to_string(&mut response).await?;
    Ok(response)
}
