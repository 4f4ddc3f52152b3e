//! Turns between lanes: a big lane cannot starve a small one, weights
//! share the claims, priorities hold within a lane, unlaned jobs take a
//! turn.

use std::collections::{BTreeMap, BTreeSet};

use super::common::setup;
use super::{LEASE, claim_one_by_one, fill, lane, lanes_of};

// A lane with 100,000 pending jobs cannot starve one with 10: the small lane's jobs are all among the first 20 claimed (two lanes alternate, one job each per turn).
#[tokio::test]
async fn a_big_lane_cannot_starve_a_small_one() {
    let (_s, q) = setup("starve").await;
    let t0 = std::time::Instant::now();
    fill(&q, "big", 100_000).await;
    let filled = t0.elapsed();
    let small = fill(&q, "small", 10).await;
    assert_eq!(q.counts().await.unwrap().pending, 100_010);
    let t1 = std::time::Instant::now();
    let first = claim_one_by_one(&q, 20).await;
    let claimed = t1.elapsed();
    let got: BTreeSet<&str> = first
        .iter()
        .filter(|l| l.lane() == Some("small"))
        .map(|l| l.id())
        .collect();
    assert_eq!(
        got,
        small.iter().map(String::as_str).collect(),
        "{:?}",
        lanes_of(&first)
    );
    // The lanes alternate exactly.
    for (i, l) in first.iter().enumerate() {
        assert_eq!(l.lane(), Some(if i % 2 == 0 { "big" } else { "small" }), "claim {i}");
    }
    // In batches the bound is the same: a batch of 20 holds all 10.
    let (_s2, q2) = setup("starve-batch").await;
    fill(&q2, "big", 5_000).await;
    fill(&q2, "small", 10).await;
    let batch = q2.claim(20, LEASE).await.unwrap();
    assert_eq!(batch.iter().filter(|l| l.lane() == Some("small")).count(), 10);
    eprintln!("100,000 laned jobs enqueued in {filled:?}; 20 single claims in {claimed:?}");
}

// Within a lane, higher priorities go first, then enqueue order; across lanes, turns decide.
#[tokio::test]
async fn priorities_hold_within_a_lane() {
    let (_s, q) = setup("prio").await;
    let low = q.enqueue_with(&0, &lane("a").priority(-5)).await.unwrap().id;
    let mid1 = q.enqueue_with(&1, &lane("a")).await.unwrap().id;
    let mid2 = q.enqueue_with(&2, &lane("a")).await.unwrap().id;
    let high = q.enqueue_with(&3, &lane("a").priority(9)).await.unwrap().id;
    let other = q.enqueue_with(&4, &lane("b").priority(-100)).await.unwrap().id;
    let order: Vec<String> = claim_one_by_one(&q, 5)
        .await
        .iter()
        .map(|l| l.id().to_owned())
        .collect();
    // a's turn first (it was ready first), then b's, then the rest of a's in priority order.
    assert_eq!(order, vec![high, other, mid1, mid2, low]);
}

// Weights: while both lanes are backlogged, a lane of weight 3 gets 3 claims for each 1 of a lane of weight 1 (exactly, give or take one turn), in single claims and in batches.
#[tokio::test]
async fn weights_share_the_claims() {
    for batch in [1, 8] {
        let (_s, q) = setup("weights").await;
        q.set_lane_weight("heavy", Some(3)).await.unwrap();
        fill(&q, "heavy", 1_000).await;
        fill(&q, "light", 1_000).await;
        let mut claimed = Vec::new();
        while claimed.len() < 400 {
            claimed.extend(q.claim(batch, LEASE).await.unwrap());
        }
        let heavy = claimed.iter().filter(|l| l.lane() == Some("heavy")).count() as i64;
        let light = claimed.len() as i64 - heavy;
        assert!(
            (heavy - 3 * light).abs() <= 3,
            "batch {batch}: heavy {heavy}, light {light} (want 3:1 within one turn)"
        );
        assert_eq!(q.lane("heavy").await.unwrap().weight, 3);
        assert_eq!(q.lane("light").await.unwrap().weight, 1);
    }
}

// Jobs without a lane take turns as one more lane (of the default weight), so neither they nor the lanes starve.
#[tokio::test]
async fn unlaned_jobs_take_a_turn_like_a_lane() {
    let (_s, q) = setup("mixed").await;
    let plain: Vec<u32> = (0..100).collect();
    q.enqueue_bulk(&plain).await.unwrap();
    fill(&q, "a", 100).await;
    fill(&q, "b", 100).await;
    let first = claim_one_by_one(&q, 30).await;
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for l in lanes_of(&first) {
        *per.entry(l).or_default() += 1;
    }
    assert_eq!(
        per,
        BTreeMap::from([("".into(), 10), ("a".into(), 10), ("b".into(), 10)])
    );
    // Unlaned jobs keep their priority order among themselves.
    let plain_order: Vec<u64> = first
        .iter()
        .filter(|l| l.lane().is_none())
        .map(|l| l.decode::<u64>().unwrap())
        .collect();
    assert_eq!(plain_order, (0..10).collect::<Vec<u64>>());
    // Once the lanes are done, unlaned jobs are claimed as before, in bulk.
    for l in q.claim(1000, LEASE).await.unwrap() {
        assert!(l.lane().is_some() || l.decode::<u64>().unwrap() >= 10);
    }
}
