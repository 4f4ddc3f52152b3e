//! `echomq`: inspect and operate echomq queues from the command line, on
//! the library's public API.
//!
//! - `args`: the command line (clap).
//! - `ctx`: the connection and the queue a command works on; a command's
//!   `Output` (its JSON document, its text, its exit code).
//! - `exit`: the exit codes and the error a command ends with; passwords
//!   kept out of what is printed.
//! - `render`: tables, times, durations, the JSON form of a job.
//! - one file per group of commands: `stats`, `jobs` (`jobs`, `show`),
//!   `groups` (`flow`, `batch`), `enqueue`,
//!   `ops` (the commands that change a queue), `schedules`, `doctor`,
//!   `watch` (live events, printed as they come).
#![forbid(unsafe_code)]

mod args;
mod ctx;
mod doctor;
mod enqueue;
mod exit;
mod groups;
mod jobs;
mod ops;
mod render;
mod schedules;
mod stats;
mod watch;

use std::io::Write as _;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::args::{Cli, Command, SchedulesAction};
use crate::ctx::{Ctx, Output};
use crate::exit::{Failure, Url};
use crate::ops::Action;

fn main() -> ExitCode {
    let cli = Cli::parse();
    check_queue(&cli);
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("echomq: cannot start: {e}");
            return ExitCode::from(exit::FAILED);
        }
    };
    let json = cli.json;
    let result = runtime.block_on(run(cli));
    // Printing to a closed pipe (`echomq jobs failed | head`) is not an error.
    let mut stdout = std::io::stdout().lock();
    let code = match result {
        Ok(out) if out.streamed => out.code,
        Ok(out) => {
            let _ = if json {
                writeln!(stdout, "{}", pretty(&out.json))
            } else {
                write!(stdout, "{}", out.text)
            };
            out.code
        }
        Err(f) => {
            // With --json the failure is one JSON document on stdout, and
            // nothing on stderr (a script reads one stream, in one form).
            if json {
                let doc = serde_json::json!({"error": f.message, "exit_code": f.code});
                let _ = writeln!(stdout, "{}", pretty(&doc));
            } else {
                eprintln!("echomq: {}", f.message);
            }
            f.code
        }
    };
    let _ = stdout.flush();
    ExitCode::from(code)
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// A usage error (exit 2) for a command that needs a queue and has none,
/// or for a name that cannot be a queue's.
fn check_queue(cli: &Cli) {
    let optional = matches!(
        cli.command,
        Command::Stats | Command::Doctor { .. } | Command::Schedules { action: None }
    );
    let error = match &cli.queue {
        None if !optional => "this command needs a queue: -q NAME (or ECHOMQ_QUEUE)".to_owned(),
        Some(name) => match echomq::keys::validate_queue_name(name) {
            Ok(()) => return,
            Err(e) => e.to_string(),
        },
        None => return,
    };
    let _ = Cli::command()
        .error(clap::error::ErrorKind::MissingRequiredArgument, error)
        .print();
    std::process::exit(exit::USAGE.into())
}

async fn run(cli: Cli) -> Result<Output, Failure> {
    let json = cli.json;
    let ctx = Ctx::connect(Url::new(&cli.url), cli.prefix, cli.queue).await?;
    match cli.command {
        Command::Stats => stats::stats(&ctx).await,
        Command::Jobs { state, limit, after } => jobs::jobs(&ctx, state, limit, after).await,
        Command::Show { id } => jobs::show(&ctx, &id).await,
        Command::Flow { id } => groups::flow(&ctx, &id).await,
        Command::Batch { id } => groups::batch(&ctx, &id).await,
        Command::Enqueue(e) => enqueue::enqueue(&ctx, e).await,
        Command::Retry { all: true, .. } => ops::all(&ctx, Action::Retry).await,
        Command::Retry { ids, .. } => ops::per_id(&ctx, Action::Retry, &ids).await,
        Command::Promote { all: true, .. } => ops::all(&ctx, Action::Promote).await,
        Command::Promote { ids, .. } => ops::per_id(&ctx, Action::Promote, &ids).await,
        Command::Remove { ids } => ops::per_id(&ctx, Action::Remove, &ids).await,
        Command::Cancel { ids } => ops::per_id(&ctx, Action::Cancel, &ids).await,
        Command::Pause => ops::pause(&ctx, true).await,
        Command::Resume => ops::pause(&ctx, false).await,
        Command::Drain { yes } => ops::drain(&ctx, yes).await,
        Command::Clean {
            state,
            older_than,
            limit,
        } => ops::clean(&ctx, state, older_than, limit).await,
        Command::Obliterate { force, yes } => ops::obliterate(&ctx, force, yes).await,
        Command::Schedules { action: None } => schedules::list(&ctx).await,
        Command::Schedules {
            action: Some(SchedulesAction::Remove { name }),
        } => schedules::remove(&ctx, &name).await,
        Command::Schedules {
            action: Some(SchedulesAction::Pause { name }),
        } => schedules::pause(&ctx, &name, true).await,
        Command::Schedules {
            action: Some(SchedulesAction::Resume { name }),
        } => schedules::pause(&ctx, &name, false).await,
        Command::Schedules {
            action: Some(SchedulesAction::Run { name }),
        } => schedules::run_now(&ctx, &name).await,
        Command::Doctor { strict } => doctor::doctor(&ctx, strict).await,
        Command::Watch { from, count, no_follow } => watch::watch(&ctx, from, count, !no_follow, json).await,
    }
}
