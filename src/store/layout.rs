//! `lua/layout.lua`: stamps a new queue with the layout version and answers
//! the version found.

use redis::Value;

use super::Spec;
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "layout",
    include_str!("../../lua/layout.lua"),
    &["meta"],
    false,
    &["version"],
);

/// Stamps the queue with `version` if it has none; answers the version it
/// holds, as text (whatever the key holds: the caller compares).
pub(crate) async fn run(conn: &mut Conn, k: &Keys, version: u32) -> Result<String> {
    let mut call = SPEC.call();
    call.key(&k.meta).arg(version);
    Ok(match call.run_raw(conn).await? {
        Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        other => format!("{other:?}"),
    })
}
