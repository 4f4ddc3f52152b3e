//! A Valkey/Redis Cluster on loopback for tests: masters and their
//! replicas, each a [`LocalServer`], joined into one cluster by the helper
//! itself (no `redis-cli --cluster`).
//!
//! Only commands Redis 7.0 and Valkey have alike are used: `CLUSTER MEET`,
//! `SET-CONFIG-EPOCH`, `ADDSLOTSRANGE`, `REPLICATE`, `SETSLOT`,
//! `GETKEYSINSLOT`, `FAILOVER`, `NODES`, `INFO`, and `MIGRATE`. Every wait
//! polls a condition against a deadline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{LocalServer, LocalServerBuilder, ServerError, free_port, percent_encode};

/// How many hash slots a cluster has.
pub const CLUSTER_SLOTS: u16 = 16_384;
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
/// The timeout `MIGRATE` is given (milliseconds on the wire).
const MIGRATE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connect, read and write timeout of the helper's own connections.
const COMMAND_TIMEOUT: Duration = Duration::from_millis(1_000);
/// How often waits poll.
const POLL: Duration = Duration::from_millis(50);

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

/// Configures and starts a [`LocalCluster`]; from [`LocalCluster::builder`].
#[derive(Debug, Clone)]
pub struct LocalClusterBuilder {
    masters: usize,
    replicas: usize,
    node_timeout: Duration,
    node: LocalServerBuilder,
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
            .field("password", &self.password.as_ref().map(|_| super::REDACTED))
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
        key_slot(key.as_bytes())
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

impl LocalClusterBuilder {
    /// How many masters (default [`DEFAULT_MASTERS`], at most
    /// [`MAX_MASTERS`]); the 16384 slots are split evenly between them.
    pub fn masters(mut self, n: usize) -> Self {
        self.masters = n;
        self
    }

