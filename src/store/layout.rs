//! `lua/layout.lua`: stamps a new queue with the layout version and answers
//! the version found, or moves a queue from an older version.

use redis::Value;

use super::Spec;
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "layout",
    include_str!("../../lua/layout.lua"),
    &["meta", "limits", "ring"],
    false,
    &["version", "from"],
);

/// Stamps the queue with `version` if it has none, or moves it from
/// `from` to `version` when it holds `from`; answers the version it holds
/// then, as text (whatever the key holds: the caller compares).
pub(crate) async fn run(conn: &mut Conn, k: &Keys, version: u32, from: Option<u32>) -> Result<String> {
    let mut call = SPEC.call();
    call.key(&k.meta).key(&k.limits).key(&k.lane_ring).arg(version);
    match from {
        Some(v) => call.arg(v),
        None => call.arg(""),
    };
    Ok(match call.run_raw(conn).await? {
        Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        other => format!("{other:?}"),
    })
}
