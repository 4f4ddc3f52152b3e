//! Cron schedules: stored in the server, one job per tick whatever the
//! number of schedulers, their clocks, pauses and deaths; missed-tick
//! policies with bounded work; daylight-saving ticks; the schedule API.
//!
//! Scheduler processes are this test binary run again (`--exact
//! processes::cron_child --ignored`), configured by `ECHOMQ_CRON_*`
//! variables, killed with the test (and when their stdin closes).
//!
//! One module per concept: the schedule API (`api`), missed ticks
//! (`missed`), the fire script's own guards (`guards`), and scheduler
//! processes (`processes`).

#![cfg(feature = "cron")]

mod api;
#[path = "../common/mod.rs"]
mod common;
mod guards;
mod missed;
mod pause;
mod processes;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::raw;
use echomq::schedule::{self, Schedule};
use echomq::server::LocalServer;
use echomq::{JobInfo, Queue};

/// Every job of `schedule` in `queue`, by tick.
async fn jobs_of(server: &LocalServer, queue: &Queue, schedule: &str) -> BTreeMap<u64, JobInfo> {
    let mut c = raw(server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("emq:{{{}}}:job:cron:{schedule}@*", queue.name()))
        .query_async(&mut c)
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    for k in keys {
        let id = k.split_once(":job:").unwrap().1;
        let (name, tick) = schedule::tick_of(id).unwrap();
        assert_eq!(name, schedule);
        out.insert(tick, queue.job(id).await.unwrap());
    }
    out
}

/// The ticks of `cron` (UTC) after `after_ms` up to and including `until_ms`.
fn expected_ticks(cron: &str, after_ms: u64, until_ms: u64) -> Vec<u64> {
    let s = Schedule::new("x", cron);
    let mut out = Vec::new();
    let mut at = after_ms;
    loop {
        let t = s.ticks_after(UNIX_EPOCH + Duration::from_millis(at), 1).unwrap();
        let t = t[0].duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        if t > until_ms {
            return out;
        }
        out.push(t);
        at = t;
    }
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}
