//! `lua/marker_done.lua`: records that the holder's effect finished.

use super::Spec;
use super::marker_claim::{Marker, answer};
use crate::conn::Conn;
use crate::error::Result;

pub(super) static SPEC: Spec = Spec::new(
    "marker_done",
    include_str!("../../lua/marker_done.lua"),
    &["marker"],
    false,
    &["token", "ttl"],
);

/// Marks `m` done by its attempt, the marker to live `ttl_ms`.
pub(crate) async fn run(conn: &mut Conn, m: &Marker<'_>, ttl_ms: u64) -> Result<()> {
    let mut call = SPEC.call();
    call.key(m.key).arg(m.token).arg(ttl_ms);
    answer(conn, m, "marker_done", call).await
}
