//! Network faults: an acknowledgement cut in flight, the server
//! partitioned away, connections dropped under load.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Ctx, Outcome, addr, enqueue, finish};
use crate::harness::{ProducerOpts, Run, WorkerOpts};
use crate::history::Ev;
use crate::netns::NetNs;
use crate::proxy::Proxy;

/// How [`ack_lost`] loses the acknowledgement of a `complete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckLoss {
    /// The server runs the complete; its reply dies with the connection.
    ReplyLost,
    /// The complete never reaches the server; the connection dies.
    RequestLost,
    /// The complete never arrives and the worker stays cut off past its lease.
    CutOffPastLease,
}

/// A worker's `complete` is cut in flight by a proxy (see [`AckLoss`]).
pub fn ack_lost(ctx: &Ctx, how: AckLoss) -> Outcome {
    let server = ctx.server(false);
    let proxy = Proxy::start(addr(&server)).expect("start the proxy");
    let mut run = Run::new(&ctx.bins, &server.url(), "acklost");
    run.reaper(100, 1000, false);
    let w1 = run.worker(&WorkerOpts {
        url: Some(proxy.url()),
        concurrency: 1,
        lease_ms: 1500,
        ..WorkerOpts::default()
    });
    // A first job loads the scripts, so the cut hits the complete itself
    // and not a missing-function answer that would be retried anyway.
    enqueue(&mut run, 1);
    let warm = run.wait_event(&w1, Duration::from_secs(10), |e| matches!(e, Ev::Settled { .. }));
    assert!(warm.is_some(), "the first job was not completed");
    let pattern = format!("{{{}}}:completed", run.queue);
    proxy.arm_cut(
        pattern.as_bytes(),
        how == AckLoss::ReplyLost,
        how == AckLoss::CutOffPastLease,
    );
    run.fault("cut_ack", "proxy", &format!("{how:?}"));
    run.producer(&ProducerOpts {
        from: 1,
        count: 1,
        ..ProducerOpts::default()
    });
    let mut notes = BTreeMap::new();
    if how == AckLoss::CutOffPastLease {
        // The worker's settle keeps failing; its lease lapses; another worker redoes the job.
        let gave_up = run.wait_event(&w1, Duration::from_secs(10), |e| matches!(e, Ev::SettleFailed { .. }));
        notes.insert("settle_failed".into(), json!(gave_up.is_some()));
        run.worker(&WorkerOpts::default());
        let drained = run.drive(Duration::from_secs(20), |_| {});
        proxy.blackhole(false);
        notes.insert("cuts".into(), json!(proxy.cuts_done()));
        return finish(run, drained, notes);
    }
    let settled = run.wait_event(
        &w1,
        Duration::from_secs(10),
        |e| matches!(e, Ev::Settled { id, .. } if id == "j1"),
    );
    notes.insert("cuts".into(), json!(proxy.cuts_done()));
    if let Some(Ev::Settled { outcome, .. }) = settled {
        notes.insert("outcome".into(), json!(outcome));
    }
    let drained = run.drive(Duration::from_secs(20), |_| {});
    finish(run, drained, notes)
}

/// How [`partition`] cuts the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// iptables DROP in a network namespace holding the server.
    Namespace,
    /// The loopback proxy stops moving bytes.
    Proxy,
}

