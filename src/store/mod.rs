//! The Lua scripts (one file per script in `lua/`) and how they are run.
//!
//! The scripts are loaded as one function library (`FUNCTION LOAD`):
//! `lua/common.lua` once, then each script's own file as a function of it,
//! called with `FCALL`. Sent as plain scripts, every call would run
//! common.lua's top level again (defining its helpers anew, about 20 µs of
//! server time per call); a library defines them once per load. The
//! library's name and its functions' names carry a hash of its code, so two
//! echomq builds with different scripts (a rolling upgrade) each call their
//! own. A call that finds no function (a restart without persistence,
//! `FUNCTION FLUSH`, a new node) loads the library and runs again, so that
//! never surfaces as an error.
//!
//! Each script has one Rust file here, named as its Lua file: its
//! [`Spec`] (the KEYS and fixed ARGV its header documents), its typed
//! parameters, the call, and the decoding of its reply into the crate's
//! types, so this module is the only code that knows KEYS, ARGV and reply
//! codes. A `Call` checks (in debug builds) that a caller passes exactly
//! the keys its spec names, and a test checks every spec against its Lua
//! header. Every script is listed once, in the `scripts!` table below.

mod call;
mod codes;

use std::sync::{LazyLock, OnceLock};

use redis::Script;

use self::call::Call;
use self::codes::Code;
use crate::conn::Conn;
use crate::error::{Error, Result};

/// The helpers every script's function shares.
const COMMON: &str = include_str!("../../lua/common.lua");

/// One script: its name, the KEYS and the fixed leading ARGV its header
/// documents (variadic keys and arguments may follow), and its code.
struct Spec {
    pub name: &'static str,
    pub keys: &'static [&'static str],
    /// True when more keys may follow the named ones (effect targets).
    pub more_keys: bool,
    pub args: &'static [&'static str],
    /// The script's own file (the body of its library function).
    body: &'static str,
    /// The library function's name (`emq_HASH_NAME`), set on first use.
    function: OnceLock<String>,
}

impl Spec {
    const fn new(
        name: &'static str,
        body: &'static str,
        keys: &'static [&'static str],
        more_keys: bool,
        args: &'static [&'static str],
    ) -> Spec {
        Spec {
            name,
            keys,
            more_keys,
            args,
            body,
            function: OnceLock::new(),
        }
    }

    /// Starts a call of this script.
    fn call(&'static self) -> Call {
        Call::new(self)
    }

    fn function(&self) -> &str {
        self.function.get_or_init(|| function_name(&LIBRARY.hash, self.name))
    }
}

fn function_name(hash: &str, script: &str) -> String {
    format!("emq_{hash}_{script}")
}

/// The function library: its code and the hash that names it.
pub(crate) struct Library {
    pub hash: String,
    pub code: String,
}

impl Library {
    /// The library's name in the server (`echomq_HASH`).
    pub fn name(&self) -> String {
        format!("echomq_{}", self.hash)
    }
}

/// Built once per process from every script of this build.
pub(crate) static LIBRARY: LazyLock<Library> = LazyLock::new(|| library(&specs()));

/// Assembles the library: common.lua, then one function per script. Each
/// function first forgets the per-call caches common.lua keeps in its
/// top-level locals (which, in a library, live from one call to the next),
/// runs the script's body as a closure (it may return anywhere), and ends
/// by writing the call's lifecycle events (common.lua `end_call`).
/// A build with `--cfg echomq_faults` (the fault suite's negative
/// controls, never a normal build) then breaks the guarantees named in
/// `ECHOMQ_FAULT` (see [`crate::faults`]).
fn library(specs: &[&Spec]) -> Library {
    let mut body = String::with_capacity(COMMON.len() + specs.iter().map(|s| s.body.len() + 128).sum::<usize>());
    body.push_str(COMMON);
    for spec in specs {
        body.push_str("\nredis.register_function('emq_@HASH@_");
        body.push_str(spec.name);
        body.push_str("', function(KEYS, ARGV)\nnew_call(KEYS, ARGV)\nreturn end_call((function()\n");
        body.push_str(spec.body);
        body.push_str("\nend)())\nend)\n");
    }
    #[cfg(echomq_faults)]
    let body = crate::faults::apply(&body);
    // The hash covers every function's code, so a changed script is a new library.
    let hash = Script::new(&body).get_hash()[..12].to_owned();
    let code = format!("#!lua name=echomq_{hash}\n{}", body.replace("@HASH@", &hash));
    Library { hash, code }
}

