//! Idempotent consumers: replay one job 1, 2 and 3 times and count its
//! effects, on a real server.
//!
//! Run: `cargo run --example idempotent_consumer --features local-server`.
//! Connects to `ECHOMQ_URL` when set; otherwise starts a private server.
//! The last line, `readout: {json}`, is what `tests/effects/examples.rs` asserts.
//!
//! The job says "credit 100 cents". Each delivery but the last performs the
//! effect and then the worker dies before acknowledging (the duplicate
//! window); the lease runs out, the reaper returns the job and it is
//! delivered again. Three consumers see the same replays:
//!
//! - non-idempotent: calls the payment provider every time: effects multiply;
//! - idempotent with an effect marker (`EffectMarker::once`): the first
//!   delivery records the effect done, every redelivery finds the marker
//!   and skips;
//! - idempotent with atomic completion (`Queue::complete_with`): the credit
//!   is a Valkey counter applied in the same script as the acknowledgement,
//!   so a delivery that dies before acknowledging applied nothing.

use std::time::Duration;

use echomq::{Client, EffectMarker, Effects, Lease, Queue, Reaper};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use serde::Serialize;

/// Short, so the demo's redeliveries are quick.
const LEASE: Duration = Duration::from_millis(150);

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Clone, Copy)]
enum Consumer {
    NonIdempotent,
    Marker,
    Atomic,
}

/// Effects counted after one job was delivered `deliveries` times.
#[derive(Debug, Serialize)]
struct Row {
    deliveries: u64,
    non_idempotent: i64,
    marker: i64,
    atomic: i64,
}

/// Waits until the lease has run out on the server's clock, reaps, and
/// leases the job again.
async fn redeliver(queue: &Queue, dead: &Lease) -> Result<Lease, Error> {
    while queue.server_time_ms().await? <= dead.deadline_ms() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Reaper::new(queue.clone()).run_once().await?;
    Ok(queue.claim(1, LEASE).await?.remove(0))
}

/// Handles one delivery; acknowledges only when `ack` (otherwise the worker
/// dies right after the handler's work).
async fn handle(
    consumer: Consumer,
    queue: &Queue,
    lease: &Lease,
    provider: &mut MultiplexedConnection,
    ledger: &str,
    ack: bool,
) -> Result<(), Error> {
    let cents: i64 = lease.decode()?;
    match consumer {
        Consumer::NonIdempotent => {
            provider.rpush::<_, _, ()>(ledger, cents).await?;
            if ack {
                queue.complete(lease).await?;
            }
        }
        Consumer::Marker => {
            let marker = EffectMarker::for_lease(queue, lease, "credit")?;
            marker
                .once(|_state| async { provider.rpush::<_, _, ()>(ledger, cents).await })
                .await?;
            if ack {
                queue.complete(lease).await?;
            }
        }
        Consumer::Atomic => {
            if ack {
                let credits = Effects::new().incr_by(queue.user_key("credited-cents")?, cents);
                queue.complete_with(lease, &credits).await?;
            }
        }
    }
    Ok(())
}

/// Delivers one job `deliveries` times to `consumer`; returns its effects.
async fn replay(
    client: &Client,
    provider: &mut MultiplexedConnection,
    run: &str,
    consumer: Consumer,
    deliveries: u64,
) -> Result<i64, Error> {
    let queue = client
        .queue(&format!("idempotent-{run}-{consumer:?}-{deliveries}"))
        .await?;
    let ledger = format!("demo:{run}:{consumer:?}-{deliveries}:ledger");
    queue.enqueue(&100i64).await?;
    let mut lease = queue.claim(1, LEASE).await?.remove(0);
    for d in 1..=deliveries {
        let last = d == deliveries;
        handle(consumer, &queue, &lease, provider, &ledger, last).await?;
        if !last {
            lease = redeliver(&queue, &lease).await?;
        }
    }
    assert_eq!(lease.attempt(), deliveries, "each delivery is a new claim");
    Ok(match consumer {
        Consumer::Atomic => {
            provider
                .get::<_, Option<i64>>(queue.user_key("credited-cents")?)
                .await?
                .unwrap_or(0)
                / 100
        }
        _ => provider.llen(&ledger).await?,
    })
}

async fn demo(url: &str) -> Result<Vec<Row>, Error> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let run = format!("{}-{nanos}", std::process::id());
    // One echomq client for all nine queues, and one connection standing in for the provider.
    let client = Client::connect(url).await?;
    let mut provider = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
    let p = &mut provider;
    let mut rows = Vec::new();
    for deliveries in 1..=3 {
        rows.push(Row {
            deliveries,
            non_idempotent: replay(&client, p, &run, Consumer::NonIdempotent, deliveries).await?,
            marker: replay(&client, p, &run, Consumer::Marker, deliveries).await?,
            atomic: replay(&client, p, &run, Consumer::Atomic, deliveries).await?,
        });
    }
    Ok(rows)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // Keep the server (if we started one) alive until the end of main.
    let (url, _server) = echomq::server::url_from_env_or_start()?;
    let rows = demo(&url).await?;
    println!("One job \"credit 100 cents\", delivered N times (every delivery but the last dies");
    println!("after its work, before the ack). Effects applied:\n");
    println!(
        "{:>10}   {:>14}   {:>20}   {:>24}",
        "deliveries", "non-idempotent", "idempotent (marker)", "idempotent (atomic ack)"
    );
    for r in &rows {
        println!(
            "{:>10}   {:>14}   {:>20}   {:>24}",
            r.deliveries, r.non_idempotent, r.marker, r.atomic
        );
    }
    println!("readout: {}", serde_json::json!({ "rows": rows }));
    Ok(())
}
