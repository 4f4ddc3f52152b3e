//! [`LocalPostgres`] (feature `local-postgres`): a private Postgres server
//! for tests and examples, on a free loopback port with a data directory
//! of its own, as `echomq::server::LocalServer` (echomq's feature `local-server`) is
//! for Valkey.
//!
//! It runs Debian's `postgresql` binaries (`/usr/lib/postgresql/*/bin`, the
//! newest version found) or those in `$ECHOMQ_PG_BIN_DIR`. Postgres refuses
//! to run as root, so under root the server runs as the `postgres` user
//! (through `setpriv`, which execs it, so the child is the postmaster
//! itself). The first server of a version initialises a template cluster
//! (`initdb`, about a second) that later servers copy.

use std::fs;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a start may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stop may take before the postmaster is killed outright.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Start attempts, each on a new free port (another process may take the
/// port between the probe and the bind).
const START_ATTEMPTS: u32 = 5;
/// The server's log, inside its directory.
const LOG_FILE: &str = "postgres.log";

/// Why a [`LocalPostgres`] could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgServerError {
    /// The Postgres server binaries are not installed.
    #[error(
        "postgres server binaries (initdb, postgres) not found in {searched}: install Debian's postgresql \
         (apt-get install postgresql; scripts/test does when run as root) or set ECHOMQ_PG_BIN_DIR"
    )]
    MissingBinaries {
        /// Where they were looked for.
        searched: String,
    },
    /// Running as root and no `postgres` user (or no `setpriv`) to run the server as.
    #[error("running as root needs a 'postgres' user and setpriv (util-linux) to run the server as: {0}")]
    NoUser(String),
    /// A command failed (`initdb`, a copy), with what it printed.
    #[error("{command} failed: {output}")]
    Command {
        /// The command.
        command: String,
        /// Its exit status and output.
        output: String,
    },
    /// The server did not accept connections in time; the log's tail.
    #[error("postgres did not start: {0}")]
    NotReady(String),
    /// A filesystem or process error.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Settings of a [`LocalPostgres`] before it starts.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct LocalPostgresBuilder {
    fsync: bool,
    settings: Vec<(String, String)>,
    bin_dir: Option<PathBuf>,
}

impl LocalPostgresBuilder {
    /// Whether the server fsyncs (default off: a killed server keeps its
    /// committed data anyway, since each commit's WAL is written to the
    /// kernel before the commit returns; only a machine crash would lose it).
    pub fn fsync(mut self, on: bool) -> Self {
        self.fsync = on;
        self
    }

    /// The directory of `initdb` and `postgres` (default:
    /// `$ECHOMQ_PG_BIN_DIR`, else the newest `/usr/lib/postgresql/*/bin`).
    pub fn bin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bin_dir = Some(dir.into());
        self
    }

    /// Any server setting (`-c name=value`).
    pub fn setting(mut self, name: &str, value: &str) -> Self {
        self.settings.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Starts the server and waits until it accepts connections.
    ///
    /// # Errors
    /// [`PgServerError::MissingBinaries`] naming what to install, or why
    /// the server could not start.
    pub fn start(self) -> Result<LocalPostgres, PgServerError> {
        let bin = find_bin_dir(self.bin_dir.clone())?;
        let user = run_as()?;
        let dir = fresh_dir()?;
        let mut pg = LocalPostgres {
            bin,
            dir,
            user,
            port: 0,
            args: Vec::new(),
            child: None,
        };
        pg.init()?;
        pg.args = vec![
            "-c".into(),
            "listen_addresses=127.0.0.1".into(),
            "-c".into(),
            format!("unix_socket_directories={}", pg.dir.display()),
            "-c".into(),
            format!("fsync={}", if self.fsync { "on" } else { "off" }),
            "-c".into(),
            "max_connections=200".into(),
            "-c".into(),
            "shared_buffers=32MB".into(),
        ];
        // Not synchronous_commit=off: a commit would then return before its
        // WAL reached the kernel, and a killed server would lose it.
        if !self.fsync {
            pg.args.extend(["-c".into(), "full_page_writes=off".into()]);
        }
        for (k, v) in self.settings {
            pg.args.extend(["-c".into(), format!("{k}={v}")]);
        }
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            pg.port = free_port()?;
            match pg.spawn_and_wait()? {
                None => return Ok(pg),
                Some(why) => last = why,
            }
        }
        Err(PgServerError::NotReady(last))
    }
}

