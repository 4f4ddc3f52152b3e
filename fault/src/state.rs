//! The server's final state of one queue (or of two, merged:
//! [`read_all`]), as the checker reads it: every job hash, the five state
//! sets, the effect counters and dedup markers.

use std::collections::BTreeMap;

use redis::AsyncCommands;

/// The state sets of a queue, in the order the checker reports them.
pub const SETS: [&str; 6] = ["pending", "active", "delayed", "completed", "failed", "cancelled"];

/// One job hash, decoded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobRecord {
    /// `st`: pending, delayed, active, completed or failed.
    pub state: String,
    /// `a`: claims so far (the last delivery number).
    pub attempts: u64,
    /// `tk`: the fencing token of the last claim (0 before the first).
    /// Minted from the queue-wide counter, so not related to `attempts`.
    pub token: u64,
    /// `s`: expired leases.
    pub stalls: u64,
    /// `f`: handler failures.
    pub failures: u64,
    /// `ct`: created, server ms.
    pub created_ms: u64,
    /// `ft`: finished, server ms.
    pub finished_ms: Option<u64>,
    /// `fs`: first started (its first claim), server ms.
    pub first_started_ms: Option<u64>,
    /// The last settlement, "OP:TOKEN" (the newest entry of `lo`).
    pub last_op: Option<String>,
    /// `lo`: the job's last settlements (at most 8), newest first.
    pub settlements: Vec<String>,
    /// `dd`: the dedup id it was created with (markers without a TTL).
    pub dedup: Option<String>,
    /// `err`: the last error.
    pub error: Option<String>,
}

/// A queue's state at the end of a run.
#[derive(Debug, Clone, Default)]
pub struct ServerState {
    /// Job id → record.
    pub jobs: BTreeMap<String, JobRecord>,
    /// Set name (see [`SETS`]) → member → score.
    pub sets: BTreeMap<String, BTreeMap<String, f64>>,
    /// Job id → unguarded effect counter.
    pub effects: BTreeMap<String, i64>,
    /// Job id → guarded effect counter.
    pub guarded: BTreeMap<String, i64>,
    /// Dedup markers still standing: dedup id → job id.
    pub dedup_markers: BTreeMap<String, String>,
    /// Lanes: the slots still held (`lanes:active` members, `LANE\0ID`).
    pub lane_slots: Vec<String>,
    /// Lanes: the ring (lane → score).
    pub lane_ring: BTreeMap<String, f64>,
    /// Lanes: pending jobs per lane set (`lane:L`) that exists.
    pub lane_pending: BTreeMap<String, u64>,
    /// Flow records (`flow:FID`): flow id → the hash's fields.
    pub flows: BTreeMap<String, BTreeMap<String, String>>,
    /// Batch records (`batch:BID`): batch id → the hash's fields.
    pub batches: BTreeMap<String, BTreeMap<String, String>>,
    /// Messages left on the queue's outbox for other queues.
    pub outbox: u64,
    /// Job id → its `enqueued` events in the queue's event stream, read
    /// through the library's reader; `None` when the stream could not be
    /// read.
    pub enqueued: Option<BTreeMap<String, u64>>,
}

/// The payload producers give job number `n`: 100 bytes or so of JSON, so
/// that a queue of layout 3 keeps it in parts (lua/lib/payload.lua), and
/// workers check that it reads back whole ([`payload_is_whole`]).
pub fn payload_for(n: u64) -> serde_json::Value {
    serde_json::json!({ "n": n, "pad": pad(n) })
}

/// Whether a job's payload is what [`payload_for`] made for its `n`.
pub fn payload_is_whole(p: &serde_json::Value) -> bool {
    match p.get("n").and_then(serde_json::Value::as_u64) {
        Some(n) => p.get("pad").and_then(serde_json::Value::as_str) == Some(pad(n).as_str()),
        None => false,
    }
}

/// 80 characters that differ from one job number to the next along their
/// whole length, so a part joined out of place shows.
fn pad(n: u64) -> String {
    (0..8)
        .map(|i| format!("{:010}", n.wrapping_mul(2_654_435_761).wrapping_add(i)))
        .collect()
}

/// The hash the workers' unguarded effect increments (field = job id).
pub fn effect_key(queue: &str) -> String {
    format!("fault:{{{queue}}}:fxu")
}

/// The hash the workers' guarded effect increments (field = job id).
pub fn guarded_key(queue: &str) -> String {
    format!("fault:{{{queue}}}:fxg")
}

fn num(v: Option<&String>) -> u64 {
    v.and_then(|s| s.parse().ok()).unwrap_or(0)
}

