//! The workload scripts/profile-cost runs against a server under callgrind:
//! N jobs enqueued in bulk, then claimed and completed in lock step (a
//! settle-and-claim of BATCH at a time, as a consumer at concurrency BATCH
//! does); or, with `split` (and `delay`), plain claims of BATCH until none
//! is left, then settlements of BATCH. Each phase lies between callgrind
//! dumps, with the server's command counts written to CMD_LOG at each.
//! MODE, a comma-separated list, turns features on: evoff, lanes (8),
//! cap, rate, result, dedup, priority, delay, kind, keep_all, keep_none,
//! keep_100, keep_age, durable (`Durability::Replicas` of 1 with a 1 ms
//! timeout, on a server with no replica: each call pays its `WAIT` and
//! its confirmation mark, and enqueues answer `NotDurable`, ignored here);
//! `floor` claims and completes with floor.lua instead
//! of echomq's scripts (the least a fenced settle-and-claim can do on
//! this keyspace), `floor_list` with floor_list.lua (the same on a
//! keyspace with pending in a list and a lease per call), `floor_plist`
//! with floor.lua and only pending in a list. The payload is 100 bytes of
//! JSON.
use echomq::{Client, EnqueueOptions, QueueOptions, Retention, Settle};
use std::time::Duration;

fn cg(flag: &str) {
    let pid = std::env::var("CG_PID").unwrap();
    std::process::Command::new("callgrind_control").arg(flag).arg(&pid).output().unwrap();
    // the server's command counts at each dump, for commands per phase
    let port = std::env::var("ECHOMQ_URL").unwrap().rsplit(':').next().unwrap().trim_end_matches('/').to_owned();
    let out = std::process::Command::new("redis-cli").args(["-p", &port, "info", "commandstats"]).output().unwrap();
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(std::env::var("CMD_LOG").unwrap()).unwrap();
    writeln!(f, "== {flag}\n{}", String::from_utf8_lossy(&out.stdout)).unwrap();
}

