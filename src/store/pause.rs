//! `lua/pause.lua`: pauses or resumes a queue's claims.

use super::Spec;
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new("pause", include_str!("../../lua/pause.lua"), &["meta", "wake"], false, &["paused"]);

/// Pauses the queue, or resumes it; answers the server's clock then.
pub(crate) async fn run(conn: &mut Conn, k: &Keys, paused: bool) -> Result<u64> {
    let mut call = SPEC.call();
    call.key(&k.meta).key(&k.wake).arg(if paused { "1" } else { "0" });
    call.run(conn).await?.uint()
}
