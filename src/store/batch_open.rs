//! `lua/batch_open.lua`: opens a batch with its callbacks.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use crate::conn::Conn;
use crate::durability::{Durability, confirm};
use crate::error::{Error, Result};
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "batch_open",
    include_str!("../../lua/batch_open.lua"),
    &["seq", "meta"],
    false,
    &[
        "prefix",
        "id",
        "keep",
        "success",
        "success_kind",
        "complete",
        "complete_kind",
        "death",
        "death_kind",
    ],
);

/// A callback as the script stores it: its JSON payload and its kind.
pub(crate) struct NewCallback<'a> {
    pub payload: &'a [u8],
    pub kind: Option<&'a str>,
}

/// Opens batch `id` (`None` mints one) on the queue of `k`, its hash kept
/// `keep_ms` after its end, with the callbacks on success, on complete
/// and on death given, confirmed as `durability` asks; answers its id.
///
/// # Errors
/// [`Error::BatchExists`] when the id is taken (nothing written),
/// [`Error::NotDurable`] (opened on the primary, confirmed by fewer), or a
/// server error.
pub(crate) async fn run(
    conn: &mut Conn,
    k: &Keys,
    id: Option<&str>,
    keep_ms: u64,
    callbacks: [Option<NewCallback<'_>>; 3],
    durability: Durability,
) -> Result<String> {
    let mut call = SPEC.call();
    call.key(&k.seq).key(&k.meta);
    call.arg(&k.base).arg(id.unwrap_or_default()).arg(keep_ms);
    for cb in &callbacks {
        match cb {
            Some(c) => call.arg(c.payload).arg(c.kind.unwrap_or_default()),
            None => call.arg("").arg(""),
        };
    }
    let (mut r, confirmed) = call.run_confirmed(conn, durability).await?;
    let _now = r.uint()?;
    let code = r.code()?;
    let id = r.string()?;
    match code {
        Code::Ok => confirm(confirmed, &id).map(|()| id),
        // (the batch found may not be on the replicas yet: a shortfall says so first)
        Code::Exists => confirm(confirmed, &id).and(Err(Error::BatchExists(id))),
        other => Err(unexpected("batch_open", other)),
    }
}
