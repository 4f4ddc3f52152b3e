//! Failovers: waiting for a replica to take over a killed master, and a
//! manual, lossless `CLUSTER FAILOVER`.

use std::time::{Duration, Instant};

use super::command::{connect, query};
use super::{ClusterHandle, SETTLE_TIMEOUT};
use crate::server::error::ServerError;

impl ClusterHandle {
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
}
