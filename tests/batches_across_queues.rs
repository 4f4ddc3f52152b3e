//! Batches whose members are on other queues than the batch's, against a
//! real server: the add counts them in on the batch's queue and sends each
//! to its queue by message; each member's end comes back by message. A
//! member counts once (a message delivered twice is applied once), the
//! callbacks are enqueued once on the batch's queue, an add retried with
//! the same ids counts each once (the second finds the first and
//! un-joins), a member whose id another job holds counts failed, minted
//! member ids are unique across batches and queues, bad input is
//! refused with nothing written, and a `Reaper` carries the ends home for
//! workers that run without the client's maintenance.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{callbacks, outbox, queues, raw, snapshot};
use echomq::batch::{BatchOptions, Callback};
use echomq::server::LocalServer;
use echomq::{
    Client, EnqueueOptions, EnqueueStatus, Error, HandlerError, Job, JobState, Lease, Queue, QueueOptions, Worker,
    WorkerHandle,
};
use serde_json::{Value, json};

const LEASE: Duration = Duration::from_secs(30);

async fn claim(q: &Queue) -> Vec<Lease> {
    let mut l = q.claim(10, LEASE).await.unwrap();
    l.sort_by(|a, b| a.id().cmp(b.id()));
    l
}

fn all_callbacks(id: &str) -> BatchOptions {
    BatchOptions::new()
        .id(id)
        .on_success(Callback::new(&json!("ok")).unwrap())
        .on_complete(Callback::new(&json!("done")).unwrap())
        .on_death(Callback::new(&json!("dead")).unwrap())
}

async fn push(s: &LocalServer, q: &Queue, message: &[u8]) {
    let _: () = redis::cmd("RPUSH")
        .arg(format!("emq:{{{}}}:outbox", q.name()))
        .arg(message)
        .query_async(&mut raw(s).await)
        .await
        .unwrap();
}

/// A message for queue `to` as the scripts write one (lua/README.md,
/// `outbox`): the target, "\x1e", then each field as its length, ":" and
/// its bytes.
fn message(to: &Queue, fields: &[&str]) -> Vec<u8> {
    let mut m = format!("{}\x1e", to.name());
    for f in fields {
        m.push_str(&format!("{}:{f}", f.len()));
    }
    m.into_bytes()
}

