//! Unique lifetimes against a real server: what a second enqueue with a
//! dedup id answers in each mode of `Unique`, a hand retry, a debounce, and
//! what the sweep does with by-states markers a torn write left.

mod common;

use std::time::Duration;

use common::{past, raw, setup};
use echomq::admin::Moved;
use echomq::{EnqueueOptions, EnqueueStatus, Error, JobState, Unique};

fn with(id: &str, unique: Unique) -> EnqueueOptions {
    EnqueueOptions::new().unique(id, unique)
}

// Until started: a waiting job keeps the id; once it runs, the next enqueue
// makes a new job, which takes the id over; a finished first job changes
// nothing for the new holder.
#[tokio::test]
async fn until_started_holds_while_the_job_waits() {
    let (_s, q) = setup("uq-started").await;
    let opts = with("sync:9", Unique::until_started());
    let first = q.enqueue_with(&1, &opts).await.unwrap();
    assert_eq!(first.status, EnqueueStatus::Created);
    let again = q.enqueue_with(&2, &opts).await.unwrap();
    assert_eq!(
        (again.status, again.id.as_str()),
        (EnqueueStatus::Deduplicated, first.id.as_str())
    );
    assert_eq!(q.dedup_holder("sync:9").await.unwrap(), Some(first.id.clone()));

    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    assert_eq!(
        q.dedup_holder("sync:9").await.unwrap(),
        None,
        "a running job holds nothing"
    );
    let second = q.enqueue_with(&3, &opts).await.unwrap();
    assert_eq!(second.status, EnqueueStatus::Created);
    assert_ne!(second.id, first.id);
    q.complete(&lease).await.unwrap();
    let third = q.enqueue_with(&4, &opts).await.unwrap();
    assert_eq!(
        (third.status, third.id),
        (EnqueueStatus::Deduplicated, second.id.clone())
    );
    // A debounce of the waiting holder replaces its payload.
    let replaced = q.enqueue_with(&5, &opts.clone().replace_waiting(true)).await.unwrap();
    assert_eq!(
        (replaced.status, replaced.id.as_str()),
        (EnqueueStatus::Replaced, second.id.as_str())
    );
    assert_eq!(q.job(&second.id).await.unwrap().payload, b"5");
    assert_eq!(q.counts().await.unwrap().pending, 1);
}

// While running: the id is kept out only while its holder runs.
#[tokio::test]
async fn while_running_holds_while_the_job_runs() {
    let (_s, q) = setup("uq-running").await;
    let opts = with("refresh", Unique::while_running());
    let first = q.enqueue_with(&1, &opts).await.unwrap();
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    let during = q.enqueue_with(&2, &opts).await.unwrap();
    assert_eq!(
        (during.status, during.id.as_str()),
        (EnqueueStatus::Deduplicated, first.id.as_str())
    );
    q.complete(&lease).await.unwrap();
    let after = q.enqueue_with(&3, &opts).await.unwrap();
    assert_eq!(after.status, EnqueueStatus::Created);
    // Its holder is waiting: the next one is a new job too (it takes the id).
    let next = q.enqueue_with(&4, &opts).await.unwrap();
    assert_eq!(next.status, EnqueueStatus::Created);
    assert_eq!(q.dedup_holder("refresh").await.unwrap(), None);
    assert_eq!(q.counts().await.unwrap().pending, 2);
}

// By states with finished ones, for a period: a completed job keeps the id
// until the period ends; one whose record is gone holds nothing.
#[tokio::test]
async fn by_states_keeps_a_finished_job_for_its_period() {
    let (_s, q) = setup("uq-states").await;
    let daily = Unique::by_states(&[
        JobState::Pending,
        JobState::Delayed,
        JobState::Active,
        JobState::Completed,
    ])
    .within(Duration::from_millis(600));
    let opts = with("invoice:4", daily);
    let first = q.enqueue_with(&1, &opts).await.unwrap();
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    q.complete(&lease).await.unwrap();
    let again = q.enqueue_with(&2, &opts).await.unwrap();
    assert_eq!(
        (again.status, again.id.as_str()),
        (EnqueueStatus::Deduplicated, first.id.as_str())
    );
    assert_eq!(q.dedup_holder("invoice:4").await.unwrap(), Some(first.id.clone()));
    // The marker's TTL is the period, counted from the enqueue.
    let mut conn = raw(&_s).await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(format!("emq:{{{}}}:de:invoice:4", q.name()))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 0 && ttl <= 600, "{ttl}");
    let created = q.job(&first.id).await.unwrap().created_ms;
    past(&q, created + 600).await;
    let later = q.enqueue_with(&3, &opts).await.unwrap();
    assert_eq!(later.status, EnqueueStatus::Created);

    // Removed by hand: its record is gone, so it holds nothing even inside
    // the period.
    q.remove(&[later.id.as_str()]).await.unwrap();
    let after_removal = q.enqueue_with(&4, &opts).await.unwrap();
    assert_eq!(after_removal.status, EnqueueStatus::Created);
}

// Until finished within a period: a job still waiting past the period no
// longer keeps the id; `dedup` (until finished, no period) still does.
#[tokio::test]
async fn a_period_bounds_until_finished() {
    let (_s, q) = setup("uq-within").await;
    let bounded = with("digest", Unique::until_finished().within(Duration::from_millis(200)));
    let first = q.enqueue_with(&1, &bounded).await.unwrap();
    assert_eq!(
        q.enqueue_with(&2, &bounded).await.unwrap().status,
        EnqueueStatus::Deduplicated
    );
    past(&q, q.job(&first.id).await.unwrap().created_ms + 200).await;
    assert_eq!(q.job(&first.id).await.unwrap().state, JobState::Pending);
    assert_eq!(
        q.enqueue_with(&3, &bounded).await.unwrap().status,
        EnqueueStatus::Created
    );

    // `dedup` is `until_finished()`: the same answers as before 0.3.
    let plain = EnqueueOptions::new().dedup("plain");
    let held = q.enqueue_with(&1, &plain).await.unwrap();
    let same = q
        .enqueue_with(&2, &with("plain", Unique::until_finished()))
        .await
        .unwrap();
    assert_eq!((same.status, same.id), (EnqueueStatus::Deduplicated, held.id));
}

