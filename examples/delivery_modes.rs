//! Delivery modes: what a worker crash costs under at-most-once and under
//! at-least-once (echomq), on a real server.
//!
//! Run: `cargo run --example delivery_modes --features local-server`.
//! Connects to `ECHOMQ_URL` when set; otherwise starts a private server.
//! The last line, `readout: {json}`, is what `tests/effects/examples.rs` asserts.
//!
//! One job, one worker that dies mid-job, then a healthy worker that takes
//! whatever the queue still offers. The effect is a counter in Valkey
//! (think "emails sent"). Two places to die:
//!
//! - before the effect: the worker took the job and died before doing it;
//! - after the effect, before the acknowledgement: it did the work and died
//!   before telling the queue.
//!
//! At-most-once is a plain list: `RPOP` hands the job out and forgets it,
//! so the pop *is* the acknowledgement, sent before the work. At-least-once
//! is echomq: the job is leased, acknowledged (`complete`) only after the
//! work, and a lease that runs out is reaped and delivered again.
//! "Dying" is a worker that stops sending anything, exactly what the server
//! sees when a process is killed.
//!
//! Exactly-once *delivery* is not a mode you can pick: the acknowledgement
//! can itself be lost, so some crash always leaves the queue unsure. What
//! can be exactly-once is the *effect*: see `idempotent_consumer` and
//! `crash_window`.

use std::time::Duration;

use echomq::{Client, Reaper};
use redis::AsyncCommands;
use serde::Serialize;

/// The at-least-once worker's lease: short, so the demo's redelivery is quick.
const LEASE: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Crash {
    BeforeEffect,
    AfterEffect,
}

impl Crash {
    fn label(self) -> &'static str {
        match self {
            Crash::BeforeEffect => "before the effect",
            Crash::AfterEffect => "after the effect, before the ack",
        }
    }
}

/// One mode and crash point, as measured.
#[derive(Debug, Serialize)]
struct Row {
    mode: &'static str,
    crash: &'static str,
    /// Times a worker was handed the job.
    deliveries: u32,
    /// Times the effect ran (the counter's value).
    runs: i64,
    /// Jobs whose effect never happened and never will (nothing left to deliver).
    lost: u32,
}

/// At-most-once: pop, then work. A crash after the pop loses the job.
async fn at_most_once(c: &mut redis::aio::MultiplexedConnection, run: &str, crash: Crash) -> redis::RedisResult<Row> {
    let (list, effect) = (
        format!("demo:{run}:amo:{crash:?}:list"),
        format!("demo:{run}:amo:{crash:?}:sent"),
    );
    c.lpush::<_, _, ()>(&list, "send-welcome-email").await?;
    let mut deliveries = 0;
    // Worker 1: the pop hands the job out and removes it: that was the ack.
    if let Some(_job) = c.rpop::<_, Option<String>>(&list, None).await? {
        deliveries += 1;
        if crash == Crash::AfterEffect {
            c.incr::<_, _, ()>(&effect, 1).await?;
        }
        // ... dies here.
    }
    // Worker 2, healthy: the queue has nothing left to hand out.
    while let Some(_job) = c.rpop::<_, Option<String>>(&list, None).await? {
        deliveries += 1;
        c.incr::<_, _, ()>(&effect, 1).await?;
    }
    let runs = c.get::<_, Option<i64>>(&effect).await?.unwrap_or(0);
    Ok(Row {
        mode: "at-most-once",
        crash: crash.label(),
        deliveries,
        runs,
        lost: u32::from(runs == 0),
    })
}

/// At-least-once (echomq): lease, work, then acknowledge. A crash leaves
/// the lease to run out; the reaper returns the job and it runs again.
async fn at_least_once(
    client: &Client,
    c: &mut redis::aio::MultiplexedConnection,
    run: &str,
    crash: Crash,
) -> Result<Row, Box<dyn std::error::Error>> {
    let queue = client.queue(&format!("delivery-modes-{run}-{crash:?}")).await?;
    let effect = format!("demo:{run}:alo:{crash:?}:sent");
    queue.enqueue(&"send-welcome-email").await?;
    let mut deliveries = 0;
    // Worker 1 leases the job ...
    let lease = queue.claim(1, LEASE).await?.remove(0);
    deliveries += 1;
    if crash == Crash::AfterEffect {
        c.incr::<_, _, ()>(&effect, 1).await?;
    }
    // ... and dies here: no complete, no heartbeat. The lease runs out on
    // the server's clock and a reaper returns the job to pending.
    while queue.server_time_ms().await? <= lease.deadline_ms() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Reaper::new(queue.clone()).run_once().await?;
    // Worker 2, healthy, takes whatever the queue offers.
    loop {
        let leases = queue.claim(1, LEASE).await?;
        let Some(lease) = leases.first() else { break };
        deliveries += 1;
        c.incr::<_, _, ()>(&effect, 1).await?;
        queue.complete(lease).await?;
    }
    let runs = c.get::<_, Option<i64>>(&effect).await?.unwrap_or(0);
    Ok(Row {
        mode: "at-least-once",
        crash: crash.label(),
        deliveries,
        runs,
        lost: u32::from(runs == 0),
    })
}

/// Every mode at every crash point.
async fn demo(url: &str) -> Result<Vec<Row>, Box<dyn std::error::Error>> {
    // A fresh namespace per run, so a shared server's old data never counts.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let run = format!("{}-{nanos}", std::process::id());
    let mut c = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
    // One echomq client for every queue of the run: one connection, shared.
    let client = Client::connect(url).await?;
    let mut rows = Vec::new();
    for crash in [Crash::BeforeEffect, Crash::AfterEffect] {
        rows.push(at_most_once(&mut c, &run, crash).await?);
    }
    for crash in [Crash::BeforeEffect, Crash::AfterEffect] {
        rows.push(at_least_once(&client, &mut c, &run, crash).await?);
    }
    Ok(rows)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Keep the server (if we started one) alive until the end of main.
    let (url, _server) = echomq::server::url_from_env_or_start()?;
    let rows = demo(&url).await?;
    println!("One job; the worker dies mid-job; a healthy worker takes what is left.\n");
    println!(
        "{:<15} {:<34} {:>10} {:>5} {:>5}",
        "mode", "worker dies", "deliveries", "ran", "lost"
    );
    for r in &rows {
        println!(
            "{:<15} {:<34} {:>10} {:>5} {:>5}",
            r.mode, r.crash, r.deliveries, r.runs, r.lost
        );
    }
    println!(
        "{:<15} not offered: the acknowledgement itself can be lost, so some crash always\n\
         {:<15} leaves the queue unsure. Exactly-once *effects* are: at-least-once delivery\n\
         {:<15} plus an idempotent consumer (examples idempotent_consumer, crash_window).",
        "exactly-once", "", ""
    );
    println!();
    for mode in ["at-most-once", "at-least-once"] {
        let lost: u32 = rows.iter().filter(|r| r.mode == mode).map(|r| r.lost).sum();
        let ran_again: u32 = rows
            .iter()
            .filter(|r| r.mode == mode)
            .map(|r| r.runs.max(1) as u32 - 1)
            .sum();
        println!("{mode}: lost {lost}, ran twice {ran_again}");
    }
    println!("readout: {}", serde_json::json!({ "rows": rows }));
    Ok(())
}
