//! Operating the server: what its settings let echomq promise (the
//! start-up self-check) and whether the queue's data agrees with itself
//! (the consistency sweep). See DESIGN.md §8 and the README's guarantees.

use redis::Value;
use tracing::{info, warn};

use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::scripts::{Reply, SCRIPTS};

/// What the server's settings let echomq promise, from [`Queue::self_check`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerReport {
    /// `valkey` or `redis`.
    pub server: String,
    /// The server's version.
    pub version: String,
    /// Whether the append-only file is on.
    pub appendonly: bool,
    /// `always`, `everysec`, `no`, or `unknown` where `CONFIG` is not allowed.
    pub appendfsync: String,
    /// The eviction policy; anything but `noeviction` can evict job records.
    pub maxmemory_policy: String,
    /// Replicas connected to this primary (replication is asynchronous).
    pub connected_replicas: u64,
}

impl ServerReport {
    /// What an acknowledged enqueue survives on this server, in one sentence.
    pub fn durability(&self) -> &'static str {
        match (self.appendonly, self.appendfsync.as_str()) {
            (true, "always") => "acknowledged jobs survive a server crash, an OS crash and power loss",
            (true, "everysec") => {
                "acknowledged jobs survive a server crash; an OS crash or power loss can lose about the last second"
            }
            (true, _) => "acknowledged jobs survive a server crash in practice; an OS crash can lose recent writes",
            (false, _) => "no append-only file: a server restart can lose acknowledged jobs",
        }
    }
}

/// What a full consistency sweep found, from [`Queue::sweep`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepReport {
    /// Job hashes and set members looked at.
    pub checked: u64,
    /// Repairs made (a job put back into the set its state names, removed
    /// from another set, or a dangling member or hash removed).
    pub repaired: u64,
}

fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

impl Queue {
    /// Reads the server's persistence, eviction and replication settings.
    /// [`Queue::connect`] runs it and refuses an eviction policy other than
    /// `noeviction` unless [`QueueOptions::allow_eviction`] is set.
    ///
    /// [`QueueOptions::allow_eviction`]: crate::QueueOptions::allow_eviction
    ///
    /// # Errors
    /// Server errors.
    pub async fn self_check(&self) -> Result<ServerReport> {
        let mut conn = self.conn();
        let info: String = redis::cmd("INFO")
            .arg("server")
            .arg("persistence")
            .arg("memory")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .or_else(|_| Ok::<_, Error>(String::new()))?;
        let info = if info.is_empty() {
            // Redis < 7 takes one section per INFO call.
            redis::cmd("INFO")
                .arg("everything")
                .query_async::<String>(&mut conn)
                .await?
        } else {
            info
        };
        let appendfsync = match redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendfsync")
            .query_async::<Vec<String>>(&mut conn)
            .await
        {
            Ok(v) if v.len() == 2 => v[1].clone(),
            _ => "unknown".to_owned(),
        };
        let (server, version) = match info_field(&info, "valkey_version") {
            Some(v) => ("valkey", v),
            None => ("redis", info_field(&info, "redis_version").unwrap_or("unknown")),
        };
        Ok(ServerReport {
            server: server.to_owned(),
            version: version.to_owned(),
            appendonly: info_field(&info, "aof_enabled") == Some("1"),
            appendfsync,
            maxmemory_policy: info_field(&info, "maxmemory_policy").unwrap_or("unknown").to_owned(),
            connected_replicas: info_field(&info, "connected_slaves")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        })
    }

    /// The start-up check of [`Queue::connect`]: logs what the server
    /// promises and refuses an evicting server unless allowed.
    pub(crate) async fn startup_check(&self, allow_eviction: bool) -> Result<()> {
        let r = self.self_check().await?;
        info!(
            queue = self.name(),
            server = %r.server, version = %r.version, appendonly = r.appendonly,
            appendfsync = %r.appendfsync, replicas = r.connected_replicas,
            "{}", r.durability()
        );
        if r.connected_replicas > 0 {
            warn!(
                queue = self.name(),
                "replication is asynchronous: a failover can lose acknowledged jobs"
            );
        }
        let evicting = !matches!(r.maxmemory_policy.as_str(), "noeviction" | "unknown");
        if evicting && !allow_eviction {
            return Err(Error::UnsafeServer(format!(
                "maxmemory-policy is {}: the server may evict job records, losing jobs; \
                 set it to noeviction, or opt out with QueueOptions::allow_eviction(true)",
                r.maxmemory_policy
            )));
        }
        if evicting {
            warn!(queue = self.name(), policy = %r.maxmemory_policy, "eviction allowed by option: jobs can be lost");
        }
        Ok(())
    }

    /// Runs a full consistency sweep in bounded steps of about `batch` keys
    /// each: every job hash is checked against the set its state names (and
    /// put back where a torn write left it out), and every set member
    /// against its hash. Safe to run beside live traffic; each step is one
    /// script. The [`Reaper`](crate::Reaper) runs it periodically.
    ///
    /// # Errors
    /// Server errors (the sweep can simply be run again).
    pub async fn sweep(&self, batch: usize) -> Result<SweepReport> {
        let k = self.keys();
        let mut report = SweepReport::default();
        for phase in ["jobs", "1", "2", "3", "4", "5"] {
            let mut cursor = "0".to_owned();
            loop {
                let v: Value = SCRIPTS
                    .sweep
                    .key(&k.pending)
                    .key(&k.active)
                    .key(&k.delayed)
                    .key(&k.completed)
                    .key(&k.failed)
                    .arg(&k.base)
                    .arg(phase)
                    .arg(&cursor)
                    .arg(batch.max(1))
                    .invoke_async(&mut self.conn())
                    .await?;
                let mut r = Reply::new("sweep", v)?;
                cursor = r.string()?;
                report.checked += r.uint()?;
                report.repaired += r.uint()?;
                if cursor == "0" {
                    break;
                }
            }
        }
        if report.repaired > 0 {
            warn!(
                queue = self.name(),
                repaired = report.repaired,
                "consistency sweep repaired the queue"
            );
        }
        Ok(report)
    }
}
