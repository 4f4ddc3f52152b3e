//! What a run left behind: the server's counts and final state of the
//! queue, the keys' snapshot, and the checker's verdict.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::Run;
use crate::state::{self, ServerState};

/// The checker's verdict.
#[derive(Debug, Clone)]
pub struct Checked {
    /// Exit code 0.
    pub ok: bool,
    /// The report (its last output line).
    pub report: Value,
    /// Everything it printed.
    pub text: String,
}

impl Checked {
    /// A number from the report (0 when absent).
    pub fn n(&self, field: &str) -> u64 {
        self.report[field].as_u64().unwrap_or(0)
    }
    /// Whether some violation mentions `needle` (e.g. "I9").
    pub fn violates(&self, needle: &str) -> bool {
        self.report["violations"]
            .as_array()
            .is_some_and(|vs| vs.iter().any(|v| v.as_str().is_some_and(|s| s.contains(needle))))
    }
}

impl Run {
    /// A blocking connection to the run's server (on a cluster, to the
    /// master that serves the queue's slot now).
    pub fn conn(&self) -> redis::RedisResult<redis::Connection> {
        self.conn_of(&self.queue)
    }

    /// [`conn`](Self::conn) for `queue` (on a cluster, the master of its slot).
    pub fn conn_of(&self, queue: &str) -> redis::RedisResult<redis::Connection> {
        let url = if state::seeds(&self.url).len() > 1 {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(state::queue_url(&self.url, queue))?
        } else {
            self.url.clone()
        };
        let c = redis::Client::open(url.as_str())?.get_connection_with_timeout(Duration::from_secs(2))?;
        c.set_read_timeout(Some(Duration::from_secs(5)))?;
        c.set_write_timeout(Some(Duration::from_secs(5)))?;
        Ok(c)
    }

    /// Jobs per state set: pending, active, delayed, completed, failed,
    /// cancelled (over both queues of a [spread](Run::spread) run).
    pub fn counts(&self) -> Option<[u64; 6]> {
        let mut out = [0; 6];
        for queue in self.queues() {
            let mut c = self.conn_of(&queue).ok()?;
            for (i, s) in state::SETS.iter().enumerate() {
                let n: u64 = redis::cmd("ZCARD")
                    .arg(format!("emq:{{{queue}}}:{s}"))
                    .query(&mut c)
                    .ok()?;
                out[i] += n;
            }
        }
        Some(out)
    }

    /// Messages waiting on the outboxes of the run's queues.
    fn outboxes(&self) -> Option<u64> {
        let mut n = 0;
        for queue in self.queues() {
            let mut c = self.conn_of(&queue).ok()?;
            let len: u64 = redis::cmd("LLEN")
                .arg(format!("emq:{{{queue}}}:outbox"))
                .query(&mut c)
                .ok()?;
            n += len;
        }
        Some(n)
    }

    /// True once the producers have exited, no job is pending, active or
    /// delayed, and no message waits on an outbox (a step's or member's
    /// end on its way home may still make a parent or a callback).
    pub fn drained(&mut self) -> bool {
        if !self.live("producer").is_empty() {
            return false;
        }
        matches!(self.counts(), Some([0, 0, 0, done, failed, cancelled]) if done + failed + cancelled > 0)
            && self.outboxes() == Some(0)
    }

    /// The server's final state of the run's queue (of both, merged, for a
    /// [spread](Run::spread) run).
    pub fn state(&self) -> ServerState {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(state::read_all(&self.url, &self.queues()))
            .expect("read the server state")
    }

    /// Runs the checker on this run (extra arguments e.g. `--not-drained`).
    pub fn check(&self, extra: &[&str]) -> Checked {
        let out = Command::new(&self.bins.check)
            .arg(format!("--dir={}", self.dir.display()))
            .arg(format!("--url={}", self.url))
            .arg(format!("--queue={}", self.queue))
            .args(self.far.iter().map(|f| format!("--far-queue={f}")))
            .args(extra)
            .output()
            .expect("run fault-check");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let report = text
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or(Value::Null);
        assert!(
            !report.is_null(),
            "fault-check printed no report: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Checked {
            ok: out.status.success(),
            report,
            text,
        }
    }

    /// Every key of the queue (and its effect hashes) with its contents,
    /// for "nothing changed" checks.
    pub fn snapshot(&self) -> Vec<(String, String)> {
        let mut c = self.conn().expect("connect for a snapshot");
        let mut keys: Vec<String> = Vec::new();
        for pattern in [
            format!("emq:{{{}}}:*", self.queue),
            format!("fault:{{{}}}:*", self.queue),
        ] {
            let mut k: Vec<String> = redis::cmd("KEYS").arg(pattern).query(&mut c).expect("KEYS");
            keys.append(&mut k);
        }
        keys.sort();
        keys.retain(|k| !k.ends_with(":wake"));
        let mut out = Vec::new();
        for k in keys {
            let t: String = redis::cmd("TYPE").arg(&k).query(&mut c).expect("TYPE");
            let v: redis::Value = match t.as_str() {
                "hash" => redis::cmd("HGETALL").arg(&k).query(&mut c),
                "zset" => redis::cmd("ZRANGE")
                    .arg(&k)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(&mut c),
                "list" => redis::cmd("LRANGE").arg(&k).arg(0).arg(-1).query(&mut c),
                // The lifecycle events: a stale call must not add one either.
                "stream" => redis::cmd("XRANGE").arg(&k).arg("-").arg("+").query(&mut c),
                _ => redis::cmd("GET").arg(&k).query(&mut c),
            }
            .expect("read a key");
            out.push((k, format!("{v:?}")));
        }
        out
    }
}