    /// How many replicas each master has (default
    /// [`DEFAULT_REPLICAS_PER_MASTER`], at most [`MAX_REPLICAS_PER_MASTER`]).
    pub fn replicas_per_master(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    /// `cluster-node-timeout` (default [`DEFAULT_NODE_TIMEOUT`], at least
    /// 100 ms): how long a node must not answer before it is thought to
    /// have failed. A failover takes about twice this, plus a second.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The builder each node starts from: binary, AOF, `appendfsync`,
    /// password (replicas then authenticate with it, and
    /// [`migrate_slot`](ClusterHandle::migrate_slot) passes it to
    /// `MIGRATE`), extra arguments. Its
    /// [`replica_of`](LocalServerBuilder::replica_of) and
    /// [`sentinel`](LocalServerBuilder::sentinel) settings are ignored.
    pub fn node(mut self, node: LocalServerBuilder) -> Self {
        self.node = node;
        self
    }

    /// Starts every node, joins them into one cluster (each master given
    /// its share of the slots, each replica following its master) and
    /// waits until every node reports `cluster_state:ok`, all agree on
    /// which master serves each slot and on who follows whom, and every
    /// replica's link to its master is up.
    ///
    /// # Errors
    /// [`ServerError::Invalid`] for counts or a node timeout out of range;
    /// as [`LocalServerBuilder::start`]; [`ServerError::Command`] when a
    /// node refuses a cluster command; [`ServerError::NotReady`] when the
    /// cluster does not form within 30 s.
    pub fn start(self) -> Result<LocalCluster, ServerError> {
        if !(1..=MAX_MASTERS).contains(&self.masters) {
            return Err(ServerError::Invalid(format!(
                "masters must be 1..={MAX_MASTERS}, not {}",
                self.masters
            )));
        }
        if self.replicas > MAX_REPLICAS_PER_MASTER {
            return Err(ServerError::Invalid(format!(
                "replicas_per_master must be 0..={MAX_REPLICAS_PER_MASTER}, not {}",
                self.replicas
            )));
        }
        if self.node_timeout < Duration::from_millis(100) {
            return Err(ServerError::Invalid(format!(
                "node_timeout must be at least 100ms, not {:?}",
                self.node_timeout
            )));
        }
        let mut template = self.node.clone();
        template.replica_of = None;
        template.sentinel = None;
        // A replica's first sync otherwise waits 5 s for more replicas to
        // share the transfer; put first so the template can still set it.
        template
            .extra
            .insert(0, ("repl-diskless-sync-delay".to_owned(), "0".to_owned()));
        let password = template.password.clone();
        let total = self.masters * (1 + self.replicas);
        let mut nodes = Vec::with_capacity(total);
        let mut bus_ports = Vec::with_capacity(total);
        for _ in 0..total {
            // The default bus port is PORT + 10000, past 65535 for most
            // ephemeral ports, so each node gets a free port of its own.
            let bus = free_port()?;
            let mut node = template
                .clone()
                .arg("cluster-enabled", "yes")
                .arg("cluster-config-file", "nodes.conf")
                .arg("cluster-port", &bus.to_string())
                .arg("cluster-node-timeout", &self.node_timeout.as_millis().to_string())
                // Topology stays as built: a master that loses its last slot
                // in a test's resharding does not turn into a replica.
                .arg("cluster-allow-replica-migration", "no")
                // A replica always takes over a dead master, however long
                // its link was down (a test may pause nodes for a while).
                .arg("cluster-replica-validity-factor", "0");
            if let Some(pw) = &password {
                node = node.arg("masterauth", pw);
            }
            nodes.push(node.start()?);
            bus_ports.push(bus);
        }
        let started = Instant::now();
        let ports: Vec<u16> = nodes.iter().map(LocalServer::port).collect();
        let mut ids = HashMap::new();
        for (i, &port) in ports.iter().enumerate() {
            let mut con = connect(port, password.as_deref())?;
            let id: String = query(&mut con, redis::cmd("CLUSTER").arg("MYID"), port)?;
            // Distinct epochs from the start, as redis-cli gives them:
            // otherwise the masters first fight out a collision.
            let epoch = i + 1;
            let _: () = query(&mut con, redis::cmd("CLUSTER").arg("SET-CONFIG-EPOCH").arg(epoch), port)?;
            if i < self.masters {
                let (first, last) = slot_share(i, self.masters);
                let _: () = query(
                    &mut con,
                    redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(first).arg(last),
                    port,
                )?;
            }
            if i > 0 {
                let _: () = query(
                    &mut con,
                    redis::cmd("CLUSTER")
                        .arg("MEET")
                        .arg("127.0.0.1")
                        .arg(ports[0])
                        .arg(bus_ports[0]),
                    port,
                )?;
            }
            ids.insert(port, id);
        }
        let handle = ClusterHandle {
            ports: Arc::new(ports.clone()),
            password,
            ids: Arc::new(ids),
            followed: Arc::new(Mutex::new(HashMap::new())),
        };
        let cluster = LocalCluster { nodes, handle };
        let h = &cluster.handle;
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        h.wait(deadline, "every node to know every other", || {
            ports
                .iter()
                .all(|&p| {
                    h.view(p).is_some_and(|view| {
                        view.len() == total && view.iter().all(|n| !n.flags.iter().any(|f| f == "handshake"))
                    })
                })
                .then_some(())
        })?;
        let mut followed = HashMap::new();
        for (k, &port) in ports[self.masters..].iter().enumerate() {
            let master = ports[k / self.replicas.max(1)];
            let mut con = connect(port, h.password.as_deref())?;
            let _: () = query(&mut con, redis::cmd("CLUSTER").arg("REPLICATE").arg(h.id(master)), port)?;
            followed.insert(port, master);
        }
        *h.followed.lock().unwrap_or_else(|e| e.into_inner()) = followed;
        let replicas = self.masters * self.replicas;
        h.wait(deadline, "the cluster to settle", || {
            let report = h.settled(&[])?;
            (report.replicas_up == replicas).then_some(())
        })?;
        tracing::debug!(nodes = total, elapsed = ?started.elapsed(), "local cluster formed");
        Ok(cluster)
    }
}

/// A resharding of one slot in progress, from
/// [`ClusterHandle::begin_migration`]: the source master is `MIGRATING`
/// it and the target `IMPORTING`, so clients get `ASK` redirections (and
/// `TRYAGAIN` for multi-key commands over keys on both sides) until
/// [`finish`](Self::finish). Dropping it unfinished leaves the slot in
/// that state.
#[derive(Debug)]
pub struct SlotMigration {
    handle: ClusterHandle,
    slot: u16,
    from: u16,
    to: u16,
    moved: usize,
}

impl SlotMigration {
    /// The slot being moved.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The master it moves from.
    pub fn from_port(&self) -> u16 {
        self.from
    }

