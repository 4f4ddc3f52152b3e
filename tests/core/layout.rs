//! The record layout: a new queue (layout 3) splits a payload of 65 to 256
//! bytes into parts of at most 64 bytes, so the record stays a listpack
//! under the server's defaults; a queue 0.2 made (layout 2) keeps payloads
//! whole until `upgrade_layout`, and both kinds of record read alike.

use std::time::Duration;

use echomq::queue::{LAYOUT_VERSION, LAYOUT_VERSION_SERVED};
use echomq::{EnqueueOptions, JobState, Queue, Settle};

use super::common::{self, raw, unique};

const LEASE: Duration = Duration::from_secs(30);

/// A JSON string payload of exactly `len` bytes once encoded.
fn text_of(len: usize, fill: char) -> String {
    fill.to_string().repeat(len - 2)
}

/// The record's field names and its encoding.
async fn record(c: &mut redis::aio::MultiplexedConnection, q: &Queue, id: &str) -> (Vec<String>, String) {
    let key = format!("emq:{{{}}}:job:{id}", q.name());
    let fields: Vec<String> = redis::cmd("HKEYS").arg(&key).query_async(c).await.unwrap();
    let enc: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(&key)
        .query_async(c)
        .await
        .unwrap();
    (fields, enc)
}

/// Claims every pending job and completes it; the payloads by job id.
async fn drain(q: &Queue) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    loop {
        let leases = q.claim(64, LEASE).await.unwrap();
        if leases.is_empty() {
            return seen;
        }
        for l in &leases {
            seen.push((
                l.id().to_owned(),
                serde_json::from_slice::<String>(l.payload()).unwrap(),
            ));
        }
        let items: Vec<_> = leases.iter().map(|l| (l, &Settle::Complete)).collect();
        for r in q.settle_many(&items).await.unwrap() {
            r.unwrap();
        }
    }
}