/// Blackholes the server `rounds` times for `hold_ms` (longer than the
/// lease) under load. `Err` says why a namespace could not be had.
pub fn partition(ctx: &Ctx, how: Cut, jobs: u64, rounds: usize, hold_ms: u64) -> Result<Outcome, String> {
    let mut ns = None;
    let mut proxy = None;
    let mut local = None;
    let (url, client_url) = match how {
        Cut::Namespace => {
            let mut n = NetNs::create()?;
            let bin = echomq::server::find_server_binary().map_err(|e| e.to_string())?;
            let env: Vec<&str> = Vec::new();
            n.start_server(&bin, &env)?;
            let u = n.url();
            ns = Some(n);
            (u.clone(), u)
        }
        Cut::Proxy => {
            let s = ctx.server(false);
            let p = Proxy::start(addr(&s)).map_err(|e| e.to_string())?;
            let urls = (s.url(), p.url());
            local = Some(s);
            proxy = Some(p);
            urls
        }
    };
    let mut run = Run::new(&ctx.bins, &url, "partition");
    run.client_url = client_url;
    run.reaper(100, 1000, false);
    run.producer(&ProducerOpts {
        count: jobs,
        concurrency: 4,
        pace_ms: 5,
        ..ProducerOpts::default()
    });
    for _ in 0..3 {
        run.worker(&WorkerOpts {
            lease_ms: 1000,
            response_timeout_ms: 500,
            ..WorkerOpts::default()
        });
    }
    let mut done = 0;
    let mut next = Instant::now() + Duration::from_millis(1000);
    let mut errors = Vec::new();
    let drained = run.drive(Duration::from_secs(60 + 10 * rounds as u64), |run| {
        if done < rounds && Instant::now() >= next {
            run.fault("partition", &format!("{how:?}"), &format!("{hold_ms} ms"));
            match (&mut ns, &proxy) {
                (Some(n), _) => {
                    if let Err(e) = n.partition() {
                        errors.push(e);
                    }
                }
                (None, Some(p)) => p.blackhole(true),
                _ => {}
            }
            std::thread::sleep(Duration::from_millis(hold_ms));
            match (&mut ns, &proxy) {
                (Some(n), _) => {
                    if let Err(e) = n.heal() {
                        errors.push(e);
                    }
                }
                (None, Some(p)) => p.blackhole(false),
                _ => {}
            }
            run.fault("heal", &format!("{how:?}"), "");
            done += 1;
            next = Instant::now() + Duration::from_millis(1500);
        }
    });
    let mut notes = BTreeMap::new();
    notes.insert("rounds".into(), json!(done));
    notes.insert("errors".into(), json!(errors));
    let out = finish(run, drained, notes);
    drop(local);
    Ok(out)
}

/// Connections are dropped under load: the proxy closes every connection
/// every 0.5–1.5 s, and `CLIENT KILL TYPE normal` runs on the server every
/// 2 s. (Much more often and a loaded 2-core machine spends its time
/// reconnecting: progress stalls, which says nothing about safety.)
pub fn connection_drops(ctx: &Ctx, jobs: u64) -> Outcome {
    let server = ctx.server(false);
    let proxy = Proxy::start(addr(&server)).expect("start the proxy");
    let mut run = Run::new(&ctx.bins, &server.url(), "drops");
    run.client_url = proxy.url();
    run.reaper(100, 1000, false);
    run.producer(&ProducerOpts {
        count: jobs,
        concurrency: 4,
        pace_ms: 3,
        ..ProducerOpts::default()
    });
    for _ in 0..3 {
        run.worker(&WorkerOpts::default());
    }
    let (mut drops, mut kills) = (0, 0);
    let mut next_drop = Instant::now() + Duration::from_millis(500);
    let mut next_kill = Instant::now() + Duration::from_millis(2000);
    let drained = run.drive(Duration::from_secs(90), |run| {
        if Instant::now() >= next_drop {
            proxy.drop_connections();
            run.fault("drop_connections", "proxy", "");
            drops += 1;
            next_drop = Instant::now() + Duration::from_millis(fastrand::u64(500..1500));
        }
        if Instant::now() >= next_kill {
            if let Ok(mut c) = run.conn() {
                let _: redis::RedisResult<i64> =
                    redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal").query(&mut c);
                run.fault("client_kill", "server", "CLIENT KILL TYPE normal");
                kills += 1;
            }
            next_kill = Instant::now() + Duration::from_millis(2000);
        }
    });
    let mut notes = BTreeMap::new();
    notes.insert("proxy_drops".into(), json!(drops));
    notes.insert("client_kills".into(), json!(kills));
    finish(run, drained, notes)
}
