//! Batches against a real server: members counted once at their first end,
//! callbacks enqueued exactly once by the call that ends the batch (an
//! empty batch at its close), fencing respected, bad input refused with
//! nothing written, and a queue without batches left as it was.

mod common;

use std::time::Duration;

use common::{callbacks, past, raw, setup, setup_with, snapshot};
use echomq::batch::{BatchOptions, Callback, MAX_KEEP};
use echomq::{EnqueueOptions, Error, JobState, Lease, Queue, QueueOptions, Retention};
use serde_json::json;

const LEASE: Duration = Duration::from_secs(30);

/// Claims up to `n` pending jobs.
async fn claim(q: &Queue, n: usize) -> Vec<Lease> {
    q.claim(n, LEASE).await.unwrap()
}

fn all_callbacks() -> BatchOptions {
    BatchOptions::new()
        .on_success(Callback::new(&json!({"on": "success"})).unwrap().kind("batch-ok"))
        .on_complete(Callback::new(&json!({"on": "complete"})).unwrap())
        .on_death(Callback::new(&json!({"on": "death"})).unwrap().kind("batch-dead"))
}

// Members added in two calls complete; only the last completion, after the
// close, enqueues success and complete, once, with their payloads and
// kinds; the counts follow each step.
#[tokio::test]
async fn success_and_complete_fire_once_after_the_last_member() {
    let (_s, q) = setup("batch-ok").await;
    let batch = q.open_batch(&all_callbacks().id("b1")).await.unwrap();
    assert_eq!(batch.id(), "b1");
    let mut ids = batch.add(&[1, 2]).await.unwrap();
    ids.extend(batch.add(&[3]).await.unwrap());
    assert_eq!(ids.len(), 3);
    let st = batch.status().await.unwrap();
    assert_eq!((st.total, st.ended(), st.closed_at), (3, 0, None));

    let leases = claim(&q, 3).await;
    assert_eq!(leases.len(), 3);
    q.complete(&leases[0]).await.unwrap();
    q.complete(&leases[1]).await.unwrap();
    batch.close().await.unwrap();
    assert!(callbacks(&q, "b1").await.is_empty(), "one member still runs");
    let st = batch.status().await.unwrap();
    assert_eq!((st.completed, st.pending(), st.ended_at), (2, 1, None));
    assert!(st.closed_at.is_some());

    q.complete(&leases[2]).await.unwrap();
    assert_eq!(callbacks(&q, "b1").await, ["success", "complete"]);
    let st = batch.status().await.unwrap();
    assert_eq!((st.total, st.completed, st.failed, st.other), (3, 3, 0, 0));
    assert!(st.ended_at.is_some() && st.success_at.is_some() && st.complete_at.is_some());
    assert_eq!(st.death_at, None);

    // the callbacks are ordinary pending jobs, with their payloads and kinds
    let cbs = claim(&q, 10).await;
    let mut got: Vec<(String, Option<String>, serde_json::Value)> = cbs
        .iter()
        .map(|l| {
            (
                l.id().to_owned(),
                l.kind().map(str::to_owned),
                l.decode::<serde_json::Value>().unwrap(),
            )
        })
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        vec![
            ("b1:complete".into(), None, json!({"on": "complete"})),
            ("b1:success".into(), Some("batch-ok".into()), json!({"on": "success"})),
        ]
    );
    for l in &cbs {
        q.complete(l).await.unwrap();
    }
    // a callback job is no member: nothing fires again
    assert_eq!(batch.status().await.unwrap().completed, 3);
    assert!(claim(&q, 10).await.is_empty());
}

// A batch closed with no members, or with every member ended already, ends
// at its close.
#[tokio::test]
async fn an_empty_batch_fires_when_closed() {
    let (_s, q) = setup("batch-empty").await;
    let empty = q.open_batch(&all_callbacks()).await.unwrap();
    assert!(callbacks(&q, empty.id()).await.is_empty());
    empty.close().await.unwrap();
    assert_eq!(callbacks(&q, empty.id()).await, ["success", "complete"]);

    let done = q.open_batch(&all_callbacks()).await.unwrap();
    assert_ne!(done.id(), empty.id(), "minted ids differ");
    done.add(&["x"]).await.unwrap();
    let l = claim(&q, 10).await;
    // the empty batch's two callbacks and the member
    assert_eq!(l.len(), 3);
    for l in &l {
        q.complete(l).await.unwrap();
    }
    assert!(callbacks(&q, done.id()).await.is_empty(), "open: nothing fires");
    done.close().await.unwrap();
    assert_eq!(callbacks(&q, done.id()).await, ["success", "complete"]);
}

