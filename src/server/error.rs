//! The helper's error type.

use std::io;

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
    /// An argument out of range (a [`LocalCluster`](super::LocalCluster)'s node counts, a slot
    /// past 16383, a port that is not a master); the message says which.
    #[error("invalid local server argument: {0}")]
    Invalid(String),
    /// A server refused a command the helper sent (for instance a cluster
    /// command while forming a [`LocalCluster`](super::LocalCluster) or moving a slot); the
    /// message names the command, the port and the server's answer.
    #[error("local server command failed: {0}")]
    Command(String),
}
