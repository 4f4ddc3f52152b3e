//! Forming a cluster: starting every node and joining them (slots shared
//! out, replicas following their masters), then waiting until all agree.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::command::{connect, query};
use super::slots::slot_share;
use super::{ClusterHandle, LocalCluster, MAX_MASTERS, MAX_REPLICAS_PER_MASTER, SETTLE_TIMEOUT};
use crate::server::config::LocalServerBuilder;
use crate::server::error::ServerError;
use crate::server::process::{LocalServer, free_port};

/// Configures and starts a [`LocalCluster`]; from [`LocalCluster::builder`].
#[derive(Debug, Clone)]
pub struct LocalClusterBuilder {
    pub(super) masters: usize,
    pub(super) replicas: usize,
    pub(super) node_timeout: Duration,
    pub(super) node: LocalServerBuilder,
}

impl LocalClusterBuilder {
    /// How many masters (default [`DEFAULT_MASTERS`](super::DEFAULT_MASTERS), at most
    /// [`MAX_MASTERS`]); the 16384 slots are split evenly between them.
    pub fn masters(mut self, n: usize) -> Self {
        self.masters = n;
        self
    }

    /// How many replicas each master has (default
    /// [`DEFAULT_REPLICAS_PER_MASTER`](super::DEFAULT_REPLICAS_PER_MASTER), at most [`MAX_REPLICAS_PER_MASTER`]).
    pub fn replicas_per_master(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    /// `cluster-node-timeout` (default [`DEFAULT_NODE_TIMEOUT`](super::DEFAULT_NODE_TIMEOUT), at least
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
