//! `lua/enqueue.lua`: stores a batch of new jobs (dedup, debounce, delays,
//! lanes) and wakes consumers.

use super::Spec;
use super::call::unexpected;
use super::codes::Code;
use crate::conn::Conn;
use crate::durability::{Confirmed, Durability};
use crate::error::{Error, Result};
use crate::job::{EnqueueStatus, Enqueued, Unique};
use crate::keys::Keys;
use crate::limits::Limits;

pub(super) static SPEC: Spec = Spec::new(
    "enqueue",
    include_str!("../../lua/enqueue.lua"),
    &["seq", "pending", "delayed", "wake", "expiring"],
    false,
    &["prefix", "batch", "jobs"],
);

/// One job to store, checked by the caller.
pub(crate) struct NewJob {
    /// The JSON payload.
    pub payload: Vec<u8>,
    /// The caller's id; `None` mints one.
    pub id: Option<String>,
    pub priority: i8,
    /// When it is due: a delay in ms, or "@MS" for a run-at time
    /// (`EnqueueOptions::when`).
    pub when: String,
    pub limits: Limits,
    /// The dedup id, and how long the job holds it.
    pub dedup: Option<(String, Unique)>,
    /// Debounce: a waiting dedup holder takes this job's payload and due time.
    pub replace: bool,
    pub lane: Option<String>,
    pub kind: Option<String>,
    /// The W3C traceparent of the enqueuing span.
    pub traceparent: Option<String>,
    /// Its expiry: "" for none, else as `EnqueueOptions::expires` writes it.
    pub expires: String,
    /// Its sequence key.
    pub sequence: Option<String>,
}

/// Stores `jobs` in one atomic call, as members of open batch `batch` if
/// given: one answer per job, in order, and whether they are as durable as
/// `durability` asks.
///
/// # Errors
/// [`Error::BatchNotFound`] or [`Error::BatchClosed`] for a batch that
/// cannot take members (nothing written), or a server error.
pub(crate) async fn run(
    conn: &mut Conn,
    k: &Keys,
    jobs: &[&NewJob],
    batch: Option<&str>,
    durability: Durability,
) -> Result<(Vec<Enqueued>, Confirmed)> {
    let mut call = SPEC.call();
    call.key(&k.seq)
        .key(&k.pending)
        .key(&k.delayed)
        .key(&k.wake)
        .key(&k.expiring);
    call.arg(&k.base).arg(batch.unwrap_or_default()).arg(jobs.len());
    for j in jobs {
        let (dedup, (dedup_ttl_ms, states)) = match &j.dedup {
            Some((d, unique)) => (d.as_str(), unique.encode()?),
            None => ("", (0, String::new())),
        };
        call.arg(j.id.as_deref().unwrap_or_default())
            .arg(&j.payload)
            .arg(j.priority)
            .arg(&j.when)
            .arg(j.limits.encode())
            .arg(dedup)
            .arg(dedup_ttl_ms)
            .arg(if j.replace { "1" } else { "0" })
            .arg(j.lane.as_deref().unwrap_or_default())
            .arg(j.kind.as_deref().unwrap_or_default())
            .arg(j.traceparent.as_deref().unwrap_or_default())
            .arg(&j.expires)
            .arg(states)
            .arg(j.sequence.as_deref().unwrap_or_default());
    }
    let (mut r, confirmed) = call.run_confirmed(conn, durability).await?;
    let _now = r.uint()?;
    let mut out = Vec::with_capacity(jobs.len());
    while r.remaining() > 0 {
        let status = match r.code()? {
            Code::Ok => EnqueueStatus::Created,
            Code::Exists => EnqueueStatus::Existing,
            Code::Deduped => EnqueueStatus::Deduplicated,
            Code::Replaced => EnqueueStatus::Replaced,
            Code::NotFound if batch.is_some() => return Err(Error::BatchNotFound(r.string()?)),
            // (the close found may not be on the replicas yet: a shortfall says so first)
            Code::Closed if batch.is_some() => {
                let id = r.string()?;
                return crate::durability::confirm(confirmed, &id).and(Err(Error::BatchClosed(id)));
            }
            other => return Err(unexpected("enqueue", other)),
        };
        out.push(Enqueued {
            id: r.string()?,
            status,
        });
    }
    Ok((out, confirmed))
}
