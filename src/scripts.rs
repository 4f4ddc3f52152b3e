//! The Lua scripts (one file per script in `lua/`) and how they are run.
//!
//! Each script is `lua/common.lua` followed by its own file, embedded at
//! build time. `redis::Script` calls it by SHA and loads it on `NOSCRIPT`,
//! so a server restart or `SCRIPT FLUSH` never surfaces as an error.

use std::sync::LazyLock;

use redis::{Script, Value};

use crate::error::{Error, Result};

macro_rules! lua {
    ($name:literal) => {
        concat!(
            include_str!("../lua/common.lua"),
            include_str!(concat!("../lua/", $name, ".lua"))
        )
    };
}

/// All scripts, hashed once per process.
pub(crate) struct Scripts {
    pub enqueue: Script,
    pub claim: Script,
    pub complete: Script,
    pub retry: Script,
    pub fail: Script,
    pub extend: Script,
    pub release: Script,
    pub reap: Script,
    pub sweep: Script,
    pub settle: Script,
    /// Effect markers and their codes: see `src/effect.rs` and [`effect_code`].
    pub marker_claim: Script,
    pub marker_done: Script,
    pub marker_abandon: Script,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    enqueue: script(lua!("enqueue")),
    claim: script(lua!("claim")),
    complete: script(lua!("complete")),
    retry: script(lua!("retry")),
    fail: script(lua!("fail")),
    extend: script(lua!("extend")),
    release: script(lua!("release")),
    reap: script(lua!("reap")),
    sweep: script(lua!("sweep")),
    settle: script(lua!("settle")),
    marker_claim: script(lua!("marker_claim")),
    marker_done: script(lua!("marker_done")),
    marker_abandon: script(lua!("marker_abandon")),
});

/// Builds a script. A build with `--cfg echomq_faults` (the fault suite's
/// negative controls, never a normal build) first breaks the guarantees
/// named in `ECHOMQ_FAULT`, so the suite can assert that its checks notice.
fn script(source: &str) -> Script {
    #[cfg(echomq_faults)]
    {
        return Script::new(&faults::apply(source));
    }
    #[allow(unreachable_code)]
    Script::new(source)
}

#[cfg(echomq_faults)]
pub(crate) mod faults {
    //! Negative controls: `ECHOMQ_FAULT` is a comma-separated list of
    //! `no-token-check`, `client-clock`, `two-step-reaper`, `no-stall-increment`.

    pub(crate) fn active(name: &str) -> bool {
        std::env::var("ECHOMQ_FAULT").is_ok_and(|v| v.split(',').any(|f| f.trim() == name))
    }

    pub(crate) fn apply(source: &str) -> String {
        let mut src = source.to_owned();
        if active("no-token-check") {
            src = src.replace("cur[1] == 'active' and cur[2] == token", "cur[1] == 'active'");
        }
        if active("no-stall-increment") {
            src = src.replace(
                "rcall('HINCRBY', jk, 's', '1')",
                "tonumber(rcall('HGET', jk, 's') or 0)",
            );
        }
        if active("client-clock") {
            // claim.lua and extend.lua count the lease from the caller's clock (the last ARGV).
            src = src.replace(
                "local deadline = now + lease",
                "local deadline = tonumber(ARGV[#ARGV]) + lease",
            );
        }
        src
    }

    /// The caller's clock in ms, sent as the last ARGV of claim and extend.
    pub(crate) fn client_now_ms() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// What a settling script answered (the codes of `common.lua`'s `check_owner`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    /// The move happened (1), or the job failed terminally (3).
    Done(i64),
    /// The same settlement already happened with this token (2).
    AlreadySettled,
    /// No such job (-1).
    NotFound,
    /// Not active, or a newer token owns it (-2).
    LeaseLost,
}

/// Maps a script's status code; the single place that knows the numbers.
pub(crate) fn code(script: &'static str, n: i64) -> Result<Code> {
    Ok(match n {
        1 | 3 => Code::Done(n),
        2 => Code::AlreadySettled,
        -1 => Code::NotFound,
        -2 => Code::LeaseLost,
        other => {
            return Err(Error::Protocol {
                script,
                detail: format!("unknown status code {other}"),
            });
        }
    })
}

