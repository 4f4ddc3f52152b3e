//! Resharding: moving a slot's keys to another master while clients keep
//! running, in one call or batch by batch.

use std::time::{Duration, Instant};

use super::command::{connect, query};
use super::nodes::{owner, slot_map};
use super::slots::check_slot;
use super::{ClusterHandle, DEFAULT_MIGRATE_BATCH, SETTLE_TIMEOUT};
use crate::server::error::ServerError;

/// The timeout `MIGRATE` is given (milliseconds on the wire).
const MIGRATE_TIMEOUT: Duration = Duration::from_secs(5);

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
}