#[tokio::main]
async fn main() {
    let url = std::env::var("ECHOMQ_URL").unwrap();
    let n: usize = std::env::var("N").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    let batch: usize = std::env::var("BATCH").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    let mode = std::env::var("MODE").unwrap_or_default();
    let has = |m: &str| mode.split(',').any(|x| x == m);
    let client = Client::connect(&url).await.unwrap();
    let mut qo = QueueOptions::default();
    if has("keep_all") { qo = qo.keep_completed(Retention::All); }
    if has("keep_none") { qo = qo.keep_completed(Retention::None); }
    if has("keep_100") { qo = qo.keep_completed(Retention::Newest(100)); }
    if has("keep_age") { qo = qo.keep_completed(Retention::Within(Duration::from_secs(3600))); }
    if has("durable") {
        qo = qo.durability(echomq::Durability::Replicas { count: 1, timeout: Duration::from_millis(1) });
    }
    // stored, if not confirmed (no replica)
    let stored = |r: echomq::Result<()>| match r {
        Ok(()) | Err(echomq::Error::NotDurable { .. }) => {}
        Err(e) => panic!("{e}"),
    };
    let q = client.queue_with("h", qo).await.unwrap();
    if has("evoff") {
        q.set_events(&echomq::EventSettings::default().enabled(false)).await.unwrap();
    }
    if has("cap") { q.set_max_active(Some(100_000)).await.unwrap(); }
    if has("rate") { q.set_rate_limit(Some(echomq::throttle::RateLimit::new(100_000, Duration::from_secs(1)).unwrap())).await.unwrap(); }
    // warm up: load the library
    stored(q.enqueue(&serde_json::json!({"w": 1})).await.map(|_| ()));
    let l = q.claim(1, Duration::from_secs(600)).await.unwrap();
    q.complete(&l[0]).await.unwrap();
    let payload = serde_json::json!({"i": 1, "s": "x".repeat(80)});
    let opts = |i: usize| {
        let mut o = EnqueueOptions::new();
        if has("lanes") { o = o.lane(format!("lane-{}", i % 8)); }
        if has("priority") { o = o.priority(5); }
        if has("dedup") { o = o.dedup(format!("d-{i}")); }
        if has("delay") { o = o.delay(Duration::from_millis(1)); }
        if has("kind") { o = o.kind("send_email"); }
        if has("sequence") { o = o.sequence(format!("s-{}", i % 64)); }
        o
    };
    cg("-z");
    let mut done_enq = 0;
    while done_enq < n {
        let k = (n - done_enq).min(1000);
        let jobs: Vec<_> = (done_enq..done_enq + k).map(|i| (payload.clone(), opts(i))).collect();
        stored(q.enqueue_bulk_with(&jobs).await.map(|_| ()));
        done_enq += k;
    }
    cg("-d");
    if has("delay") { tokio::time::sleep(Duration::from_millis(20)).await; }
    let lease = Duration::from_secs(600);
    let settle = if has("result") { Settle::Return { result: "{\"ok\":true,\"n\":17}".into() } } else { Settle::Complete };
    let mut done = 0;
    if has("floor") || has("floor_list") || has("floor_plist") {
        // floor.lua on the same records, for what any script could reach;
        // floor_list.lua, and floor.lua in mode floor_plist, with pending
        // moved into a list first (not counted)
        let mut con = redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
        let plist = has("floor_plist");
        let list = has("floor_list") || plist;
        let script = redis::Script::new(if list && !plist { include_str!("floor_list.lua") } else { include_str!("floor.lua") });
        let names = if plist { ["plist", "active", "completed", "token", "events"] } else if list { ["plist", "leases", "clist", "token", "events"] } else { ["pending", "active", "completed", "token", "events"] };
        let keys = names.map(|k| format!("emq:{{h}}:{k}"));
        if list {
            let ids: Vec<String> = redis::cmd("ZRANGE").arg("emq:{h}:pending").arg(0).arg(-1).query_async(&mut con).await.unwrap();
            let _: () = redis::cmd("RPUSH").arg(&keys[0]).arg(&ids).query_async(&mut con).await.unwrap();
            let _: () = redis::cmd("DEL").arg("emq:{h}:pending").query_async(&mut con).await.unwrap();
            let pid = std::env::var("CG_PID").unwrap();
            std::process::Command::new("callgrind_control").arg("-z").arg(&pid).output().unwrap();
        }
        let call = |held: &[(String, String)]| {
            let mut inv = script.prepare_invoke();
            for k in &keys { inv.key(k); }
            inv.arg("emq:{h}:").arg(if has("evoff") { "0" } else { "1" }).arg(batch);
            if !list || plist { inv.arg(if plist { "1" } else { "0" }); }
            for (id, tk) in held { inv.arg(id).arg(tk); }
            inv
        };
        let mut held: Vec<(String, String)> = Vec::new();
        loop {
            let out: Vec<String> = call(&held).invoke_async(&mut con).await.unwrap();
            done += held.len();
            held = out.chunks(3).map(|c| (c[0].clone(), c[1].clone())).collect();
            if held.is_empty() { break; }
        }
        cg("-d");
        assert_eq!(done, n);
        eprintln!("done {done}");
        return;
    }
    if has("split") || has("delay") {
        // plain claims (which promote due delayed jobs), then settle_many
        let mut all = Vec::new();
        loop {
            let got = q.claim(batch, lease).await.unwrap();
            if got.is_empty() { break; }
            all.extend(got);
        }
        cg("-d");
        for chunk in all.chunks(batch) {
            let items: Vec<_> = chunk.iter().map(|l| (l, &settle)).collect();
            let settled = q.settle_many(&items).await.unwrap();
            assert!(settled.iter().all(|s| s.is_ok()));
            done += settled.len();
        }
    } else {
        let mut leases = q.claim(batch, lease).await.unwrap();
        while !leases.is_empty() {
            let items: Vec<_> = leases.iter().map(|l| (l, &settle)).collect();
            let (settled, next) = q.settle_and_claim(&items, batch, lease).await.unwrap();
            assert!(settled.iter().all(|s| s.is_ok()));
            done += settled.len();
            leases = next;
        }
    }
    cg("-d");
    assert_eq!(done, n);
    eprintln!("done {done}");
}
