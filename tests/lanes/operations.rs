//! Operator calls and input on laned queues: cancel, remove, drain and
//! the rest keep lanes right; bad input is refused; odd names keep apart.

use std::time::Duration;

use echomq::admin::Cancel;
use echomq::lanes::{LaneState, MAX_LANE_WEIGHT};
use echomq::{EnqueueStatus, Error, JobState, Outcome};

use super::common;
use super::common::setup;
use super::{LEASE, active_of, capped, fill, lane, lanes_of};

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
