//! What the cluster looks like to its nodes (masters, slot owners,
//! replicas), and waiting until they all agree on it.

use std::time::{Duration, Instant};

use super::command::{connect, field};
use super::nodes::{NodeLine, Roles, SlotMap, owner, parse_nodes, roles, slot_map};
use super::slots::check_slot;
use super::{CLUSTER_SLOTS, ClusterHandle};
use crate::server::error::ServerError;

/// How often waits poll.
const POLL: Duration = Duration::from_millis(50);

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
    pub(super) fn wait<T>(
        &self,
        deadline: Instant,
        what: &str,
        mut check: impl FnMut() -> Option<T>,
    ) -> Result<T, ServerError> {
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

    /// `CLUSTER NODES` of the node on `port`, or `None` if it does not answer.
    pub(super) fn view(&self, port: u16) -> Option<Vec<NodeLine>> {
        let mut con = connect(port, self.password.as_deref()).ok()?;
        let text: String = redis::cmd("CLUSTER").arg("NODES").query(&mut con).ok()?;
        parse_nodes(&text)
    }

    /// The view of the first node that answers.
    pub(super) fn any_view(&self) -> Result<Vec<NodeLine>, ServerError> {
        self.any_view_without(&[])
    }

    pub(super) fn any_view_without(&self, skip: &[u16]) -> Result<Vec<NodeLine>, ServerError> {
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
    pub(super) fn settled(&self, skip: &[u16]) -> Option<Settled> {
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

/// What [`ClusterHandle::settled`] found.
pub(super) struct Settled {
    /// `(first, last, port)` ranges of the agreed slot map.
    pub(super) slots: SlotMap,
    /// Replicas whose link to their master is up.
    pub(super) replicas_up: usize,
}
