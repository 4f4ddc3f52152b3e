//! Finding the server binary a [`LocalServer`](super::LocalServer) runs,
//! and whether a binary is built with TLS.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::error::ServerError;
use super::process::{STDIO_FILE, free_port, make_temp_dir};

/// Environment variable naming the server binary to use.
pub(super) const SERVER_BIN_ENV: &str = "ECHOMQ_SERVER_BIN";

/// Environment variable naming the server binary to use for TLS.
pub(super) const TLS_SERVER_BIN_ENV: &str = "ECHOMQ_TLS_SERVER_BIN";

/// Where `scripts/find-server` installs Valkey, relative to the crate root.
pub(super) const TOOLS_BINARY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/.tools/valkey/valkey-server");

/// Finds the server binary to use, in this order:
///
/// 1. the `ECHOMQ_SERVER_BIN` environment variable (a path, or a bare name
///    looked up on `PATH`); if it is set but unusable, that is an error
///    rather than a silent fallback;
/// 2. `.tools/valkey/valkey-server` in the echomq crate root, where
///    `scripts/find-server` installs Valkey;
/// 3. `valkey-server` on `PATH`;
/// 4. `redis-server` on `PATH`.
///
/// [`ServerError::NotFound`] lists what was tried.
pub fn find_server_binary() -> Result<PathBuf, ServerError> {
    if let Some(value) = std::env::var_os(SERVER_BIN_ENV).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(&value);
        return resolve_binary(&path).ok_or_else(|| {
            ServerError::NotFound(format!("{SERVER_BIN_ENV}={} (not an executable file)", path.display()))
        });
    }
    let tools = Path::new(TOOLS_BINARY);
    if is_executable(tools) {
        return Ok(tools.to_path_buf());
    }
    for name in ["valkey-server", "redis-server"] {
        if let Some(found) = search_path(name) {
            return Ok(found);
        }
    }
    Err(ServerError::NotFound(format!(
        "{SERVER_BIN_ENV} (unset), {TOOLS_BINARY}, valkey-server on PATH, redis-server on PATH"
    )))
}

/// Finds a server binary built with TLS, for [`LocalServerBuilder::tls`](super::LocalServerBuilder::tls):
///
/// 1. the `ECHOMQ_TLS_SERVER_BIN` environment variable (a path or a bare
///    name on `PATH`); if it is set but unusable or has no TLS, that is an
///    error rather than a silent fallback;
/// 2. else the first of [`find_server_binary`]'s choice, `valkey-server`
///    and `redis-server` on `PATH`, `/usr/bin/valkey-server` and
///    `/usr/bin/redis-server` that is built with TLS.
///
/// A binary is tried by starting it with a TLS port and certificate files
/// that do not exist: a build with TLS fails to load them, one without
/// fails to find TLS at all. The answer is kept for the process.
/// [`ServerError::NoTls`] lists what was tried.
pub fn find_tls_server_binary() -> Result<PathBuf, ServerError> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND.get_or_init(search_tls_binary).clone().map_err(ServerError::NoTls)
}

pub(super) fn search_tls_binary() -> Result<PathBuf, String> {
    let mut tried = Vec::new();
    let mut candidates = Vec::new();
    if let Some(value) = std::env::var_os(TLS_SERVER_BIN_ENV).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(&value);
        return match resolve_binary(&path) {
            Some(bin) if has_tls(&bin) => Ok(bin),
            Some(bin) => Err(format!("{TLS_SERVER_BIN_ENV}={} (built without TLS)", bin.display())),
            None => Err(format!(
                "{TLS_SERVER_BIN_ENV}={} (not an executable file)",
                path.display()
            )),
        };
    }
    tried.push(format!("{TLS_SERVER_BIN_ENV} (unset)"));
    match find_server_binary() {
        Ok(bin) => candidates.push(bin),
        Err(e) => tried.push(e.to_string()),
    }
    candidates.extend(["valkey-server", "redis-server"].into_iter().filter_map(search_path));
    candidates.extend(
        ["/usr/bin/valkey-server", "/usr/bin/redis-server"]
            .into_iter()
            .map(PathBuf::from)
            .filter(|p| is_executable(p)),
    );
    let mut seen = Vec::new();
    for bin in candidates {
        let real = fs::canonicalize(&bin).unwrap_or_else(|_| bin.clone());
        if seen.contains(&real) {
            continue;
        }
        seen.push(real);
        if has_tls(&bin) {
            return Ok(bin);
        }
        tried.push(format!("{} (built without TLS)", bin.display()));
    }
    Err(tried.join(", "))
}

/// Whether `binary` is built with TLS (see [`find_tls_server_binary`]).
pub(super) fn has_tls(binary: &Path) -> bool {
    let Ok(dir) = make_temp_dir() else { return false };
    let missing = |name: &str| dir.join(name).display().to_string();
    let port = free_port().map(|p| p.to_string()).unwrap_or_else(|_| "1".into());
    let out = dir.join(STDIO_FILE);
    let ran = OpenOptions::new().create(true).append(true).open(&out).and_then(|f| {
        Command::new(binary)
            .args(["--port", "0", "--tls-port", &port, "--save", "", "--appendonly", "no"])
            .args([
                "--tls-cert-file",
                &missing("none.crt"),
                "--tls-key-file",
                &missing("none.key"),
            ])
            .args(["--tls-ca-cert-file", &missing("none-ca.crt"), "--logfile", ""])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .spawn()
    });
    let tls = match ran {
        Ok(mut child) => {
            // Both kinds of build exit at once; one that keeps running
            // ignored the TLS port, so it has no TLS.
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
            let log = fs::read_to_string(&out).unwrap_or_default();
            log.contains("Failed to configure TLS") || log.contains("Failed to load certificate")
        }
        Err(_) => false,
    };
    let _ = fs::remove_dir_all(&dir);
    tls
}

/// A path to an executable file, or a bare name looked up on `PATH`.
pub(super) fn resolve_binary(path: &Path) -> Option<PathBuf> {
    let bare = path.components().count() == 1 && path.parent() == Some(Path::new(""));
    if bare && !path.exists() {
        return search_path(path.to_str()?);
    }
    is_executable(path).then(|| path.to_path_buf())
}

pub(super) fn search_path(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

pub(super) fn is_executable(path: &Path) -> bool {
    let Ok(meta) = fs::metadata(path) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}