// A member that fails for good fires death at once (open or not), once; the
// batch then ends with complete but not success. Cancelled and removed
// members count as ended otherwise, and an expired one too.
#[tokio::test]
async fn death_fires_at_the_first_failure_and_others_count_as_ended() {
    let (_s, q) = setup("batch-death").await;
    let batch = q.open_batch(&all_callbacks().id("b2")).await.unwrap();
    let ids = batch
        .add_with(&[
            (1, EnqueueOptions::new().id("fails")),
            (2, EnqueueOptions::new().id("fails-too")),
            (
                3,
                EnqueueOptions::new().id("cancelled").delay(Duration::from_secs(3600)),
            ),
            (4, EnqueueOptions::new().id("removed").delay(Duration::from_secs(3600))),
            (5, EnqueueOptions::new().id("completes")),
            (
                6,
                EnqueueOptions::new()
                    .id("expires")
                    .discard_after(Duration::from_millis(200)),
            ),
        ])
        .await
        .unwrap();
    assert_eq!(ids.len(), 6);
    let mut leases = claim(&q, 3).await;
    leases.sort_by(|a, b| a.id().cmp(b.id()));
    let ids: Vec<&str> = leases.iter().map(Lease::id).collect();
    assert_eq!(ids, ["completes", "fails", "fails-too"]);
    q.fail(&leases[1], "broken").await.unwrap();
    assert_eq!(callbacks(&q, "b2").await, ["death"]);
    q.fail(&leases[2], "broken too").await.unwrap();
    q.complete(&leases[0]).await.unwrap();
    q.cancel("cancelled").await.unwrap();
    batch.close().await.unwrap();
    assert_eq!(callbacks(&q, "b2").await, ["death"], "two members are still waiting");
    let expiry = q.job("expires").await.unwrap().expires_at_ms.unwrap();
    past(&q, expiry).await;
    q.reap(10).await.unwrap();
    assert_eq!(q.job("expires").await.unwrap().state, JobState::Expired);
    assert_eq!(callbacks(&q, "b2").await, ["death"], "one member is still delayed");
    q.remove(&["removed"]).await.unwrap();
    assert_eq!(callbacks(&q, "b2").await, ["complete", "death"]);
    let st = batch.status().await.unwrap();
    assert_eq!((st.total, st.completed, st.failed, st.other), (6, 1, 2, 3));
    // a hand retry of a failed member runs it again, but the batch counted
    // it at its first end
    q.retry_failed(&["fails"]).await.unwrap();
    let again = claim(&q, 10).await;
    let member = again.iter().find(|l| l.id() == "fails").unwrap();
    q.complete(member).await.unwrap();
    let st = batch.status().await.unwrap();
    assert_eq!((st.completed, st.failed), (1, 2));
    assert_eq!(callbacks(&q, "b2").await, ["complete", "death"]);
}

// A stale worker's completion after its lease was reaped changes nothing
// (LeaseLost), and the member counts once, when its new owner completes it;
// a record deleted at once by retention still counts.
#[tokio::test]
async fn fencing_and_retention_keep_counts_exact() {
    let (_s, q) = setup_with("batch-fence", QueueOptions::new().keep_completed(Retention::None)).await;
    let batch = q.open_batch(&all_callbacks().id("b3")).await.unwrap();
    batch.add(&["only"]).await.unwrap();
    batch.close().await.unwrap();
    let stale = q.claim(1, Duration::from_millis(50)).await.unwrap().remove(0);
    past(&q, stale.deadline_ms()).await;
    q.reap(10).await.unwrap();
    let fresh = claim(&q, 1).await.remove(0);
    assert!(matches!(q.complete(&stale).await, Err(Error::LeaseLost { .. })));
    assert_eq!(batch.status().await.unwrap().ended(), 0);
    assert!(callbacks(&q, "b3").await.is_empty());
    q.complete(&fresh).await.unwrap();
    assert!(
        matches!(q.job(fresh.id()).await, Err(Error::JobNotFound(_))),
        "retention deleted it"
    );
    let st = batch.status().await.unwrap();
    assert_eq!((st.total, st.completed), (1, 1));
    assert_eq!(callbacks(&q, "b3").await, ["success", "complete"]);
}

// Bad input gets typed errors and writes nothing.
#[tokio::test]
async fn bad_input_is_refused_and_writes_nothing() {
    let (s, q) = setup("batch-bad").await;
    let batch = q.open_batch(&BatchOptions::new().id("b4")).await.unwrap();
    batch.add(&[1]).await.unwrap();
    batch.close().await.unwrap();
    let before = snapshot(&s, q.name()).await;
    assert!(matches!(batch.add(&[2]).await, Err(Error::BatchClosed(id)) if id == "b4"));
    assert!(matches!(batch.close().await, Err(Error::BatchClosed(_))));
    assert!(matches!(
        q.open_batch(&BatchOptions::new().id("b4")).await,
        Err(Error::BatchExists(id)) if id == "b4"
    ));
    let ghost = q.batch("never-opened").unwrap();
    assert!(matches!(ghost.add(&[3]).await, Err(Error::BatchNotFound(_))));
    assert!(matches!(ghost.close().await, Err(Error::BatchNotFound(_))));
    assert!(matches!(ghost.status().await, Err(Error::BatchNotFound(_))));
    for bad in [String::new(), "x".repeat(250), "a\nb".into()] {
        assert!(
            matches!(q.batch(&bad), Err(Error::InvalidId { what: "batch id", .. })),
            "{bad:?}"
        );
        assert!(matches!(
            q.open_batch(&BatchOptions::new().id(bad.clone())).await,
            Err(Error::InvalidId { .. })
        ));
    }
    assert!(matches!(
        q.open_batch(&BatchOptions::new().keep(MAX_KEEP + Duration::from_secs(1)))
            .await,
        Err(Error::InvalidOption { .. })
    ));
    let bad_kind = BatchOptions::new().on_success(Callback::new(&1).unwrap().kind(""));
    assert!(matches!(
        q.open_batch(&bad_kind).await,
        Err(Error::InvalidId { what: "job kind", .. })
    ));
    let big = BatchOptions::new().on_complete(Callback::new(&"x".repeat(2 << 20)).unwrap());
    assert!(matches!(q.open_batch(&big).await, Err(Error::PayloadTooLarge { .. })));
    assert_eq!(snapshot(&s, q.name()).await, before);
}

