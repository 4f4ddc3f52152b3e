//! `lua/marker_claim.lua`: claims a job's effect marker for the calling
//! attempt before the effect runs. The marker's identity and the refusals
//! the three marker scripts share live here too, as their values are
//! defined in marker_claim.lua.

use super::Spec;
use super::call::{Call, unexpected};
use super::codes::Code;
use crate::conn::Conn;
use crate::error::{Error, Result};

pub(super) static SPEC: Spec = Spec::new(
    "marker_claim",
    include_str!("../../lua/marker_claim.lua"),
    &["job", "marker"],
    false,
    &["token", "ttl"],
);

/// One effect marker as one attempt of its job sees it (the caller
/// checked the names and the token).
pub(crate) struct Marker<'a> {
    pub job_id: &'a str,
    /// The job hash: the claim reads its state and attempts (the fence).
    pub job_key: &'a str,
    /// `PREFIX:{Q}:fx:EFFECT:ID`.
    pub key: &'a str,
    pub effect: &'a str,
    /// The calling attempt's fencing token.
    pub token: u64,
}

/// What a claim of a marker found.
pub(crate) enum Found {
    /// No attempt held it; the caller holds it now.
    Fresh,
    /// The attempt with this token finished the effect.
    Done { token: u64 },
    /// The attempt with this token held it and ended without finishing;
    /// the caller holds it now.
    Orphaned { token: u64 },
}

/// Claims `m` for its attempt, the marker to live `ttl_ms`.
pub(crate) async fn run(conn: &mut Conn, m: &Marker<'_>, ttl_ms: u64) -> Result<Found> {
    let mut call = SPEC.call();
    call.key(m.job_key).key(m.key).arg(m.token).arg(ttl_ms);
    let mut r = call.run(conn).await?;
    let (code, _now, token) = (r.code()?, r.uint()?, r.uint()?);
    match code {
        Code::Ok => Ok(Found::Fresh),
        Code::MarkerDone => Ok(Found::Done { token }),
        Code::MarkerOrphaned => Ok(Found::Orphaned { token }),
        other => Err(refusal(m, "marker_claim", other, token)),
    }
}

/// Runs a marker call answering `{code, now, token}` where only OK is a
/// success (marker_done, marker_abandon).
pub(super) async fn answer(conn: &mut Conn, m: &Marker<'_>, script: &'static str, call: Call) -> Result<()> {
    let mut r = call.run(conn).await?;
    let (code, _now, token) = (r.code()?, r.uint()?, r.uint()?);
    match code {
        Code::Ok => Ok(()),
        other => Err(refusal(m, script, other, token)),
    }
}

/// The error for a marker script's refusal; `holder` is the token its
/// reply names.
fn refusal(m: &Marker<'_>, script: &'static str, code: Code, holder: u64) -> Error {
    match code {
        Code::LeaseLost => Error::LeaseLost {
            id: m.job_id.to_owned(),
            token: m.token,
        },
        Code::NotFound => Error::JobNotFound(m.job_id.to_owned()),
        Code::HeldByOther | Code::DoneByOther => Error::MarkerLost {
            id: m.job_id.to_owned(),
            effect: m.effect.to_owned(),
            token: m.token,
            holder,
            done: code == Code::DoneByOther,
        },
        Code::Foreign => Error::Protocol {
            script,
            detail: format!("marker {} holds a value echomq did not write", m.key),
        },
        other => unexpected(script, other),
    }
}
