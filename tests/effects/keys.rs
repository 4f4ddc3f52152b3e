//! Idempotency and incarnation keys: the same on every delivery of a job,
//! different for a job stored again under its id.

use std::sync::Arc;
use std::time::Duration;

use echomq::{Backoff, Consumer, EnqueueOptions, Job, JobState, Queue};
use tokio::sync::Mutex;

use super::common;
use super::common::{eventually, setup};
use super::{LONG, SHORT, redeliver};

// The idempotency key is the same on every delivery (handler error, crash), and {QUEUE}:ID never collides.
#[tokio::test]
async fn idempotency_key_is_stable_across_redeliveries() {
    let (s, q) = setup("idkey").await;
    let opts = EnqueueOptions::new()
        .backoff(Backoff::Fixed(Duration::from_millis(5)))
        .max_attempts(5);
    let id = q.enqueue_with(&1u32, &opts).await.unwrap().id;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let consumer = Consumer::new(q.clone(), move |job: Job<u32>| {
        let seen = seen2.clone();
        async move {
            seen.lock().await.push((job.attempt(), job.idempotency_key()));
            if job.attempt() < 3 {
                Err("not yet".into())
            } else {
                Ok(())
            }
        }
    })
    .spawn()
    .unwrap();
    let done = eventually(Duration::from_secs(10), || async {
        q.job(&id).await.unwrap().state == JobState::Completed
    })
    .await;
    consumer.shutdown().await.unwrap();
    assert!(done);
    let seen = seen.lock().await.clone();
    let want = format!("{{{}}}:{id}", q.name());
    assert_eq!(seen.iter().map(|(a, _)| *a).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert!(seen.iter().all(|(_, k)| *k == want), "{seen:?}");
    assert_eq!(q.idempotency_key(&id), want);

    // A crash redelivery (lease reaped) keeps the key too.
    let id2 = q.enqueue(&2u32).await.unwrap();
    let first = q.claim(1, SHORT).await.unwrap().remove(0);
    let second = redeliver(&q, &first, LONG).await;
    assert_eq!(q.idempotency_key(first.id()), q.idempotency_key(second.id()));
    assert_eq!(q.idempotency_key(second.id()), format!("{{{}}}:{id2}", q.name()));

    // Queue names may hold ':' and ids too; the braces keep the pairs apart.
    let a = Queue::connect(&s.url(), "t:a").await.unwrap();
    let b = Queue::connect(&s.url(), "t").await.unwrap();
    assert_ne!(a.idempotency_key("b"), b.idempotency_key("a:b"));
}

// The idempotency key names the id; the incarnation key also tells apart a job stored again under that id, after its record was deleted or after the id counter went back (lost writes), and is the same on every delivery of one job.
#[tokio::test]
async fn incarnation_keys_differ_when_an_id_is_minted_again() {
    let opts = echomq::QueueOptions::new().keep_completed(echomq::Retention::None);
    let (s, q) = common::setup_with("incarnation", opts).await;
    let id = q.enqueue(&1u32).await.unwrap();
    let first = q.claim(1, Duration::from_millis(50)).await.unwrap().remove(0);
    let again = redeliver(&q, &first, LONG).await;
    assert_eq!(
        first.incarnation_key(),
        again.incarnation_key(),
        "stable across redeliveries"
    );
    assert!(
        first
            .incarnation_key()
            .starts_with(&format!("{}@", q.idempotency_key(&id)))
    );
    q.complete(&again).await.unwrap(); // and its record is deleted
    // The counter goes back, as after a torn append-only file: the id is minted again.
    let mut c = common::raw(&s).await;
    let _: () = redis::cmd("DECR")
        .arg(format!("emq:{{{}}}:seq", q.name()))
        .query_async(&mut c)
        .await
        .unwrap();
    common::past(&q, first.created_ms()).await;
    let id2 = q.enqueue(&2u32).await.unwrap();
    assert_eq!(id2, id, "the id was minted again");
    let second = q.claim(1, LONG).await.unwrap().remove(0);
    assert_eq!(q.idempotency_key(second.id()), q.idempotency_key(first.id()));
    assert_ne!(second.incarnation_key(), first.incarnation_key());
    assert!(second.created_ms() > first.created_ms());
}
