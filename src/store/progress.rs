//! `lua/progress.lua`: records a running job's progress or checkpoint,
//! fenced like a settlement.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "progress",
    include_str!("../../lua/progress.lua"),
    &["job"],
    false,
    &["token", "value", "field"],
);

/// Which of the attempt's fields a report writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    /// `pg`: the progress, evented.
    Progress,
    /// `ck`: the checkpoint the next attempt reads (an empty value clears it).
    Checkpoint,
}

/// Records `value` (JSON, checked by the caller; empty clears a
/// checkpoint) as `field` of job `id`'s attempt `token`.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, id: &str, token: u64, field: Field, value: &[u8]) -> Result<()> {
    let mut call = SPEC.call();
    call.key(k.job(id)).arg(token).arg(value).arg(match field {
        Field::Progress => "pg",
        Field::Checkpoint => "ck",
    });
    let mut r = call.run(conn).await?;
    match r.code()? {
        Code::Ok => Ok(()),
        Code::NotFound => Err(Error::JobNotFound(id.to_owned())),
        Code::LeaseLost => Err(Error::LeaseLost {
            id: id.to_owned(),
            token,
        }),
        other => Err(unexpected("progress", other)),
    }
}
