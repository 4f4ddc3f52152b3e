//! The crash window: step a worker's crash point across its job and count
//! how often the effect happened, on a real server.
//!
//! Run: `cargo run --example crash_window --features local-server`.
//! Connects to `ECHOMQ_URL` when set; otherwise starts a private server.
//! The last line, `readout: {json}`, is what `tests/effects/examples.rs` asserts.
//!
//! For each crash point a fresh job is leased by a worker that dies right
//! after that step (it stops sending anything: no settle, no heartbeat);
//! the lease runs out, the reaper returns the job and a healthy worker runs
//! it to the end. The effect is "credit 100 cents" recorded by a payment
//! provider that does *not* deduplicate, but keeps a ledger you can query
//! by idempotency key.
//!
//! 1. A plain handler (lease → effect → complete): only a crash between the
//!    effect and the complete produces a duplicate. That is the duplicate
//!    window, and no reordering of these steps closes it.
//! 2. The same handler guarded by an effect marker (lease → claim marker →
//!    effect → mark done → complete). A crash after "mark done" is skipped
//!    on redelivery. A crash between the effect and "mark done" leaves the
//!    marker *orphaned* (held by a dead attempt): echomq cannot know whether
//!    the effect happened. Redoing it ("redo") duplicates; asking the
//!    provider's ledger by idempotency key ("ask") gives exactly one.
//! 3. Atomic completion (lease → complete_with(effect)): for an effect that
//!    lives in Valkey, effect and acknowledgement are one script, so there
//!    is no window at all.

use std::time::Duration;

use echomq::{Client, EffectMarker, Effects, JobState, Lease, MarkerState, Queue, Reaper};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use serde::Serialize;

/// Short, so the redeliveries in the demo are quick.
const LEASE: Duration = Duration::from_millis(150);

type Error = Box<dyn std::error::Error + Send + Sync>;

/// What a redelivered attempt does when the marker is orphaned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Orphan {
    /// Perform the effect again.
    Redo,
    /// Ask the provider whether the effect happened.
    Ask,
}

/// The provider: credits an account and appends the idempotency key to its
/// ledger. It does not deduplicate.
struct Provider {
    conn: MultiplexedConnection,
    ledger: String,
}

impl Provider {
    async fn credit(&mut self, key: &str) -> Result<(), Error> {
        self.conn.rpush::<_, _, ()>(&self.ledger, key).await?;
        Ok(())
    }
    /// The provider's record: was this key applied?
    async fn applied(&mut self, key: &str) -> Result<bool, Error> {
        let pos: Option<i64> = redis::cmd("LPOS")
            .arg(&self.ledger)
            .arg(key)
            .query_async(&mut self.conn)
            .await?;
        Ok(pos.is_some())
    }
    async fn count(&mut self) -> Result<i64, Error> {
        Ok(self.conn.llen(&self.ledger).await?)
    }
}

/// One crash point of one handler style: how often the effect happened.
#[derive(Debug, Serialize)]
struct Row {
    crash: String,
    effects: i64,
}

/// Marker rows report both orphan policies.
#[derive(Debug, Serialize)]
struct MarkerRow {
    crash: String,
    redo: i64,
    ask: i64,
}

#[derive(Debug, Serialize)]
struct Readout {
    plain: Vec<Row>,
    marker: Vec<MarkerRow>,
    atomic: Vec<Row>,
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

/// What every run shares: one echomq client for all its queues, and the
/// provider's connection.
struct Env {
    client: Client,
    conn: MultiplexedConnection,
    /// A fresh namespace per run, so a shared server's old data never counts.
    run: String,
}

/// A fresh queue and provider ledger for one run of one crash point.
async fn fresh(env: &Env, name: &str) -> Result<(Queue, Provider), Error> {
    let run = &env.run;
    let queue = env.client.queue(&format!("crash-window-{run}-{name}")).await?;
    let conn = env.conn.clone();
    let ledger = format!("demo:{run}:{name}:ledger");
    queue.enqueue(&100u32).await?;
    Ok((queue, Provider { conn, ledger }))
}

/// Returns a check "does the worker die after step `n`?" that fires once,
/// for the first delivery's crash point `crash` (`None`: no crash).
fn crash_point(mut crash: Option<usize>) -> impl FnMut(usize) -> bool {
    move |n| {
        let hit = crash == Some(n);
        if hit {
            crash = None;
        }
        hit
    }
}

/// Style 1, lease → effect → complete: dies after step `crash`.
async fn plain(env: &Env, crash: Option<usize>) -> Result<i64, Error> {
    let (queue, mut provider) = fresh(env, &format!("plain-{crash:?}")).await?;
    let mut dies_after = crash_point(crash);
    let mut lease = queue.claim(1, LEASE).await?.remove(0);
    loop {
        if dies_after(1) {
            lease = redeliver(&queue, &lease).await?;
            continue;
        }
        provider.credit(&queue.idempotency_key(lease.id())).await?;
        if dies_after(2) {
            lease = redeliver(&queue, &lease).await?;
            continue;
        }
        queue.complete(&lease).await?;
        // Dying now (step 3) loses nothing: the job is settled.
        dies_after(3);
        break;
    }
    assert_eq!(queue.job(lease.id()).await?.state, JobState::Completed);
    provider.count().await
}

/// Style 2, lease → claim marker → effect → mark done → complete: dies after
/// step `crash`, and resolves an orphaned marker with `policy`.
async fn guarded(env: &Env, crash: Option<usize>, policy: Orphan) -> Result<i64, Error> {
    let (queue, mut provider) = fresh(env, &format!("marker-{crash:?}-{policy:?}")).await?;
    let mut dies_after = crash_point(crash);
    let mut lease = queue.claim(1, LEASE).await?.remove(0);
    'delivery: loop {
        if dies_after(1) {
            lease = redeliver(&queue, &lease).await?;
            continue 'delivery;
        }
        let marker = EffectMarker::for_lease(&queue, &lease, "credit")?;
        let state = marker.claim().await?;
        if dies_after(2) {
            lease = redeliver(&queue, &lease).await?;
            continue 'delivery;
        }
        let perform = match state {
            MarkerState::Done { .. } => false,
            MarkerState::Orphaned { .. } if policy == Orphan::Ask => {
                !provider.applied(&marker.idempotency_key()).await?
            }
            _ => true,
        };
        if perform {
            provider.credit(&marker.idempotency_key()).await?;
        }
        if dies_after(3) {
            lease = redeliver(&queue, &lease).await?;
            continue 'delivery;
        }
        if !matches!(state, MarkerState::Done { .. }) {
            marker.done().await?;
        }
        if dies_after(4) {
            lease = redeliver(&queue, &lease).await?;
            continue 'delivery;
        }
        queue.complete(&lease).await?;
        dies_after(5);
        break;
    }
    assert_eq!(queue.job(lease.id()).await?.state, JobState::Completed);
    provider.count().await
}

