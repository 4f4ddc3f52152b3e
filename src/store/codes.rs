//! The one map of script reply codes. `lua/lib/codes.lua` defines them in its
//! `CODE` table; this is the only Rust place that knows the numbers, and a
//! test checks that the two tables agree name for name.

use crate::error::{Error, Result};

/// What a script answered, for every script (a code means one thing everywhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Code {
    /// Done as asked (1).
    Ok,
    /// This settlement already happened with this token (2).
    Already,
    /// A retry (or a reap) failed the job for good (3).
    Failed,
    /// An earlier attempt finished the effect (4).
    MarkerDone,
    /// An attempt claimed the effect and ended without finishing it (5).
    MarkerOrphaned,
    /// Enqueue: a job with that id exists; nothing written (6).
    Exists,
    /// Enqueue: the dedup marker is held by another job (7).
    Deduped,
    /// The job is active (leased): an operator call left it alone (8).
    Busy,
    /// Enqueue: the dedup marker's waiting holder took this payload (9).
    Replaced,
    /// Cancel: the job is active; the request is recorded for its holder (10).
    Requested,
    /// The job is cancelled (11).
    Cancelled,
    /// Cancel: the job had already finished; nothing changed (12).
    Finished,
    /// The job ended expired: it can no longer start before its expiry (13).
    Expired,
    /// The batch is closed: nothing written (14).
    Closed,
    /// No such job (or, for the batch scripts, no such batch) (-1).
    NotFound,
    /// Not active under this token: nothing changed (-2).
    LeaseLost,
    /// A declared effect was refused: nothing changed (-3).
    Refused,
    /// Another attempt holds the effect marker (-4).
    HeldByOther,
    /// Another attempt finished the effect (-5).
    DoneByOther,
    /// The marker holds a value echomq did not write (-6).
    Foreign,
    /// A schedule changed since the scheduler read it: nothing written (-7).
    Stale,
    /// A message this version does not know: nothing changed (-8).
    Unknown,
}

/// Every code with its name in `lua/lib/codes.lua`'s `CODE` table.
pub(super) const CODES: &[(&str, i64, Code)] = &[
    ("OK", 1, Code::Ok),
    ("ALREADY", 2, Code::Already),
    ("FAILED", 3, Code::Failed),
    ("MARKER_DONE", 4, Code::MarkerDone),
    ("MARKER_ORPHANED", 5, Code::MarkerOrphaned),
    ("EXISTS", 6, Code::Exists),
    ("DEDUPED", 7, Code::Deduped),
    ("BUSY", 8, Code::Busy),
    ("REPLACED", 9, Code::Replaced),
    ("REQUESTED", 10, Code::Requested),
    ("CANCELLED", 11, Code::Cancelled),
    ("FINISHED", 12, Code::Finished),
    ("EXPIRED", 13, Code::Expired),
    ("CLOSED", 14, Code::Closed),
    ("NOT_FOUND", -1, Code::NotFound),
    ("LEASE_LOST", -2, Code::LeaseLost),
    ("REFUSED", -3, Code::Refused),
    ("HELD_BY_OTHER", -4, Code::HeldByOther),
    ("DONE_BY_OTHER", -5, Code::DoneByOther),
    ("FOREIGN", -6, Code::Foreign),
    ("STALE", -7, Code::Stale),
    ("UNKNOWN", -8, Code::Unknown),
];

impl Code {
    /// Decodes `n` from `script`; an unknown number is a protocol error.
    pub(super) fn of(script: &'static str, n: i64) -> Result<Code> {
        CODES
            .iter()
            .find(|(_, v, _)| *v == n)
            .map(|(_, _, c)| *c)
            .ok_or_else(|| Error::Protocol {
                script,
                detail: format!("unknown status code {n}"),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The Lua CODE table and the Rust map hold the same names and numbers, and no number twice.
    #[test]
    fn lua_and_rust_codes_agree() {
        let lua = include_str!("../../lua/lib/codes.lua");
        let start = lua.find("local CODE = {").expect("CODE table in lib/codes.lua");
        let body = &lua[start..start + lua[start..].find("\n}").unwrap()];
        let mut from_lua: Vec<(String, i64)> = body
            .lines()
            .skip(1)
            .filter_map(|l| {
                let l = l.split("--").next()?.trim().trim_end_matches(',');
                let (name, value) = l.split_once('=')?;
                Some((name.trim().to_owned(), value.trim().parse().ok()?))
            })
            .collect();
        let mut from_rust: Vec<(String, i64)> = CODES.iter().map(|(n, v, _)| ((*n).to_owned(), *v)).collect();
        from_lua.sort();
        from_rust.sort();
        assert_eq!(from_lua, from_rust);
        let mut values: Vec<i64> = CODES.iter().map(|(_, v, _)| *v).collect();
        values.sort();
        values.dedup();
        assert_eq!(values.len(), CODES.len(), "a number means one thing");
        for (_, v, c) in CODES {
            assert_eq!(Code::of("t", *v).unwrap(), *c);
        }
        assert!(matches!(Code::of("t", 0), Err(Error::Protocol { .. })));
    }
}
