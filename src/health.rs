//! The server self-check: what the server's settings let echomq promise
//! (persistence, eviction, replication), read at connect. The consistency
//! sweep, which checks the queue's own data, is in
//! [`crate::maintenance::sweep`].

use std::collections::HashMap;

use redis::Value;
use tracing::{info, warn};

use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::queue::Queue;

/// What the server's settings let echomq promise, from [`Client::self_check`](crate::Client::self_check).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerReport {
    /// `valkey` or `redis`.
    pub server: String,
    /// The server's version.
    pub version: String,
    /// Whether the append-only file is on (false where it could not be
    /// read: see `unverified`).
    pub appendonly: bool,
    /// `always`, `everysec`, `no`, or `unknown` where `CONFIG` is not allowed.
    pub appendfsync: String,
    /// The eviction policy; anything but `noeviction` can evict job records.
    /// `unknown` where neither `INFO` nor `CONFIG` is allowed.
    pub maxmemory_policy: String,
    /// Replicas connected to this primary (replication is asynchronous);
    /// 0 where `INFO` is not allowed.
    pub connected_replicas: u64,
    /// `hash-max-listpack-value`: a job record holding a longer value (a
    /// payload over 256 bytes, which is kept whole; on a queue of layout 2,
    /// any payload longer than this) is kept as a hash table instead of a
    /// listpack, which costs about 1.6× the memory ([`crate::guide::operating_the_server`], "Memory per job"); `None` where
    /// `CONFIG` is not allowed.
    pub hash_max_listpack_value: Option<u64>,
    /// What could not be verified, and why, e.g. `"appendfsync (CONFIG GET
    /// denied)"`: a user whose ACL denies `INFO` or `CONFIG` (any
    /// `-@dangerous` user) still connects, and the fields above hold
    /// defaults for these. Empty when everything was read.
    pub unverified: Vec<String>,
}

/// The `hash-max-listpack-value` echomq suggests: job records with payloads
/// up to this many bytes stay compact (a listpack).
pub const SUGGESTED_HASH_MAX_LISTPACK_VALUE: u64 = 256;

/// Names in [`ServerReport::unverified`], each followed by the reason.
const UNVERIFIED_APPENDONLY: &str = "append-only file";

impl ServerReport {
    /// What an acknowledged enqueue survives on this server, in one sentence.
    pub fn durability(&self) -> &'static str {
        if !self.persistence_known() {
            return "the server's persistence settings could not be read: what acknowledged jobs survive is unknown";
        }
        match (self.appendonly, self.appendfsync.as_str()) {
            (true, "always") => "acknowledged jobs survive a server crash, an OS crash and power loss",
            (true, "everysec") => {
                "acknowledged jobs survive a server crash; an OS crash or power loss can lose about the last second"
            }
            (true, _) => "acknowledged jobs survive a server crash in practice; an OS crash can lose recent writes",
            (false, _) => "no append-only file: a server restart can lose acknowledged jobs",
        }
    }

    /// Whether the server's persistence settings (`appendonly`,
    /// `appendfsync`) could be read; when not, [`appendonly`](Self::appendonly)
    /// is only a guess.
    pub fn persistence_known(&self) -> bool {
        !self.unverified.iter().any(|u| u.starts_with(UNVERIFIED_APPENDONLY))
    }
}

/// True when the server's ACL refused the command.
fn denied(e: &redis::RedisError) -> bool {
    e.code() == Some("NOPERM")
}

fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// Reads the server's persistence, eviction and replication settings
/// through `conn` ([`Client::self_check`](crate::Client::self_check)).
pub(crate) async fn self_check(mut conn: Conn) -> Result<ServerReport> {
    let info = match redis::cmd("INFO")
        .arg("server")
        .arg("persistence")
        .arg("memory")
        .arg("replication")
        .query_async::<String>(&mut conn)
        .await
    {
        Ok(info) => Some(info),
        Err(e) if denied(&e) => None,
        // Redis < 7 takes one section per INFO call.
        Err(_) => match redis::cmd("INFO")
            .arg("everything")
            .query_async::<String>(&mut conn)
            .await
        {
            Ok(info) => Some(info),
            Err(e) if denied(&e) => None,
            Err(e) => return Err(Error::from_redis(e)),
        },
    };
    // One CONFIG GET for all four (Redis 7 takes several parameters).
    // Managed servers often rename CONFIG: any failure leaves these unknown.
    let config: std::result::Result<HashMap<String, String>, &str> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendfsync")
        .arg("appendonly")
        .arg("maxmemory-policy")
        .arg("hash-max-listpack-value")
        .query_async(&mut conn)
        .await
        .map_err(|e| {
            if denied(&e) {
                "CONFIG GET denied"
            } else {
                "CONFIG GET unavailable"
            }
        });
    let info_field = |name| info.as_deref().and_then(|i| info_field(i, name));
    let config_field = |name: &str| config.as_ref().ok().and_then(|c| c.get(name)).map(String::as_str);
    let mut unverified = Vec::new();
    let mut unknown = |what: &str, sources: &[Option<&str>]| {
        let why: Vec<&str> = sources.iter().flatten().copied().collect();
        unverified.push(format!("{what} ({})", why.join(", ")));
    };
    let info_why = info.is_none().then_some("INFO denied");
    let config_why = config.as_ref().err().copied();

    let (server, version) = match info_field("valkey_version") {
        Some(v) => ("valkey".to_owned(), v.to_owned()),
        None => match info_field("redis_version") {
            Some(v) => ("redis".to_owned(), v.to_owned()),
            // HELLO (no arguments: the protocol stays as it is) is
            // allowed to every user and names the server and version.
            None => match hello(&mut conn).await {
                Some(sv) => sv,
                None => {
                    unknown("server version", &[info_why, Some("HELLO denied")]);
                    ("unknown".to_owned(), "unknown".to_owned())
                }
            },
        },
    };
    let appendonly = match (info_field("aof_enabled"), config_field("appendonly")) {
        (Some(v), _) => v == "1",
        (None, Some(v)) => v == "yes",
        (None, None) => {
            unknown(UNVERIFIED_APPENDONLY, &[info_why, config_why]);
            false
        }
    };
    let appendfsync = config_field("appendfsync").map(str::to_owned).unwrap_or_else(|| {
        unknown("appendfsync", &[config_why]);
        "unknown".to_owned()
    });
    let maxmemory_policy = info_field("maxmemory_policy")
        .or_else(|| config_field("maxmemory-policy"))
        .map(str::to_owned)
        .unwrap_or_else(|| {
            unknown("eviction policy", &[info_why, config_why]);
            "unknown".to_owned()
        });
    let connected_replicas = match info_field("connected_slaves") {
        Some(v) => v.parse().unwrap_or(0),
        None => {
            unknown("replicas", &[info_why]);
            0
        }
    };
    let hash_max_listpack_value = config_field("hash-max-listpack-value").and_then(|v| v.parse().ok());
    Ok(ServerReport {
        server,
        version,
        appendonly,
        appendfsync,
        maxmemory_policy,
        connected_replicas,
        hash_max_listpack_value,
        unverified,
    })
}

