//! `lua/claim.lua`: promotes due delayed jobs, then leases up to N ready
//! jobs, each fenced by a newly minted token.

use std::sync::Arc;
use std::time::Duration;

use super::Spec;
use super::call::{Call, Reply};
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::Keys;
use crate::lease::Lease;
use crate::limits::Limits;

pub(super) static SPEC: Spec = Spec::new(
    "claim",
    include_str!("../../lua/claim.lua"),
    &["pending", "active", "delayed", "wake", "token", "meta", "expired"],
    false,
    &["prefix", "keep_failed", "lease", "max", "holder"],
);

/// What a claim asks for: a plain claim, or the one that ends a settle
/// call (`store/settle.rs`).
pub(crate) struct Claim<'a> {
    /// The lease length in whole ms (at least 1: the caller checked).
    pub lease_ms: u64,
    /// The most jobs to lease.
    pub max: usize,
    /// The name the leased jobs record as their holder.
    pub holder: &'a str,
}

impl Claim<'_> {
    /// The claim's arguments after the prefix, as claim.lua and the tail
    /// of settle.lua take them.
    pub(super) fn args(&self, call: &mut Call) {
        call.arg(self.lease_ms).arg(self.max).arg(self.holder);
        // The `client-clock` negative control (`crate::faults`) counts the
        // lease from the caller's clock, read from the last argument.
        #[cfg(echomq_faults)]
        call.arg(crate::faults::client_now_ms());
    }
}

/// What a claim leased.
#[derive(Default)]
pub(crate) struct Claimed {
    pub leases: Vec<Lease>,
    /// How long until a rate limit that stopped the claim (or left a lane
    /// out, or left room for fewer than asked) lets it lease again; `None`:
    /// nothing to wait for.
    pub wait: Option<Duration>,
}

/// Leases up to `claim.max` ready jobs of the queue whose key base is
/// `queue` (shared with every lease it makes); jobs found past their expiry
/// end expired, kept as `keep_failed` (`Retention::arg`) says.
pub(crate) async fn run(
    conn: &mut Conn,
    k: &Keys,
    queue: &Arc<str>,
    keep_failed: &str,
    claim: &Claim<'_>,
) -> Result<Claimed> {
    let mut call = SPEC.call();
    call.key(&k.pending)
        .key(&k.active)
        .key(&k.delayed)
        .key(&k.wake)
        .key(&k.token)
        .key(&k.meta)
        .key(&k.expired);
    call.arg(&k.base).arg(keep_failed);
    claim.args(&mut call);
    let mut r = call.run(conn).await?;
    let claimed_ms = r.uint()?;
    read_leases(&mut r, queue, claimed_ms)
}

/// Reads claim's `deadline, wait, (head, payload)*` tail (also the tail
/// of settle's reply). `head` is `id, token, attempt, created` joined by
/// NUL bytes, then, for a job with failures, limits, a lane, a kind or a
/// traceparent, those five too (`lua/README.md`, claim): two reply
/// elements a job rather than ten, each a parse for the client.
pub(super) fn read_leases(r: &mut Reply, queue: &Arc<str>, claimed_ms: u64) -> Result<Claimed> {
    let deadline_ms = r.uint()?;
    let wait = Some(Duration::from_millis(r.uint()?)).filter(|w| !w.is_zero());
    let mut leases = Vec::with_capacity(r.remaining() / 2);
    while r.remaining() > 0 {
        let head = r.string()?;
        let mut parts = head.split('\0');
        let id = parts.next().filter(|id| !id.is_empty()).map(str::to_owned);
        let mut num = || parts.next().and_then(|n| n.parse::<u64>().ok());
        let (Some(id), Some(token), Some(attempt), Some(created_ms)) = (id, num(), num(), num()) else {
            return Err(r.malformed("a lease's id, token, attempt and created", &head));
        };
        let failures = match parts.next() {
            Some(f) => f.parse().map_err(|_| r.malformed("a lease's failures", &head))?,
            None => 0,
        };
        let mut text = || parts.next().filter(|p| !p.is_empty());
        let limits = Limits::decode(text().unwrap_or("").as_bytes());
        let (lane, kind) = (text().map(str::to_owned), text().map(str::to_owned));
        let traceparent = text().map(str::to_owned);
        let payload = crate::compression::readable(r.bytes()?, &id);
        leases.push(Lease {
            queue: queue.clone(),
            id,
            token,
            attempt,
            failures,
            limits,
            payload,
            lane,
            kind,
            created_ms,
            traceparent,
            deadline_ms,
            claimed_ms,
            cancel_requested: false,
        });
    }
    Ok(Claimed { leases, wait })
}
