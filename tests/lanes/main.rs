//! Lanes: fair turns between lanes, caps enforced by the claim script and
//! given back exactly once on every exit, weights, priorities within a
//! lane, operator calls on laned jobs, and the sweep's repairs.

mod caps;
#[path = "../common/mod.rs"]
mod common;
mod fairness;
mod operations;
mod repair;

use std::time::Duration;

use common::setup_with;
use echomq::lanes::LaneState;
use echomq::{EnqueueOptions, Lease, Queue, QueueOptions};

const LEASE: Duration = Duration::from_secs(30);

fn lane(l: &str) -> EnqueueOptions {
    EnqueueOptions::new().lane(l)
}

/// Enqueues `n` jobs (payload = their number) on lane `l`, a thousand per call.
async fn fill(q: &Queue, l: &str, n: usize) -> Vec<String> {
    let jobs: Vec<(usize, EnqueueOptions)> = (0..n).map(|i| (i, lane(l))).collect();
    q.enqueue_bulk_with(&jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect()
}

/// Claims one job at a time, `n` times (or until none is ready); returns the leases.
async fn claim_one_by_one(q: &Queue, n: usize) -> Vec<Lease> {
    let mut out = Vec::new();
    for _ in 0..n {
        match q.claim(1, LEASE).await.unwrap().pop() {
            Some(l) => out.push(l),
            None => break,
        }
    }
    out
}

/// The lanes of `leases`, in order ("" for none).
fn lanes_of(leases: &[Lease]) -> Vec<String> {
    leases.iter().map(|l| l.lane().unwrap_or("").to_owned()).collect()
}

async fn active_of(q: &Queue, l: &str) -> u64 {
    q.lane(l).await.unwrap().active
}

/// A queue with lane "l" capped at 2 and three of its jobs: two leased, one
/// blocked behind them.
async fn capped(name: &str) -> (echomq::server::LocalServer, Queue, Vec<Lease>, String) {
    let (s, q) = setup_with(name, QueueOptions::new().max_attempts(5)).await;
    q.set_lane_cap("l", Some(2)).await.unwrap();
    let ids = fill(&q, "l", 3).await;
    let leases = q.claim(3, LEASE).await.unwrap();
    assert_eq!(leases.len(), 2);
    assert_eq!(active_of(&q, "l").await, 2);
    assert_eq!(q.lane("l").await.unwrap().state, LaneState::Blocked);
    (s, q, leases, ids[2].clone())
}