// The batch's record stays `keep` after its end, then goes; its members'
// later ends change nothing (no record is made again).
#[tokio::test]
async fn an_ended_batch_is_kept_for_its_keep_time() {
    let (s, q) = setup("batch-keep").await;
    let batch = q
        .open_batch(&BatchOptions::new().id("b5").keep(Duration::from_millis(300)))
        .await
        .unwrap();
    batch.add(&[1]).await.unwrap();
    batch.close().await.unwrap();
    let l = claim(&q, 1).await.remove(0);
    q.complete(&l).await.unwrap();
    let mut c = raw(&s).await;
    let key = format!("emq:{{{}}}:batch:b5", q.name());
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut c).await.unwrap();
    assert!(ttl > 0 && ttl <= 300, "{ttl}");
    let ended = batch.status().await.unwrap().ended_at.unwrap();
    past(&q, ended + 300).await;
    assert!(matches!(batch.status().await, Err(Error::BatchNotFound(_))));
    // a member that ends after its batch's record is gone changes nothing
    let late = q
        .open_batch(&BatchOptions::new().id("b6").keep(Duration::from_millis(1)))
        .await
        .unwrap();
    late.add(&[1, 2]).await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(format!("emq:{{{}}}:batch:b6", q.name()))
        .query_async(&mut c)
        .await
        .unwrap();
    for l in claim(&q, 2).await {
        q.complete(&l).await.unwrap();
    }
    let exists: i64 = redis::cmd("EXISTS")
        .arg(format!("emq:{{{}}}:batch:b6", q.name()))
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(exists, 0);
}

// A queue that never opened a batch writes no batch field or flag: its
// jobs' records and its meta hash are as before batches existed.
#[tokio::test]
async fn a_queue_without_batches_writes_nothing_for_them() {
    let (s, q) = setup("batch-none").await;
    let ids = q.enqueue_bulk(&[1, 2]).await.unwrap();
    for l in claim(&q, 2).await {
        q.complete(&l).await.unwrap();
    }
    let mut c = raw(&s).await;
    for id in &ids {
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg(format!("emq:{{{}}}:job:{id}", q.name()))
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(!fields.iter().any(|f| f == "bt" || f == "bf"), "{fields:?}");
        assert_eq!(q.job(id).await.unwrap().state, JobState::Completed);
    }
    let bt: Option<String> = redis::cmd("HGET")
        .arg(format!("emq:{{{}}}:meta", q.name()))
        .arg("bt")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(bt, None);
}

// The sweep counts a member an older process finished without counting
// it, which ends the batch and fires its callbacks once.
#[tokio::test]
async fn the_sweep_counts_a_member_an_old_process_missed() {
    let (s, q) = setup("batch-sweep").await;
    let batch = q.open_batch(&all_callbacks().id("b7")).await.unwrap();
    let ids = batch.add(&["only"]).await.unwrap();
    batch.close().await.unwrap();
    let mut c = raw(&s).await;
    let base = format!("emq:{{{}}}:", q.name());
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(format!("{base}job:{}", ids[0]))
        .arg("st")
        .arg("completed")
        .arg("ft")
        .arg("1")
        .ignore()
        .cmd("ZREM")
        .arg(format!("{base}pending"))
        .arg(&ids[0])
        .ignore()
        .cmd("ZADD")
        .arg(format!("{base}completed"))
        .arg(1)
        .arg(&ids[0])
        .ignore()
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(batch.status().await.unwrap().ended(), 0);
    q.sweep(100).await.unwrap();
    let st = batch.status().await.unwrap();
    assert_eq!((st.completed, st.ended_at.is_some()), (1, true));
    assert_eq!(callbacks(&q, "b7").await, ["success", "complete"]);
    // a second sweep counts nothing again
    echomq::maintenance::sweep_queues(std::slice::from_ref(&q), 100)
        .await
        .unwrap();
    assert_eq!(batch.status().await.unwrap().completed, 1);
}