/// What an effect script answered: the effect-marker scripts
/// (`lua/marker_*.lua`) and atomic completion's refusal in `complete.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EffectCode {
    /// Done as asked; a claim found the marker free and the caller holds it now (1).
    Ok,
    /// A claim found the effect done by an earlier attempt (2).
    Done,
    /// A claim took the marker over from an attempt that ended without finishing (3).
    Orphaned,
    /// No such job (-1).
    NotFound,
    /// The caller is not the job's current attempt (-2).
    LeaseLost,
    /// `complete`: a declared effect was refused; nothing changed (-3).
    Refused,
    /// Another attempt holds the marker (-4).
    HeldByOther,
    /// Another attempt finished the effect (-5).
    DoneByOther,
    /// The marker holds a value echomq did not write (-6).
    Foreign,
}

/// Maps an effect script's status code; the single place that knows them.
pub(crate) fn effect_code(script: &'static str, n: i64) -> Result<EffectCode> {
    Ok(match n {
        1 => EffectCode::Ok,
        2 => EffectCode::Done,
        3 => EffectCode::Orphaned,
        -1 => EffectCode::NotFound,
        -2 => EffectCode::LeaseLost,
        -3 => EffectCode::Refused,
        -4 => EffectCode::HeldByOther,
        -5 => EffectCode::DoneByOther,
        -6 => EffectCode::Foreign,
        other => {
            return Err(Error::Protocol {
                script,
                detail: format!("unknown status code {other}"),
            });
        }
    })
}

/// Reads a script's flat array reply field by field.
pub(crate) struct Reply {
    script: &'static str,
    items: std::vec::IntoIter<Value>,
}

impl Reply {
    pub fn new(script: &'static str, v: Value) -> Result<Self> {
        match v {
            Value::Array(items) => Ok(Reply {
                script,
                items: items.into_iter(),
            }),
            other => Err(Error::Protocol {
                script,
                detail: format!("expected an array, got {other:?}"),
            }),
        }
    }

    fn bad(&self, what: &str, got: Option<Value>) -> Error {
        Error::Protocol {
            script: self.script,
            detail: format!("expected {what}, got {got:?}"),
        }
    }

    pub fn remaining(&self) -> usize {
        self.items.len()
    }

    pub fn int(&mut self) -> Result<i64> {
        match self.items.next() {
            Some(Value::Int(n)) => Ok(n),
            Some(Value::BulkString(b)) => std::str::from_utf8(&b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| self.bad("an integer", Some(Value::BulkString(b)))),
            other => Err(self.bad("an integer", other)),
        }
    }

    pub fn uint(&mut self) -> Result<u64> {
        let n = self.int()?;
        u64::try_from(n).map_err(|_| self.bad("a non-negative integer", Some(Value::Int(n))))
    }

    pub fn bytes(&mut self) -> Result<Vec<u8>> {
        match self.items.next() {
            Some(Value::BulkString(b)) => Ok(b),
            Some(Value::SimpleString(s)) => Ok(s.into_bytes()),
            other => Err(self.bad("a string", other)),
        }
    }

    pub fn string(&mut self) -> Result<String> {
        let b = self.bytes()?;
        String::from_utf8(b).map_err(|e| self.bad("UTF-8", Some(Value::BulkString(e.into_bytes()))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every status code a script can send maps to one meaning; others are protocol errors.
    #[test]
    fn codes_map_one_to_one() {
        assert_eq!(code("t", 1).unwrap(), Code::Done(1));
        assert_eq!(code("t", 3).unwrap(), Code::Done(3));
        assert_eq!(code("t", 2).unwrap(), Code::AlreadySettled);
        assert_eq!(code("t", -1).unwrap(), Code::NotFound);
        assert_eq!(code("t", -2).unwrap(), Code::LeaseLost);
        assert!(matches!(code("t", 7), Err(Error::Protocol { .. })));
    }

    // Every effect script code maps to one meaning; others are protocol errors.
    #[test]
    fn effect_codes_map_one_to_one() {
        use EffectCode::*;
        let all = [
            (1, Ok),
            (2, Done),
            (3, Orphaned),
            (-1, NotFound),
            (-2, LeaseLost),
            (-3, Refused),
            (-4, HeldByOther),
            (-5, DoneByOther),
            (-6, Foreign),
        ];
        for (n, want) in all {
            assert_eq!(effect_code("t", n).unwrap(), want, "code {n}");
        }
        for bad in [0, 4, -7] {
            assert!(matches!(effect_code("t", bad), Err(Error::Protocol { .. })));
        }
    }

    // The embedded scripts start with the shared helpers and keep their own text.
    #[test]
    fn scripts_embed_common_helpers() {
        let src = lua!("complete");
        assert!(src.starts_with("-- common.lua"));
        assert!(src.contains("-- complete: settles"));
    }
}
