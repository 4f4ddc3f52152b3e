//! Relay figures (prints them; asserts nothing about time):
//!
//! - throughput: rows/s a relay moves from the outbox into one queue,
//!   against the same jobs enqueued straight with `enqueue_bulk_with`;
//! - latency: commit → job stored (pending), p50/p99, with NOTIFY and
//!   with polling only.
//!
//! ```text
//! ECHOMQ_SERVER_BIN=.tools/valkey/valkey-server cargo bench -p echomq-outbox --features local-postgres --bench relay
//! ```
//!
//! Both servers are private (Postgres with fsync off, Valkey without AOF)
//! on the same machine, so the job's created time (Valkey's clock) and the
//! commit time (this process's clock) share one clock.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use echomq::EnqueueOptions;
use echomq::server::LocalServer;
use echomq_outbox::testing::LocalPostgres;
use echomq_outbox::{JobOptions, Outbox, Relay, RelayOptions};

const ROWS: usize = 20_000;
const LATENCY_SAMPLES: usize = 200;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pg = LocalPostgres::start()?;
    let valkey = LocalServer::start()?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect(&pg.url())
        .await?;
    let outbox = Outbox::new();
    outbox.migrate(&pool).await?;
    let client = echomq::Client::connect(&valkey.url()).await?;
    let payload = serde_json::json!({"user_id": 12345, "email": "someone@example.com", "template": "welcome"});

    // Direct: the same jobs straight into a queue, 1,000 a call.
    let direct = client.queue("direct").await?;
    let jobs: Vec<_> = (0..ROWS)
        .map(|i| (&payload, EnqueueOptions::new().id(format!("d-{i}"))))
        .collect();
    let t = Instant::now();
    for chunk in jobs.chunks(1000) {
        direct.enqueue_bulk_with(chunk).await?;
    }
    let direct_rate = ROWS as f64 / t.elapsed().as_secs_f64();

    for (relays, batch) in [(1usize, 500usize), (1, 2000), (2, 500)] {
        let queue = format!("relayed-{relays}-{batch}");
        for chunk in 0..ROWS / 5000 {
            let mut tx = pool.begin().await?;
            let rows: Vec<_> = (0..5000).map(|_| (&payload, JobOptions::new())).collect();
            outbox.enqueue_bulk(&mut tx, &queue, &rows).await?;
            tx.commit().await?;
            let _ = chunk;
        }
        let t = Instant::now();
        let tasks: Vec<_> = (0..relays)
            .map(|_| {
                let relay = Relay::new(pool.clone(), client.clone(), RelayOptions::new().batch_size(batch)).unwrap();
                tokio::spawn(async move { while relay.run_once().await.unwrap().rows > 0 {} })
            })
            .collect();
        for task in tasks {
            task.await?;
        }
        let rate = ROWS as f64 / t.elapsed().as_secs_f64();
        let c = client.queue(&queue).await?.counts().await?;
        assert_eq!(c.pending as usize, ROWS);
        println!(
            "throughput: {relays} relay(s), batch {batch}: {rate:.0} rows/s; direct enqueue_bulk_with: {direct_rate:.0} jobs/s ({:.2}x)",
            rate / direct_rate
        );
    }

    for (label, opts) in [
        ("NOTIFY (poll 1 s)", RelayOptions::new()),
        (
            "polling only, every 100 ms",
            RelayOptions::new()
                .listen(false)
                .poll_interval(Duration::from_millis(100)),
        ),
    ] {
        let relay = Relay::new(pool.clone(), client.clone(), opts)?.spawn();
        let queue = client.queue("latency").await?;
        let mut samples = Vec::with_capacity(LATENCY_SAMPLES);
        for i in 0..LATENCY_SAMPLES {
            let mut tx = pool.begin().await?;
            let e = outbox.enqueue(&mut tx, "latency", &payload, &JobOptions::new()).await?;
            let committed_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64() * 1000.0;
            tx.commit().await?;
            let job = loop {
                match queue.job(&e.job_id).await {
                    Ok(j) => break j,
                    Err(echomq::Error::JobNotFound(_)) => tokio::time::sleep(Duration::from_millis(1)).await,
                    Err(e) => return Err(e.into()),
                }
            };
            samples.push((job.created_ms as f64 - committed_ms).max(0.0));
            // The next commit lands at a spread of points of the 100 ms poll
            // cycle (the job just seen was relayed by a poll that just ran).
            tokio::time::sleep(Duration::from_millis((i as u64 * 37) % 100)).await;
        }
        relay.shutdown().await;
        samples.sort_by(f64::total_cmp);
        let p = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
        println!(
            "latency commit -> pending, {label}: p50 {:.1} ms, p99 {:.1} ms ({LATENCY_SAMPLES} commits)",
            p(0.5),
            p(0.99)
        );
    }
    Ok(())
}
