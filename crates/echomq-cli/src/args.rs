//! The command line: global options and one subcommand each.

use clap::{Parser, Subcommand, ValueEnum};
use echomq::JobState;
use echomq::admin::ListCursor;

/// Inspect and operate echomq queues on Valkey and Redis.
///
/// Every command takes the server (--url, else $ECHOMQ_URL), the key
/// prefix (--prefix) and the queue (-q NAME, else $ECHOMQ_QUEUE); `stats`,
/// `schedules` and `doctor` look at every queue on the server when no
/// queue is given. --json prints one JSON document instead of text.
#[derive(Debug, Parser)]
#[command(name = "echomq", version, after_help = crate::exit::HELP)]
pub struct Cli {
    /// The server: redis://[USER:PASSWORD@]HOST:PORT/DB
    #[arg(
        long,
        env = "ECHOMQ_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true,
        global = true
    )]
    pub url: String,

    /// The key prefix the queues were opened with
    #[arg(long, env = "ECHOMQ_PREFIX", default_value = echomq::keys::DEFAULT_PREFIX, global = true)]
    pub prefix: String,

    /// The queue
    #[arg(short, long, env = "ECHOMQ_QUEUE", global = true)]
    pub queue: Option<String>,

    /// Print one JSON document (stable field names) instead of text
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Jobs per state and whether paused, for the queue or every queue
    Stats,

    /// List a state's jobs in its order, a page at a time
    ///
    /// Pending jobs in the order they will be claimed, delayed ones by due
    /// time, active ones by lease deadline (with their holder), completed,
    /// failed and cancelled ones newest first. A full page ends with the
    /// cursor to pass to --after for the next one.
    Jobs {
        /// The state
        state: State,
        /// Jobs per page (1 to 1000)
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..=1000))]
        limit: u16,
        /// Go on after this cursor (printed at the end of the previous page)
        #[arg(long, value_parser = parse_cursor)]
        after: Option<ListCursor>,
    },

    /// Enqueue a job: PAYLOAD is JSON ("-": read it from stdin)
    ///
    /// The queue must exist (a typo never makes a new queue) unless
    /// --create is given. Prints the job's id and what happened: created,
    /// existing (--id already there), deduplicated (--dedup held).
    Enqueue(EnqueueArgs),

    /// Show a job's whole record
    Show {
        /// The job id
        id: String,
    },

    /// Move failed jobs back to pending, to run again with their full max_attempts
    Retry {
        /// Job ids
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        ids: Vec<String>,
        /// Every failed job of the queue
        #[arg(long)]
        all: bool,
    },

    /// Remove jobs that are not active (records and dedup markers)
    Remove {
        /// Job ids
        #[arg(required = true)]
        ids: Vec<String>,
    },

    /// Cancel jobs: a waiting one at once, a running one by request to its consumer
    Cancel {
        /// Job ids
        #[arg(required = true)]
        ids: Vec<String>,
    },

    /// Run delayed jobs now
    Promote {
        /// Job ids
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        ids: Vec<String>,
        /// Every delayed job of the queue
        #[arg(long)]
        all: bool,
    },

    /// Stop every consumer in every process from leasing the queue's jobs
    Pause,

    /// Let consumers lease the queue's jobs again
    Resume,

    /// Remove every pending and delayed job (running and finished ones stay)
    Drain {
        /// Do it (without: say what it would remove)
        #[arg(long)]
        yes: bool,
    },

    /// Remove the finished jobs of a state older than a duration
    ///
    /// Completed, failed or cancelled jobs that finished more than
    /// --older-than ago (on the server's clock), records and all, at most
    /// --limit; retention does this as jobs finish, this is a one-off.
    Clean {
        /// completed, failed or cancelled
        state: State,
        /// Finished longer ago than this (e.g. 7d, 12h, 30m)
        #[arg(long, value_parser = parse_duration)]
        older_than: std::time::Duration,
        /// The most jobs to remove
        #[arg(long, default_value_t = 100_000)]
        limit: u64,
    },

    /// Delete every key of the queue: jobs, sets, counters, schedules, user keys
    ///
    /// Refused while jobs are active unless --force: forced, the running
    /// jobs' records go first and their workers' settlements find nothing.
    /// Stop producers first.
    Obliterate {
        /// Go on while jobs are active
        #[arg(long)]
        force: bool,
        /// Do it (without: say what it would delete)
        #[arg(long)]
        yes: bool,
    },

    /// Show a flow: its steps as a tree (each under the step that runs
    /// after it) with their states, and the counts per state
    Flow {
        /// The flow's id
        id: String,
    },

    /// Show a batch: its members' counts and when its callbacks were enqueued
    Batch {
        /// The batch's id
        id: String,
    },

    /// List the cron schedules of the queue (or of every queue), or remove,
    /// pause, resume or run one
    Schedules {
        /// Remove a schedule instead of listing
        #[command(subcommand)]
        action: Option<SchedulesAction>,
    },

    /// Check the server's settings and sweep the queue (or every queue)
    ///
    /// Reads what the server's persistence, eviction and replication
    /// settings let echomq promise, then runs a full consistency sweep of
    /// each queue, which repairs what a torn write left behind (as every
    /// worker's maintenance does every 10 minutes). Exits with 4 when it
    /// finds problems: an evicting server, a server older than Redis 7, a
    /// queue it cannot open, repairs made or keys skipped by a sweep; with
    /// --strict, also on a warning (no append-only file, replicas, a
    /// setting it could not read, other builds' function libraries).
    Doctor {
        /// Exit with 4 on warnings too
        #[arg(long)]
        strict: bool,
    },

    /// Print the queue's lifecycle events live, one line each (--json: one
    /// JSON object per line), until Ctrl-C or --count events
    Watch {
        /// Where to start: "$" (now, the default), "0" (the oldest event
        /// kept) or an event id printed earlier (resume after it)
        #[arg(long, default_value = "$", value_parser = parse_from)]
        from: echomq::EventCursor,
        /// Stop after this many events (waiting for new ones if the
        /// history has fewer, unless --no-follow)
        #[arg(long)]
        count: Option<u64>,
        /// Print the events kept from --from to the newest, then exit
        /// instead of waiting for new ones (as `tail` without -f)
        #[arg(long)]
        no_follow: bool,
    },
}