impl JobRecord {
    /// Decodes a job hash's fields.
    pub fn from_fields(f: &BTreeMap<String, String>) -> JobRecord {
        JobRecord {
            state: f.get("st").cloned().unwrap_or_default(),
            attempts: num(f.get("a")),
            token: num(f.get("tk")),
            stalls: num(f.get("s")),
            failures: num(f.get("f")),
            created_ms: num(f.get("ct")),
            finished_ms: f.get("ft").and_then(|s| s.parse().ok()),
            first_started_ms: f.get("fs").and_then(|s| s.parse().ok()),
            last_op: f
                .get("lo")
                .and_then(|lo| lo.split_whitespace().next())
                .map(str::to_owned),
            settlements: f
                .get("lo")
                .map(|lo| lo.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default(),
            dedup: f.get("dd").cloned(),
            error: f.get("err").cloned(),
        }
    }
}

/// The seeds of `url`: a comma-separated list of node URLs names a
/// cluster (its seeds), one URL a single server.
pub fn seeds(url: &str) -> Vec<&str> {
    url.split(',').map(str::trim).filter(|u| !u.is_empty()).collect()
}

/// The URL of the server holding `queue`'s keys: `url` itself for a
/// single server; for a cluster (several seeds, or one seed that says
/// `cluster_enabled:1`), the master that serves the slot of `{queue}`
/// (every key of the queue, and the fault suite's effect hashes, carry
/// that hash tag), as the first seed that is itself a master sees it.
pub async fn queue_url(url: &str, queue: &str) -> redis::RedisResult<String> {
    let seeds = seeds(url);
    let slot = i64::from(echomq::server::LocalCluster::slot_of(&format!("{{{queue}}}")));
    let mut last = None;
    for seed in &seeds {
        match owner_of(seed, slot).await {
            Ok(Some(owner)) => return Ok(owner),
            Ok(None) if seeds.len() == 1 => return Ok((*seed).to_owned()),
            Ok(None) => {}
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        redis::RedisError::from((
            redis::ErrorKind::Io,
            "no seed knows the master of the slot",
            url.to_owned(),
        ))
    }))
}

/// Asks `seed` which master serves `slot`: `None` when it is no cluster
/// node; an error when it is down, not a master, or knows no owner.
async fn owner_of(seed: &str, slot: i64) -> redis::RedisResult<Option<String>> {
    let client = redis::Client::open(seed)?;
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(std::time::Duration::from_secs(2)))
        .set_connection_timeout(Some(std::time::Duration::from_secs(1)));
    let mut c = client.get_multiplexed_async_connection_with_config(&config).await?;
    let info: String = redis::cmd("INFO").arg("cluster").query_async(&mut c).await?;
    if !info.contains("cluster_enabled:1") {
        return Ok(None);
    }
    let role: String = redis::cmd("INFO").arg("replication").query_async(&mut c).await?;
    if !role.contains("role:master") {
        return Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "seed is a replica",
            seed.to_owned(),
        )));
    }
    let ranges: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut c).await?;
    for range in ranges {
        let redis::Value::Array(r) = range else { continue };
        let (Some(redis::Value::Int(lo)), Some(redis::Value::Int(hi)), Some(redis::Value::Array(m))) =
            (r.first(), r.get(1), r.get(2))
        else {
            continue;
        };
        if (*lo..=*hi).contains(&slot) {
            let host = match m.first() {
                Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                Some(redis::Value::SimpleString(s)) => s.clone(),
                _ => "127.0.0.1".to_owned(),
            };
            let host = if host.is_empty() { "127.0.0.1".to_owned() } else { host };
            if let Some(redis::Value::Int(port)) = m.get(1) {
                return Ok(Some(format!("redis://{host}:{port}/")));
            }
        }
    }
    Err(redis::RedisError::from((
        redis::ErrorKind::Io,
        "no master serves the slot",
        seed.to_owned(),
    )))
}

