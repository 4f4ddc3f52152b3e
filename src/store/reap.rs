//! `lua/reap.lua`: returns expired leases to pending (or fails or cancels
//! them) and promotes due delayed jobs.

use super::Spec;
use super::codes::Code;
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "reap",
    include_str!("../../lua/reap.lua"),
    &["active", "pending", "delayed", "failed", "wake", "cancelled", "expired", "expiring"],
    false,
    &["prefix", "limit", "keep_failed"],
);

/// What one reap call did.
pub(crate) struct Reaped {
    pub server_ms: u64,
    /// Due delayed jobs moved to pending.
    pub promoted: u64,
    /// Leases still held after the call.
    pub active: u64,
    /// The earliest due time of a delayed job after the call (server ms).
    pub next_due_ms: Option<u64>,
    /// Waiting jobs ended expired: their expiry passed before anyone
    /// started them (`lua/lib/expiry.lua`).
    pub expired_waiting: u64,
    /// Each expired lease, in the order reaped.
    pub expired: Vec<Expired>,
}

/// One expired lease and where its job went.
pub(crate) struct Expired {
    pub id: String,
    /// The job's stalls now, this one counted.
    pub stalls: u64,
    pub fate: Fate,
}

pub(crate) enum Fate {
    /// Back to pending.
    Requeued,
    /// Failed for good, as stalled.
    Failed,
    /// Cancelled, as an operator had asked.
    Cancelled,
    /// Expired: its expiry passed while it ran, so it cannot start again.
    Expired,
}

/// Reaps up to `limit` expired leases and promotes up to `limit` due jobs;
/// `keep_failed` as `Retention::arg` writes it.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, limit: usize, keep_failed: &str) -> Result<Reaped> {
    let mut call = SPEC.call();
    call.key(&k.active)
        .key(&k.pending)
        .key(&k.delayed)
        .key(&k.failed)
        .key(&k.wake)
        .key(&k.cancelled)
        .key(&k.expired)
        .key(&k.expiring);
    call.arg(&k.base).arg(limit).arg(keep_failed);
    let mut r = call.run(conn).await?;
    let mut reaped = Reaped {
        server_ms: r.uint()?,
        promoted: r.uint()?,
        active: r.uint()?,
        next_due_ms: Some(r.uint()?).filter(|&d| d > 0),
        expired_waiting: r.uint()?,
        expired: Vec::new(),
    };
    while r.remaining() > 0 {
        let id = r.string()?;
        let fate = match r.code()? {
            Code::Failed => Fate::Failed,
            Code::Cancelled => Fate::Cancelled,
            Code::Expired => Fate::Expired,
            _ => Fate::Requeued,
        };
        let stalls = r.uint()?;
        reaped.expired.push(Expired { id, stalls, fate });
    }
    Ok(reaped)
}
