//! The server process: its binary, ports, directory and log, how it is
//! spawned and seen ready, and its cleanup on drop.

use std::fs::{self, OpenOptions};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::config::LocalServerBuilder;
use super::error::ServerError;
use super::resp::{Probe, probe};
use super::secrets::{REDACTED, percent_encode, redact_args};

/// How long one start attempt may take to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Start attempts before giving up (each with a new port on a fresh start).
pub(super) const START_ATTEMPTS: u32 = 5;
/// Lines of the server's log quoted in [`ServerError::NotReady`].
const LOG_TAIL_LINES: usize = 25;
/// The server's own log file, inside its directory.
pub(super) const LOG_FILE: &str = "server.log";
/// The child's stdout and stderr (config errors are printed only there).
pub(super) const STDIO_FILE: &str = "server.stdio.log";

/// A private `valkey-server` / `redis-server` process on `127.0.0.1`.
///
/// Dropping it sends `SIGKILL`, reaps the process and removes its directory.
/// Its `Debug` output shows no password (see [`redact_arg`](super::redact_arg)).
pub struct LocalServer {
    pub(super) binary: PathBuf,
    pub(super) dir: PathBuf,
    pub(super) port: u16,
    /// The TLS port, when started with [`LocalServerBuilder::tls`].
    pub(super) tls_port: Option<u16>,
    /// The `requirepass` password, put in [`url`](Self::url).
    pub(super) password: Option<String>,
    /// Server arguments without `--port`/`--tls-port` (fixed for the server's lifetime).
    pub(super) args: Vec<String>,
    /// Run as a Sentinel with this configuration (written to
    /// `sentinel.conf` in the directory before each start, since a
    /// sentinel rewrites its configuration file as it learns).
    pub(super) sentinel: Option<String>,
    /// Extra environment of the server process (e.g. libfaketime's).
    pub(super) envs: Vec<(String, String)>,
    pub(super) child: Option<Child>,
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

    /// The first start of a server [`LocalServerBuilder::start`] built: each
    /// attempt on new free ports (a TLS port too, with `tls`) and from an
    /// empty directory, up to 5 times while the process exits at once.
    pub(super) fn start_fresh(mut self, tls: bool) -> Result<LocalServer, ServerError> {
        let mut last_failure = String::new();
        for attempt in 1..=START_ATTEMPTS {
            if attempt > 1 {
                // Start each attempt from an empty directory.
                let _ = fs::remove_dir_all(&self.dir);
                fs::create_dir(&self.dir)?;
            }
            self.port = free_port()?;
            if tls {
                self.tls_port = Some(free_port_besides(self.port)?);
            }
            match self.spawn_and_wait()? {
                Attempt::Ready => return Ok(self),
                Attempt::TimedOut(why) => return Err(ServerError::NotReady(why)),
                Attempt::Retry(why) => last_failure = why,
            }
        }
        Err(ServerError::NotReady(format!(
            "gave up after {START_ATTEMPTS} attempts; last: {last_failure}"
        )))
    }

    /// Spawns the server on `self.port` and waits for it to answer.
    pub(super) fn spawn_and_wait(&mut self) -> Result<Attempt, ServerError> {
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
pub(super) enum Attempt {
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
pub(super) fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

/// A free port other than `taken` (which is free too, until its server binds it).
pub(super) fn free_port_besides(taken: u16) -> io::Result<u16> {
    loop {
        let port = free_port()?;
        if port != taken {
            return Ok(port);
        }
    }
}

/// Creates a new, uniquely named directory under the system temp dir and
/// returns its absolute path (the server chdirs into it).
pub(super) fn make_temp_dir() -> io::Result<PathBuf> {
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
    use super::super::binary::is_executable;
    use super::super::resp::{ping, send};
    use super::*;

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
