//! A queue's history against a real server: the counts its workers add
//! up exactly, land in bounded (expiring) buckets, and cost commands per
//! announcement, never per job.

mod common;

use std::time::Duration;

use common::{eventually, raw, unique};
use echomq::admin::{ANNOUNCE_EVERY, Bucket, HOURS_KEPT, MINUTES_KEPT, Span};
use echomq::{Client, HandlerError, Job, Queue, QueueOptions, Worker, WorkerHandle};

/// A worker whose handler fails job `n` for good when `n % 5 == 0`,
/// retries it once at once when `n % 5 == 1`, completes the rest.
fn worker(queue: &Queue) -> WorkerHandle {
    Worker::new()
        .queue(queue.clone(), |job: Job<u32>| async move {
            match job.payload() % 5 {
                0 => Err(HandlerError::fail("no good")),
                1 if job.attempt() == 1 => Err(HandlerError::retry_after("once more", Duration::ZERO)),
                _ => Ok(()),
            }
        })
        .concurrency(8)
        .spawn()
        .unwrap()
}

async fn run(queue: &Queue, n: u32) {
    let payloads: Vec<u32> = (0..n).collect();
    let was = queue.counts().await.unwrap();
    queue.enqueue_bulk(&payloads).await.unwrap();
    let w = worker(queue);
    let fails = u64::from(n.div_ceil(5));
    let (fails, done) = (was.failed + fails, was.completed + u64::from(n) - fails);
    assert!(
        eventually(Duration::from_secs(30), || async {
            let c = queue.counts().await.unwrap();
            c.completed == done && c.failed == fails
        })
        .await,
        "every job settles"
    );
    w.shutdown().await.unwrap();
}

fn sum(buckets: &[Bucket]) -> (u64, u64, u64, u64) {
    buckets.iter().fold((0, 0, 0, 0), |(c, f, r, w), b| {
        (c + b.completed, f + b.failed, r + b.retried, w + b.waited)
    })
}

#[tokio::test]
async fn counts_add_up_exactly_after_jobs_through_a_worker() {
    let server = echomq::server::LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = client
        .queue_with(&unique("hist"), QueueOptions::new().max_attempts(2))
        .await
        .unwrap();
    for span in Span::ALL {
        assert_eq!(sum(&queue.history(span).await.unwrap()), (0, 0, 0, 0), "{span}");
    }
    run(&queue, 100).await;
    let now = queue.server_time_ms().await.unwrap();
    for span in Span::ALL {
        let h = queue.history(span).await.unwrap();
        assert_eq!(h.len(), span.buckets(), "{span}");
        // 80 completed (20 of them after a retry), 20 failed for good,
        // 100 first attempts started.
        assert_eq!(sum(&h), (80, 20, 20, 100), "{span}");
        let width = u64::try_from(span.bucket().as_millis()).unwrap();
        assert!(h.windows(2).all(|w| w[1].start_ms == w[0].start_ms + width), "{span}");
        let last = h.last().unwrap();
        assert!(
            last.start_ms <= now && now < last.start_ms + width,
            "{span}: {last:?} at {now}"
        );
        let with = h.iter().filter(|b| b.waited > 0).collect::<Vec<_>>();
        assert!(with.iter().all(|b| b.mean_wait_ms().is_some()), "{span}");
    }
    // A second worker's counts add to the first's.
    run(&queue, 10).await;
    assert_eq!(
        sum(&queue.history(Span::Hour).await.unwrap()),
        (80 + 8, 20 + 2, 20 + 2, 110)
    );
}

#[tokio::test]
async fn buckets_expire_so_they_stay_bounded() {
    let server = echomq::server::LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let name = unique("hist-ttl");
    let queue = client.queue(&name).await.unwrap();
    run(&queue, 20).await;
    let mut c = raw(&server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("emq:{{{name}}}:stats:*"))
        .query_async(&mut c)
        .await
        .unwrap();
    // A minute key and an hour key per announcement time (two of each
    // when the run crossed a minute).
    assert!((2..=4).contains(&keys.len()), "{keys:?}");
    for k in &keys {
        let ttl: i64 = redis::cmd("TTL").arg(k).query_async(&mut c).await.unwrap();
        let kept = if k.contains(":stats:m:") {
            MINUTES_KEPT
        } else {
            HOURS_KEPT
        };
        let most = i64::try_from(kept.as_secs()).unwrap() + 3_600;
        assert!(ttl > 0 && ttl <= most, "{k}: ttl {ttl}");
    }
    // Obliterate takes them with the rest of the queue.
    queue.obliterate(false).await.unwrap();
    let left: Vec<String> = redis::cmd("KEYS")
        .arg(format!("emq:{{{name}}}:stats:*"))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
}

/// Calls of each command so far, from `INFO commandstats`.
async fn calls(c: &mut redis::aio::MultiplexedConnection) -> std::collections::HashMap<String, u64> {
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(c).await.unwrap();
    stats
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let n = rest.split("calls=").nth(1)?.split(',').next()?.parse().ok()?;
            Some((name.to_owned(), n))
        })
        .collect()
}

/// Commands of `names` between two `calls` readings.
fn between(
    a: &std::collections::HashMap<String, u64>,
    b: &std::collections::HashMap<String, u64>,
    names: &[&str],
) -> u64 {
    names
        .iter()
        .map(|n| b.get(*n).unwrap_or(&0) - a.get(*n).unwrap_or(&0))
        .sum()
}

// The history's writes come with announcements: a run of 400 jobs makes
// no more of them than a run of 20. Its EXPIREs stand for them (no script
// calls EXPIRE, and each write of counts sets the expiry of its minute and
// its hour key, beside its at most five HINCRBYs each; the scripts' own
// HINCRBYs on job records hide the history's in the HINCRBY figure). The
// whole run's commands per job are printed for the record (`--nocapture`).
#[tokio::test]
async fn the_history_costs_commands_per_announcement_not_per_job() {
    let server = echomq::server::LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut c = raw(&server).await;
    let queue = client
        .queue_with(&unique("hist-cost"), QueueOptions::new().max_attempts(2))
        .await
        .unwrap();
    let mut writes = Vec::new();
    for n in [20_u32, 400] {
        let before = calls(&mut c).await;
        let started = std::time::Instant::now();
        run(&queue, n).await;
        let after = calls(&mut c).await;
        let announcements = 2 + started.elapsed().as_secs() / ANNOUNCE_EVERY.as_secs();
        let w = between(&before, &after, &["expire"]);
        assert!(
            w <= 2 * announcements,
            "{n} jobs: {w} history EXPIREs in {announcements} announcements"
        );
        let total: u64 = after.values().sum::<u64>() - before.values().sum::<u64>();
        eprintln!(
            "{n} jobs: {total} commands ({:.2} per job), {w} history EXPIREs, {} announcements at most",
            total as f64 / f64::from(n),
            announcements
        );
        writes.push((w, announcements));
    }
    // Both runs wrote their counts (one announcement at least has some).
    assert!(writes.iter().all(|(w, _)| *w >= 2), "{writes:?}");
    assert_eq!(sum(&queue.history(Span::Hour).await.unwrap()).0, 16 + 320);
}
