//! `lua/extend.lua`: renews a lease (the heartbeat), and tells of an
//! operator's cancel request.

use super::Spec;
use super::call::fenced;
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::Keys;
use crate::lease::Lease;

pub(super) static SPEC: Spec = Spec::new(
    "extend",
    include_str!("../../lua/extend.lua"),
    &["job", "active"],
    false,
    &["id", "token", "lease"],
);

/// A renewed lease.
pub(crate) struct Renewed {
    /// The new deadline (server ms).
    pub deadline_ms: u64,
    /// An operator asked to cancel the job.
    pub cancel_requested: bool,
}

/// Renews `lease` for `lease_ms` (at least 1: the caller checked).
pub(crate) async fn run(conn: &mut Conn, k: &Keys, lease: &Lease, lease_ms: u64) -> Result<Renewed> {
    let mut call = SPEC.call();
    call.key(k.job(&lease.id))
        .key(&k.active)
        .arg(&lease.id)
        .arg(lease.token)
        .arg(lease_ms);
    // The `client-clock` negative control (`crate::faults`) counts the
    // lease from the caller's clock, read from the last argument.
    #[cfg(echomq_faults)]
    call.arg(crate::faults::client_now_ms());
    let mut r = call.run(conn).await?;
    let (code, _now) = (r.code()?, r.uint()?);
    fenced("extend", &lease.id, lease.token, code)?;
    Ok(Renewed {
        deadline_ms: r.uint()?,
        cancel_requested: r.uint()? == 1,
    })
}
