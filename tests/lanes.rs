//! Lanes: fair turns between lanes, caps enforced by the claim script and
//! given back exactly once on every exit, weights, priorities within a
//! lane, operator calls on laned jobs, and the sweep's repairs.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{raw, setup, setup_with};
use echomq::admin::Cancel;
use echomq::lanes::{LaneState, MAX_LANE_WEIGHT};
use echomq::{
    Consumer, EnqueueOptions, EnqueueStatus, Error, Job, JobState, Lease, Outcome, Queue, QueueOptions, Reaper,
    Retention, Settle, WorkerEvent,
};

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

// Cancel: a waiting laned job leaves its lane at once; a running one ends cancelled at its settlement and gives its slot back.
#[tokio::test]
async fn cancel_waiting_and_active() {
    let (_s, q, leases, blocked) = capped("cancel").await;
    assert_eq!(q.cancel(&blocked).await.unwrap(), Cancel::Cancelled);
    let l = q.lane("l").await.unwrap();
    assert_eq!((l.pending, l.active, l.state), (0, 2, LaneState::Idle));
    assert_eq!(q.cancel(leases[0].id()).await.unwrap(), Cancel::Requested);
    assert_eq!(
        active_of(&q, "l").await,
        2,
        "a request holds the slot until the job ends"
    );
    let done = q.retry(&leases[0], None, "stopped").await.unwrap();
    assert_eq!(done.outcome, Outcome::Cancelled);
    assert_eq!(active_of(&q, "l").await, 1);
    q.complete(&leases[1]).await.unwrap();
    let l = q.lane("l").await.unwrap();
    assert_eq!((l.pending, l.active, l.state), (0, 0, LaneState::Empty));
    assert_eq!(q.counts().await.unwrap().cancelled, 2);
}

