//! `lua/marker_abandon.lua`: gives an effect marker back when the effect
//! surely did not happen.

use super::Spec;
use super::marker_claim::{Marker, answer};
use crate::conn::Conn;
use crate::error::Result;

pub(super) static SPEC: Spec = Spec::new(
    "marker_abandon",
    include_str!("../../lua/marker_abandon.lua"),
    &["marker"],
    false,
    &["token"],
);

/// Gives `m` back from its attempt.
pub(crate) async fn run(conn: &mut Conn, m: &Marker<'_>) -> Result<()> {
    let mut call = SPEC.call();
    call.key(m.key).arg(m.token);
    answer(conn, m, "marker_abandon", call).await
}
