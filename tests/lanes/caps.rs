//! Lane caps: a cap bounds a lane's active jobs, every exit gives the
//! slot back exactly once, defaults apply, and claims stay bounded over
//! many capped lanes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use echomq::lanes::LaneState;
use echomq::{Consumer, Error, Job, Outcome, QueueOptions, Reaper, Retention, Settle, WorkerEvent};

use super::common;
use super::common::{raw, setup, setup_with};
use super::{LEASE, active_of, capped, fill, lanes_of};

// A cap bounds a lane's active jobs: claims skip a lane at its cap (blocked) and lease the others' jobs.
#[tokio::test]
async fn a_cap_bounds_active_jobs() {
    let (_s, q) = setup("cap").await;
    q.set_lane_cap("a", Some(2)).await.unwrap();
    fill(&q, "a", 10).await;
    fill(&q, "b", 10).await;
    let got = q.claim(10, LEASE).await.unwrap();
    assert_eq!(got.iter().filter(|l| l.lane() == Some("a")).count(), 2);
    assert_eq!(got.iter().filter(|l| l.lane() == Some("b")).count(), 8);
    let a = q.lane("a").await.unwrap();
    assert_eq!(
        (a.pending, a.active, a.cap, a.own_cap, a.state),
        (8, 2, Some(2), Some(2), LaneState::Blocked)
    );
    // Nothing more of a until a slot comes back.
    let more = q.claim(10, LEASE).await.unwrap();
    assert!(more.iter().all(|l| l.lane() == Some("b")), "{:?}", lanes_of(&more));
    // A higher cap readies the lane at once; removing it (no default) lifts the cap.
    q.set_lane_cap("a", Some(3)).await.unwrap();
    assert_eq!(q.lane("a").await.unwrap().state, LaneState::Ready);
    assert_eq!(lanes_of(&q.claim(10, LEASE).await.unwrap()), vec!["a"]);
    q.set_lane_cap("a", None).await.unwrap();
    assert_eq!(q.claim(10, LEASE).await.unwrap().len(), 7);
    let a = q.lane("a").await.unwrap();
    assert_eq!((a.pending, a.active, a.cap, a.state), (0, 10, None, LaneState::Idle));
}

// Every way a lease ends gives its lane's slot back exactly once: the blocked job is claimable after it, and a repeated settlement gives nothing back again.
#[tokio::test]
async fn every_exit_gives_the_slot_back_once() {
    let exits: Vec<(&str, Settle)> = vec![
        ("complete", Settle::Complete),
        ("return", Settle::Return { result: "7".into() }),
        (
            "retry now",
            Settle::Retry {
                delay: Some(Duration::ZERO),
                error: "e".into(),
            },
        ),
        (
            "retry later",
            Settle::Retry {
                delay: Some(Duration::from_secs(60)),
                error: "e".into(),
            },
        ),
        ("fail", Settle::Fail { reason: "no".into() }),
        ("release", Settle::Release),
        (
            "snooze",
            Settle::Snooze {
                delay: Duration::from_secs(60),
            },
        ),
        ("cancel", Settle::Cancel { reason: String::new() }),
    ];
    for (what, op) in exits {
        let (_s, q, leases, blocked) = capped("exit").await;
        let r = q.settle_many(&[(&leases[0], &op)]).await.unwrap();
        assert!(r[0].is_ok(), "{what}: {r:?}");
        assert_eq!(active_of(&q, "l").await, 1, "{what}: one slot back");
        // Sent again (a lost reply): already settled, no second slot.
        let again = q.settle_many(&[(&leases[0], &op)]).await.unwrap();
        assert_eq!(again[0].as_ref().unwrap().outcome, Outcome::AlreadySettled, "{what}");
        assert_eq!(active_of(&q, "l").await, 1, "{what}: given back once");
        // The freed slot goes to the next job of the lane (a job retried or released now comes first: it keeps its place).
        let next = q.claim(5, LEASE).await.unwrap();
        assert_eq!(next.len(), 1, "{what}");
        if !matches!(what, "retry now" | "release") {
            assert_eq!(next[0].id(), blocked, "{what}");
        }
        assert_eq!(active_of(&q, "l").await, 2, "{what}");
        // Settle the rest: every slot comes back.
        for l in [&leases[1], &next[0]] {
            q.complete(l).await.unwrap();
        }
        let rest = q.claim(5, LEASE).await.unwrap();
        for l in &rest {
            q.complete(l).await.unwrap();
        }
        let info = q.lane("l").await.unwrap();
        assert_eq!(info.active, 0, "{what}: {info:?}");
    }
}

