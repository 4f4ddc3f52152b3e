//! The least-privilege ACL for an echomq user: the commands echomq runs
//! and its keys, nothing else.
//!
//! The server checks the commands a script runs against the user that
//! runs the script, so the list holds both what echomq sends
//! ([`DIRECT_COMMANDS`]) and what its scripts call ([`SCRIPT_COMMANDS`]; a
//! test checks it against every script in `lua/`). No `@dangerous`
//! command is needed; [`SELF_CHECK_COMMANDS`] (all `@dangerous`) are
//! optional: without them the start-up self-check cannot read the
//! persistence and eviction settings, and says so in
//! [`ServerReport::unverified`](crate::ServerReport::unverified) and in a
//! warning, but connects.
//!
//! ```
//! let line = format!("ACL SETUSER echomq on >secret {}", echomq::acl::rules("emq"));
//! assert!(line.starts_with("ACL SETUSER echomq on >secret resetkeys ~emq:* resetchannels -@all +fcall"));
//! ```
//!
//! The rules grant `+scan` (the sweep and obliterate walk the queue's keys
//! with it), which also lets [`Client::queue_names`](crate::Client::queue_names)
//! and the command line's `stats` without `-q` find queues. Mind that SCAN
//! shows key *names* outside the pattern (never their values).
//!
//! With Sentinel ([`Client::connect_sentinel`](crate::Client::connect_sentinel)),
//! the same user works (create it on every data node: ACL users are not
//! replicated); add `+role` to let echomq check that the node the
//! sentinels name is a master (without it, echomq takes the sentinels'
//! word). The sentinels' own users need `+sentinel|get-master-addr-by-name`.

/// Commands echomq sends itself: its scripts as functions of one library
/// (`FCALL`; `FUNCTION LOAD` when the library is missing),
/// `MULTI`/`EXEC` around the reads of `Queue::job` and `Queue::counts`,
/// `TIME`, a consumer's `BLPOP` wake-up wait, `SELECT` for a database
/// other than 0, `CLIENT ID`, with which the maintenance task notices
/// that its connection was made anew (a server restart or failover: it
/// then sweeps its queues), and `LPUSH`/`PEXPIRE` on a worker's own wake
/// list (which ends its wake-up wait early when a queue goes idle),
/// `XRANGE`/`XREVRANGE`/`XREAD` on a queue's event stream (an
/// [`EventReader`](crate::EventReader)) and `HMGET`/`HSET`/`HDEL` of the
/// queue's event settings ([`Queue::set_events`](crate::Queue::set_events)),
/// `HMGET` of a batch's counts ([`Batch::status`](crate::batch::Batch::status)),
/// `LRANGE` and `LREM` of a queue's outbox (the relay of flows of several
/// queues: `LREM` is among the scripts' commands),
/// `WAIT` after writes when a queue asks for replicas'
/// [`Durability`](crate::Durability), and `CLUSTER SLOTS`, with which a
/// cluster connection learns which master holds which slot. (`Durability::Fsynced` needs
/// `+waitaof` too, which Redis before 7.2 does not know, so the rules
/// leave it out.)
pub const DIRECT_COMMANDS: &[&str] = &[
    "fcall",
    "function|load",
    "multi",
    "exec",
    "hgetall",
    "hexists",
    "zcard",
    "zscore",
    "time",
    "blpop",
    "select",
    "client|id",
    "lpush",
    "pexpire",
    "xrange",
    "xrevrange",
    "xread",
    "hmget",
    "hset",
    "hdel",
    "wait",
    "cluster|slots",
    "lrange",
];

/// Commands echomq's scripts call.
pub const SCRIPT_COMMANDS: &[&str] = &[
    "del",
    "exists",
    "get",
    "set",
    "incr",
    "incrby",
    "pexpire",
    "pttl",
    "type",
    "unlink",
    "scan",
    "hdel",
    "hexists",
    "hget",
    "hincrby",
    "hmget",
    "hset",
    "hsetnx",
    "lindex",
    "llen",
    "lrange",
    "lpop",
    "lpush",
    "lrem",
    "rpush",
    "sadd",
    "xadd",
    "zadd",
    "zcard",
    "zlexcount",
    "zpopmin",
    "zrange",
    "zrangebyscore",
    "zrank",
    "zrevrank",
    "zrem",
    "zremrangebyscore",
    "zscan",
    "zscore",
    "time",
];

