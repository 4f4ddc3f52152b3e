//! `lua/sweep.lua`: one bounded step of the consistency sweep, which repairs
//! what a torn write or a lost key left behind.

use super::Spec;
use super::call::Call;
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "sweep",
    include_str!("../../lua/sweep.lua"),
    &[
        "pending",
        "active",
        "delayed",
        "completed",
        "failed",
        "cancelled",
        "expired",
        "seq",
        "expiring",
    ],
    // Phase "keys": the job hashes, dedup markers, sequence lines and flows to check.
    true,
    &["prefix", "phase", "cursor", "count", "chain"],
);

/// The phases of a sweep, in order, as the script takes them: the job
/// hashes, then each set (by its index in the script's KEYS), then the
/// lanes' slots (`held`), the ring of lanes (`ring`), the dedup markers
/// (`markers`), the sequence lines (`sequences`) and the flows (`flows`).
pub(crate) const PHASES: [&str; 13] = [
    "jobs",
    "1",
    "2",
    "3",
    "4",
    "5",
    "6",
    "7",
    "held",
    "ring",
    "markers",
    "sequences",
    "flows",
];

/// What one sweep call found.
pub(crate) struct Swept {
    /// Where the phase goes on from; `None` once it is done.
    pub next: Option<String>,
    pub checked: u64,
    pub repaired: u64,
    pub skipped: u64,
}

/// The call with the queue's keys every phase takes.
fn call(k: &Keys) -> Call {
    let mut call = SPEC.call();
    call.key(&k.pending)
        .key(&k.active)
        .key(&k.delayed)
        .key(&k.completed)
        .key(&k.failed)
        .key(&k.cancelled)
        .key(&k.expired)
        .key(&k.seq)
        .key(&k.expiring);
    call
}

/// Runs `call` and reads `{next_cursor, checked, repaired, skipped, phase}`.
async fn run(conn: &mut Conn, call: Call) -> Result<(Swept, String)> {
    let mut r = call.run(conn).await?;
    let next = r.string()?;
    let swept = Swept {
        next: (next != "0").then_some(next),
        checked: r.uint()?,
        repaired: r.uint()?,
        skipped: r.uint()?,
    };
    Ok((swept, r.string()?))
}

/// One step of phase `PHASES[phase]` from `cursor` ("" at its start) over
/// about `count` keys. With `chain`, a set phase that ends goes on into
/// the next while fewer than `count` were checked; the answer says which
/// phase (an index into [`PHASES`]) its cursor belongs to.
pub(crate) async fn phase(
    conn: &mut Conn,
    k: &Keys,
    phase: usize,
    cursor: &str,
    count: usize,
    chain: bool,
) -> Result<(Swept, usize)> {
    let mut call = call(k);
    call.arg(&k.base)
        .arg(PHASES[phase])
        .arg(if cursor.is_empty() { "0" } else { cursor })
        .arg(count)
        .arg(if chain { "chain" } else { "" });
    let (swept, reached) = run(conn, call).await?;
    // The cursor belongs to the phase asked for, or with "chain" a later one.
    let at = PHASES
        .iter()
        .position(|p| *p == reached)
        .filter(|&i| i >= phase)
        .ok_or_else(|| Error::Protocol {
            script: "sweep",
            detail: format!("unexpected phase {reached:?}"),
        })?;
    Ok((swept, at))
}

/// Checks the job hashes and dedup markers `keys` (of this queue, as a
/// walk of the keyspace found them) in one call.
pub(crate) async fn keys(conn: &mut Conn, k: &Keys, keys: &[String]) -> Result<Swept> {
    let mut call = call(k);
    for key in keys {
        call.key(key);
    }
    call.arg(&k.base).arg("keys").arg("0").arg(keys.len()).arg("");
    Ok(run(conn, call).await?.0)
}
