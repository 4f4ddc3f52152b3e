//! `lua/aging.lua`: reads or sets the queue's priority aging.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "aging",
    include_str!("../../lua/aging.lua"),
    &["meta", "pending", "delayed", "active"],
    false,
    &["aging"],
);

/// What the script answered: whether it applied, the setting (ms per
/// level, 0 for none) and the jobs the queue holds.
pub(crate) struct Aging {
    pub applied: bool,
    pub ms: u64,
    pub jobs: u64,
}

/// Reads the setting (`None`), or sets it (`Some(0)` turns it off).
pub(crate) async fn run(conn: &mut Conn, k: &Keys, set: Option<u64>) -> Result<Aging> {
    let mut call = SPEC.call();
    call.key(&k.meta).key(&k.pending).key(&k.delayed).key(&k.active);
    match set {
        None => call.arg("get"),
        Some(0) => call.arg(""),
        Some(ms) => call.arg(ms),
    };
    let mut r = call.run(conn).await?;
    let applied = match r.code()? {
        Code::Ok => true,
        Code::Busy => false,
        other => return Err(unexpected("aging", other)),
    };
    Ok(Aging {
        applied,
        ms: r.uint()?,
        jobs: r.uint()?,
    })
}