/// Commands the start-up self-check uses to read the server's
/// persistence, eviction and replication settings (`INFO`,
/// `CONFIG GET`): optional, and `@dangerous`.
pub const SELF_CHECK_COMMANDS: &[&str] = &["info", "config|get"];

/// The `ACL SETUSER` rules of a least-privilege echomq user whose queues
/// use key prefix `prefix` ([`keys::DEFAULT_PREFIX`](crate::keys::DEFAULT_PREFIX)
/// is `emq`): access to the keys `PREFIX:*` only, no pub/sub channel, and
/// only the commands of [`DIRECT_COMMANDS`] and [`SCRIPT_COMMANDS`].
/// Glob characters in `prefix` are escaped.
///
/// Prepend the user's name, `on` and its password:
/// `ACL SETUSER echomq on >PASSWORD <rules>` (or a line of the same words
/// in an ACL file, without `ACL SETUSER`).
pub fn rules(prefix: &str) -> String {
    let mut escaped = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    let mut words = vec![
        "resetkeys".to_owned(),
        format!("~{escaped}:*"),
        "resetchannels".to_owned(),
        "-@all".to_owned(),
    ];
    let mut seen: Vec<&str> = Vec::new();
    for cmd in DIRECT_COMMANDS.iter().chain(SCRIPT_COMMANDS) {
        if !seen.contains(cmd) {
            seen.push(cmd);
            words.push(format!("+{cmd}"));
        }
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command a script in `lua/` (or its helpers in `lua/lib/`) calls, lowercase.
    fn script_commands() -> Vec<String> {
        let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/lua"));
        let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.extend(std::fs::read_dir(dir.join("lib")).unwrap().map(|e| e.unwrap().path()));
        let mut found = Vec::new();
        for path in files.iter().filter(|p| p.extension().is_some_and(|e| e == "lua")) {
            let source = std::fs::read_to_string(path).unwrap();
            for call in ["rcall(", "redis.call(", "redis.pcall("] {
                for rest in source.split(call).skip(1) {
                    let rest = rest.trim_start();
                    let Some(quote) = rest.chars().next().filter(|c| *c == '\'' || *c == '"') else {
                        continue;
                    };
                    let name: String = rest[1..].chars().take_while(|c| *c != quote).collect();
                    let name = name.to_ascii_lowercase();
                    if !found.contains(&name) {
                        found.push(name);
                    }
                }
            }
        }
        found.sort();
        found
    }

    // Every command the scripts call is in the ACL, and the ACL names none they do not call.
    #[test]
    fn script_commands_match_the_scripts() {
        let used = script_commands();
        assert!(used.len() > 10, "found too few commands in lua/: {used:?}");
        let missing: Vec<&String> = used.iter().filter(|c| !SCRIPT_COMMANDS.contains(&c.as_str())).collect();
        assert!(
            missing.is_empty(),
            "lua/ calls {missing:?}: add them to acl::SCRIPT_COMMANDS"
        );
        let unused: Vec<&&str> = SCRIPT_COMMANDS
            .iter()
            .filter(|c| !used.iter().any(|u| u == *c))
            .collect();
        assert!(
            unused.is_empty(),
            "no script calls {unused:?}: drop them from acl::SCRIPT_COMMANDS"
        );
        // Scripts never call a command the user must not have.
        for c in &used {
            assert!(!SELF_CHECK_COMMANDS.contains(&c.as_str()), "a script calls {c}");
        }
    }

    // The rules confine the user to its prefix, escaping glob characters.
    #[test]
    fn rules_name_the_prefix_and_each_command_once() {
        let r = rules("emq");
        assert!(
            r.starts_with("resetkeys ~emq:* resetchannels -@all +fcall +function|load"),
            "{r}"
        );
        assert_eq!(r.matches("+time").count(), 1, "{r}");
        assert!(!r.contains("+info") && !r.contains("+config"), "{r}");
        assert!(rules("a*b?[c]").contains(r"~a\*b\?\[c\]:*"));
    }
}
