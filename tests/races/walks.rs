//! Listing while jobs move: no job twice, every job that stayed.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use echomq::{Consumer, Job, JobState, QueueOptions, Retention};

use super::common;
use super::common::setup_with;

/// A small deterministic generator (xorshift64*), so a failing walk can be
/// replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A priority in -8..=7.
    fn priority(&mut self) -> i8 {
        (self.next() % 16) as i8 - 8
    }
}

/// The members of a sorted set, in one read.
async fn members(c: &mut redis::aio::MultiplexedConnection, key: &str) -> HashSet<String> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async::<Vec<String>>(c)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

/// Walks `state` page by page (`limit` a page); returns the ids shown, in order.
async fn walk(q: &echomq::Queue, state: JobState, limit: usize) -> Vec<String> {
    let mut shown = Vec::new();
    let mut after: Option<echomq::admin::ListCursor> = None;
    loop {
        let page = q.list(state, after.as_ref(), limit).await.unwrap();
        shown.extend(page.jobs.into_iter().map(|j| j.id));
        match page.next {
            Some(c) => after = Some(c),
            None => return shown,
        }
    }
}

// Listing while jobs move, all at once: a consumer completes jobs and a
// producer enqueues jobs of random priorities (so they land before and
// after the cursor) while pending and completed are walked 20 at a time,
// and completed records are trimmed at the far end. Each walk shows no job
// twice, and shows every job that was in the state both before and after
// the walk (a job leaves pending or completed for good here, so those
// stayed for the whole walk).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walks_while_jobs_move() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    let started = Instant::now();
    let opts = QueueOptions::new().keep_completed(Retention::Newest(1500));
    let (s, q) = setup_with("walk-moving", opts).await;
    let mut raw = common::raw(&s).await;
    let base = format!("emq:{{{}}}:", q.name());
    let mut rng = Rng(seed);
    let with_priorities = |rng: &mut Rng, n: u32| -> Vec<(u32, echomq::EnqueueOptions)> {
        (0..n)
            .map(|i| (i, echomq::EnqueueOptions::new().priority(rng.priority())))
            .collect()
    };
    // A full completed set (trimmed to about 1,500), then a backlog.
    q.enqueue_bulk(&(0..2000u32).collect::<Vec<_>>()).await.unwrap();
    loop {
        let leases = q.claim(500, Duration::from_secs(60)).await.unwrap();
        if leases.is_empty() {
            break;
        }
        let items: Vec<_> = leases.iter().map(|l| (l, &echomq::Settle::Complete)).collect();
        for r in q.settle_many(&items).await.unwrap() {
            r.unwrap();
        }
    }
    q.enqueue_bulk_with(&with_priorities(&mut rng, 3000)).await.unwrap();

    let consumer = Consumer::new(q.clone(), |_job: Job<u32>| async {
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok(())
    })
    .concurrency(4)
    // No job leased ahead: a job leaves pending once and never comes back.
    .prefetch(0)
    .spawn()
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let producer = {
        let (q, stop, mut rng) = (q.clone(), stop.clone(), Rng(seed.rotate_left(17) | 1));
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                q.enqueue_bulk_with(&with_priorities(&mut rng, 5)).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };

    let mut figures = Vec::new();
    for (state, set) in [
        (JobState::Pending, "pending"),
        (JobState::Completed, "completed"),
        (JobState::Pending, "pending"),
        (JobState::Completed, "completed"),
    ] {
        let key = format!("{base}{set}");
        let before = members(&mut raw, &key).await;
        let shown = walk(&q, state, 20).await;
        let after = members(&mut raw, &key).await;
        let unique: HashSet<&String> = shown.iter().collect();
        assert_eq!(
            unique.len(),
            shown.len(),
            "seed {seed}: a {set} walk showed a job twice"
        );
        let missed: Vec<&String> = before.intersection(&after).filter(|id| !unique.contains(id)).collect();
        assert!(
            missed.is_empty(),
            "seed {seed}: a {set} walk left out {} jobs that stayed {set}: {missed:?}",
            missed.len()
        );
        // The walk raced real movement: jobs left the state and others came.
        let (left, came) = (before.difference(&after).count(), after.difference(&before).count());
        assert!(
            left > 20 && came > 20,
            "seed {seed}: {set} barely moved: {left} left, {came} came"
        );
        figures.push(format!("{set}: {} shown, {left} left, {came} came", shown.len()));
    }
    stop.cancel();
    producer.await.unwrap();
    consumer.shutdown().await.unwrap();
    println!(
        "walks while jobs move (seed {seed}, {:?}): {}",
        started.elapsed(),
        figures.join("; ")
    );
}