// Two members on the batch's queue H and three on R: the add answers the
// ids it sent (minted BATCH:N, or the caller's), R holds them as jobs at
// once (the add relayed), and only the last end, after the close, fires
// success and complete on H, once, even with every message delivered
// twice.
#[tokio::test]
async fn members_on_another_queue_count_once_and_fire_once() {
    let (s, _client, qs) = queues("bspan", 2).await;
    let (h, r) = (&qs[0], &qs[1]);
    let batch = h.open_batch(&all_callbacks("b1")).await.unwrap();
    assert_eq!(batch.add(&[1, 2]).await.unwrap().len(), 2);
    let there = batch.on(r).unwrap();
    let sent = there
        .add_with(&[
            (json!(3), EnqueueOptions::new()),
            (json!(4), EnqueueOptions::new().id("four").max_attempts(3)),
        ])
        .await
        .unwrap();
    let ids: Vec<(&str, EnqueueStatus)> = sent.iter().map(|e| (e.id.as_str(), e.status)).collect();
    // made there by the add's relay; numbered by the batch's queue's mint
    // counter, after the two local members ("four" is 4), and named after
    // that queue
    let (m3, m5) = (format!("b1:3@{}", h.name()), format!("b1:5@{}", h.name()));
    assert_eq!(
        ids,
        [(m3.as_str(), EnqueueStatus::Created), ("four", EnqueueStatus::Created)]
    );
    let more = there.add(&[5]).await.unwrap();
    assert_eq!(more, [m5.as_str()]);
    assert!(outbox(&s, h).await.is_empty(), "the add relayed its messages");
    let st = batch.status().await.unwrap();
    assert_eq!((st.total, st.ended()), (5, 0));
    let job = r.job("four").await.unwrap();
    assert_eq!((job.state, job.limits.max_attempts), (JobState::Pending, 3));

    // the first make-member message again: its receipt makes it a no-op
    let ct = st.created_at.to_string();
    let again = message(r, &["m", "b1", &ct, "3", h.name(), &m3, "3", "0", "", "", "", "", ""]);
    push(&s, h, &again).await;
    assert_eq!(h.relay().await.unwrap(), 1);
    // and once more with its receipt gone (a delivery more than a day
    // late): the member's record says it was made, so nothing changes
    let _: () = redis::cmd("DEL")
        .arg(format!("emq:{{{}}}:inbox", r.name()))
        .query_async(&mut raw(&s).await)
        .await
        .unwrap();
    push(&s, h, &again).await;
    assert_eq!(h.relay().await.unwrap(), 1);
    assert!(outbox(&s, r).await.is_empty(), "no answer sent back");
    assert_eq!(batch.status().await.unwrap().total, 5);
    let leases = claim(r).await;
    let got: Vec<&str> = leases.iter().map(Lease::id).collect();
    assert_eq!(got, [m3.as_str(), m5.as_str(), "four"]);
    assert_eq!(leases[0].decode::<Value>().unwrap(), json!(3));

    for l in &claim(h).await {
        h.complete(l).await.unwrap();
    }
    for l in &leases[..2] {
        r.complete(l).await.unwrap();
    }
    // the ends wait on R's outbox until they are relayed
    let ends = outbox(&s, r).await;
    assert_eq!(ends.len(), 2);
    assert_eq!(batch.status().await.unwrap().completed, 2);
    assert_eq!(r.relay().await.unwrap(), 2);
    // delivered again: counted once
    push(&s, r, &ends[0]).await;
    assert_eq!(r.relay().await.unwrap(), 1);
    assert_eq!(batch.status().await.unwrap().completed, 4);

    batch.close().await.unwrap();
    assert!(callbacks(h, "b1").await.is_empty(), "one member is still running");
    r.complete(&leases[2]).await.unwrap();
    r.relay().await.unwrap();
    assert_eq!(callbacks(h, "b1").await, ["success", "complete"]);
    assert!(
        r.job("b1:success").await.is_err(),
        "callbacks are jobs of the batch's queue"
    );
    let st = batch.status().await.unwrap();
    assert_eq!((st.total, st.completed, st.pending()), (5, 5, 0));
    assert!(st.ended_at.is_some());
    let hash: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(format!("emq:{{{}}}:batch:b1", h.name()))
        .query_async(&mut raw(&s).await)
        .await
        .unwrap();
    assert!(
        !hash.iter().any(|(f, _)| f.starts_with("m:")),
        "no member left to count: {hash:?}"
    );
}

// A member on R that fails for good fires death on H; a removed one and a
// cancelled one count as ended otherwise, a delayed one waits for its
// time; complete fires after the last.
#[tokio::test]
async fn ends_of_every_kind_come_back() {
    let (_s, _client, qs) = queues("bend", 2).await;
    let (h, r) = (&qs[0], &qs[1]);
    let batch = h.open_batch(&all_callbacks("b2")).await.unwrap();
    batch
        .on(r)
        .unwrap()
        .add_with(&[
            (1, EnqueueOptions::new().id("fails").max_attempts(1)),
            (2, EnqueueOptions::new().id("removed").delay(Duration::from_secs(3600))),
            (
                3,
                EnqueueOptions::new().id("cancelled").delay(Duration::from_secs(3600)),
            ),
        ])
        .await
        .unwrap();
    batch.close().await.unwrap();
    assert_eq!(r.job("removed").await.unwrap().state, JobState::Delayed);
    let leases = claim(r).await;
    assert_eq!(leases.len(), 1);
    r.fail(&leases[0], "broken").await.unwrap();
    r.relay().await.unwrap();
    assert_eq!(callbacks(h, "b2").await, ["death"]);
    r.remove(&["removed"]).await.unwrap();
    r.cancel("cancelled").await.unwrap();
    r.relay().await.unwrap();
    assert_eq!(callbacks(h, "b2").await, ["complete", "death"]);
    let st = batch.status().await.unwrap();
    assert_eq!((st.total, st.completed, st.failed, st.other), (3, 0, 1, 2));
}