/// A private Postgres server on `127.0.0.1`, user `postgres`, no password
/// (trust). Dropping it stops the server and removes its directory.
#[derive(Debug)]
pub struct LocalPostgres {
    bin: PathBuf,
    dir: PathBuf,
    /// `(uid, gid)` to run as, when running as root.
    user: Option<(u32, u32)>,
    port: u16,
    args: Vec<String>,
    child: Option<Child>,
}

impl LocalPostgres {
    /// Starts a server with the default settings.
    ///
    /// # Errors
    /// As [`LocalPostgresBuilder::start`].
    pub fn start() -> Result<LocalPostgres, PgServerError> {
        Self::builder().start()
    }

    /// A builder to configure the server before starting it.
    pub fn builder() -> LocalPostgresBuilder {
        LocalPostgresBuilder::default()
    }

    /// The connection URL, `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the server the hard way (`SIGQUIT`, an immediate shutdown: no
    /// checkpoint, crash recovery at the next start) and waits for it.
    /// Does nothing if it is not running.
    pub fn kill(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        signal(child.id(), "QUIT");
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Kills the server (as [`kill`](Self::kill)) and starts it again on
    /// the same port and data, waiting until it accepts connections.
    ///
    /// # Errors
    /// [`PgServerError::NotReady`] when it does not come back.
    pub fn restart(&mut self) -> Result<(), PgServerError> {
        self.kill();
        let mut last = String::new();
        for attempt in 0..START_ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(200));
            }
            match self.spawn_and_wait()? {
                None => return Ok(()),
                Some(why) => last = why,
            }
        }
        Err(PgServerError::NotReady(last))
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        match self.user {
            Some((uid, gid)) => {
                let mut c = Command::new("setpriv");
                c.args([
                    format!("--reuid={uid}"),
                    format!("--regid={gid}"),
                    "--clear-groups".into(),
                ])
                .arg("--")
                .arg(path);
                c
            }
            None => Command::new(path),
        }
    }

    /// A data directory copied from the version's template, made first if
    /// missing.
    fn init(&self) -> Result<(), PgServerError> {
        let template = template_dir(&self.bin, self.user);
        if !template.join("PG_VERSION").exists() {
            // One staging dir per call, not per process: tests of one
            // process (`cargo test` runs them on threads) start servers at
            // once, and with the pid alone two initdb runs shared a dir.
            static STAGING: AtomicU64 = AtomicU64::new(0);
            let staging = PathBuf::from(format!(
                "{}.{}-{}.tmp",
                template.display(),
                std::process::id(),
                STAGING.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&staging);
            fs::create_dir_all(&staging)?;
            self.own(&staging)?;
            let out = self
                .command("initdb")
                .arg("-D")
                .arg(&staging)
                .args([
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--no-sync",
                    "-E",
                    "UTF8",
                    "--locale=C",
                ])
                .stdin(Stdio::null())
                .output()?;
            if !out.status.success() {
                let _ = fs::remove_dir_all(&staging);
                return Err(PgServerError::Command {
                    command: "initdb".into(),
                    output: format!(
                        "{}: {}{}",
                        out.status,
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    ),
                });
            }
            // Another process may have made it meanwhile; either copy is good.
            if fs::rename(&staging, &template).is_err() {
                let _ = fs::remove_dir_all(&staging);
            }
        }
        let out = Command::new("cp").arg("-a").arg(&template).arg(self.data()).output()?;
        if !out.status.success() {
            return Err(PgServerError::Command {
                command: "cp -a".into(),
                output: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(())
    }

    fn own(&self, path: &Path) -> io::Result<()> {
        if let Some((uid, gid)) = self.user {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
        }
        Ok(())
    }

    /// Spawns the postmaster and waits until it is ready; `Some(why)` when
    /// it exited at once (retry on another port), an error when it hung.
    fn spawn_and_wait(&mut self) -> Result<Option<String>, PgServerError> {
        let log_path = self.dir.join(LOG_FILE);
        let log = fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
        let start_len = log.metadata()?.len();
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(self.data())
            .arg("-p")
            .arg(self.port.to_string())
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let text = fs::read(&log_path).unwrap_or_default();
            let tail = String::from_utf8_lossy(&text[(start_len as usize).min(text.len())..]).into_owned();
            if tail.contains("ready to accept connections") {
                return Ok(None);
            }
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                self.child = None;
                return Ok(Some(format!("exited with {status}: {}", last_lines(&tail))));
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(PgServerError::NotReady(format!(
                    "not ready after {READY_TIMEOUT:?}: {}",
                    last_lines(&tail)
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for LocalPostgres {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn last_lines(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// `$ECHOMQ_PG_BIN_DIR`, else the newest `/usr/lib/postgresql/*/bin` that
/// has both `initdb` and `postgres`.
fn find_bin_dir(chosen: Option<PathBuf>) -> Result<PathBuf, PgServerError> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("postgres").is_file();
    if let Some(d) = chosen.or_else(|| std::env::var_os("ECHOMQ_PG_BIN_DIR").map(PathBuf::from)) {
        return if has(&d) {
            Ok(d)
        } else {
            Err(PgServerError::MissingBinaries {
                searched: d.display().to_string(),
            })
        };
    }
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            has(&bin).then_some((v, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, d)| d)
        .ok_or_else(|| PgServerError::MissingBinaries {
            searched: "/usr/lib/postgresql/*/bin".into(),
        })
}

/// `None` when not root; else the `postgres` user's ids.
fn run_as() -> Result<Option<(u32, u32)>, PgServerError> {
    if fs::metadata("/proc/self")?.uid() != 0 {
        return Ok(None);
    }
    let id = |flag: &str| -> Result<u32, PgServerError> {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .map_err(|e| PgServerError::NoUser(e.to_string()))?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| PgServerError::NoUser(String::from_utf8_lossy(&out.stderr).trim().to_owned()))
    };
    if Command::new("setpriv").arg("--version").output().is_err() {
        return Err(PgServerError::NoUser("setpriv not found".into()));
    }
    Ok(Some((id("-u")?, id("-g")?)))
}

fn template_dir(bin: &Path, user: Option<(u32, u32)>) -> PathBuf {
    let version = bin
        .parent()
        .and_then(Path::file_name)
        .and_then(|v| v.to_str())
        .unwrap_or("pg");
    let uid = user.map_or_else(|| fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0), |(u, _)| u);
    base_dir(user.is_some()).join(format!("echomq-outbox-pg-template-{version}-{uid}"))
}

/// Where the servers' directories go: the temp dir, unless the server runs
/// as another user (root starting it as `postgres`) who could not reach it
/// there: a private temp dir (mode 0700, as `mktemp -d` makes one for a CI
/// run) is not traversable by others, so then `/tmp`.
fn base_dir(other_user: bool) -> PathBuf {
    let tmp = std::env::temp_dir();
    let traversable = tmp
        .ancestors()
        .all(|d| fs::metadata(d).is_ok_and(|m| m.mode() & 0o001 != 0));
    if other_user && !traversable {
        PathBuf::from("/tmp")
    } else {
        tmp
    }
}

/// A fresh directory for one server, owned by the user it runs as.
fn fresh_dir() -> Result<PathBuf, PgServerError> {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let user = run_as()?;
    let dir = base_dir(user.is_some()).join(format!(
        "echomq-outbox-pg-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    fs::create_dir_all(&dir)?;
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
    }
    Ok(dir)
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}
