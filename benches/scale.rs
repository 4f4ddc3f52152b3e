//! How echomq's costs grow with the size of a queue and the number of
//! queues (issue 15): it measures; it changes nothing.
//!
//! Run: `cargo bench --bench scale --features local-server` (a private
//! server, as `benches/throughput.rs` starts one). Figures:
//!
//! - `pending`: with a backlog of `SCALE_PENDING` (1000,1000000) pending
//!   jobs, `SCALE_OPS` (2000) calls each of enqueue (one job per call),
//!   claim (one job per call) and complete: server µs and server commands
//!   per call, and wall µs per call (one call at a time).
//! - `delayed`: with `SCALE_DELAYED` (1000,1000000) delayed jobs due in an
//!   hour or more, `SCALE_OPS` jobs that are due now are promoted by reaper
//!   passes: server µs per promoted job.
//! - `queues`: `SCALE_QUEUES` (10000) queues, each with one completed job
//!   and one pending: server memory per queue.
//!
//! Each figure prints one JSON line per size, then a table of the growth
//! (the largest size against the smallest).

#[allow(dead_code)] // each bench uses a part of the shared helpers
mod support;

use std::time::{Duration, Instant};

use echomq::server::LocalServer;
use echomq::{Client, EnqueueOptions, Queue};
use redis::aio::MultiplexedConnection;
use serde_json::json;
use support::{SCRIPT_CMDS, Snap, env_list, env_or, parse_info, round};

fn main() {
    let figures: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let want = |f: &str| figures.is_empty() || figures.iter().any(|a| a == f || a == "all");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = LocalServer::start().expect("start a private server (scripts/find-server installs one)");
    eprintln!(
        "scale: private server {} on {}",
        server.binary().display(),
        server.url()
    );
    rt.block_on(async {
        let mut b = Scale::new(&server.url()).await;
        let ops: usize = env_or("SCALE_OPS", 2_000);
        if want("pending") {
            let mut lines = Vec::new();
            for size in env_list::<usize>("SCALE_PENDING", "1000,1000000") {
                lines.push(b.pending(size, ops).await);
            }
            growth("pending", &lines, &["enqueue_usec", "claim_usec", "complete_usec"]);
        }
        if want("delayed") {
            let mut lines = Vec::new();
            for size in env_list::<usize>("SCALE_DELAYED", "1000,1000000") {
                lines.push(b.delayed(size, ops).await);
            }
            growth("delayed", &lines, &["promote_usec_per_job"]);
        }
        if want("queues") {
            b.queues(env_or("SCALE_QUEUES", 10_000)).await;
        }
    });
    drop(server);
}

/// Prints how each field grew from the first line to the last.
fn growth(figure: &str, lines: &[serde_json::Value], fields: &[&str]) {
    let (Some(a), Some(z)) = (lines.first(), lines.last()) else {
        return;
    };
    println!("\n{figure}: size {} -> {}", a["size"], z["size"]);
    for f in fields {
        let (x, y) = (a[f].as_f64().unwrap_or(0.0), z[f].as_f64().unwrap_or(0.0));
        println!("  {f:<24} {x:>9.2} -> {y:>9.2}  (x{:.2})", y / x.max(1e-9));
    }
}

struct Scale {
    client: Client,
    admin: MultiplexedConnection,
    seq: usize,
}

impl Scale {
    async fn new(url: &str) -> Scale {
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let admin = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        Scale {
            client: Client::connect(url).await.unwrap(),
            admin,
            seq: 0,
        }
    }