/// What `enqueue` takes: the payload and the job's options.
#[derive(Debug, clap::Args)]
pub struct EnqueueArgs {
    /// The payload, JSON; "-" reads it from stdin
    pub payload: String,
    /// A caller-chosen job id (not all digits)
    #[arg(long)]
    pub id: Option<String>,
    /// Run it after this delay (e.g. 90s, 5m, 2h; 1500ms)
    #[arg(long, value_parser = parse_duration)]
    pub delay: Option<std::time::Duration>,
    /// Priority, -128 to 127 (higher first)
    #[arg(long, allow_negative_numbers = true)]
    pub priority: Option<i8>,
    /// Its lane (tenant, customer)
    #[arg(long)]
    pub lane: Option<String>,
    /// Its kind (the handler a router picks)
    #[arg(long)]
    pub kind: Option<String>,
    /// A dedup id, held for --dedup-for (default: until the job finishes)
    #[arg(long)]
    pub dedup: Option<String>,
    /// How long the dedup id holds, whether or not the job finished
    #[arg(long, value_parser = parse_duration, requires = "dedup")]
    pub dedup_for: Option<std::time::Duration>,
    /// Handler failures before it fails for good
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// Make the queue if it is not on the server yet
    #[arg(long)]
    pub create: bool,
}

/// What `schedules` does instead of listing.
#[derive(Debug, Subcommand)]
pub enum SchedulesAction {
    /// Remove a schedule: no job is made for it from now on (jobs it made stay)
    Remove {
        /// The schedule's name
        name: String,
    },
    /// Pause a schedule: no job is made for it until it is resumed
    Pause {
        /// The schedule's name
        name: String,
    },
    /// Resume a paused schedule: the ticks that passed meanwhile are skipped
    Resume {
        /// The schedule's name
        name: String,
    },
    /// Enqueue the schedule's job now, outside its ticks
    Run {
        /// The schedule's name
        name: String,
    },
}

/// A job state, as the command line names it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum State {
    /// Ready to be claimed
    Pending,
    /// Waiting for a due time
    Delayed,
    /// Leased to a worker
    Active,
    /// Done
    Completed,
    /// Failed for good
    Failed,
    /// Cancelled
    Cancelled,
    /// Not started before its expiry
    Expired,
}

impl State {
    /// The library's state.
    pub fn job_state(self) -> JobState {
        match self {
            State::Pending => JobState::Pending,
            State::Delayed => JobState::Delayed,
            State::Active => JobState::Active,
            State::Completed => JobState::Completed,
            State::Failed => JobState::Failed,
            State::Cancelled => JobState::Cancelled,
            State::Expired => JobState::Expired,
        }
    }
}

fn parse_from(s: &str) -> Result<echomq::EventCursor, String> {
    echomq::EventCursor::parse(s).map_err(|e| e.to_string())
}

fn parse_cursor(s: &str) -> Result<ListCursor, String> {
    s.parse::<ListCursor>().map_err(|e| e.to_string())
}

/// A duration as `90s`, `5m`, `2h`, `1d` or `1500ms` (a plain number is
/// seconds).
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: a number and a unit (ms, s, m, h, d)"))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        _ => return Err(format!("{s:?}: the unit is one of ms, s, m, h, d")),
    };
    ms.map(std::time::Duration::from_millis)
        .ok_or_else(|| format!("{s:?} is too long"))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::parse_duration;

    // The definitions are consistent (clap's own check).
    #[test]
    fn cli_definition_is_valid() {
        super::Cli::command().debug_assert();
    }

    // Durations take ms, s, m, h, d (a bare number is seconds); others are refused.
    #[test]
    fn durations_parse() {
        use std::time::Duration;
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        for bad in [
            "",
            "m",
            "5x",
            "-1s",
            "1.5h",
            "99999999999999999999d",
            "9999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
