//! What compressed payloads save and cost (feature `compression`): for
//! JSON payloads of about 1 KB, 10 KB and 100 KB (rows of a report, as a
//! job might carry), the server memory per pending job (INFO used_memory
//! before and after enqueueing N, divided by N) and the client time per
//! job of encoding plus compressing at enqueue and of decompressing plus
//! decoding at claim (the whole enqueue and claim round trips, one job
//! each, N of them), with and without `QueueOptions::compress_above`.
//!
//! cargo bench --bench compression --features local-server,compression
//! (N=500 by default; ECHOMQ_SERVER_BIN picks the server).

use std::time::Instant;

use echomq::server::LocalServer;
use echomq::{Queue, QueueOptions};
use serde_json::{Value, json};

fn payload(rows: usize) -> Value {
    json!({"report": "monthly", "rows": (0..rows).map(|i| json!({
        "id": i, "customer": format!("customer-{}", i % 97), "plan": if i % 3 == 0 { "yearly" } else { "monthly" },
        "amount_cents": 1_000 + (i * 37) % 9_000, "currency": "EUR", "paid": i % 5 != 0,
    })).collect::<Vec<_>>()})
}

async fn used_memory(c: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query_async(c).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("N").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
    let server = LocalServer::start().expect("a server (scripts/find-server)");
    println!("server: {}; N={n} jobs per row", server.url());
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    println!("| payload (JSON) | stored | server memory per job | client time per job (enqueue + claim) |");
    println!("| --- | --- | --- | --- |");
    for rows in [8usize, 80, 800] {
        let p = payload(rows);
        let len = serde_json::to_vec(&p).unwrap().len();
        for compress in [false, true] {
            let name = format!("lz4-{rows}-{compress}");
            let opts = if compress {
                QueueOptions::new().compress_above(512)
            } else {
                QueueOptions::new()
            };
            let q = Queue::connect_with(&server.url(), &name, opts).await.unwrap();
            let before = used_memory(&mut c).await;
            let t = Instant::now();
            for _ in 0..n {
                q.enqueue(&p).await.unwrap();
            }
            let enq = t.elapsed();
            let after = used_memory(&mut c).await;
            let t = Instant::now();
            let mut got = 0;
            while got < n {
                for l in q.claim(1, std::time::Duration::from_secs(60)).await.unwrap() {
                    let _: Value = l.decode().unwrap();
                    got += 1;
                }
            }
            let claim = t.elapsed();
            println!(
                "| {:.1} KB | {} | {:.0} B | {:.0} µs + {:.0} µs |",
                len as f64 / 1024.0,
                if compress { "LZ4" } else { "as is" },
                (after.saturating_sub(before)) as f64 / n as f64,
                enq.as_secs_f64() * 1e6 / n as f64,
                claim.as_secs_f64() * 1e6 / n as f64,
            );
        }
    }
}
