//! `lua/progress.lua`: records a running job's progress, fenced like a
//! settlement.

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
    &["token", "value"],
);

/// Records `value` (JSON, checked by the caller) as the progress of job
/// `id`'s attempt `token`.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, id: &str, token: u64, value: &[u8]) -> Result<()> {
    let mut call = SPEC.call();
    call.key(k.job(id)).arg(token).arg(value);
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