/// Style 3, lease → complete_with(credit): dies after step `crash`.
async fn atomic(env: &Env, crash: Option<usize>) -> Result<i64, Error> {
    let (queue, mut provider) = fresh(env, &format!("atomic-{crash:?}")).await?;
    let balance = queue.user_key("credited-cents")?;
    let mut dies_after = crash_point(crash);
    let mut lease = queue.claim(1, LEASE).await?.remove(0);
    if dies_after(1) {
        lease = redeliver(&queue, &lease).await?;
    }
    queue
        .complete_with(&lease, &Effects::new().incr_by(&balance, 100))
        .await?;
    // Dying now (step 2) loses nothing: effect and ack committed together.
    dies_after(2);
    assert_eq!(queue.job(lease.id()).await?.state, JobState::Completed);
    let cents: Option<i64> = provider.conn.get(&balance).await?;
    Ok(cents.unwrap_or(0) / 100)
}

async fn demo(url: &str) -> Result<Readout, Error> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let env = Env {
        client: Client::connect(url).await?,
        conn: redis::Client::open(url)?.get_multiplexed_async_connection().await?,
        run: format!("{}-{nanos}", std::process::id()),
    };
    let label = |names: &[&str], crash: Option<usize>| match crash {
        Some(n) => format!("after {}", names[n - 1]),
        None => "no crash".to_owned(),
    };
    let plain_steps = ["lease", "effect", "complete"];
    let mut readout = Readout {
        plain: Vec::new(),
        marker: Vec::new(),
        atomic: Vec::new(),
    };
    for crash in [Some(1), Some(2), Some(3), None] {
        readout.plain.push(Row {
            crash: label(&plain_steps, crash),
            effects: plain(&env, crash).await?,
        });
    }
    let marker_steps = ["lease", "marker claim", "effect", "mark done", "complete"];
    for crash in [Some(1), Some(2), Some(3), Some(4), Some(5), None] {
        readout.marker.push(MarkerRow {
            crash: label(&marker_steps, crash),
            redo: guarded(&env, crash, Orphan::Redo).await?,
            ask: guarded(&env, crash, Orphan::Ask).await?,
        });
    }
    let atomic_steps = ["lease", "complete_with(effect)"];
    for crash in [Some(1), Some(2), None] {
        readout.atomic.push(Row {
            crash: label(&atomic_steps, crash),
            effects: atomic(&env, crash).await?,
        });
    }
    Ok(readout)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // Keep the server (if we started one) alive until the end of main.
    let (url, _server) = echomq::server::url_from_env_or_start()?;
    let r = demo(&url).await?;
    let mark = |n: i64| if n > 1 { "  <- duplicate" } else { "" };
    println!("1. plain handler: lease -> effect -> complete");
    println!("   {:<34} {:>7}", "worker dies", "effects");
    for row in &r.plain {
        println!("   {:<34} {:>7}{}", row.crash, row.effects, mark(row.effects));
    }
    println!("\n2. effect marker: lease -> marker claim -> effect -> mark done -> complete");
    println!("   (orphaned marker resolved by: redo = perform again, ask = query the provider's ledger)");
    println!("   {:<34} {:>7} {:>7}", "worker dies", "redo", "ask");
    for row in &r.marker {
        println!(
            "   {:<34} {:>7} {:>7}{}",
            row.crash,
            row.redo,
            row.ask,
            mark(row.redo.max(row.ask))
        );
    }
    println!("\n3. atomic completion: lease -> complete_with(effect)");
    println!("   {:<34} {:>7}", "worker dies", "effects");
    for row in &r.atomic {
        println!("   {:<34} {:>7}{}", row.crash, row.effects, mark(row.effects));
    }
    println!("\nOnly a crash between an effect and the record of it (the ack, or the marker's done)");
    println!("duplicates; only the system holding the effect can close that window.");
    println!("readout: {}", serde_json::to_string(&r)?);
    Ok(())
}
