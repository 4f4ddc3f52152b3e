//! The process scripts/test-upgrade runs, built twice: against echomq 0.2
//! (v0.2.0, in a git worktree) and against the working tree (feature
//! `tree`). It uses only the API both have (a `Client`, a queue handle,
//! enqueue, a `Consumer`), plus the working tree's layout calls.
//!
//!   upgrade-probe enqueue START COUNT   jobs START..START+COUNT (every third delayed 1.5 s)
//!   upgrade-probe work LOG MS           a consumer (4 at a time, 2 s leases) whose handler
//!                                       waits MS ms, then appends the job's number to LOG;
//!                                       SIGTERM shuts it down cleanly
//!   upgrade-probe counts                pending delayed active completed failed
//!   upgrade-probe layout | upgrade      (the working tree only) the queue's layout version
//!
//! ECHOMQ_URL names the server, QUEUE the queue. Exit 4: the queue's
//! layout is refused (Error::LayoutMismatch); 3: any other error.

use std::io::Write;
use std::time::Duration;

use echomq::{Client, Consumer, EnqueueOptions, Error, HandlerError, Job, Queue};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Payload {
    n: u64,
    /// 100 bytes, so the working tree keeps it in parts on a layout-3 queue.
    pad: String,
}

fn fail(e: Error) -> ! {
    eprintln!("upgrade-probe: {e}");
    std::process::exit(if matches!(e, Error::LayoutMismatch { .. }) { 4 } else { 3 });
}

async fn open() -> Queue {
    let url = std::env::var("ECHOMQ_URL").expect("ECHOMQ_URL");
    let name = std::env::var("QUEUE").expect("QUEUE");
    let client = Client::connect(&url).await.unwrap_or_else(|e| fail(e));
    client.queue(&name).await.unwrap_or_else(|e| fail(e))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| -> u64 { args[i].parse().expect("a number") };
    let q = open().await;
    match args.first().map(String::as_str) {
        Some("enqueue") => {
            for n in num(1)..num(1) + num(2) {
                let p = Payload { n, pad: "x".repeat(100) };
                let mut opts = EnqueueOptions::new();
                if n % 3 == 0 {
                    opts = opts.delay(Duration::from_millis(1500));
                }
                q.enqueue_with(&p, &opts).await.unwrap_or_else(|e| fail(e));
            }
        }
        Some("work") => {
            let log = args[1].clone();
            let ms = num(2);
            let consumer = Consumer::new(q, move |job: Job<Payload>| {
                let log = log.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
                    // one write, so lines of several processes do not interleave
                    f.write_all(format!("{}\n", job.payload().n).as_bytes()).unwrap();
                    Ok::<(), HandlerError>(())
                }
            })
            .concurrency(4)
            .lease(Duration::from_secs(2))
            .spawn()
            .unwrap_or_else(|e| fail(e));
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
            term.recv().await;
            consumer.shutdown().await.unwrap_or_else(|e| fail(e));
        }
        Some("counts") => {
            let c = q.counts().await.unwrap_or_else(|e| fail(e));
            println!("{} {} {} {} {}", c.pending, c.delayed, c.active, c.completed, c.failed);
        }
        #[cfg(feature = "tree")]
        Some("layout") => println!("{}", q.layout().await.unwrap_or_else(|e| fail(e))),
        #[cfg(feature = "tree")]
        Some("upgrade") => println!("{}", q.upgrade_layout().await.unwrap_or_else(|e| fail(e))),
        other => panic!("unknown command {other:?}"),
    }
}