/// The start-up check of [`Client::connect`](crate::Client::connect): logs what the server
/// promises (and what it could not verify), and refuses an evicting
/// server unless allowed. (A user who may not run scripts is refused
/// when a queue is opened: opening runs the first script.)
pub(crate) async fn startup_check(conn: Conn, allow_eviction: bool) -> Result<()> {
    let r = self_check(conn).await?;
    info!(
        server = %r.server, version = %r.version, appendonly = r.appendonly,
        appendfsync = %r.appendfsync, replicas = r.connected_replicas,
        "{}", r.durability()
    );
    if !r.unverified.is_empty() {
        warn!(
            unverified = %r.unverified.join("; "),
            "the self-check could not verify these server settings (the user's ACL denies \
             the commands that read them); check them by hand"
        );
    }
    if r.maxmemory_policy == "unknown" {
        warn!(
            "eviction policy unknown: make sure maxmemory-policy is noeviction, or the server \
                 may evict job records and lose jobs"
        );
    }
    if r.connected_replicas > 0 {
        warn!("replication is asynchronous: a failover can lose acknowledged jobs");
    }
    if let Some(v) = r
        .hash_max_listpack_value
        .filter(|v| *v < SUGGESTED_HASH_MAX_LISTPACK_VALUE)
    {
        info!(
            hash_max_listpack_value = v,
            "job records with payloads over 256 bytes (over {v} on a queue of layout 2) take about 1.6x \
                 the memory (a hash table); hash-max-listpack-value {SUGGESTED_HASH_MAX_LISTPACK_VALUE} keeps \
                 them compact up to that many bytes"
        );
    }
    let evicting = !matches!(r.maxmemory_policy.as_str(), "noeviction" | "unknown");
    if evicting && !allow_eviction {
        return Err(Error::UnsafeServer(format!(
            "maxmemory-policy is {}: the server may evict job records, losing jobs; \
                 set it to noeviction, or opt out with ClientOptions::allow_eviction(true)",
            r.maxmemory_policy
        )));
    }
    if evicting {
        warn!(policy = %r.maxmemory_policy, "eviction allowed by option: jobs can be lost");
    }
    Ok(())
}

/// The echomq function libraries in the server ([`Client::script_libraries`](crate::Client::script_libraries)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScriptLibraries {
    /// This build's library (`echomq_HASH`).
    pub current: String,
    /// Whether it is loaded (it loads at the first script call).
    pub loaded: bool,
    /// Libraries of other echomq builds (`echomq_*`), sorted: left by
    /// builds that ran before an upgrade, or still running beside this one.
    pub others: Vec<String>,
}

/// The echomq function libraries loaded in the server ([`Client::script_libraries`](crate::Client::script_libraries)).
pub(crate) async fn script_libraries(mut conn: Conn) -> Result<ScriptLibraries> {
    let v: Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg("echomq_*")
        .query_async(&mut conn)
        .await
        .map_err(Error::from_redis)?;
    let current = crate::store::LIBRARY.name();
    let mut names = library_names(&v);
    names.retain(|n| n.starts_with("echomq_"));
    names.sort();
    let loaded = names.contains(&current);
    names.retain(|n| *n != current);
    Ok(ScriptLibraries {
        current,
        loaded,
        others: names,
    })
}

/// The `library_name` of each library in a `FUNCTION LIST` reply (a list
/// of maps: flat arrays in RESP2, maps in RESP3).
fn library_names(v: &Value) -> Vec<String> {
    let Value::Array(libs) = v else { return Vec::new() };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    libs.iter()
        .filter_map(|lib| {
            let pairs: Vec<(&Value, &Value)> = match lib {
                Value::Array(kv) => kv.chunks(2).filter_map(|p| Some((p.first()?, p.get(1)?))).collect(),
                Value::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
                _ => return None,
            };
            pairs
                .into_iter()
                .find(|(k, _)| text(k).as_deref() == Some("library_name"))
                .and_then(|(_, v)| text(v))
        })
        .collect()
}

impl Queue {
    /// [`Client::self_check`](crate::Client::self_check) of this queue's client.
    ///
    /// # Errors
    /// As [`Client::self_check`](crate::Client::self_check).
    pub async fn self_check(&self) -> Result<ServerReport> {
        self_check(self.link().conn()).await
    }
}

/// The server's name and version from `HELLO`, or None where it is refused.
async fn hello(conn: &mut Conn) -> Option<(String, String)> {
    let v: HashMap<String, Value> = redis::cmd("HELLO").query_async(conn).await.ok()?;
    let field = |name: &str| match v.get(name) {
        Some(Value::BulkString(b)) => String::from_utf8(b.clone()).ok(),
        Some(Value::SimpleString(s)) => Some(s.clone()),
        _ => None,
    };
    Some((field("server")?, field("version")?))
}
