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
//! Each script's [`Spec`] names the KEYS and fixed ARGV its header
//! documents; a [`Call`] checks (in debug builds) that a caller passes
//! exactly those keys, and a test checks every spec against its Lua header.

pub(crate) mod codes;
#[cfg(test)]
pub(crate) mod contract;

use std::sync::{LazyLock, OnceLock};

use redis::{Script, ToRedisArgs, Value};

pub(crate) use self::codes::Code;
use crate::conn::Conn;
use crate::error::{Error, Result};

macro_rules! lua {
    ($name:literal) => {
        include_str!(concat!("../../lua/", $name, ".lua"))
    };
}

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
    ("events", include_str!("../../lua/lib/events.lua")),
    ("call", include_str!("../../lua/lib/call.lua")),
    ("budget", include_str!("../../lua/lib/budget.lua")),
    ("lanes", include_str!("../../lua/lib/lanes.lua")),
    ("throttle", include_str!("../../lua/lib/throttle.lua")),
    ("sets", include_str!("../../lua/lib/sets.lua")),
    ("mint", include_str!("../../lua/lib/mint.lua")),
    ("fence", include_str!("../../lua/lib/fence.lua")),
    ("claim", include_str!("../../lua/lib/claim.lua")),
    ("settle", include_str!("../../lua/lib/settle.lua")),
];