// An add retried with the same ids (after a transient error, say) counts
// each member once: the second one finds the first holding its id and
// un-joins; a member whose id another job holds on R cannot run and counts
// failed, firing death. Either way the add answers Existing.
#[tokio::test]
async fn a_retried_add_counts_once_and_a_foreign_id_counts_failed() {
    let (_s, _client, qs) = queues("btaken", 2).await;
    let (h, r) = (&qs[0], &qs[1]);
    r.enqueue_with(&0, &EnqueueOptions::new().id("taken")).await.unwrap();
    let batch = h.open_batch(&all_callbacks("b3")).await.unwrap();
    let on = batch.on(r).unwrap();
    let status = |added: Vec<echomq::Enqueued>| added.into_iter().map(|e| e.status).collect::<Vec<_>>();
    let mine = [(json!(2), EnqueueOptions::new().id("mine"))];
    assert_eq!(status(on.add_with(&mine).await.unwrap()), [EnqueueStatus::Created]);
    assert_eq!(status(on.add_with(&mine).await.unwrap()), [EnqueueStatus::Existing]);
    assert_eq!(
        batch.status().await.unwrap().total,
        1,
        "the retry's member did not join"
    );
    let foreign = [(json!(1), EnqueueOptions::new().id("taken"))];
    assert_eq!(status(on.add_with(&foreign).await.unwrap()), [EnqueueStatus::Existing]);
    let st = batch.status().await.unwrap();
    assert_eq!((st.total, st.failed), (2, 1));
    assert_eq!(callbacks(h, "b3").await, ["death"]);
    assert_eq!(
        r.job("taken").await.unwrap().payload,
        b"0",
        "the other job is as it was"
    );
    batch.close().await.unwrap();
    let leases = claim(r).await;
    let l = leases.iter().find(|l| l.id() == "mine").unwrap();
    r.complete(l).await.unwrap();
    r.relay().await.unwrap();
    assert_eq!(callbacks(h, "b3").await, ["complete", "death"]);
    let st = batch.status().await.unwrap();
    assert_eq!((st.total, st.completed, st.failed), (2, 1, 1));
}

// Batches of one id on two queues (each mints batch "1") with members on
// a third: their minted member ids name their batch's queue, so neither
// takes the other's.
#[tokio::test]
async fn minted_member_ids_of_two_queues_do_not_collide() {
    let (_s, _client, qs) = queues("bmint", 3).await;
    let r = &qs[2];
    let mut ids = Vec::new();
    for h in &qs[..2] {
        let batch = h.open_batch(&BatchOptions::new()).await.unwrap();
        assert_eq!(batch.id(), "1");
        let added = batch
            .on(r)
            .unwrap()
            .add_with(&[(json!(h.name()), EnqueueOptions::new())])
            .await
            .unwrap();
        assert_eq!(added[0].status, EnqueueStatus::Created);
        assert_eq!(added[0].id, format!("1:2@{}", h.name()));
        let job = r.job(&added[0].id).await.unwrap();
        assert_eq!(job.payload, serde_json::to_vec(&json!(h.name())).unwrap());
        assert_eq!(batch.status().await.unwrap().total, 1);
        ids.push(added[0].id.clone());
    }
    assert_ne!(ids[0], ids[1]);
}

// A batch whose record expired, opened again with its id, mints member
// ids its first life did not use, so its members join although the old
// ones' records are still there.
#[tokio::test]
async fn a_batch_opened_again_mints_new_member_ids() {
    let (s, _client, qs) = queues("bagain", 2).await;
    let (h, r) = (&qs[0], &qs[1]);
    let mut seen = Vec::new();
    for life in 0..2 {
        let batch = h
            .open_batch(&BatchOptions::new().id("b7").keep(Duration::ZERO))
            .await
            .unwrap();
        let added = batch.on(r).unwrap().add(&[life]).await.unwrap();
        assert_eq!(r.job(&added[0]).await.unwrap().state, JobState::Pending);
        assert!(!seen.contains(&added[0]), "{added:?} used again");
        seen.extend(added);
        batch.close().await.unwrap();
        let l = claim(r).await;
        r.complete(&l[0]).await.unwrap();
        r.relay().await.unwrap();
        assert_eq!(batch.status().await.unwrap().completed, 1);
        // its record gone, as at the end of its keep time
        let _: () = redis::cmd("DEL")
            .arg(format!("emq:{{{}}}:batch:b7", h.name()))
            .query_async(&mut raw(&s).await)
            .await
            .unwrap();
    }
}

