//! Torn writes of lane bookkeeping: the sweep repairs them, and claims
//! meanwhile never lease a job around its lane nor strand a live one.

use std::collections::BTreeSet;

use echomq::EnqueueOptions;
use echomq::lanes::LaneState;

use super::common::{raw, setup};
use super::{LEASE, active_of, claim_one_by_one, fill, lane, lanes_of};

// The sweep repairs lane bookkeeping a torn write broke: a slot held by no active job, an active job holding none, a lane missing from the ring, a job missing from its lane, a lane in the ring without jobs.
#[tokio::test]
async fn the_sweep_repairs_lanes() {
    let (s, q) = setup("sweep").await;
    q.set_lane_cap("a", Some(1)).await.unwrap();
    let a = fill(&q, "a", 3).await;
    let b = fill(&q, "b", 3).await;
    let leased = q.claim(2, LEASE).await.unwrap();
    assert_eq!(lanes_of(&leased), vec!["a", "b"]);
    assert_eq!(
        q.sweep(100).await.unwrap().repaired,
        0,
        "a healthy queue needs no repair"
    );
    let mut c = raw(&s).await;
    let k = |x: &str| format!("emq:{{{}}}:{x}", q.name());
    let cmd = |args: &[&str]| {
        let mut r = redis::cmd(args[0]);
        for a in &args[1..] {
            r.arg(*a);
        }
        r
    };
    // A leaked slot: a ghost holds a's only slot, so a would never run again.
    let _: () = cmd(&["ZADD", &k("lanes:active"), "0", "a\0ghost"])
        .query_async(&mut c)
        .await
        .unwrap();
    q.complete(&leased[0]).await.unwrap();
    assert_eq!(active_of(&q, "a").await, 1);
    assert_eq!(q.lane("a").await.unwrap().state, LaneState::Blocked);
    // b's active job lost its slot (an undercount), b left the ring, and one of b's pending jobs left its lane.
    let _: () = cmd(&["ZREM", &k("lanes:active"), &format!("b\0{}", leased[1].id())])
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = cmd(&["ZREM", &k("lanes:ring"), "b"]).query_async(&mut c).await.unwrap();
    let _: () = cmd(&["ZREM", &k("lane:b"), &b[2]]).query_async(&mut c).await.unwrap();
    // A dead lane in the ring.
    let _: () = cmd(&["ZADD", &k("lanes:ring"), "1", "ghost-lane"])
        .query_async(&mut c)
        .await
        .unwrap();

    let r = q.sweep(100).await.unwrap();
    assert!(r.repaired >= 5, "{r:?}");
    assert_eq!(q.sweep(100).await.unwrap().repaired, 0, "the sweep converged");
    let la = q.lane("a").await.unwrap();
    assert_eq!((la.active, la.pending, la.state), (0, 2, LaneState::Ready));
    let lb = q.lane("b").await.unwrap();
    assert_eq!((lb.active, lb.pending, lb.state), (1, 2, LaneState::Ready));
    assert_eq!(q.lane("ghost-lane").await.unwrap().state, LaneState::Empty);
    // Everything runs: a's two, b's two (b[2] among them).
    let mut ids: Vec<String> = Vec::new();
    loop {
        let got = q.claim(10, LEASE).await.unwrap();
        if got.is_empty() {
            break;
        }
        for l in got {
            ids.push(l.id().to_owned());
            q.complete(&l).await.unwrap();
        }
    }
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert!(ids.contains(&b[2]) && ids.contains(&a[1]) && ids.contains(&a[2]));
}

// A torn write that lost the whole ring leaves laned jobs in pending: unlaned claims skip them (never leasing a job around its lane), and the sweep puts their lane back.
#[tokio::test]
async fn a_lost_ring_is_skipped_then_repaired() {
    let (s, q) = setup("lostring").await;
    q.set_lane_cap("a", Some(1)).await.unwrap();
    let a = fill(&q, "a", 2).await;
    let plain = q.enqueue(&"plain").await.unwrap();
    let mut c = raw(&s).await;
    let _: () = redis::cmd("DEL")
        .arg(format!("emq:{{{}}}:lanes:ring", q.name()))
        .query_async(&mut c)
        .await
        .unwrap();
    let got = q.claim(10, LEASE).await.unwrap();
    assert_eq!(got.iter().map(|l| l.id().to_owned()).collect::<Vec<_>>(), vec![plain]);
    assert_eq!(q.counts().await.unwrap().pending, 2, "the laned jobs stay pending");
    assert!(q.claim(10, LEASE).await.unwrap().is_empty());
    assert!(q.sweep(100).await.unwrap().repaired >= 1);
    let got = q.claim(10, LEASE).await.unwrap();
    assert_eq!(
        got.iter().map(|l| l.id().to_owned()).collect::<Vec<_>>(),
        vec![a[0].clone()],
        "cap 1 holds"
    );
}

// A lane holding a stray id (a torn write, or a key left from before an
// obliterate) that a live pending job of the queue now uses: the claim
// drops the stray from the lane, and the live job stays claimable.
#[tokio::test]
async fn a_stray_lane_entry_does_not_strand_a_live_job() {
    let (s, q) = setup("lane-stray").await;
    let live = q
        .enqueue_with(&1u32, &EnqueueOptions::new().id("job-a"))
        .await
        .unwrap()
        .id;
    let mut c = raw(&s).await;
    let lane_key = format!("emq:{{{}}}:lane:L", q.name());
    let _: () = redis::cmd("ZADD")
        .arg(&lane_key)
        .arg(0)
        .arg(&live)
        .query_async(&mut c)
        .await
        .unwrap();
    let laned = q.enqueue_with(&2u32, &lane("L")).await.unwrap().id;
    let mut claimed = BTreeSet::new();
    for l in claim_one_by_one(&q, 5).await {
        claimed.insert(l.id().to_owned());
    }
    assert_eq!(claimed, BTreeSet::from([live.clone(), laned]), "both jobs claimed once");
    assert_eq!(q.counts().await.unwrap().pending, 0);
}
