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

// One file per concept: the binary finder (binary), the process and its
// start (process), its configuration (config), process faults (faults),
// secrets in Debug output and URLs (secrets), the small RESP client of the
// readiness probe (resp), the error type (error); a Sentinel group
// (sentinel) and a Cluster (cluster/).
mod binary;
mod cluster;
mod config;
mod error;
mod faults;
mod process;
mod resp;
mod secrets;
mod sentinel;

pub use binary::{find_server_binary, find_tls_server_binary};
pub use cluster::{
    CLUSTER_SLOTS, ClusterHandle, DEFAULT_MASTERS, DEFAULT_MIGRATE_BATCH, DEFAULT_NODE_TIMEOUT,
    DEFAULT_REPLICAS_PER_MASTER, LocalCluster, LocalClusterBuilder, MAX_MASTERS, MAX_REPLICAS_PER_MASTER,
    SlotMigration,
};
pub use config::LocalServerBuilder;
pub use error::ServerError;
pub use process::{LocalServer, url_from_env_or_start};
pub use secrets::redact_arg;
pub use sentinel::{DEFAULT_DOWN_AFTER, DEFAULT_FAILOVER_TIMEOUT, SentinelGroup, SentinelGroupBuilder};