/// Reads the state of `queue` (default key prefix `emq`) from `url`: the
/// server, or for a cluster (see [`queue_url`]) the master of the queue's slot.
pub async fn read(url: &str, queue: &str) -> redis::RedisResult<ServerState> {
    let url = queue_url(url, queue).await?;
    let client = redis::Client::open(url.as_str())?;
    // The client's default 500 ms is too short for one reply holding a
    // whole run (the effect hashes and the completed set of 100,000 jobs
    // in a debug build).
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(std::time::Duration::from_secs(60)));
    let mut c = client.get_multiplexed_async_connection_with_config(&config).await?;
    let base = format!("emq:{{{queue}}}:");
    let mut st = ServerState::default();

    let mut job_keys = Vec::new();
    let mut dedup_keys = Vec::new();
    let mut lane_keys = Vec::new();
    let mut group_keys = Vec::new();
    {
        let mut it: redis::AsyncIter<String> = c.scan_match(format!("{base}*")).await?;
        while let Some(k) = it.next_item().await {
            let k = k?;
            if let Some(id) = k.strip_prefix(&format!("{base}job:")) {
                job_keys.push((id.to_owned(), k.clone()));
            } else if let Some(d) = k.strip_prefix(&format!("{base}de:")) {
                dedup_keys.push((d.to_owned(), k.clone()));
            } else if let Some(l) = k.strip_prefix(&format!("{base}lane:")) {
                lane_keys.push((l.to_owned(), k.clone()));
            } else if let Some(f) = k.strip_prefix(&format!("{base}flow:")) {
                group_keys.push((true, f.to_owned(), k.clone()));
            } else if let Some(b) = k.strip_prefix(&format!("{base}batch:")) {
                group_keys.push((false, b.to_owned(), k.clone()));
            }
        }
    }
    for chunk in job_keys.chunks(500) {
        let mut p = redis::pipe();
        for (_, k) in chunk {
            p.hgetall(k);
        }
        let hashes: Vec<BTreeMap<String, String>> = p.query_async(&mut c).await?;
        for ((id, _), h) in chunk.iter().zip(hashes) {
            st.jobs.insert(id.clone(), JobRecord::from_fields(&h));
        }
    }
    for set in SETS {
        let members: Vec<(String, f64)> = c.zrange_withscores(format!("{base}{set}"), 0, -1).await?;
        st.sets.insert(set.to_owned(), members.into_iter().collect());
    }
    let fx: BTreeMap<String, i64> = c.hgetall(effect_key(queue)).await?;
    st.effects = fx;
    let g: BTreeMap<String, i64> = c.hgetall(guarded_key(queue)).await?;
    st.guarded = g;
    st.lane_slots = c.zrange(format!("{base}lanes:active"), 0, -1).await?;
    let ring: Vec<(String, f64)> = c.zrange_withscores(format!("{base}lanes:ring"), 0, -1).await?;
    st.lane_ring = ring.into_iter().collect();
    for (l, k) in lane_keys {
        let n: u64 = c.zcard(&k).await?;
        st.lane_pending.insert(l, n);
    }
    for (d, k) in dedup_keys {
        let v: Option<String> = c.get(&k).await?;
        if let Some(v) = v {
            st.dedup_markers.insert(d, v);
        }
    }
    for (is_flow, id, k) in group_keys {
        let h: BTreeMap<String, String> = c.hgetall(&k).await?;
        if is_flow { &mut st.flows } else { &mut st.batches }.insert(id, h);
    }
    st.outbox = c.llen(format!("{base}outbox")).await?;
    st.enqueued = enqueued(&url, queue).await.ok();
    Ok(st)
}

/// Reads the state of every queue of `queues` (see [`read`]) and merges
/// them into one: a run whose flows and batches span two queues has its
/// job ids unique across both, so the checker reads the union as one
/// queue's (each set the union of the queues' sets, the outboxes summed).
pub async fn read_all(url: &str, queues: &[String]) -> redis::RedisResult<ServerState> {
    let mut st = ServerState::default();
    for (i, queue) in queues.iter().enumerate() {
        let one = read(url, queue).await?;
        if i == 0 {
            st = one;
        } else {
            st.merge(one);
        }
    }
    Ok(st)
}

impl ServerState {
    /// Adds another queue's state to this one (see [`read_all`]).
    pub fn merge(&mut self, o: ServerState) {
        self.jobs.extend(o.jobs);
        for (set, members) in o.sets {
            self.sets.entry(set).or_default().extend(members);
        }
        self.effects.extend(o.effects);
        self.guarded.extend(o.guarded);
        self.dedup_markers.extend(o.dedup_markers);
        self.lane_slots.extend(o.lane_slots);
        self.lane_ring.extend(o.lane_ring);
        self.lane_pending.extend(o.lane_pending);
        self.flows.extend(o.flows);
        self.batches.extend(o.batches);
        self.outbox += o.outbox;
        self.enqueued = match (self.enqueued.take(), o.enqueued) {
            (Some(mut a), Some(b)) => {
                for (id, n) in b {
                    *a.entry(id).or_default() += n;
                }
                Some(a)
            }
            _ => None,
        };
    }
}

/// Counts each job's `enqueued` events in `queue`'s event stream on `url`
/// (the library's reader expands the entries that hold many jobs).
async fn enqueued(url: &str, queue: &str) -> echomq::Result<BTreeMap<String, u64>> {
    let client = echomq::Client::connect(url).await?;
    let q = client.queue(queue).await?;
    let mut reader = q.events(echomq::EventCursor::Start).await?;
    let mut out = BTreeMap::new();
    while let Some(ev) = reader.next_within(std::time::Duration::from_millis(200)).await? {
        if let (echomq::EventKind::Enqueued, Some(id)) = (ev.kind, ev.job_id) {
            *out.entry(id).or_default() += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod payload_tests {
    use super::*;

    // A payload reads as whole only as made: parts joined out of place,
    // cut, or another job's, do not.
    #[test]
    fn a_payload_out_of_place_shows() {
        for n in [0, 1, 17, 123_456, u64::MAX] {
            let p = payload_for(n);
            assert!(payload_is_whole(&p));
            let text = serde_json::to_string(&p).unwrap();
            assert!(text.len() > 64, "{} bytes: split on a layout-3 queue", text.len());
            let (a, b) = text.split_at(64);
            if let Ok(swapped) = serde_json::from_str::<serde_json::Value>(&format!("{b}{a}")) {
                assert!(!payload_is_whole(&swapped));
            }
            let mut other = p.clone();
            other["n"] = serde_json::json!(n.wrapping_add(1));
            assert!(!payload_is_whole(&other));
            let mut cut = p.clone();
            cut["pad"] = serde_json::json!(&pad(n)[..60]);
            assert!(!payload_is_whole(&cut));
        }
    }
}
