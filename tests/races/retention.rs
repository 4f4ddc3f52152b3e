//! Retention by age over 100,000 jobs: the server's memory stays flat.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::{Consumer, Job, QueueOptions, Retention, WorkerEvent};

use super::common;
use super::common::{eventually, setup_with};

/// The server's `used_memory`, in bytes.
async fn used_memory(c: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query_async(c).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

// Retention by age keeps the server's memory flat: 100,000 jobs, enqueued
// in waves of 10,000 and completed by a consumer (concurrency 64, a no-op
// handler) on a queue keeping completed records for 500 ms. After each
// wave the completed set holds exactly the jobs finished within 500 ms of
// the last settlement (each settle call deletes up to 1,000 older records,
// more than a consumer's call adds, so the trims keep up): it is bounded
// by the completions of half a second, not by the jobs completed. Once
// those 500 ms pass, a few single completions trim the rest (a thousand
// each), and used_memory then is the same after every wave, within
// 256 KiB, where keeping every record would add 10,000 records a wave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_age_keeps_memory_flat() {
    const AGE: Duration = Duration::from_millis(500);
    const WAVE: u32 = 10_000;
    const WAVES: u32 = 10;
    const MARGIN: u64 = 256 * 1024;
    let started = Instant::now();
    let (s, q) = setup_with(
        "retention-age",
        QueueOptions::new().keep_completed(Retention::Within(AGE)),
    )
    .await;
    let mut raw = common::raw(&s).await;
    // The slow log keeps the arguments of up to 128 slow calls (a bulk
    // enqueue of a thousand jobs can be one), memory that grows with them
    // for a while and is not the queue's: off on this private server.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(-1)
        .query_async(&mut raw)
        .await
        .unwrap();
    let completed_key = format!("emq:{{{}}}:completed", q.name());
    let empty = used_memory(&mut raw).await;
    q.enqueue_bulk(&(0..WAVE).collect::<Vec<_>>()).await.unwrap();
    let filled = used_memory(&mut raw).await;

    // The finish time of every job (a settle call's server time is the
    // finish time it writes).
    let finished: Arc<Mutex<Vec<u64>>> = Arc::default();
    let consumer = {
        let finished = finished.clone();
        Consumer::new(q.clone(), |_job: Job<u32>| async { Ok(()) })
            .concurrency(64)
            .observer(move |e| {
                if let WorkerEvent::Settled {
                    outcome: echomq::Outcome::Completed,
                    server_ms,
                    ..
                } = e
                {
                    finished.lock().unwrap().push(*server_ms);
                }
            })
            .spawn()
            .unwrap()
    };
    let completions = |n: usize| {
        let finished = finished.clone();
        async move {
            assert!(
                eventually(Duration::from_secs(60), || async {
                    finished.lock().unwrap().len() == n
                })
                .await,
                "{} of {n} jobs completed",
                finished.lock().unwrap().len()
            );
        }
    };
    let kept = |mut raw: redis::aio::MultiplexedConnection| {
        let key = completed_key.clone();
        async move {
            redis::cmd("ZCARD")
                .arg(&key)
                .query_async::<u64>(&mut raw)
                .await
                .unwrap()
        }
    };
    // Per wave: records kept and used_memory as it ends; then, once the
    // records have aged out and been trimmed, records kept and used_memory.
    let mut samples: Vec<(u64, u64, u64, u64)> = Vec::new();
    let mut expected = 0;
    for wave in 1..=WAVES {
        if wave > 1 {
            q.enqueue_bulk(&(0..WAVE).collect::<Vec<_>>()).await.unwrap();
        }
        expected += WAVE as usize;
        completions(expected).await;
        let (at_end, memory_at_end) = (kept(raw.clone()).await, used_memory(&mut raw).await);
        let last = {
            let finished = finished.lock().unwrap();
            let last = *finished.iter().max().unwrap();
            let within = finished.iter().filter(|&&t| t + AGE.as_millis() as u64 >= last).count() as u64;
            assert_eq!(
                at_end, within,
                "wave {wave}: the completed set should hold exactly the jobs finished within {AGE:?} of the last"
            );
            last
        };
        // Past the age on the server's clock, single completions trim the
        // aged records, a thousand a call, until only they are left.
        common::past(&q, last + AGE.as_millis() as u64).await;
        let mut probes = 0;
        while kept(raw.clone()).await > probes {
            q.enqueue(&0u32).await.unwrap();
            probes += 1;
            expected += 1;
            completions(expected).await;
        }
        samples.push((at_end, memory_at_end, probes, used_memory(&mut raw).await));
    }
    consumer.shutdown().await.unwrap();

    println!(
        "retention by age over 100,000 jobs ({:?}): empty server {empty} B, first 10,000 jobs waiting {filled} B",
        started.elapsed()
    );
    println!(
        "| jobs completed | records kept at the wave's end | used_memory (B) | after 500 ms: records kept | used_memory (B) |"
    );
    for (wave, (at_end, memory_at_end, probes, rested)) in samples.iter().enumerate() {
        println!(
            "| {} | {at_end} | {memory_at_end} | {probes} | {rested} |",
            (wave as u32 + 1) * WAVE
        );
    }
    let rested: Vec<u64> = samples.iter().map(|s| s.3).collect();
    let (low, high) = (*rested.iter().min().unwrap(), *rested.iter().max().unwrap());
    assert!(
        high - low <= MARGIN,
        "used_memory once the records aged out moved by {} B over 100,000 jobs: {rested:?}",
        high - low
    );
}