// The low-level calls and retention 0 give the slot back too; a stale token gives nothing back.
#[tokio::test]
async fn low_level_exits_and_stale_tokens() {
    let (_s, q) = setup_with("lowlevel", QueueOptions::new().keep_completed(Retention::None)).await;
    q.set_lane_cap("l", Some(1)).await.unwrap();
    fill(&q, "l", 3).await;
    let first = q.claim(3, LEASE).await.unwrap().pop().unwrap();
    q.release(&first).await.unwrap();
    assert_eq!(active_of(&q, "l").await, 0);
    let second = q.claim(3, LEASE).await.unwrap().pop().unwrap();
    assert_eq!(second.id(), first.id(), "a released job keeps its place");
    // The old lease of the same job is stale: refused, nothing given back.
    assert!(matches!(q.complete(&first).await, Err(Error::LeaseLost { .. })));
    assert_eq!(active_of(&q, "l").await, 1);
    q.complete(&second).await.unwrap();
    assert!(
        matches!(q.job(second.id()).await, Err(Error::JobNotFound(_))),
        "record deleted at completion"
    );
    assert_eq!(active_of(&q, "l").await, 0);
    let third = q.claim(3, LEASE).await.unwrap().pop().unwrap();
    q.snooze(&third, Duration::from_millis(1)).await.unwrap();
    assert_eq!(active_of(&q, "l").await, 0);
}

// An expired lease, reaped, gives its slot back once, however many reapers race; the blocked job then runs.
#[tokio::test]
async fn a_reaped_lease_gives_the_slot_back() {
    let (_s, q) = setup("reap").await;
    q.set_lane_cap("l", Some(1)).await.unwrap();
    let ids = fill(&q, "l", 2).await;
    let lease = q.claim(2, Duration::from_millis(50)).await.unwrap().pop().unwrap();
    assert!(q.claim(2, LEASE).await.unwrap().is_empty(), "the lane is at its cap");
    common::past(&q, lease.deadline_ms()).await;
    let reapers: Vec<_> = (0..3).map(|_| Reaper::new(q.clone())).collect();
    let mut requeued = 0;
    for r in &reapers {
        requeued += r.run_once().await.unwrap().requeued.len();
    }
    assert_eq!(requeued, 1);
    assert_eq!(active_of(&q, "l").await, 0);
    // The reaped job went back to its place, first in its lane.
    let next = q.claim(2, LEASE).await.unwrap();
    assert_eq!(lanes_of(&next), vec!["l"]);
    assert_eq!(next[0].id(), ids[0]);
    assert_eq!(q.job(&ids[0]).await.unwrap().stalls, 1);
}

// A Consumer sees the lane (Job::lane, WorkerEvent::Claimed, JobInfo::lane), and a cap of 1 holds across four consumers.
#[tokio::test]
async fn consumers_share_a_capped_lane() {
    let (_s, q) = setup("consumers").await;
    q.set_lane_cap("one", Some(1)).await.unwrap();
    let ids = fill(&q, "one", 12).await;
    fill(&q, "free", 12).await;
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for _ in 0..4 {
        let (running, most, seen) = (running.clone(), most.clone(), seen.clone());
        let claimed = seen.clone();
        let h = Consumer::new(q.clone(), move |job: Job<u64>| {
            let (running, most) = (running.clone(), most.clone());
            async move {
                if job.lane() == Some("one") {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                }
                Ok(())
            }
        })
        .concurrency(4)
        .observer(move |e| {
            if let WorkerEvent::Claimed { lane, .. } = e {
                claimed.lock().unwrap().push(lane.map(str::to_owned));
            }
        })
        .spawn()
        .unwrap();
        handles.push(h);
    }
    assert!(
        common::eventually(Duration::from_secs(20), || async {
            q.counts().await.unwrap().completed == 24
        })
        .await
    );
    for h in handles {
        h.shutdown().await.unwrap();
    }
    assert_eq!(most.load(Ordering::SeqCst), 1, "the cap of 1 held across consumers");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.iter().filter(|l| l.as_deref() == Some("one")).count(), 12);
    assert_eq!(q.job(&ids[0]).await.unwrap().lane.as_deref(), Some("one"));
    assert_eq!(active_of(&q, "one").await, 0);
}