    /// The master it moves to.
    pub fn to_port(&self) -> u16 {
        self.to
    }

    /// Keys moved so far.
    pub fn moved(&self) -> usize {
        self.moved
    }

    /// Moves up to `batch` of the keys still on the source (one
    /// `CLUSTER GETKEYSINSLOT` and one `MIGRATE ... REPLACE KEYS`);
    /// returns how many it moved, 0 once the source has none left.
    ///
    /// # Errors
    /// [`ServerError::Invalid`] for a `batch` of 0; [`ServerError::Command`]
    /// when a node refuses (a `MIGRATE` that fails is retried once).
    pub fn step(&mut self, batch: usize) -> Result<usize, ServerError> {
        if batch == 0 {
            return Err(ServerError::Invalid(
                "a migration batch must be at least 1 key".to_owned(),
            ));
        }
        let h = &self.handle;
        let mut con = connect(self.from, h.password.as_deref())?;
        let keys: Vec<Vec<u8>> = query(
            &mut con,
            redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(self.slot).arg(batch),
            self.from,
        )?;
        if keys.is_empty() {
            return Ok(0);
        }
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg("127.0.0.1")
            .arg(self.to)
            .arg("")
            .arg(0)
            .arg(MIGRATE_TIMEOUT.as_millis() as u64)
            .arg("REPLACE");
        if let Some(pw) = &h.password {
            migrate.arg("AUTH").arg(pw);
        }
        migrate.arg("KEYS").arg(&keys);
        let first: Result<redis::Value, _> = migrate.query(&mut con);
        if let Err(err) = first {
            // An I/O error between the two servers (the target busy) is
            // worth one more try; the keys not moved stay on the source.
            tracing::debug!(slot = self.slot, error = %err, "MIGRATE failed, retrying once");
            let _: redis::Value = query(&mut con, &migrate, self.from)?;
        }
        self.moved += keys.len();
        Ok(keys.len())
    }

    /// Moves the remaining keys ([`step`](Self::step) with
    /// [`DEFAULT_MIGRATE_BATCH`] until none is left), then assigns the slot
    /// to the target (`SETSLOT NODE` on the target, the source, then every
    /// other master) and waits until every node agrees.
    ///
    /// # Errors
    /// As [`step`](Self::step); [`ServerError::NotReady`] when the nodes do
    /// not agree within 30 s.
    pub fn finish(mut self) -> Result<(), ServerError> {
        while self.step(DEFAULT_MIGRATE_BATCH)? > 0 {}
        let h = self.handle.clone();
        let target = h.id(self.to).to_owned();
        let mut order = vec![self.to, self.from];
        order.extend(
            h.master_ports()?
                .into_iter()
                .filter(|p| *p != self.to && *p != self.from),
        );
        for port in order {
            let mut con = connect(port, h.password.as_deref())?;
            let _: () = query(
                &mut con,
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(self.slot)
                    .arg("NODE")
                    .arg(&target),
                port,
            )?;
        }
        let (slot, to) = (self.slot, self.to);
        h.wait(
            Instant::now() + SETTLE_TIMEOUT,
            "every node to agree on the migrated slot",
            || {
                let report = h.settled(&[])?;
                (owner(&report.slots, slot) == Some(to)).then_some(())
            },
        )?;
        tracing::debug!(slot, to, moved = self.moved, "slot migrated");
        Ok(())
    }
}

impl ClusterHandle {
    /// Every node's port (masters at start first, then their replicas).
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// The ports of the current masters that serve slots, in slot order, as
    /// the first node that answers sees them (so right after a failover
    /// too, once it is known).
    ///
    /// # Errors
    /// [`ServerError::NotReady`] when no node answers.
    pub fn master_ports(&self) -> Result<Vec<u16>, ServerError> {
        let view = self.any_view()?;
        let mut out: Vec<u16> = Vec::new();
        for (_, _, port) in slot_map(&view) {
            if !out.contains(&port) {
                out.push(port);
            }
        }
        Ok(out)
    }