// A hand retry of a failed by-states job takes the id again, or leaves the
// job failed while another job holds it.
#[tokio::test]
async fn a_hand_retry_takes_a_by_states_id_again() {
    let (_s, q) = setup("uq-retry").await;
    let opts = with("export:2", Unique::until_started()).max_attempts(1);
    let first = q.enqueue_with(&1, &opts).await.unwrap();
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    q.fail(&lease, "boom").await.unwrap();
    let second = q.enqueue_with(&2, &opts).await.unwrap();
    assert_eq!(second.status, EnqueueStatus::Created);
    let retried = q.retry_failed(&[first.id.as_str()]).await.unwrap();
    assert_eq!(retried, vec![(first.id.clone(), Moved::DedupHeld)]);
    assert_eq!(q.job(&first.id).await.unwrap().state, JobState::Failed);

    // Once the second has started, the first may wait again, holding the id.
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    assert_eq!(lease.id(), second.id);
    let retried = q.retry_failed(&[first.id.as_str()]).await.unwrap();
    assert_eq!(retried, vec![(first.id.clone(), Moved::Done)]);
    let third = q.enqueue_with(&3, &opts).await.unwrap();
    assert_eq!((third.status, third.id), (EnqueueStatus::Deduplicated, first.id));
}

// The sweep deletes by-states markers that can no longer hold (holder
// gone, or finished in a state that does not hold) and keeps live ones.
#[tokio::test]
async fn the_sweep_deletes_stale_by_states_markers() {
    let (s, q) = setup("uq-sweep").await;
    let live = q
        .enqueue_with(&1, &with("live", Unique::until_started()))
        .await
        .unwrap();
    let done = q
        .enqueue_with(&2, &with("done", Unique::while_running()))
        .await
        .unwrap();
    let leases = q.claim(10, Duration::from_secs(30)).await.unwrap();
    let done_lease = leases.iter().find(|l| l.id() == done.id).unwrap();
    q.complete(done_lease).await.unwrap();
    let mut conn = raw(&s).await;
    let base = format!("emq:{{{}}}:", q.name());
    // A torn write's leftover: a marker whose holder never existed.
    let () = redis::cmd("SET")
        .arg(format!("{base}de:ghost"))
        .arg("nobody\x1fpd")
        .query_async(&mut conn)
        .await
        .unwrap();
    q.sweep(1_000).await.unwrap();
    let exists = |name: &'static str| {
        let mut conn = conn.clone();
        let key = format!("{base}de:{name}");
        async move {
            redis::cmd("EXISTS")
                .arg(key)
                .query_async::<i64>(&mut conn)
                .await
                .unwrap()
                == 1
        }
    };
    assert!(!exists("ghost").await, "a marker without its holder goes");
    assert!(!exists("done").await, "a holder finished outside its states lets go");
    // `live`'s holder is active now (claimed above), which until_started
    // does not hold in, but it is not finished: it may wait again.
    assert_eq!(q.job(&live.id).await.unwrap().state, JobState::Active);
    assert!(exists("live").await);
}

// An empty set of states, and a period of zero or past MAX_DELAY, are
// typed errors that write nothing.
#[tokio::test]
async fn bad_unique_modes_are_refused() {
    let (_s, q) = setup("uq-bad").await;
    for unique in [
        Unique::by_states(&[]),
        Unique::until_started().within(Duration::ZERO),
        Unique::while_running().within(echomq::limits::MAX_DELAY + Duration::from_secs(1)),
    ] {
        let r = q.enqueue_with(&1, &with("x", unique)).await;
        assert!(matches!(r, Err(Error::InvalidOption { .. })), "{unique:?}: {r:?}");
    }
    assert_eq!(q.counts().await.unwrap(), echomq::Counts::default());
    assert_eq!(q.dedup_holder("x").await.unwrap(), None);
}

// A `dedup` job retried by hand takes its id back from a by-states holder
// that no longer holds it (one that has started, for `until_started`).
#[tokio::test]
async fn a_hand_retry_takes_an_id_a_by_states_holder_let_go() {
    let (_s, q) = setup("uq-mixed").await;
    let plain = EnqueueOptions::new().dedup("mixed").max_attempts(1);
    let first = q.enqueue_with(&1, &plain).await.unwrap();
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    q.fail(&lease, "boom").await.unwrap();
    let second = q
        .enqueue_with(&2, &with("mixed", Unique::until_started()))
        .await
        .unwrap();
    assert_eq!(second.status, EnqueueStatus::Created);
    let retried = q.retry_failed(&[first.id.as_str()]).await.unwrap();
    assert_eq!(
        retried,
        vec![(first.id.clone(), Moved::DedupHeld)],
        "the waiting second holds it"
    );
    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    assert_eq!(lease.id(), second.id);
    let retried = q.retry_failed(&[first.id.as_str()]).await.unwrap();
    assert_eq!(
        retried,
        vec![(first.id.clone(), Moved::Done)],
        "a started holder lets go"
    );
    let again = q.enqueue_with(&3, &plain).await.unwrap();
    assert_eq!((again.status, again.id), (EnqueueStatus::Deduplicated, first.id));
}