// Operator calls keep lanes right: remove, drain, promote, retry_failed, debounce's replace, list and list_lane, counts, obliterate.
#[tokio::test]
async fn operator_calls_handle_laned_jobs() {
    let (s, q) = setup("ops").await;
    let a = fill(&q, "a", 4).await;
    let b = fill(&q, "b", 2).await;
    q.enqueue(&"plain").await.unwrap();
    assert_eq!(q.counts().await.unwrap().pending, 7);
    // list: unlaned first, then laned; list_lane: a lane in its claim order.
    let page = q.list(JobState::Pending, None, 100).await.unwrap();
    assert_eq!(page.jobs.len(), 7);
    assert_eq!(page.jobs[0].lane, None);
    assert!(page.jobs[1..].iter().all(|j| j.lane.is_some()));
    let lane_a = q.list_lane("a", None, 2).await.unwrap();
    assert_eq!(
        lane_a.jobs.iter().map(|j| j.id.clone()).collect::<Vec<_>>(),
        a[..2].to_vec()
    );
    let rest = q.list_lane("a", lane_a.next.as_ref(), 10).await.unwrap();
    assert_eq!(
        rest.jobs.iter().map(|j| j.id.clone()).collect::<Vec<_>>(),
        a[2..].to_vec()
    );
    assert_eq!(q.job(&a[0]).await.unwrap().lane.as_deref(), Some("a"));
    // remove: the lane loses the job; a lane emptied leaves the ring.
    q.remove(&[&b[0], &b[1]]).await.unwrap();
    let lb = q.lane("b").await.unwrap();
    assert_eq!((lb.pending, lb.state), (0, LaneState::Empty));
    // debounce replace: a pending laned job delayed by a newer enqueue leaves its lane; promote brings it back.
    let d1 = q
        .enqueue_with(&1, &lane("a").debounce("d", Duration::ZERO))
        .await
        .unwrap();
    let d2 = q
        .enqueue_with(&2, &lane("a").debounce("d", Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!((d2.status, d2.id.clone()), (EnqueueStatus::Replaced, d1.id.clone()));
    assert_eq!(q.lane("a").await.unwrap().pending, 4);
    assert_eq!(q.job(&d1.id).await.unwrap().state, JobState::Delayed);
    q.promote(&[&d1.id]).await.unwrap();
    assert_eq!(q.lane("a").await.unwrap().pending, 5);
    // fail one, retry it by hand: back on its lane.
    let leased = q.claim(1, LEASE).await.unwrap().pop().unwrap();
    let on = leased.lane().unwrap_or("").to_owned();
    q.fail(&leased, "no").await.unwrap();
    q.retry_failed(&[leased.id()]).await.unwrap();
    if !on.is_empty() {
        assert_eq!(q.job(leased.id()).await.unwrap().lane.as_deref(), Some(on.as_str()));
    }
    assert_eq!(q.counts().await.unwrap().pending, 6);
    // drain: every pending job goes, laned or not, and the lanes leave the ring.
    assert_eq!(q.drain().await.unwrap(), 6);
    assert_eq!(q.counts().await.unwrap().pending, 0);
    assert_eq!(q.lane("a").await.unwrap().state, LaneState::Empty);
    assert!(q.claim(10, LEASE).await.unwrap().is_empty());
    // obliterate: every lane key goes too.
    q.set_lane_cap("a", Some(1)).await.unwrap();
    fill(&q, "a", 2).await;
    q.obliterate(false).await.unwrap();
    assert!(common::snapshot(&s, q.name()).await.is_empty());
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

// Bad lane names, caps and weights are typed errors and write nothing.
#[tokio::test]
async fn bad_lane_input_is_refused() {
    let (_s, q) = setup("bad").await;
    for bad in ["", "tab\there", &"x".repeat(300)] {
        assert!(
            matches!(
                q.enqueue_with(&1, &lane(bad)).await,
                Err(Error::InvalidId { what: "lane", .. })
            ),
            "{bad:?}"
        );
        assert!(matches!(
            q.set_lane_cap(bad, Some(1)).await,
            Err(Error::InvalidId { .. })
        ));
        assert!(matches!(q.lane(bad).await, Err(Error::InvalidId { .. })));
        assert!(matches!(q.list_lane(bad, None, 1).await, Err(Error::InvalidId { .. })));
    }
    assert!(matches!(
        q.set_lane_cap("a", Some(0)).await,
        Err(Error::InvalidOption { .. })
    ));
    assert!(matches!(
        q.set_lane_default_cap(Some(0)).await,
        Err(Error::InvalidOption { .. })
    ));
    assert!(matches!(
        q.set_lane_weight("a", Some(0)).await,
        Err(Error::InvalidOption { .. })
    ));
    assert!(matches!(
        q.set_lane_weight("a", Some(MAX_LANE_WEIGHT + 1)).await,
        Err(Error::InvalidOption { .. })
    ));
    assert!(matches!(q.lanes(None, 0).await, Err(Error::InvalidOption { .. })));
    assert!("not a cursor".parse::<echomq::lanes::LaneCursor>().is_err());
    assert_eq!(q.counts().await.unwrap().pending, 0);
    let a = q.lane("a").await.unwrap();
    assert_eq!((a.own_cap, a.own_weight, a.state), (None, None, LaneState::Empty));
}

// A queue that never had a laned job has no lane keys at all.
#[tokio::test]
async fn unlaned_queues_have_no_lane_keys() {
    let (s, q) = setup("plain").await;
    q.enqueue_bulk(&(0..10).collect::<Vec<u32>>()).await.unwrap();
    for l in q.claim(10, LEASE).await.unwrap() {
        q.complete(&l).await.unwrap();
    }
    let keys: Vec<String> = common::snapshot(&s, q.name())
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert!(keys.iter().all(|k| !k.contains(":lane")), "{keys:?}");
}

// Lane names with key separators, glob and range characters, spaces and non-ASCII, and names that are prefixes of each other, keep their own jobs and slots.
#[tokio::test]
async fn odd_lane_names_keep_apart() {
    let (_s, q) = setup("names").await;
    let names = ["a", "a:b", "a b", "ab", "x*y", "[z", "(w", "ünï cødé", "lanes:ring"];
    for n in names {
        q.set_lane_cap(n, Some(1)).await.unwrap();
        fill(&q, n, 2).await;
    }
    let got = q.claim(100, LEASE).await.unwrap();
    let mut seen: Vec<String> = lanes_of(&got);
    seen.sort();
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(seen, want, "one job of each lane (caps of 1)");
    for n in names {
        let l = q.lane(n).await.unwrap();
        assert_eq!((l.pending, l.active, l.state), (1, 1, LaneState::Blocked), "{n}");
    }
    for l in &got {
        q.complete(l).await.unwrap();
    }
    for n in names {
        assert_eq!(q.lane(n).await.unwrap().state, LaneState::Ready, "{n}");
    }
    assert_eq!(q.sweep(100).await.unwrap().repaired, 0);
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