    /// The port of the master serving `slot`, as the first node that
    /// answers sees it.
    ///
    /// # Errors
    /// [`ServerError::Invalid`] for a slot past 16383;
    /// [`ServerError::NotReady`] when no node answers or none serves it.
    pub fn master_of_slot(&self, slot: u16) -> Result<u16, ServerError> {
        check_slot(slot)?;
        owner(&slot_map(&self.any_view()?), slot)
            .ok_or_else(|| ServerError::NotReady(format!("no master serves slot {slot}")))
    }

    /// A replica following the master on `master_port` (that is not marked
    /// failed), as the first node that answers sees it.
    pub fn replica_of(&self, master_port: u16) -> Option<u16> {
        let id = self.ids.get(&master_port)?;
        let view = self.any_view().ok()?;
        let replica = view
            .iter()
            .find(|n| n.master_id.as_deref() == Some(id.as_str()) && !n.failed())?
            .port;
        self.remember(replica, master_port);
        Some(replica)
    }

    /// Moves `slot` to the master on `to_port` while the cluster keeps
    /// serving it, the way `redis-cli --cluster reshard` does: `SETSLOT
    /// IMPORTING` on the target, `MIGRATING` on the source, batches of
    /// `GETKEYSINSLOT` + `MIGRATE` until the source has no key left, then
    /// `SETSLOT NODE` everywhere; returns once every node agrees. Clients
    /// writing to the slot meanwhile get `ASK`, `MOVED` or `TRYAGAIN`.
    ///
    /// It blocks; to keep clients running in an async test, call it from
    /// another thread with a handle: `let h = cluster.handle();
    /// tokio::task::spawn_blocking(move || h.migrate_slot(slot, to))`.
    /// For control over each batch, see [`begin_migration`](Self::begin_migration).
    /// Moving a slot to the master that already has it does nothing.
    ///
    /// # Errors
    /// As [`begin_migration`](Self::begin_migration) and
    /// [`SlotMigration::finish`].
    pub fn migrate_slot(&self, slot: u16, to_port: u16) -> Result<(), ServerError> {
        check_slot(slot)?;
        if self.master_of_slot(slot)? == to_port {
            return Ok(());
        }
        self.begin_migration(slot, to_port)?.finish()
    }

    /// Starts moving `slot` to the master on `to_port`: `SETSLOT
    /// IMPORTING` on the target, then `MIGRATING` on the source. Move the
    /// keys with [`SlotMigration::step`] and end with
    /// [`SlotMigration::finish`].
    ///
    /// # Errors
    /// [`ServerError::Invalid`] for a slot past 16383, or a `to_port` that
    /// is not a master of the cluster or already serves the slot;
    /// [`ServerError::Command`] when a node refuses (for instance the slot
    /// is already being migrated).
    pub fn begin_migration(&self, slot: u16, to_port: u16) -> Result<SlotMigration, ServerError> {
        check_slot(slot)?;
        let view = self.any_view()?;
        let from = owner(&slot_map(&view), slot)
            .ok_or_else(|| ServerError::NotReady(format!("no master serves slot {slot}")))?;
        let is_master = view.iter().any(|n| n.port == to_port && n.is_master() && !n.failed());
        if !is_master {
            return Err(ServerError::Invalid(format!(
                "port {to_port} is not a master of the cluster"
            )));
        }
        if from == to_port {
            return Err(ServerError::Invalid(format!(
                "slot {slot} is already on port {to_port}"
            )));
        }
        let mut con = connect(to_port, self.password.as_deref())?;
        let _: () = query(
            &mut con,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("IMPORTING")
                .arg(self.id(from)),
            to_port,
        )?;
        let mut con = connect(from, self.password.as_deref())?;
        let _: () = query(
            &mut con,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("MIGRATING")
                .arg(self.id(to_port)),
            from,
        )?;
        tracing::debug!(slot, from, to = to_port, "slot migration begun");
        Ok(SlotMigration {
            handle: self.clone(),
            slot,
            from,
            to: to_port,
            moved: 0,
        })
    }