    async fn info(&mut self, section: &str) -> String {
        redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.admin)
            .await
            .unwrap()
    }

    async fn snap(&mut self) -> Snap {
        let cmds = self.info("commandstats").await;
        let cpu = self.info("cpu").await;
        Snap::parse(&cmds, &cpu)
    }

    async fn flush(&mut self) {
        let _: () = redis::cmd("FLUSHALL").query_async(&mut self.admin).await.unwrap();
    }

    async fn queue(&mut self, what: &str) -> Queue {
        self.seq += 1;
        self.client.queue(&format!("scale-{what}-{}", self.seq)).await.unwrap()
    }

    /// Server µs, server commands and wall µs per script call while `f` runs `calls` calls.
    async fn measure<F: Future<Output = ()>>(&mut self, calls: usize, f: F) -> (f64, f64, f64) {
        let before = self.snap().await;
        let t = Instant::now();
        f.await;
        let wall = t.elapsed();
        let d = self.snap().await.since(&before);
        let scripts = d.calls(SCRIPT_CMDS).max(1) as f64;
        let usec = d.usec(SCRIPT_CMDS) as f64 / scripts;
        let cmds = (d.all_calls() as f64 - scripts) / scripts;
        (
            round(usec, 2),
            round(cmds, 2),
            round(wall.as_secs_f64() * 1e6 / calls as f64, 1),
        )
    }

    async fn pending(&mut self, size: usize, ops: usize) -> serde_json::Value {
        self.flush().await;
        let q = self.queue("pending").await;
        let t = Instant::now();
        fill(&q, size, None).await;
        let fill_s = t.elapsed().as_secs_f64();
        let (enqueue_usec, enqueue_cmds, enqueue_wall) = self
            .measure(ops, async {
                for i in 0..ops {
                    q.enqueue(&i).await.unwrap();
                }
            })
            .await;
        let mut leases = Vec::with_capacity(ops);
        let (claim_usec, claim_cmds, claim_wall) = self
            .measure(ops, async {
                for _ in 0..ops {
                    leases.extend(q.claim(1, Duration::from_secs(600)).await.unwrap());
                }
            })
            .await;
        let (complete_usec, complete_cmds, complete_wall) = self
            .measure(ops, async {
                for l in &leases {
                    q.complete(l).await.unwrap();
                }
            })
            .await;
        let line = json!({
            "figure": "pending", "size": size, "ops": ops, "fill_s": round(fill_s, 1),
            "enqueue_usec": enqueue_usec, "enqueue_cmds": enqueue_cmds, "enqueue_wall_us": enqueue_wall,
            "claim_usec": claim_usec, "claim_cmds": claim_cmds, "claim_wall_us": claim_wall,
            "complete_usec": complete_usec, "complete_cmds": complete_cmds, "complete_wall_us": complete_wall,
        });
        println!("{line}");
        line
    }

    async fn delayed(&mut self, size: usize, ops: usize) -> serde_json::Value {
        self.flush().await;
        let q = self.queue("delayed").await;
        fill(&q, size, Some(Duration::from_secs(3_600))).await;
        fill(&q, ops, Some(Duration::from_millis(1))).await;
        // Past the due jobs' time on the server's clock.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut promoted = 0;
        let before = self.snap().await;
        while promoted < ops {
            let r = q.reap(100).await.unwrap();
            assert!(r.promoted > 0 || promoted >= ops, "nothing due to promote");
            promoted += r.promoted as usize;
        }
        let d = self.snap().await.since(&before);
        let line = json!({
            "figure": "delayed", "size": size, "promoted": promoted,
            "promote_usec_per_job": round(d.usec(SCRIPT_CMDS) as f64 / promoted as f64, 2),
            "cmds_per_job": round((d.all_calls() - d.calls(SCRIPT_CMDS)) as f64 / promoted as f64, 2),
        });
        println!("{line}");
        line
    }

    async fn queues(&mut self, n: usize) {
        self.flush().await;
        let used = |s: &str| -> i64 { parse_info(s)["used_memory"].parse().unwrap() };
        // Memory is read between the two halves, so what the server holds
        // anyway (and allocator warm-up) cancels out.
        let half = (n / 2).max(1);
        let mut mid = 0;
        for i in 0..2 * half {
            if i == half {
                mid = used(&self.info("memory").await);
            }
            let q = self.queue("many").await;
            q.enqueue(&i).await.unwrap();
            let l = q.claim(1, Duration::from_secs(600)).await.unwrap();
            q.complete(&l[0]).await.unwrap();
            q.enqueue(&i).await.unwrap();
        }
        let after = used(&self.info("memory").await);
        let keys: i64 = redis::cmd("DBSIZE").query_async(&mut self.admin).await.unwrap();
        let line = json!({
            "figure": "queues", "queues": 2 * half,
            "bytes_per_queue": (after - mid) / half as i64,
            "keys_per_queue": round(keys as f64 / (2 * half) as f64, 2),
        });
        println!("{line}");
    }
}

/// Enqueues `n` jobs in calls of 1,000 (delayed by `delay` when given).
async fn fill(q: &Queue, n: usize, delay: Option<Duration>) {
    let mut left = n;
    while left > 0 {
        let k = left.min(1_000);
        let opts = match delay {
            Some(d) => EnqueueOptions::new().delay(d),
            None => EnqueueOptions::new(),
        };
        let jobs: Vec<(usize, EnqueueOptions)> = (0..k).map(|i| (i, opts.clone())).collect();
        q.enqueue_bulk_with(&jobs).await.unwrap();
        left -= k;
    }
}
