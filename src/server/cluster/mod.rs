//! A Valkey/Redis Cluster on loopback for tests: masters and their
//! replicas, each a [`LocalServer`], joined into one cluster by the helper
//! itself (no `redis-cli --cluster`).
//!
//! Only commands Redis 7.0 and Valkey have alike are used: `CLUSTER MEET`,
//! `SET-CONFIG-EPOCH`, `ADDSLOTSRANGE`, `REPLICATE`, `SETSLOT`,
//! `GETKEYSINSLOT`, `FAILOVER`, `NODES`, `INFO`, and `MIGRATE`. Every wait
//! polls a condition against a deadline.
//!
//! One file per concept: forming the cluster (form), what it looks like
//! and waiting for it to agree (topology), the `CLUSTER NODES` parser
//! (nodes), hash slots (slots), resharding (migration), failovers
//! (failover), and the helper's own connections (command).

mod command;
mod failover;
mod form;
mod migration;
mod nodes;
mod slots;
mod topology;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::error::ServerError;
use super::process::LocalServer;
use super::secrets::REDACTED;
pub use form::LocalClusterBuilder;
pub use migration::SlotMigration;
pub use slots::CLUSTER_SLOTS;

/// Default number of masters of a [`LocalCluster`].
pub const DEFAULT_MASTERS: usize = 3;
/// Most masters a [`LocalCluster`] may have.
pub const MAX_MASTERS: usize = 16;
/// Default number of replicas of each master.
pub const DEFAULT_REPLICAS_PER_MASTER: usize = 1;
/// Most replicas per master.
pub const MAX_REPLICAS_PER_MASTER: usize = 4;
/// Default `cluster-node-timeout`: short, so a replica takes over a killed
/// master within a few seconds.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(1_000);
/// Default number of keys one `MIGRATE` moves in [`SlotMigration::step`].
pub const DEFAULT_MIGRATE_BATCH: usize = 100;
/// How long [`LocalClusterBuilder::start`], [`ClusterHandle::migrate_slot`]
/// and [`ClusterHandle::failover`] wait for the cluster to agree.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A cluster of masters and replicas on `127.0.0.1`, each a private
/// [`LocalServer`] with `cluster-enabled yes` (all dropped with the
/// cluster).
///
/// The queries and the operations that change the cluster (resharding,
/// failovers) live on a [`ClusterHandle`], a cheap `Clone + Send +
/// 'static` value ([`handle`](Self::handle)) that can be moved into another
/// thread; this type forwards to it and adds what needs the processes
/// ([`node_mut`](Self::node_mut) to kill, pause or restart one).
///
/// ```no_run
/// use std::time::Duration;
/// use echomq::server::LocalCluster;
///
/// let mut cluster = LocalCluster::builder().masters(3).replicas_per_master(1).start()?;
/// let seeds = cluster.urls(); // for a cluster client
/// let slot = LocalCluster::slot_of("{orders}:jobs");
/// let old = cluster.master_of_slot(slot)?;
/// cluster.node_mut(old).unwrap().kill();
/// let new = cluster.wait_for_failover(old, Duration::from_secs(30))?;
/// assert_ne!(new, old);
/// # Ok::<(), echomq::server::ServerError>(())
/// ```
#[derive(Debug)]
pub struct LocalCluster {
    /// Masters first (in slot order at start), then the replicas.
    nodes: Vec<LocalServer>,
    handle: ClusterHandle,
}

/// The ports and credentials of a [`LocalCluster`], enough to query and
/// reshard it from any thread (for instance inside
/// `tokio::task::spawn_blocking` while a test's clients keep writing).
/// Every method is blocking `std` code. Its `Debug` output shows no
/// password.
#[derive(Clone)]
pub struct ClusterHandle {
    ports: Arc<Vec<u16>>,
    password: Option<String>,
    /// The node id of each port (`CLUSTER MYID`; kept across restarts,
    /// since `nodes.conf` is in the node's directory).
    ids: Arc<HashMap<u16, String>>,
    /// Which master each replica followed when last seen, so that
    /// [`wait_for_failover`](Self::wait_for_failover) knows the candidates
    /// even after the cluster has forgotten the dead master's replicas.
    followed: Arc<Mutex<HashMap<u16, u16>>>,
}