// Every length round-trips, through inspection and through a claim; the
// parts are at most 64 bytes, and a 100-byte payload's record is a listpack.
#[tokio::test]
async fn payloads_split_and_join() {
    let (s, q) = common::setup("split").await;
    assert_eq!(q.layout().await.unwrap(), LAYOUT_VERSION);
    let mut c = raw(&s).await;
    let lens = [2, 10, 64, 65, 100, 128, 129, 192, 193, 200, 256, 257, 1000];
    let mut want = Vec::new();
    for (i, len) in lens.iter().enumerate() {
        let p = text_of(*len, char::from(b'a' + i as u8));
        let id = q.enqueue(&p).await.unwrap();
        let info = q.job(&id).await.unwrap();
        assert_eq!(info.payload, serde_json::to_vec(&p).unwrap(), "{len} bytes");
        let (fields, enc) = record(&mut c, &q, &id).await;
        let parts = fields.iter().filter(|f| f.starts_with('p')).count();
        let expect = if *len <= 64 || *len > 256 { 1 } else { len.div_ceil(64) };
        assert_eq!(parts, expect, "{len} bytes: {fields:?}");
        if *len <= 256 {
            assert_eq!(enc, "listpack", "{len} bytes");
        }
        want.push((id, p));
    }
    // Bulk and batched enqueues split alike.
    let bulk: Vec<String> = (0..5).map(|i| text_of(100 + i, 'z')).collect();
    for (id, p) in q.enqueue_bulk(&bulk).await.unwrap().into_iter().zip(bulk) {
        want.push((id, p));
    }
    let mut got = drain(&q).await;
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

// A debounce that replaces a waiting job's payload leaves no part of the
// old one behind, whichever is longer.
#[tokio::test]
async fn a_replaced_payload_leaves_no_old_part() {
    let (s, q) = common::setup("split-replace").await;
    let mut c = raw(&s).await;
    let opts = EnqueueOptions::new().dedup("d").replace_waiting(true);
    let id = q.enqueue_with(&text_of(250, 'a'), &opts).await.unwrap().id;
    for len in [70, 10, 200, 300, 130] {
        let p = text_of(len, 'b');
        let r = q.enqueue_with(&p, &opts).await.unwrap();
        assert_eq!(r.id, id);
        assert_eq!(
            q.job(&id).await.unwrap().payload,
            serde_json::to_vec(&p).unwrap(),
            "{len} bytes"
        );
        let (fields, _) = record(&mut c, &q, &id).await;
        let parts = fields.iter().filter(|f| f.starts_with('p')).count();
        let expect = if len <= 64 || len > 256 { 1 } else { len.div_ceil(64) };
        assert_eq!(parts, expect, "{len} bytes: {fields:?}");
    }
    let got = drain(&q).await;
    assert_eq!(got, [(id, text_of(130, 'b'))]);
}

// A queue echomq 0.2 made (layout 2) is served as 0.2 writes it, payloads
// whole, so 0.2 processes beside ours read every job; upgrade_layout moves
// it to 3 (once), after which new jobs split and old ones read as before.
#[tokio::test]
async fn a_layout_2_queue_keeps_payloads_whole_until_upgraded() {
    let s = echomq::server::LocalServer::start().unwrap();
    let mut c = raw(&s).await;
    let name = unique("v2");
    let _: () = redis::cmd("HSET")
        .arg(format!("emq:{{{name}}}:meta"))
        .arg("v")
        .arg(LAYOUT_VERSION_SERVED)
        .query_async(&mut c)
        .await
        .unwrap();
    let q = Queue::connect(&s.url(), &name).await.unwrap();
    assert_eq!(q.layout().await.unwrap(), LAYOUT_VERSION_SERVED);
    let old: Vec<String> = (0..3).map(|i| text_of(100 + i, 'o')).collect();
    let mut want: Vec<(String, String)> = Vec::new();
    for p in &old {
        let id = q.enqueue(p).await.unwrap();
        let (fields, _) = record(&mut c, &q, &id).await;
        assert!(!fields.iter().any(|f| f == "p2"), "{fields:?}");
        want.push((id, p.clone()));
    }
    // One of them leased before the upgrade, settled after it.
    let leased = q.claim(1, LEASE).await.unwrap().remove(0);
    assert_eq!(q.upgrade_layout().await.unwrap(), LAYOUT_VERSION);
    assert_eq!(q.upgrade_layout().await.unwrap(), LAYOUT_VERSION);
    assert_eq!(q.layout().await.unwrap(), LAYOUT_VERSION);
    let fresh = text_of(150, 'n');
    let id = q.enqueue(&fresh).await.unwrap();
    let (fields, _) = record(&mut c, &q, &id).await;
    assert!(fields.iter().any(|f| f == "p3"), "{fields:?}");
    want.push((id, fresh));
    q.complete(&leased).await.unwrap();
    assert_eq!(q.job(leased.id()).await.unwrap().state, JobState::Completed);
    let mut got = drain(&q).await;
    got.push((
        leased.id().to_owned(),
        serde_json::from_slice::<String>(leased.payload()).unwrap(),
    ));
    got.sort();
    want.sort();
    assert_eq!(got, want);
    // A reopened handle sees the new version.
    let again = Queue::connect(&s.url(), &name).await.unwrap();
    assert_eq!(again.layout().await.unwrap(), LAYOUT_VERSION);
}

/// `INFO commandstats` calls of `cmd` since the last `CONFIG RESETSTAT`.
async fn calls(c: &mut redis::aio::MultiplexedConnection, cmd: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(c).await.unwrap();
    let tag = format!("cmdstat_{cmd}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&tag))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

async fn meta_field(c: &mut redis::aio::MultiplexedConnection, q: &Queue, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(format!("emq:{{{}}}:meta", q.name()))
        .arg(field)
        .query_async(c)
        .await
        .unwrap()
}

// A plain queue (layout 3: its limits and its lanes flag in the meta hash)
// pays no command for lanes or limits it does not use: a claim reads the
// meta hash and each job's record (one HMGET each), a settle-and-claim
// also each settled job's, and nothing asks whether lanes exist.
#[tokio::test]
async fn a_plain_queue_pays_no_command_for_lanes_or_limits() {
    let (s, q) = common::setup("plain-cost").await;
    let mut c = raw(&s).await;
    for i in 0..3 {
        q.enqueue(&i).await.unwrap();
    }
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut c).await.unwrap();
    let mut leases = q.claim(1, LEASE).await.unwrap();
    let mut done = 0;
    while let Some(l) = leases.pop() {
        let (settled, next) = q.settle_and_claim(&[(&l, &Settle::Complete)], 1, LEASE).await.unwrap();
        for r in settled {
            r.unwrap();
        }
        done += 1;
        leases = next;
    }
    assert_eq!(done, 3);
    assert_eq!(calls(&mut c, "exists").await, 0, "no lanes check");
    // claim: meta + 1 record; 2 settle-and-claims: meta + 2 records each;
    // the last: meta + the settled record.
    assert_eq!(calls(&mut c, "hmget").await, 2 + 3 + 3 + 2);
}

// The lanes flag follows the ring: set by the first laned job, cleared by
// the claim that finds the lanes gone, so the queue is plain again.
#[tokio::test]
async fn the_lanes_flag_follows_the_ring() {
    let (s, q) = common::setup("lanes-flag").await;
    let mut c = raw(&s).await;
    assert_eq!(meta_field(&mut c, &q, "ln").await, None);
    q.enqueue_with(&"x", &EnqueueOptions::new().lane("a")).await.unwrap();
    assert_eq!(meta_field(&mut c, &q, "ln").await.as_deref(), Some("1"));
    let got = drain(&q).await;
    assert_eq!(got.len(), 1);
    // the drain's last claim found no ring
    assert_eq!(meta_field(&mut c, &q, "ln").await, None);
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut c).await.unwrap();
    q.enqueue(&2).await.unwrap();
    assert_eq!(q.claim(1, LEASE).await.unwrap().len(), 1);
    assert_eq!(calls(&mut c, "exists").await, 0);
    // and back to lanes
    q.enqueue_with(&3, &EnqueueOptions::new().lane("b")).await.unwrap();
    assert_eq!(meta_field(&mut c, &q, "ln").await.as_deref(), Some("1"));
    assert_eq!(q.claim(1, LEASE).await.unwrap()[0].lane(), Some("b"));
}

// A flag lost to a torn write (the ring there, `ln` gone) is found again:
// by the claim that pops a laned job without lanes, and by the sweep.
#[tokio::test]
async fn a_lost_lanes_flag_is_found_again() {
    let (s, q) = common::setup("lanes-flag-lost").await;
    let mut c = raw(&s).await;
    let meta = format!("emq:{{{}}}:meta", q.name());
    q.enqueue_with(&1, &EnqueueOptions::new().lane("a")).await.unwrap();
    let _: () = redis::cmd("HDEL")
        .arg(&meta)
        .arg("ln")
        .query_async(&mut c)
        .await
        .unwrap();
    // the plain path pops the laned job, puts it back and marks the lanes
    assert!(q.claim(1, LEASE).await.unwrap().is_empty());
    assert_eq!(meta_field(&mut c, &q, "ln").await.as_deref(), Some("1"));
    assert_eq!(q.claim(1, LEASE).await.unwrap()[0].lane(), Some("a"));

    q.enqueue_with(&2, &EnqueueOptions::new().lane("b")).await.unwrap();
    let _: () = redis::cmd("HDEL")
        .arg(&meta)
        .arg("ln")
        .query_async(&mut c)
        .await
        .unwrap();
    let report = q.sweep(100).await.unwrap();
    assert!(report.repaired >= 1, "{report:?}");
    assert_eq!(meta_field(&mut c, &q, "ln").await.as_deref(), Some("1"));
    assert_eq!(q.claim(1, LEASE).await.unwrap()[0].lane(), Some("b"));
}

// Upgrading a layout-2 queue moves its limits (a hash of their own in 0.2)
// and its lanes into the meta hash: every limit reads and holds as before.
#[tokio::test]
async fn upgrade_moves_limits_and_lanes_into_meta() {
    let s = echomq::server::LocalServer::start().unwrap();
    let mut c = raw(&s).await;
    let name = unique("v2-limits");
    let meta = format!("emq:{{{name}}}:meta");
    let limits = format!("emq:{{{name}}}:limits");
    let _: () = redis::cmd("HSET")
        .arg(&meta)
        .arg("v")
        .arg(LAYOUT_VERSION_SERVED)
        .query_async(&mut c)
        .await
        .unwrap();
    let q = Queue::connect(&s.url(), &name).await.unwrap();
    q.set_max_active(Some(2)).await.unwrap();
    let rate = echomq::throttle::RateLimit::new(1000, Duration::from_secs(1)).unwrap();
    q.set_rate_limit(Some(rate)).await.unwrap();
    q.enqueue_with(&0, &EnqueueOptions::new().lane("a")).await.unwrap();
    for i in 1..4 {
        q.enqueue(&i).await.unwrap();
    }
    let before = q.throttles().await.unwrap();
    assert_eq!(before.max_active, Some(2));
    let stored: Option<String> = redis::cmd("HGET")
        .arg(&limits)
        .arg("max")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(stored.as_deref(), Some("2"), "0.2 keeps them apart");
    assert_eq!(meta_field(&mut c, &q, "ln").await, None);

    assert_eq!(q.upgrade_layout().await.unwrap(), LAYOUT_VERSION);
    let gone: bool = redis::cmd("EXISTS").arg(&limits).query_async(&mut c).await.unwrap();
    assert!(!gone);
    assert_eq!(meta_field(&mut c, &q, "max").await.as_deref(), Some("2"));
    assert_eq!(meta_field(&mut c, &q, "ln").await.as_deref(), Some("1"));
    let after = q.throttles().await.unwrap();
    assert_eq!(after.max_active, before.max_active);
    assert_eq!(after.rate, before.rate);
    // the cap holds, and the laned job is still handed out
    let leased = q.claim(10, LEASE).await.unwrap();
    assert_eq!(leased.len(), 2);
    assert!(q.claim(10, LEASE).await.unwrap().is_empty());
    q.set_max_active(None).await.unwrap();
    assert_eq!(meta_field(&mut c, &q, "max").await, None);
    let rest = q.claim(10, LEASE).await.unwrap();
    let mut lanes: Vec<_> = leased
        .iter()
        .chain(&rest)
        .map(|l| l.lane().map(str::to_owned))
        .collect();
    lanes.sort();
    assert_eq!(lanes, [None, None, None, Some("a".to_owned())]);
}