    /// After a test killed (or paused) the master on `old_master_port`:
    /// waits until one of its replicas serves slots as a master and the
    /// nodes that answer (the old master left out) report `cluster_state:ok`
    /// and agree on the slot map; returns the new master's port.
    ///
    /// # Errors
    /// [`ServerError::Invalid`] when `old_master_port` is not a node of the
    /// cluster or had no replica; [`ServerError::NotReady`] after `timeout`.
    pub fn wait_for_failover(&self, old_master_port: u16, timeout: Duration) -> Result<u16, ServerError> {
        let Some(old_id) = self.ids.get(&old_master_port) else {
            return Err(ServerError::Invalid(format!(
                "port {old_master_port} is not a node of the cluster"
            )));
        };
        let mut candidates: Vec<u16> = self
            .followed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, m)| **m == old_master_port)
            .map(|(r, _)| *r)
            .collect();
        if let Ok(view) = self.any_view_without(&[old_master_port]) {
            for n in view.iter().filter(|n| n.master_id.as_deref() == Some(old_id.as_str())) {
                if !candidates.contains(&n.port) {
                    candidates.push(n.port);
                }
            }
        }
        if candidates.is_empty() {
            return Err(ServerError::Invalid(format!(
                "the master on port {old_master_port} has no replica to take over"
            )));
        }
        let what = format!("a replica of port {old_master_port} ({candidates:?}) to take over");
        self.wait(Instant::now() + timeout, &what, || {
            let report = self.settled(&[old_master_port])?;
            candidates
                .iter()
                .copied()
                .find(|c| report.slots.iter().any(|(_, _, p)| p == c))
        })
    }

    /// A manual, lossless failover: `CLUSTER FAILOVER` on the replica on
    /// `replica_port` (its master stops writes until the replica has caught
    /// up, then they swap roles); returns once the replica serves its old
    /// master's slots and every node agrees. The master must be up (after
    /// killing it, use [`wait_for_failover`](Self::wait_for_failover)).
    /// Takes well under a second.
    ///
    /// # Errors
    /// [`ServerError::Invalid`] when `replica_port` is not a replica of the
    /// cluster; [`ServerError::Command`] when it refuses;
    /// [`ServerError::NotReady`] when the failover does not complete
    /// within 30 s.
    pub fn failover(&self, replica_port: u16) -> Result<(), ServerError> {
        let view = self
            .view(replica_port)
            .ok_or_else(|| ServerError::NotReady(format!("the node on port {replica_port} does not answer")))?;
        let me = view
            .iter()
            .find(|n| n.myself())
            .ok_or_else(|| ServerError::NotReady(format!("the node on port {replica_port} does not list itself")))?;
        let Some(master_id) = me.master_id.clone() else {
            return Err(ServerError::Invalid(format!("port {replica_port} is not a replica")));
        };
        if let Some(master) = view.iter().find(|n| n.id == master_id) {
            self.remember(replica_port, master.port);
        }
        let mut con = connect(replica_port, self.password.as_deref())?;
        let _: () = query(&mut con, redis::cmd("CLUSTER").arg("FAILOVER"), replica_port)?;
        self.wait(
            Instant::now() + SETTLE_TIMEOUT,
            &format!("the replica on port {replica_port} to take over"),
            || {
                let report = self.settled(&[])?;
                report.slots.iter().any(|(_, _, p)| *p == replica_port).then_some(())
            },
        )
    }

    /// Waits until the nodes that answer report `cluster_state:ok`, agree
    /// on which master serves each of the 16384 slots (none of them marked
    /// failed, no slot migrating) and on who follows whom, and every
    /// replica's link to its master is up: after a test restarts a node,
    /// for instance.
    ///
    /// # Errors
    /// [`ServerError::NotReady`] after `timeout`.
    pub fn wait_until_settled(&self, timeout: Duration) -> Result<(), ServerError> {
        self.wait(Instant::now() + timeout, "the cluster to settle", || {
            self.settled(&[]).map(|_| ())
        })
    }