impl std::fmt::Debug for ClusterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterHandle")
            .field("ports", &self.ports)
            .field("password", &self.password.as_ref().map(|_| REDACTED))
            .finish_non_exhaustive()
    }
}

impl LocalCluster {
    /// A builder: [`DEFAULT_MASTERS`] masters, [`DEFAULT_REPLICAS_PER_MASTER`]
    /// replica each, [`DEFAULT_NODE_TIMEOUT`].
    pub fn builder() -> LocalClusterBuilder {
        LocalClusterBuilder {
            masters: DEFAULT_MASTERS,
            replicas: DEFAULT_REPLICAS_PER_MASTER,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            node: LocalServer::builder(),
        }
    }

    /// A handle on the cluster that can be moved to another thread.
    pub fn handle(&self) -> ClusterHandle {
        self.handle.clone()
    }

    /// Every node's URL, `redis://127.0.0.1:PORT/` (with the password when
    /// the template has one): the seeds of a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(LocalServer::url).collect()
    }

    /// One seed URL: the first node that is running.
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .find(|n| n.pid().is_some())
            .unwrap_or(&self.nodes[0])
            .url()
    }

    /// The nodes: the masters at start (in slot order), then their replicas.
    pub fn nodes(&self) -> &[LocalServer] {
        &self.nodes
    }

    /// The node on `port`, to kill, pause or restart.
    pub fn node_mut(&mut self, port: u16) -> Option<&mut LocalServer> {
        self.nodes.iter_mut().find(|n| n.port() == port)
    }

    /// The hash slot of `key` (CRC16 of the key or of its `{hash tag}`,
    /// modulo 16384), as `CLUSTER KEYSLOT` computes it.
    pub fn slot_of(key: &str) -> u16 {
        slots::key_slot(key.as_bytes())
    }

    /// See [`ClusterHandle::master_ports`].
    ///
    /// # Errors
    /// As [`ClusterHandle::master_ports`].
    pub fn master_ports(&self) -> Result<Vec<u16>, ServerError> {
        self.handle.master_ports()
    }

    /// See [`ClusterHandle::master_of_slot`].
    ///
    /// # Errors
    /// As [`ClusterHandle::master_of_slot`].
    pub fn master_of_slot(&self, slot: u16) -> Result<u16, ServerError> {
        self.handle.master_of_slot(slot)
    }

    /// See [`ClusterHandle::replica_of`].
    pub fn replica_of(&self, master_port: u16) -> Option<u16> {
        self.handle.replica_of(master_port)
    }

    /// See [`ClusterHandle::migrate_slot`].
    ///
    /// # Errors
    /// As [`ClusterHandle::migrate_slot`].
    pub fn migrate_slot(&self, slot: u16, to_port: u16) -> Result<(), ServerError> {
        self.handle.migrate_slot(slot, to_port)
    }

    /// See [`ClusterHandle::begin_migration`].
    ///
    /// # Errors
    /// As [`ClusterHandle::begin_migration`].
    pub fn begin_migration(&self, slot: u16, to_port: u16) -> Result<SlotMigration, ServerError> {
        self.handle.begin_migration(slot, to_port)
    }

    /// See [`ClusterHandle::wait_for_failover`].
    ///
    /// # Errors
    /// As [`ClusterHandle::wait_for_failover`].
    pub fn wait_for_failover(&self, old_master_port: u16, timeout: Duration) -> Result<u16, ServerError> {
        self.handle.wait_for_failover(old_master_port, timeout)
    }

    /// See [`ClusterHandle::failover`].
    ///
    /// # Errors
    /// As [`ClusterHandle::failover`].
    pub fn failover(&self, replica_port: u16) -> Result<(), ServerError> {
        self.handle.failover(replica_port)
    }

    /// See [`ClusterHandle::wait_until_settled`].
    ///
    /// # Errors
    /// As [`ClusterHandle::wait_until_settled`].
    pub fn wait_until_settled(&self, timeout: Duration) -> Result<(), ServerError> {
        self.handle.wait_until_settled(timeout)
    }
}

impl ClusterHandle {
    /// The node id of `port` ("" if not a node of the cluster).
    fn id(&self, port: u16) -> &str {
        self.ids.get(&port).map_or("", String::as_str)
    }

    fn remember(&self, replica: u16, master: u16) {
        self.followed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(replica, master);
    }
}