/// Whether `e` says the function called is not loaded.
fn missing_function(e: &redis::RedisError) -> bool {
    e.detail().is_some_and(|d| d.starts_with("Function not found")) || e.to_string().contains("Function not found")
}

/// Loads the library (again) on the server behind `conn`.
pub(crate) async fn load_library(conn: &mut Conn) -> Result<()> {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(&LIBRARY.code)
        .query_async::<()>(conn)
        .await
        .map_err(Error::from_redis)
}

/// Declares each script's module and lists its [`Spec`] in a fixed order
/// (the library is built in this order, and its hash names the library).
macro_rules! scripts {
    ($($(#[$cfg:meta])* $name:ident),* $(,)?) => {
        $($(#[$cfg])* pub(crate) mod $name;)*

        /// Every script of this build, in the table's order.
        #[allow(clippy::vec_init_then_push, reason = "a `vec![]` cannot leave out the cfg'd scripts")]
        fn specs() -> Vec<&'static Spec> {
            let mut all = Vec::new();
            $($(#[$cfg])* all.push(&$name::SPEC);)*
            all
        }
    };
}

// Every script, once: adding one is its `lua/NAME.lua`, its `NAME.rs` here
// (with a `static SPEC`), and its name in this table.
scripts! {
    enqueue,
    claim,
    settle,
    complete,
    extend,
    reap,
    sweep,
    marker_claim,
    marker_done,
    marker_abandon,
    layout,
    pause,
    to_pending,
    remove,
    progress,
    list,
    obliterate,
    cancel,
    lane_config,
    lanes,
    limits,
    #[cfg(feature = "cron")]
    schedule_upsert,
    #[cfg(feature = "cron")]
    schedule_remove,
    #[cfg(feature = "cron")]
    schedule_due,
    #[cfg(feature = "cron")]
    schedule_fire,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `WHAT[n] name` pairs of a script's header, in order.
    fn header(source: &str, what: &str) -> Vec<String> {
        let head: String = source
            .lines()
            .take_while(|l| l.starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut out = Vec::new();
        let mut rest = head.as_str();
        let open = format!("{what}[");
        while let Some(i) = rest.find(&open) {
            rest = &rest[i + open.len()..];
            let Some(close) = rest.find(']') else { break };
            let Ok(n) = rest[..close].parse::<usize>() else {
                continue;
            };
            let name: String = rest[close + 1..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert_eq!(n, out.len() + 1, "{what}[{n}] out of order");
            out.push(name);
        }
        out
    }

    // Each script's header names the same KEYS and leading ARGV, in the same order, as its Rust spec.
    #[test]
    fn headers_match_specs() {
        for (spec, source) in specs().into_iter().map(|s| (s, s.body)) {
            assert_eq!(header(source, "KEYS"), spec.keys, "{}: KEYS", spec.name);
            assert_eq!(header(source, "ARGV"), spec.args, "{}: ARGV", spec.name);
        }
    }

    // The library holds common.lua once, then every script as a function named with the library's hash.
    #[test]
    fn library_holds_common_helpers_and_every_script() {
        let lib = &*LIBRARY;
        assert!(
            lib.code
                .starts_with(&format!("#!lua name=echomq_{}\n-- common.lua", lib.hash))
        );
        assert_eq!(lib.code.matches("-- common.lua:").count(), 1);
        for spec in specs() {
            let f = format!(
                "redis.register_function('{}', function(KEYS, ARGV)\nnew_call(KEYS, ARGV)\n",
                spec.function()
            );
            assert!(lib.code.contains(&f), "{} is not registered", spec.name);
        }
        assert!(!lib.code.contains("@HASH@"));
        assert!(lib.code.contains("-- complete: settles"));
    }
}