// Defaults: a default cap applies to lanes without their own, and changing it settles every lane; lane_defaults and lanes() read them.
#[tokio::test]
async fn default_cap_and_weight() {
    let (_s, q) = setup("defaults").await;
    for l in ["a", "b", "c"] {
        fill(&q, l, 5).await;
    }
    q.set_lane_cap("c", Some(3)).await.unwrap();
    q.set_lane_default_cap(Some(1)).await.unwrap();
    q.set_lane_default_weight(Some(2)).await.unwrap();
    let d = q.lane_defaults().await.unwrap();
    assert_eq!((d.cap, d.weight), (Some(1), 2));
    let got = q.claim(100, LEASE).await.unwrap();
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for l in lanes_of(&got) {
        *per.entry(l).or_default() += 1;
    }
    assert_eq!(per, BTreeMap::from([("a".into(), 1), ("b".into(), 1), ("c".into(), 3)]));
    // Raising the default readies the blocked lanes at once.
    q.set_lane_default_cap(Some(2)).await.unwrap();
    assert_eq!(q.lane("a").await.unwrap().state, LaneState::Ready);
    assert_eq!(q.claim(100, LEASE).await.unwrap().len(), 2);
    // The listing walks every lane with jobs.
    let mut names = BTreeSet::new();
    let mut after = None;
    loop {
        let page = q.lanes(after.as_ref(), 1).await.unwrap();
        assert_eq!(page.defaults.cap, Some(2));
        for l in page.lanes {
            assert_eq!(l.weight, 2);
            names.insert(l.name);
        }
        match page.next {
            Some(c) => after = Some(c.to_string().parse().unwrap()),
            None => break,
        }
    }
    assert_eq!(names, BTreeSet::from(["a".into(), "b".into(), "c".into()]));
    q.set_lane_default_cap(None).await.unwrap();
    q.set_lane_default_weight(None).await.unwrap();
    let d = q.lane_defaults().await.unwrap();
    assert_eq!((d.cap, d.weight), (None, 1));
    // a and b have no cap now; c keeps its own (3, all taken).
    assert_eq!(q.claim(100, LEASE).await.unwrap().len(), 3 + 3);
    assert_eq!(q.lane("c").await.unwrap().state, LaneState::Blocked);
}

// A claim looks at a bounded number of lanes: lanes found over a cap lowered behind their back are blocked a few at a time, a wake token stays, and the next claims reach the ready lane.
#[tokio::test]
async fn claims_stay_bounded_when_many_lanes_are_over_their_cap() {
    let (s, q) = setup("bounded").await;
    for i in 0..40 {
        fill(&q, &format!("l{i:02}"), 2).await;
    }
    assert_eq!(q.claim(40, LEASE).await.unwrap().len(), 40, "one job of each lane");
    fill(&q, "z", 1).await;
    // A default cap of 1 written without settling the lanes: every lane but
    // z is over it yet still ready in the ring.
    let mut c = raw(&s).await;
    let _: () = redis::cmd("HSET")
        .arg(format!("emq:{{{}}}:lanes:cap", q.name()))
        .arg("")
        .arg(1)
        .query_async(&mut c)
        .await
        .unwrap();
    let mut claims = 0;
    let got = loop {
        claims += 1;
        let got = q.claim(1, LEASE).await.unwrap();
        if !got.is_empty() || claims > 10 {
            break got;
        }
        let wake: i64 = redis::cmd("LLEN")
            .arg(format!("emq:{{{}}}:wake", q.name()))
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(wake > 0, "a claim cut short leaves a wake token");
    };
    assert_eq!(lanes_of(&got), vec!["z"]);
    assert!(claims <= 3, "17 lanes looked at per claim of 1: {claims} claims");
    assert_eq!(q.lane("l00").await.unwrap().state, LaneState::Blocked);
}
