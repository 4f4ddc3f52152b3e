//! Compressed payloads (feature `compression`) against a real server:
//! stored as LZ4 blocks behind a marker above the threshold, read back as
//! JSON everywhere, plain below it; a corrupt or oversized stored block is
//! a typed decode error (the job fails for good), never an allocation.
#![cfg(feature = "compression")]

mod common;

use std::time::Duration;

use common::{raw, setup_with};
use echomq::{Consumer, Error, HandlerError, Job, JobState, QueueOptions};
use serde_json::{Value, json};

const LEASE: Duration = Duration::from_secs(30);

fn big() -> Value {
    json!({"rows": (0..400).map(|i| json!({"id": i, "name": "a customer", "plan": "monthly"})).collect::<Vec<_>>()})
}

async fn stored(c: &mut redis::aio::MultiplexedConnection, q: &echomq::Queue, id: &str) -> Vec<u8> {
    redis::cmd("HGET")
        .arg(format!("emq:{{{}}}:job:{id}", q.name()))
        .arg("p")
        .query_async(c)
        .await
        .unwrap()
}

#[tokio::test]
async fn payloads_above_the_threshold_are_stored_compressed_and_read_back() {
    let (s, q) = setup_with("lz4", QueueOptions::new().compress_above(256)).await;
    let mut c = raw(&s).await;
    let payload = big();
    let json_len = serde_json::to_vec(&payload).unwrap().len();
    let id = q.enqueue(&payload).await.unwrap();
    let small = q.enqueue(&json!({"to": "ada"})).await.unwrap();
    let kept = stored(&mut c, &q, &id).await;
    assert!(kept.starts_with(b"\0emqz1"), "compressed form");
    assert!(kept.len() * 4 < json_len, "{} of {json_len} bytes", kept.len());
    assert_eq!(stored(&mut c, &q, &small).await, br#"{"to":"ada"}"#);
    assert_eq!(q.job(&id).await.unwrap().decode::<Value>().unwrap(), payload);
    // a handle that does not compress reads them too, and a worker decodes them
    let plain = echomq::Queue::connect(&s.url(), q.name()).await.unwrap();
    assert_eq!(plain.job(&id).await.unwrap().decode::<Value>().unwrap(), payload);
    let got = plain.claim(2, LEASE).await.unwrap();
    assert_eq!(got[0].decode::<Value>().unwrap(), payload);
    assert_eq!(got[1].decode::<Value>().unwrap(), json!({"to": "ada"}));
}

#[tokio::test]
async fn a_corrupt_or_oversized_block_fails_the_job_with_a_typed_error() {
    let (s, q) = setup_with("lz4-bad", QueueOptions::new().compress_above(16)).await;
    let mut c = raw(&s).await;
    let a = q.enqueue(&big()).await.unwrap();
    let b = q.enqueue(&big()).await.unwrap();
    let key = |id: &str| format!("emq:{{{}}}:job:{id}", q.name());
    // a: the block cut short; b: a declared size of 4 GiB (a bomb)
    let mut cut = stored(&mut c, &q, &a).await;
    cut.truncate(cut.len() / 2);
    let _: () = redis::cmd("HSET")
        .arg(key(&a))
        .arg("p")
        .arg(&cut)
        .query_async(&mut c)
        .await
        .unwrap();
    let mut bomb = b"\0emqz1".to_vec();
    bomb.extend_from_slice(&u32::MAX.to_le_bytes());
    bomb.extend_from_slice(&[0x1f; 40]);
    let _: () = redis::cmd("HSET")
        .arg(key(&b))
        .arg("p")
        .arg(&bomb)
        .query_async(&mut c)
        .await
        .unwrap();
    for (id, why) in [(&a, "corrupt"), (&b, "more than")] {
        match q.job(id).await.unwrap().decode::<Value>() {
            Err(Error::Decode { source, .. }) => assert!(source.to_string().contains(why), "{source}"),
            other => panic!("{id}: {other:?}"),
        }
    }
    let w = Consumer::new(q.clone(), |_job: Job<Value>| async move { Ok::<_, HandlerError>(()) })
        .spawn()
        .unwrap();
    for id in [&a, &b] {
        assert!(
            common::eventually(Duration::from_secs(10), || async {
                q.job(id).await.unwrap().state == JobState::Failed
            })
            .await,
            "{id} fails for good"
        );
    }
    w.shutdown().await.unwrap();
    assert!(q.job(&a).await.unwrap().last_error.unwrap().contains("corrupt"));
}
