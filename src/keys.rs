//! Key naming: the only place that builds a key.
//!
//! Every key of queue `Q` carries the hash tag `{Q}`, so a queue lives in
//! one hash slot and every script is single-slot, on one node or a cluster.

use crate::error::{Error, Result};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "emq";

/// The last part of a queue's resharding guard, `PREFIX:{Q}:reshard-guard`:
/// a key never written, declared by every script call on a cluster so that
/// none runs while the queue's slot is moved key by key (see
/// `src/store/call.rs`, `reshard_guard`). `lua/lib/call.lua` `new_call`
/// knows its length.
pub(crate) const RESHARD_GUARD: &str = "reshard-guard";

pub use crate::validate::{MAX_ID_BYTES, MAX_QUEUE_NAME_BYTES};

/// The keys of one queue.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// `PREFIX:{Q}:`; scripts build job and dedup keys from it.
    pub base: String,
    pub pending: String,
    pub active: String,
    pub delayed: String,
    pub completed: String,
    pub failed: String,
    pub cancelled: String,
    /// Jobs that ended past their expiry (kept as failed jobs are).
    pub expired: String,
    /// The jobs with an expiry, scored by it (`lua/lib/expiry.lua`).
    pub expiring: String,
    pub seq: String,
    /// The fencing-token counter (tokens never repeat for a queue).
    pub token: String,
    pub meta: String,
    /// Wake tokens for consumers blocked in BLPOP (see `src/worker/claim.rs`).
    pub wake: String,
    /// The cron schedules (`src/schedule/`): each schedule's name, scored
    /// by when schedulers next look at it (server ms).
    #[cfg_attr(not(feature = "cron"), allow(dead_code))]
    pub schedules: String,
    /// Lanes: the ring of lanes with pending or active jobs (see
    /// `lua/lib/lanes.lua`; a lane's pending jobs are in [`Keys::lane`]).
    pub lane_ring: String,
    /// Lanes: one `LANE\0ID` member per active laned job (its slot).
    pub lane_held: String,
    /// Lanes: caps per lane; field `""` the queue-wide default.
    pub lane_caps: String,
    /// Lanes: weights per lane; field `""` the queue-wide default.
    pub lane_weights: String,
    /// Lanes: the turn counter, and the lane whose turn runs.
    pub lane_turn: String,
    /// Limits: the global cap (`max`), the rate limit (`rate`) and a
    /// handler's hold (`hold`) of the queue (see `lua/lib/throttle.lua`).
    pub limits: String,
    /// Limits: the queue's recent claims (for its rate limit).
    pub limits_log: String,
    /// Lanes: rate limits per lane; field `""` the queue-wide default.
    pub lane_rates: String,
    /// Lanes: when each stopped lane may give jobs again (server ms).
    pub lane_wait: String,
    /// Lifecycle events: the capped stream every transition appends to
    /// (`lua/lib/events.lua`; read by [`EventReader`](crate::EventReader)).
    pub events: String,
    /// Flows: messages this queue's scripts wrote for other queues, which
    /// the relay carries there (`lua/lib/flow.lua`, `src/relay.rs`).
    pub outbox: String,
    /// Flows: receipts of the node messages this queue applied, so each
    /// is applied once.
    pub inbox: String,
}

impl Keys {
    pub fn new(prefix: &str, queue: &str) -> Result<Self> {
        validate_queue_name(queue)?;
        crate::validate::id("key prefix", prefix)?;
        if prefix.contains(['{', '}']) {
            return Err(Error::InvalidId {
                what: "key prefix",
                value: crate::error::excerpt(prefix),
                reason: "must not contain '{' or '}'",
            });
        }
        let base = format!("{prefix}:{{{queue}}}:");
        let k = |s: &str| format!("{base}{s}");
        Ok(Keys {
            pending: k("pending"),
            active: k("active"),
            delayed: k("delayed"),
            completed: k("completed"),
            failed: k("failed"),
            cancelled: k("cancelled"),
            expired: k("expired"),
            expiring: k("expiring"),
            seq: k("seq"),
            token: k("token"),
            meta: k("meta"),
            wake: k("wake"),
            schedules: k("schedules"),
            lane_ring: k("lanes:ring"),
            lane_held: k("lanes:active"),
            lane_caps: k("lanes:cap"),
            lane_weights: k("lanes:weight"),
            lane_turn: k("lanes:turn"),
            limits: k("limits"),
            limits_log: k("limits:log"),
            lane_rates: k("lanes:rate"),
            lane_wait: k("lanes:wait"),
            events: k("events"),
            outbox: k("outbox"),
            inbox: k("inbox"),
            base,
        })
    }