    /// Polls `check` every 50 ms until it answers or `deadline` passes;
    /// the error then says what each node thinks, for a failed test's log.
    fn wait<T>(&self, deadline: Instant, what: &str, mut check: impl FnMut() -> Option<T>) -> Result<T, ServerError> {
        loop {
            if let Some(v) = check() {
                return Ok(v);
            }
            if Instant::now() >= deadline {
                return Err(ServerError::NotReady(format!(
                    "timed out waiting for {what}; {}",
                    self.describe()
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    /// One line per node: its `cluster_state`, role and slot ranges as it
    /// sees itself, and how many nodes it knows.
    fn describe(&self) -> String {
        let lines: Vec<String> = self
            .ports
            .iter()
            .map(|&port| {
                let Ok(mut con) = connect(port, self.password.as_deref()) else {
                    return format!("{port}: no answer");
                };
                let state = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query::<String>(&mut con)
                    .ok()
                    .and_then(|info| field(&info, "cluster_state"))
                    .unwrap_or_else(|| "?".to_owned());
                let view = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query::<String>(&mut con)
                    .ok()
                    .and_then(|text| parse_nodes(&text))
                    .unwrap_or_default();
                let me = view.iter().find(|n| n.myself());
                let flags = me.map(|n| n.flags.join(",")).unwrap_or_default();
                let slots = me.map(|n| format!("{:?}", n.slots)).unwrap_or_default();
                format!("{port}: {state} {flags} slots {slots}, knows {} nodes", view.len())
            })
            .collect();
        format!("nodes: {}", lines.join("; "))
    }

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

    /// `CLUSTER NODES` of the node on `port`, or `None` if it does not answer.
    fn view(&self, port: u16) -> Option<Vec<NodeLine>> {
        let mut con = connect(port, self.password.as_deref()).ok()?;
        let text: String = redis::cmd("CLUSTER").arg("NODES").query(&mut con).ok()?;
        parse_nodes(&text)
    }

    /// The view of the first node that answers.
    fn any_view(&self) -> Result<Vec<NodeLine>, ServerError> {
        self.any_view_without(&[])
    }

    fn any_view_without(&self, skip: &[u16]) -> Result<Vec<NodeLine>, ServerError> {
        self.ports
            .iter()
            .filter(|p| !skip.contains(p))
            .find_map(|&p| self.view(p))
            .ok_or_else(|| ServerError::NotReady("no node of the cluster answers".to_owned()))
    }

    /// `Some` when every node that answers (those in `skip` left out) says
    /// `cluster_state:ok`, all see the same full slot map with no failed
    /// owner and no slot migrating, the same nodes alive with the same
    /// roles (who follows whom), and every replica's link is up. Also
    /// records which master each replica follows.
    fn settled(&self, skip: &[u16]) -> Option<Settled> {
        // The first view's slot map and roles, which every other must match.
        let mut slots: Option<(SlotMap, Roles)> = None;
        let mut replicas_up = 0;
        let mut answered = 0;
        for &port in self.ports.iter().filter(|p| !skip.contains(p)) {
            let Ok(mut con) = connect(port, self.password.as_deref()) else {
                continue;
            };
            let Ok(info) = redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut con) else {
                continue;
            };
            answered += 1;
            if field(&info, "cluster_state").as_deref() != Some("ok") {
                return None;
            }
            let text: String = redis::cmd("CLUSTER").arg("NODES").query(&mut con).ok()?;
            let view = parse_nodes(&text)?;
            if view.iter().any(|n| n.migrating) {
                return None;
            }
            let map = slot_map(&view);
            let covered: u32 = map.iter().map(|(a, b, _)| u32::from(*b) - u32::from(*a) + 1).sum();
            if covered != u32::from(CLUSTER_SLOTS) {
                return None;
            }
            let owners_alive = map
                .iter()
                .all(|(_, _, p)| view.iter().any(|n| n.port == *p && !n.failed()));
            if !owners_alive {
                return None;
            }
            let roles = roles(&view);
            match &slots {
                None => slots = Some((map, roles)),
                Some(first) if first.0 == map && first.1 == roles => {}
                Some(_) => return None,
            }
            let me = view.iter().find(|n| n.myself())?;
            if let Some(master_id) = &me.master_id {
                let repl = redis::cmd("INFO").arg("replication").query::<String>(&mut con).ok()?;
                if field(&repl, "master_link_status").as_deref() != Some("up") {
                    return None;
                }
                replicas_up += 1;
                if let Some(master) = view.iter().find(|n| &n.id == master_id) {
                    self.remember(port, master.port);
                }
            }
        }
        if answered == 0 {
            return None;
        }
        Some(Settled {
            slots: slots?.0,
            replicas_up,
        })
    }
}

/// `(first, last, port)` slot ranges, in slot order.
type SlotMap = Vec<(u16, u16, u16)>;
/// `(port, port of its master)` of each node (`None` for a master).
type Roles = Vec<(u16, Option<u16>)>;

/// What [`ClusterHandle::settled`] found.
struct Settled {
    /// `(first, last, port)` ranges of the agreed slot map.
    slots: SlotMap,
    /// Replicas whose link to their master is up.
    replicas_up: usize,
}

/// One line of `CLUSTER NODES`:
/// `ID IP:PORT@BUSPORT[,HOSTNAME] FLAGS MASTER PING PONG EPOCH LINK SLOT...`.
#[derive(Debug, Clone, PartialEq)]
struct NodeLine {
    id: String,
    port: u16,
    flags: Vec<String>,
    /// The master's id, for a replica (`-` for a master).
    master_id: Option<String>,
    /// `(first, last)` slot ranges it serves.
    slots: Vec<(u16, u16)>,
    /// A `[SLOT->-ID]` or `[SLOT-<-ID]` entry: a slot being moved.
    migrating: bool,
}

impl NodeLine {
    fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
    fn myself(&self) -> bool {
        self.has("myself")
    }
    fn is_master(&self) -> bool {
        self.has("master")
    }
    fn failed(&self) -> bool {
        self.has("fail") || self.has("fail?") || self.has("noaddr")
    }
}

/// Parses a `CLUSTER NODES` reply; `None` if a line is malformed.
fn parse_nodes(text: &str) -> Option<Vec<NodeLine>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.len() < 8 {
                return None;
            }
            let addr = words[1].split(['@', ',']).next()?;
            let port: u16 = addr.rsplit_once(':')?.1.parse().ok()?;
            let mut slots = Vec::new();
            let mut migrating = false;
            for word in &words[8..] {
                if word.starts_with('[') {
                    migrating = true;
                } else if let Some((a, b)) = word.split_once('-') {
                    slots.push((a.parse().ok()?, b.parse().ok()?));
                } else {
                    let s = word.parse().ok()?;
                    slots.push((s, s));
                }
            }
            Some(NodeLine {
                id: words[0].to_owned(),
                port,
                flags: words[2].split(',').map(str::to_owned).collect(),
                master_id: (words[3] != "-").then(|| words[3].to_owned()),
                slots,
                migrating,
            })
        })
        .collect()
}

/// The slot map of a view: `(first, last, port)` ranges in slot order.
fn slot_map(view: &[NodeLine]) -> SlotMap {
    let mut map: SlotMap = view
        .iter()
        .flat_map(|n| n.slots.iter().map(move |(a, b)| (*a, *b, n.port)))
        .collect();
    map.sort_unstable();
    map
}

/// The roles in a view: `(port, port of its master)` of every node not
/// thought failed, in port order (`None` for a master).
fn roles(view: &[NodeLine]) -> Roles {
    let mut out: Roles = view
        .iter()
        .filter(|n| !n.failed())
        .map(|n| {
            let master = n
                .master_id
                .as_ref()
                .map(|id| view.iter().find(|m| &m.id == id).map_or(0, |m| m.port));
            (n.port, master)
        })
        .collect();
    out.sort_unstable();
    out
}

/// Who serves `slot` in `map`.
fn owner(map: &[(u16, u16, u16)], slot: u16) -> Option<u16> {
    map.iter()
        .find(|(a, b, _)| (*a..=*b).contains(&slot))
        .map(|(_, _, p)| *p)
}

/// Master `i` of `n`'s share of the slots, `(first, last)`.
fn slot_share(i: usize, n: usize) -> (u16, u16) {
    let total = usize::from(CLUSTER_SLOTS);
    ((i * total / n) as u16, ((i + 1) * total / n - 1) as u16)
}

fn check_slot(slot: u16) -> Result<(), ServerError> {
    if slot >= CLUSTER_SLOTS {
        return Err(ServerError::Invalid(format!("slot {slot} is past 16383")));
    }
    Ok(())
}

/// The hash slot of `key`: CRC16 (XMODEM) of the key, or of the part
/// between the first `{` and the next `}` when that is not empty.
fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) % CLUSTER_SLOTS
}

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the cluster's
/// key hash.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A connection to the node on `port` with the helper's timeouts.
fn connect(port: u16, password: Option<&str>) -> Result<redis::Connection, ServerError> {
    let auth = password
        .map(|pw| format!(":{}@", percent_encode(pw)))
        .unwrap_or_default();
    let not_ready =
        |e: redis::RedisError| ServerError::NotReady(format!("the node on port {port} does not answer: {e}"));
    let client = redis::Client::open(format!("redis://{auth}127.0.0.1:{port}/")).map_err(not_ready)?;
    let con = client.get_connection_with_timeout(COMMAND_TIMEOUT).map_err(not_ready)?;
    con.set_read_timeout(Some(COMMAND_TIMEOUT)).map_err(not_ready)?;
    con.set_write_timeout(Some(COMMAND_TIMEOUT)).map_err(not_ready)?;
    Ok(con)
}

