//! `echomq-outbox-relay`: the outbox relay as a process of its own (feature
//! `cli`). Run as many as you like against one database; each stops after
//! its batch in flight on SIGINT or SIGTERM.
//!
//! ```text
//! echomq-outbox-relay --database-url postgres://app@db/app --valkey-url redis://valkey:6379/ --migrate
//! ```

use std::time::Duration;

use clap::Parser;
use echomq_outbox::{Outbox, Relay, RelayOptions};

/// Moves committed echomq outbox rows from Postgres into echomq.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The application's Postgres.
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// The echomq server (Valkey or Redis).
    #[arg(long, env = "ECHOMQ_URL")]
    valkey_url: String,
    /// Apply the outbox's migrations first.
    #[arg(long)]
    migrate: bool,
    /// Rows per batch.
    #[arg(long, default_value_t = echomq_outbox::DEFAULT_BATCH_SIZE)]
    batch_size: usize,
    /// Milliseconds between looks when no notification comes.
    #[arg(long, default_value_t = echomq_outbox::DEFAULT_POLL_INTERVAL.as_millis() as u64)]
    poll_interval_ms: u64,
    /// Milliseconds a batch may take before it gives up (its rows stay
    /// for a later batch; Postgres ends a session cut off mid-batch after
    /// as long).
    #[arg(long, default_value_t = echomq_outbox::DEFAULT_BATCH_TIMEOUT.as_millis() as u64)]
    batch_timeout_ms: u64,
    /// Poll only (no LISTEN), e.g. behind a transaction-mode pooler.
    #[arg(long)]
    no_listen: bool,
    /// Test-only: stop at this point of the first batch (locked,
    /// after-enqueue, after-delete) after writing the marker file.
    #[cfg(feature = "fault-injection")]
    #[arg(long, hide = true, requires = "fault_marker")]
    fault_pause_at: Option<String>,
    #[cfg(feature = "fault-injection")]
    #[arg(long, hide = true)]
    fault_marker: Option<std::path::PathBuf>,
    /// Test-only negative control: delete rows before enqueueing them.
    #[cfg(feature = "fault-injection")]
    #[arg(long, hide = true)]
    fault_delete_before_enqueue: bool,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "echomq-outbox-relay stopped");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy(&args.database_url)?;
    if args.migrate {
        Outbox::new().migrate(&pool).await?;
    }
    let client = echomq::Client::connect(&args.valkey_url).await?;
    #[allow(unused_mut)]
    let mut opts = RelayOptions::new()
        .batch_size(args.batch_size)
        .poll_interval(Duration::from_millis(args.poll_interval_ms))
        .batch_timeout(Duration::from_millis(args.batch_timeout_ms))
        .listen(!args.no_listen);
    #[cfg(feature = "fault-injection")]
    {
        use echomq_outbox::faults::{FaultHooks, FaultPoint};
        let pause_at = match (&args.fault_pause_at, &args.fault_marker) {
            (Some(p), Some(m)) => Some((FaultPoint::parse(p).ok_or("unknown fault point")?, m.clone())),
            _ => None,
        };
        opts = opts.faults(FaultHooks {
            pause_at,
            delete_before_enqueue: args.fault_delete_before_enqueue,
        });
    }
    let relay = Relay::new(pool, client, opts)?;
    tracing::info!("echomq-outbox-relay running");
    relay.run(stopped()).await;
    tracing::info!("echomq-outbox-relay stopped");
    Ok(())
}

async fn stopped() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "no SIGTERM handler; stopping on Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