    /// Every fixed key of the queue (not the job records, markers or user
    /// keys): what obliterate deletes last, and what the hash-tag test checks.
    pub fn own(&self) -> [&String; 25] {
        [
            &self.pending,
            &self.active,
            &self.delayed,
            &self.completed,
            &self.failed,
            &self.cancelled,
            &self.expired,
            &self.expiring,
            &self.seq,
            &self.token,
            &self.meta,
            &self.wake,
            &self.schedules,
            &self.lane_ring,
            &self.lane_held,
            &self.lane_caps,
            &self.lane_weights,
            &self.lane_turn,
            &self.limits,
            &self.limits_log,
            &self.lane_rates,
            &self.lane_wait,
            &self.events,
            &self.outbox,
            &self.inbox,
        ]
    }

    pub fn job(&self, id: &str) -> String {
        format!("{}job:{id}", self.base)
    }

    /// The hash of batch `id` (`src/batch.rs`, `lua/lib/batch.lua`).
    pub fn batch(&self, id: &str) -> String {
        format!("{}batch:{id}", self.base)
    }

    /// The hash of flow `id` (`src/flow/`, `lua/lib/flow.lua`).
    pub fn flow(&self, id: &str) -> String {
        format!("{}flow:{id}", self.base)
    }

    /// The hash of cron schedule `name` (`src/schedule/`).
    #[cfg_attr(not(feature = "cron"), allow(dead_code))]
    pub fn schedule(&self, name: &str) -> String {
        format!("{}schedule:{name}", self.base)
    }

    /// The history counts of minute `minute` (minutes since the Unix
    /// epoch; `src/admin/history.rs`). It expires by itself.
    pub fn stats_minute(&self, minute: u64) -> String {
        format!("{}stats:m:{minute}", self.base)
    }

    /// The history counts of hour `hour` (hours since the Unix epoch). It
    /// expires by itself.
    pub fn stats_hour(&self, hour: u64) -> String {
        format!("{}stats:h:{hour}", self.base)
    }

    /// The pending jobs of lane `lane` (a zset scored as `pending`).
    pub fn lane(&self, lane: &str) -> String {
        format!("{}lane:{lane}", self.base)
    }

    /// The recent claims of lane `lane` (for its rate limit; the scripts
    /// build it from the prefix, and it expires by itself).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn lane_log(&self, lane: &str) -> String {
        format!("{}lanes:log:{lane}", self.base)
    }
}

/// `text` with the characters a `SCAN MATCH` pattern treats specially
/// escaped, so it matches itself only (a queue name or prefix may hold
/// them).
pub(crate) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A worker's own wake list, `PREFIX:worker:ID` (no hash tag on one
/// server: it belongs to no queue; the wake-up names it beside the queues'
/// wake lists, so a push to it ends the blocking call early, when the set
/// of lists to listen to has changed). On a cluster a blocking call names
/// keys of one slot only, so each group of the wake-up has its own,
/// `PREFIX:worker:ID:{Q}`, in the slot of its queue `Q`. Pushes to it
/// expire, so a worker that dies leaves nothing behind for long.
pub(crate) fn worker_wake(prefix: &str, id: &str, slot_of: Option<&str>) -> String {
    match slot_of {
        Some(queue) => format!("{prefix}:worker:{id}:{{{queue}}}"),
        None => format!("{prefix}:worker:{id}"),
    }
}

pub use crate::validate::queue_name as validate_queue_name;

#[cfg(test)]
mod tests {
    use super::*;

    // Every key carries the queue's hash tag, so the queue stays in one slot.
    #[test]
    fn keys_carry_the_hash_tag() {
        let k = Keys::new("emq", "mail").unwrap();
        for key in k.own() {
            assert!(key.starts_with("emq:{mail}:"), "{key}");
        }
        assert_eq!(k.job("42"), "emq:{mail}:job:42");
        assert_eq!(k.schedule("nightly"), "emq:{mail}:schedule:nightly");
        assert_eq!(k.lane("acme"), "emq:{mail}:lane:acme");
        assert_eq!(k.lane_log("acme"), "emq:{mail}:lanes:log:acme");
    }

    // Names that would break the hash tag or the key space are refused.
    #[test]
    fn bad_names_are_refused() {
        for bad in ["", "a{b", "a}b", "tab\there", &"x".repeat(201)] {
            assert!(
                matches!(validate_queue_name(bad), Err(Error::InvalidQueueName { .. })),
                "{bad:?}"
            );
        }
        assert!(validate_queue_name("emails:high-priority").is_ok());
        assert!(Keys::new("a{b", "q").is_err());
        assert!(crate::validate::id("job id", "").is_err());
        assert!(crate::validate::id("job id", "order-17").is_ok());
        let long = "x".repeat(600_000);
        let e = crate::validate::id("job id", &long).unwrap_err().to_string();
        assert!(
            e.len() < 300,
            "the message repeats at most an excerpt: {} bytes",
            e.len()
        );
    }
}