/// Runs `cmd` on `con` (the node on `port`), naming the command and the
/// node in the error.
fn query<T: redis::FromRedisValue>(con: &mut redis::Connection, cmd: &redis::Cmd, port: u16) -> Result<T, ServerError> {
    cmd.query(con).map_err(|e| {
        let name: Vec<String> = cmd
            .args_iter()
            .take(2)
            .map(|a| match a {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => String::new(),
            })
            .collect();
        ServerError::Command(format!("{} on port {port}: {e}", name.join(" ")))
    })
}

/// `name:value` out of an `INFO`-style reply.
fn field(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    // The key hash matches the cluster specification's examples and honours hash tags.
    #[test]
    fn key_slots_follow_the_specification() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
    }

    // The slots are split evenly and completely between the masters.
    #[test]
    fn slot_shares_cover_every_slot() {
        for n in 1..=MAX_MASTERS {
            let shares: Vec<(u16, u16)> = (0..n).map(|i| slot_share(i, n)).collect();
            assert_eq!(shares[0].0, 0);
            assert_eq!(shares[n - 1].1, CLUSTER_SLOTS - 1);
            for w in shares.windows(2) {
                assert_eq!(w[0].1 + 1, w[1].0);
            }
        }
    }

    // CLUSTER NODES lines of Redis 7.0 and Valkey (with hostnames and migration markers) parse.
    #[test]
    fn parses_cluster_nodes() {
        let text = "07c3 127.0.0.1:30004@31004,host replica,myself e7d1 0 1426238317239 4 connected\n\
                    e7d1 127.0.0.1:30001@31001 master - 0 1426238316232 1 connected 0-5460 7000 [5461->-67ed]\n\
                    67ed 127.0.0.1:30002@31002 master,fail - 1426238316232 1426238316232 2 disconnected\n";
        let view = parse_nodes(text).unwrap();
        assert_eq!(view.len(), 3);
        assert_eq!(view[0].port, 30004);
        assert!(view[0].myself());
        assert_eq!(view[0].master_id.as_deref(), Some("e7d1"));
        assert_eq!(view[1].slots, vec![(0, 5460), (7000, 7000)]);
        assert!(view[1].migrating);
        assert!(view[2].failed());
        assert_eq!(slot_map(&view), vec![(0, 5460, 30001), (7000, 7000, 30001)]);
        assert_eq!(owner(&slot_map(&view), 7000), Some(30001));
        assert_eq!(owner(&slot_map(&view), 6000), None);
    }
}
