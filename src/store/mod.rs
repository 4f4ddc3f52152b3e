//! The Lua scripts (one file per script in `lua/`) and how they are run.
//!
//! The scripts are loaded as one function library (`FUNCTION LOAD`): the
//! shared helpers of `lua/lib/` once, in the order [`LIB`] lists them,
//! then each script's own file as a function of it, called with `FCALL`.
//! `lua/README.md` is the contract index: every key, every job-hash field,
//! the reply codes, and each script's KEYS, ARGV and reply shape (the tests
//! check it against the scripts and the Rust side). Sent as plain scripts,
//! every call would run the helpers' top level again (defining them anew,
//! about 20 µs of server time per call); a library defines them once per
//! load. The
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
//! header; a `Reply` checks (in debug builds) that its decoder's reads
//! follow the script's `-- REPLY:` shape (`shape.rs`). Every script is
//! listed once, in the `scripts!` table below.

mod call;
mod codes;
#[cfg(test)]
pub(crate) mod contract;
#[cfg(any(test, debug_assertions))]
mod shape;

use std::sync::{LazyLock, OnceLock};

use redis::Script;

use self::call::Call;
use self::codes::Code;
use crate::conn::Conn;
use crate::error::{Error, Result};

/// The helpers every script's function shares, one concept per file, in
/// load order: each file uses only what the files before it define, and
/// names those in its header's `Needs:` line (a test checks both). They
/// are top-level locals of one chunk, which Lua 5.1 allows 200 of (a test
/// counts them).
const LIB: &[(&str, &str)] = &[
    ("base", include_str!("../../lua/lib/base.lua")),
    ("codes", include_str!("../../lua/lib/codes.lua")),
    ("defaults", include_str!("../../lua/lib/defaults.lua")),
    ("keyspace", include_str!("../../lua/lib/keyspace.lua")),
    ("meta", include_str!("../../lua/lib/meta.lua")),
    ("payload", include_str!("../../lua/lib/payload.lua")),
    ("events", include_str!("../../lua/lib/events.lua")),
    ("call", include_str!("../../lua/lib/call.lua")),
    ("budget", include_str!("../../lua/lib/budget.lua")),
    ("lanes", include_str!("../../lua/lib/lanes.lua")),
    ("throttle", include_str!("../../lua/lib/throttle.lua")),
    ("mint", include_str!("../../lua/lib/mint.lua")),
    ("sequence", include_str!("../../lua/lib/sequence.lua")),
    ("outbox", include_str!("../../lua/lib/outbox.lua")),
    ("batch", include_str!("../../lua/lib/batch.lua")),
    ("flow", include_str!("../../lua/lib/flow.lua")),
    ("sets", include_str!("../../lua/lib/sets.lua")),
    ("expiry", include_str!("../../lua/lib/expiry.lua")),
    ("fence", include_str!("../../lua/lib/fence.lua")),
    ("claim", include_str!("../../lua/lib/claim.lua")),
    ("settle", include_str!("../../lua/lib/settle.lua")),
];

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
    /// The reply shape its header states, parsed on first use: debug
    /// builds check every decoder's reads against it (`shape.rs`).
    #[cfg(debug_assertions)]
    shape: OnceLock<Option<shape::Shape>>,
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
            #[cfg(debug_assertions)]
            shape: OnceLock::new(),
        }
    }

    /// Starts a call of this script.
    fn call(&'static self) -> Call {
        Call::new(self)
    }

    fn function(&self) -> &str {
        self.function.get_or_init(|| function_name(&LIBRARY.hash, self.name))
    }

    /// The reply shape of its `-- REPLY:` header (`None` for a header
    /// without one; the contract tests require one of every script).
    #[cfg(debug_assertions)]
    fn reply_shape(&self) -> Option<&shape::Shape> {
        self.shape
            .get_or_init(|| shape::header_reply(self.body).and_then(|t| shape::Shape::parse(&t).ok()))
            .as_ref()
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

/// Assembles the library: the [`LIB`] files in order, then one function
/// per script. Each function first forgets the per-call caches the
/// helpers keep in their top-level locals (which, in a library, live from
/// one call to the next; `lua/lib/call.lua` `new_call`), runs the script's
/// body as a closure (it may return anywhere), and ends by writing the
/// call's lifecycle events (`end_call`).
/// A build with `--cfg echomq_faults` (the fault suite's negative
/// controls, never a normal build) then breaks the guarantees named in
/// `ECHOMQ_FAULT` (see [`crate::faults`]).
fn library(specs: &[&Spec]) -> Library {
    let lib_len: usize = LIB.iter().map(|(_, code)| code.len()).sum();
    let mut body = String::with_capacity(lib_len + specs.iter().map(|s| s.body.len() + 128).sum::<usize>());
    for (_, code) in LIB {
        body.push_str(code);
    }
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
    throttle,
    aging,
    batch_open,
    batch_close,
    batch_join,
    flow_add,
    flow_cancel,
    flow_read,
    deliver,
    flow_extend,
    flow_remove,
    #[cfg(feature = "cron")]
    schedule_upsert,
    #[cfg(feature = "cron")]
    schedule_remove,
    #[cfg(feature = "cron")]
    schedule_pause,
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

    // Each script's header names the same KEYS and leading ARGV, in the same order, as its Rust spec, and the reply shape lua/README.md lists for it; the README names the same KEYS and ARGV too.
    #[test]
    fn headers_match_specs() {
        let docs = contract::script_docs();
        let shapes = contract::reply_shapes();
        for (spec, source) in specs().into_iter().map(|s| (s, s.body)) {
            assert_eq!(header(source, "KEYS"), spec.keys, "{}: KEYS", spec.name);
            assert_eq!(header(source, "ARGV"), spec.args, "{}: ARGV", spec.name);
            let doc = docs
                .get(spec.name)
                .unwrap_or_else(|| panic!("{}: no section in lua/README.md", spec.name));
            assert_eq!(doc.keys, spec.keys, "{}: KEYS in lua/README.md", spec.name);
            assert_eq!(
                doc.more_keys, spec.more_keys,
                "{}: KEYS[n..] in lua/README.md",
                spec.name
            );
            assert_eq!(doc.args, spec.args, "{}: ARGV in lua/README.md", spec.name);
            let reply =
                contract::header_reply(source).unwrap_or_else(|| panic!("{}: no `-- REPLY:` header", spec.name));
            let reply = contract::Shape::parse(&reply).unwrap_or_else(|e| panic!("{}: REPLY: {e}", spec.name));
            assert_eq!(
                reply.to_string(),
                shapes[spec.name].to_string(),
                "{}: REPLY differs from lua/README.md",
                spec.name
            );
        }
        #[cfg(feature = "cron")]
        assert_eq!(
            docs.len(),
            specs().len(),
            "lua/README.md documents a script that is not in the table"
        );
    }

    // The library holds each lib file once, in order, then every script as a function named with the library's hash.
    #[test]
    fn library_holds_the_lib_files_and_every_script() {
        let lib = &*LIBRARY;
        assert!(
            lib.code
                .starts_with(&format!("#!lua name=echomq_{}\n-- lib/{}.lua:", lib.hash, LIB[0].0))
        );
        let mut at = 0;
        for (name, _) in LIB {
            let head = format!("-- lib/{name}.lua:");
            assert_eq!(lib.code.matches(&head).count(), 1, "{head}");
            let here = lib.code.find(&head).unwrap();
            assert!(here >= at, "{head} out of order");
            at = here;
        }
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