// Bad input is refused before anything is sent: a queue of another prefix
// or client, an option a member of another queue cannot take, a closed or
// unknown batch.
#[tokio::test]
async fn bad_input_is_refused_and_writes_nothing() {
    let (s, client, qs) = queues("bbad", 2).await;
    let (h, r) = (&qs[0], &qs[1]);
    let batch = h.open_batch(&BatchOptions::new().id("b4")).await.unwrap();
    let prefixed = client
        .queue_with(r.name(), QueueOptions::new().prefix("other"))
        .await
        .unwrap();
    assert!(matches!(
        batch.on(&prefixed),
        Err(Error::InvalidOption { name: "Batch::on", .. })
    ));
    let other_client = Client::connect(&s.url()).await.unwrap();
    let far = other_client.queue(r.name()).await.unwrap();
    assert!(matches!(
        batch.on(&far),
        Err(Error::InvalidOption { name: "Batch::on", .. })
    ));
    let before = (snapshot(&s, h.name()).await, snapshot(&s, r.name()).await);
    let on = batch.on(r).unwrap();
    for opts in [
        EnqueueOptions::new().dedup("d"),
        EnqueueOptions::new().discard_after(Duration::from_secs(5)),
        EnqueueOptions::new().sequence("k"),
    ] {
        let e = on.add_with(&[(1, EnqueueOptions::new()), (2, opts)]).await.unwrap_err();
        assert!(matches!(e, Error::InvalidOption { name: "Batch::on", .. }), "{e}");
    }
    assert!(matches!(
        on.add_with(&[(1, EnqueueOptions::new().id("123"))]).await,
        Err(Error::InvalidId { .. })
    ));
    assert_eq!((snapshot(&s, h.name()).await, snapshot(&s, r.name()).await), before);
    // a batch id that leaves no room for minted member ids there
    let long = h.open_batch(&BatchOptions::new().id("l".repeat(240))).await.unwrap();
    let before = (snapshot(&s, h.name()).await, snapshot(&s, r.name()).await);
    assert!(matches!(
        long.on(r).unwrap().add(&[1]).await,
        Err(Error::InvalidId { what: "batch id", .. })
    ));
    assert_eq!((snapshot(&s, h.name()).await, snapshot(&s, r.name()).await), before);
    long.on(r)
        .unwrap()
        .add_with(&[(1, EnqueueOptions::new().id("given"))])
        .await
        .expect("members with ids need no minted id");
    assert_eq!(r.job("given").await.unwrap().state, JobState::Pending);
    let before = (snapshot(&s, h.name()).await, snapshot(&s, r.name()).await);
    batch.close().await.unwrap();
    assert!(matches!(on.add(&[1]).await, Err(Error::BatchClosed(_))));
    let unknown = h.batch("nope").unwrap().on(r).unwrap();
    assert!(matches!(unknown.add(&[1]).await, Err(Error::BatchNotFound(_))));
    assert_eq!(snapshot(&s, r.name()).await, before.1);
    // the batch's own queue gives a plain handle: members join as always
    let b5 = h.open_batch(&BatchOptions::new().id("b5")).await.unwrap();
    let same = b5.on(h).unwrap().add(&[1]).await.unwrap();
    assert_eq!(h.job(&same[0]).await.unwrap().state, JobState::Pending);
}