/// One script: its name, the KEYS and the fixed leading ARGV its header
/// documents (variadic keys and arguments may follow), and its code.
pub(crate) struct Spec {
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
    fn new(
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
    pub fn call(&'static self) -> Call {
        Call {
            spec: self,
            keys: Vec::with_capacity(self.keys.len()),
            args: Vec::with_capacity(self.args.len()),
        }
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
pub(crate) static LIBRARY: LazyLock<Library> = LazyLock::new(|| library(&SCRIPTS.list()));

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

/// All scripts.
pub(crate) struct Scripts {
    pub enqueue: Spec,
    pub claim: Spec,
    pub settle: Spec,
    pub complete: Spec,
    pub extend: Spec,
    pub reap: Spec,
    pub sweep: Spec,
    pub marker_claim: Spec,
    pub marker_done: Spec,
    pub marker_abandon: Spec,
    pub layout: Spec,
    pub pause: Spec,
    pub to_pending: Spec,
    pub remove: Spec,
    pub progress: Spec,
    pub list: Spec,
    pub obliterate: Spec,
    pub cancel: Spec,
    #[cfg(feature = "cron")]
    pub schedule_upsert: Spec,
    #[cfg(feature = "cron")]
    pub schedule_remove: Spec,
    #[cfg(feature = "cron")]
    pub schedule_due: Spec,
    #[cfg(feature = "cron")]
    pub schedule_fire: Spec,
    pub lane_config: Spec,
    pub lanes: Spec,
    pub limits: Spec,
}

impl Scripts {
    /// Every script of this build, in a fixed order.
    fn list(&self) -> Vec<&Spec> {
        #[allow(unused_mut)]
        let mut all = vec![
            &self.enqueue,
            &self.claim,
            &self.settle,
            &self.complete,
            &self.extend,
            &self.reap,
            &self.sweep,
            &self.marker_claim,
            &self.marker_done,
            &self.marker_abandon,
            &self.layout,
            &self.pause,
            &self.to_pending,
            &self.remove,
            &self.progress,
            &self.list,
            &self.obliterate,
            &self.cancel,
            &self.lane_config,
            &self.lanes,
            &self.limits,
        ];
        #[cfg(feature = "cron")]
        all.extend([
            &self.schedule_upsert,
            &self.schedule_remove,
            &self.schedule_due,
            &self.schedule_fire,
        ]);
        all
    }
}

#[cfg(test)]
impl Scripts {
    fn all(&self) -> Vec<(&Spec, &'static str)> {
        #[allow(unused_mut)]
        let mut all = vec![
            (&self.enqueue, include_str!("../../lua/enqueue.lua")),
            (&self.claim, include_str!("../../lua/claim.lua")),
            (&self.settle, include_str!("../../lua/settle.lua")),
            (&self.complete, include_str!("../../lua/complete.lua")),
            (&self.extend, include_str!("../../lua/extend.lua")),
            (&self.reap, include_str!("../../lua/reap.lua")),
            (&self.sweep, include_str!("../../lua/sweep.lua")),
            (&self.marker_claim, include_str!("../../lua/marker_claim.lua")),
            (&self.marker_done, include_str!("../../lua/marker_done.lua")),
            (&self.marker_abandon, include_str!("../../lua/marker_abandon.lua")),
            (&self.layout, include_str!("../../lua/layout.lua")),
            (&self.pause, include_str!("../../lua/pause.lua")),
            (&self.to_pending, include_str!("../../lua/to_pending.lua")),
            (&self.remove, include_str!("../../lua/remove.lua")),
            (&self.progress, include_str!("../../lua/progress.lua")),
            (&self.list, include_str!("../../lua/list.lua")),
            (&self.obliterate, include_str!("../../lua/obliterate.lua")),
            (&self.cancel, include_str!("../../lua/cancel.lua")),
            (&self.lane_config, include_str!("../../lua/lane_config.lua")),
            (&self.lanes, include_str!("../../lua/lanes.lua")),
            (&self.limits, include_str!("../../lua/limits.lua")),
        ];
        #[cfg(feature = "cron")]
        all.extend([
            (&self.schedule_upsert, include_str!("../../lua/schedule_upsert.lua")),
            (&self.schedule_remove, include_str!("../../lua/schedule_remove.lua")),
            (&self.schedule_due, include_str!("../../lua/schedule_due.lua")),
            (&self.schedule_fire, include_str!("../../lua/schedule_fire.lua")),
        ]);
        all
    }
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    enqueue: Spec::new(
        "enqueue",
        lua!("enqueue"),
        &["seq", "pending", "delayed", "wake"],
        false,
        &["prefix", "jobs"],
    ),
    claim: Spec::new(
        "claim",
        lua!("claim"),
        &["pending", "active", "delayed", "wake", "token", "meta"],
        false,
        &["prefix", "lease", "max", "holder"],
    ),
    settle: Spec::new(
        "settle",
        lua!("settle"),
        &[
            "active",
            "pending",
            "delayed",
            "completed",
            "failed",
            "wake",
            "token",
            "meta",
            "cancelled",
        ],
        false,
        &["prefix", "keep_completed", "keep_failed", "items"],
    ),
    complete: Spec::new(
        "complete",
        lua!("complete"),
        &["job", "active", "completed"],
        true,
        &["prefix", "id", "token", "keep_completed", "effects"],
    ),
    extend: Spec::new(
        "extend",
        lua!("extend"),
        &["job", "active"],
        false,
        &["id", "token", "lease"],
    ),
    reap: Spec::new(
        "reap",
        lua!("reap"),
        &["active", "pending", "delayed", "failed", "wake", "cancelled"],
        false,
        &["prefix", "limit", "keep_failed"],
    ),
    sweep: Spec::new(
        "sweep",
        lua!("sweep"),
        &[
            "pending",
            "active",
            "delayed",
            "completed",
            "failed",
            "cancelled",
            "seq",
        ],
        // Phase "keys": the job hashes and dedup markers to check.
        true,
        &["prefix", "phase", "cursor", "count", "chain"],
    ),
    marker_claim: Spec::new(
        "marker_claim",
        lua!("marker_claim"),
        &["job", "marker"],
        false,
        &["token", "ttl"],
    ),
    marker_done: Spec::new(
        "marker_done",
        lua!("marker_done"),
        &["marker"],
        false,
        &["token", "ttl"],
    ),
    marker_abandon: Spec::new("marker_abandon", lua!("marker_abandon"), &["marker"], false, &["token"]),
    layout: Spec::new("layout", lua!("layout"), &["meta"], false, &["version"]),
    pause: Spec::new("pause", lua!("pause"), &["meta", "wake"], false, &["paused"]),
    to_pending: Spec::new(
        "to_pending",
        lua!("to_pending"),
        &["from", "pending", "wake"],
        false,
        &["prefix", "limit", "state"],
    ),
    obliterate: Spec::new(
        "obliterate",
        lua!("obliterate"),
        &["active", "meta"],
        true,
        &["prefix", "cursor", "count", "force"],
    ),
    list: Spec::new(
        "list",
        lua!("list"),
        &["set"],
        false,
        &["order", "limit", "score", "id"],
    ),
    cancel: Spec::new(
        "cancel",
        lua!("cancel"),
        &["pending", "delayed", "cancelled"],
        false,
        &["prefix", "keep_failed"],
    ),
    progress: Spec::new("progress", lua!("progress"), &["job"], false, &["token", "value"]),
    lane_config: Spec::new(
        "lane_config",
        lua!("lane_config"),
        &["ring", "setting"],
        false,
        &["prefix", "lane", "value", "cursor", "count"],
    ),
    lanes: Spec::new(
        "lanes",
        lua!("lanes"),
        &["ring", "held", "caps", "weights"],
        false,
        &["prefix", "cursor", "count"],
    ),
    limits: Spec::new(
        "limits",
        lua!("limits"),
        &["limits", "rates", "pending", "wake"],
        false,
        &["prefix", "what", "lane", "value"],
    ),
    remove: Spec::new(
        "remove",
        lua!("remove"),
        &["pending", "delayed", "completed", "failed", "cancelled"],
        false,
        &["prefix", "limit"],
    ),
    #[cfg(feature = "cron")]
    schedule_upsert: Spec::new(
        "schedule_upsert",
        lua!("schedule_upsert"),
        &["schedules", "schedule"],
        false,
        &[
            "name", "cron", "tz", "payload", "priority", "limits", "missed", "grace", "kind",
        ],
    ),
    #[cfg(feature = "cron")]
    schedule_remove: Spec::new(
        "schedule_remove",
        lua!("schedule_remove"),
        &["schedules", "schedule"],
        false,
        &["name"],
    ),
    #[cfg(feature = "cron")]
    schedule_due: Spec::new(
        "schedule_due",
        lua!("schedule_due"),
        &["schedules"],
        false,
        &["prefix", "limit"],
    ),
    #[cfg(feature = "cron")]
    schedule_fire: Spec::new(
        "schedule_fire",
        lua!("schedule_fire"),
        &["schedules", "schedule", "seq", "pending", "wake"],
        false,
        &["prefix", "name", "cron", "tz", "next"],
    ),
});

/// One script call being built: keys first, then arguments.
pub(crate) struct Call {
    spec: &'static Spec,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Call {
    pub fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    pub fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// Runs the call and opens its flat array reply.
    pub async fn run(&self, conn: &mut Conn) -> Result<Reply> {
        let v = self.run_raw(conn).await?;
        Reply::new(self.spec.name, v)
    }

    /// Runs the call and returns its reply as it is.
    pub async fn run_raw(&self, conn: &mut Conn) -> Result<Value> {
        let spec = self.spec;
        debug_assert!(
            self.keys.len() == spec.keys.len() || (spec.more_keys && self.keys.len() > spec.keys.len()),
            "{}: {} keys passed, the header names {:?}",
            spec.name,
            self.keys.len(),
            spec.keys
        );
        debug_assert!(
            self.args.len() >= spec.args.len(),
            "{}: {} arguments passed, the header names {:?}",
            spec.name,
            self.args.len(),
            spec.args
        );
        let guard = reshard_guard(conn, &self.keys);
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(spec.function())
            .arg(self.keys.len() + usize::from(guard.is_some()));
        for k in &self.keys {
            cmd.arg(k.as_slice());
        }
        if let Some(g) = &guard {
            cmd.arg(g.as_bytes());
        }
        for a in &self.args {
            cmd.arg(a.as_slice());
        }
        match cmd.query_async(conn).await {
            Err(e) if missing_function(&e) => {
                load_library(conn).await?;
                cmd.query_async(conn).await.map_err(Error::from_redis)
            }
            r => r.map_err(Error::from_redis),
        }
    }
}

/// On a cluster, the queue's resharding guard, `PREFIX:{Q}:reshard-guard`,
/// a key that never exists, declared last in every call (the function
/// wrapper drops it from `KEYS` again, `lua/common.lua` `new_call`).
///
/// While a slot moves key by key (`CLUSTER SETSLOT ... MIGRATING` and
/// `MIGRATE`), a script that reads or creates a key already gone from the
/// node it runs on raises in mid-run, after some of its writes (the server
/// rolls nothing back), and a script sent on by `ASK` to the importing node
/// would read keys not moved yet as missing. A call declaring a key that
/// is missing on both nodes is refused with `TRYAGAIN` before it runs, on
/// the source and on the target alike (a multi-key request in a slot being
/// moved), so no script of the queue runs while its slot is split; the
/// cluster connection retries until the move ends, within the response
/// timeout. Outside a move the guard is just an absent key.
fn reshard_guard(conn: &Conn, keys: &[Vec<u8>]) -> Option<String> {
    let first = std::str::from_utf8(keys.first()?).ok()?;
    conn.slot_group(first)?;
    let close = first
        .find('{')
        .and_then(|open| first[open..].find('}').map(|c| open + c))?;
    Some(format!("{}:{}", &first[..=close], crate::keys::RESHARD_GUARD))
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

    /// A reply code (see [`codes`]).
    pub fn code(&mut self) -> Result<Code> {
        let n = self.int()?;
        Code::of(self.script, n)
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
        for (spec, source) in SCRIPTS.all() {
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
            SCRIPTS.all().len(),
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
        for spec in SCRIPTS.list() {
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