// Workers on both queues move the batch on with no call by hand: each
// member's end is relayed by its worker's settlement, and the success
// callback runs on the batch's queue.
#[tokio::test]
async fn workers_move_a_batch_over_queues_on_their_own() {
    let (_s, _client, qs) = queues("bwork", 2).await;
    let (h, r) = (&qs[0], &qs[1]);
    let (handle, ran) = recording_worker(Worker::new(), &[h, r]);
    let batch = h.open_batch(&all_callbacks("b6")).await.unwrap();
    let ids = batch.on(r).unwrap().add(&[1, 2, 3]).await.unwrap();
    batch.close().await.unwrap();
    let done = || async {
        let ran = ran.lock().unwrap();
        ["b6:success", "b6:complete"]
            .iter()
            .all(|cb| ran.iter().any(|id| id == cb))
    };
    assert!(
        common::eventually(Duration::from_secs(10), done).await,
        "{:?}",
        ran.lock().unwrap()
    );
    handle.shutdown().await.unwrap();
    assert_eq!(batch.status().await.unwrap().completed, 3);
    let ran = ran.lock().unwrap();
    for id in ids.iter().map(String::as_str).chain(["b6:success", "b6:complete"]) {
        assert_eq!(ran.iter().filter(|r| *r == id).count(), 1, "{id} ran once: {ran:?}");
    }
}

/// Spawns `worker` with a handler on each of `queues` that records the ids
/// of the jobs it ran.
fn recording_worker(mut worker: Worker, queues: &[&Queue]) -> (WorkerHandle, Arc<Mutex<Vec<String>>>) {
    let ran: Arc<Mutex<Vec<String>>> = Arc::default();
    for q in queues {
        let ran = ran.clone();
        worker = worker.queue((*q).clone(), move |job: Job<Value>| {
            let ran = ran.clone();
            async move {
                ran.lock().unwrap().push(job.id().to_owned());
                Ok::<_, HandlerError>(())
            }
        });
    }
    (worker.spawn().unwrap(), ran)
}

// Workers that turn the client's maintenance off (`.reaper(false)`, a
// `Reaper` process beside them) still move a batch over queues: the
// `Reaper` of the members' queue relays their ends home at its passes.
#[tokio::test]
async fn a_reaper_relays_for_workers_without_maintenance() {
    let (s, _client, qs) = queues("breap", 2).await;
    let (h, r) = (&qs[0], &qs[1]);
    let (handle, ran) = recording_worker(Worker::new().reaper(false), &[h, r]);
    let reaper = echomq::Reaper::new(r.clone())
        .interval(Duration::from_millis(50))
        .spawn()
        .unwrap();
    let batch = h.open_batch(&all_callbacks("b7")).await.unwrap();
    batch.on(r).unwrap().add(&[1, 2, 3]).await.unwrap();
    batch.close().await.unwrap();
    let fired = || async { callbacks(h, "b7").await == ["success", "complete"] };
    let moved = common::eventually(Duration::from_secs(10), fired).await;
    let left = outbox(&s, r).await.len();
    assert!(
        moved,
        "ran {:?}, {left} messages left on the members' queue's outbox",
        ran.lock().unwrap()
    );
    reaper.shutdown().await;
    handle.shutdown().await.unwrap();
    assert_eq!(batch.status().await.unwrap().completed, 3);
}

// Obliterating the members' queue ends every member that had not ended
// "removed" at home, the leased one too, with the end of one that completed
// before (still on the outbox) counted as completed: the batch ends and its
// complete callback fires once, instead of its batch waiting for good.
#[tokio::test]
async fn obliterating_the_members_queue_ends_the_batch() {
    let (s, _client, qs) = queues("boblit", 2).await;
    let (h, r) = (&qs[0], &qs[1]);
    let batch = h.open_batch(&all_callbacks("b8")).await.unwrap();
    batch.on(r).unwrap().add(&[1, 2, 3]).await.unwrap();
    batch.close().await.unwrap();
    let leased = r.claim(2, Duration::from_secs(60)).await.unwrap();
    assert_eq!(leased.len(), 2);
    r.complete(&leased[0]).await.unwrap();
    assert_eq!(outbox(&s, r).await.len(), 1);
    r.obliterate(true).await.unwrap();
    let st = batch.status().await.unwrap();
    assert_eq!((st.total, st.completed, st.failed, st.other), (3, 1, 0, 2), "{st:?}");
    assert!(st.ended_at.is_some(), "{st:?}");
    assert_eq!(callbacks(h, "b8").await, ["complete"]);
    // Obliterating again tells nothing twice.
    r.obliterate(true).await.unwrap();
    assert_eq!(batch.status().await.unwrap().other, 2);
}
