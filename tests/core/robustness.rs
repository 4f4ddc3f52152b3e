//! Bad input gets a typed error, and a flushed function library reloads:
//! the queue keeps working.

use std::time::Duration;

use echomq::{EnqueueOptions, Error, JobState, Queue, QueueOptions, Reaper};

use super::common;
use super::common::{past, raw, setup, setup_with};
use super::{Email, LEASE, email};

// Bad input gets a typed error and the queue keeps working.
#[tokio::test]
async fn bad_input_gets_typed_errors() {
    let (s, q) = setup_with("bad", QueueOptions::new().max_payload_bytes(1024)).await;
    for name in ["", "a{b}", "new\nline"] {
        assert!(
            matches!(
                Queue::connect(&s.url(), name).await,
                Err(Error::InvalidQueueName { .. })
            ),
            "{name:?}"
        );
    }
    let big = "x".repeat(2000);
    assert!(matches!(
        q.enqueue(&big).await,
        Err(Error::PayloadTooLarge { limit: 1024, .. })
    ));
    assert!(matches!(
        q.enqueue_with(&1, &EnqueueOptions::new().id("")).await,
        Err(Error::InvalidId { .. })
    ));
    assert!(matches!(q.job("nope").await, Err(Error::JobNotFound(_))));
    assert!(matches!(q.claim(0, LEASE).await, Err(Error::InvalidOption { .. })));

    // An undecodable payload fails that job for good; the consumer keeps going.
    let wrong = q.enqueue(&"not an email").await.unwrap();
    let right = q.enqueue(&email(1)).await.unwrap();
    assert!(common::complete_with_noop::<Email>(&q, 1).await);
    let w = q.job(&wrong).await.unwrap();
    assert_eq!(w.state, JobState::Failed);
    assert!(w.last_error.unwrap().starts_with("undecodable payload"));
    assert_eq!(q.job(&right).await.unwrap().state, JobState::Completed);

    // A queue written by a newer layout is refused, not misread.
    let mut c = raw(&s).await;
    let newer = common::unique("newer");
    let _: () = redis::cmd("HSET")
        .arg(format!("emq:{{{newer}}}:meta"))
        .arg("v")
        .arg(99)
        .query_async(&mut c)
        .await
        .unwrap();
    let e = Queue::connect(&s.url(), &newer).await.unwrap_err();
    assert!(
        matches!(e, Error::LayoutMismatch { ref found, .. } if found == "99"),
        "{e:?}"
    );

    // An unreachable server is a typed, transient error.
    let port = s.port();
    drop(s);
    let e = Queue::connect(&format!("redis://127.0.0.1:{port}/"), "q")
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    assert!(q.enqueue(&email(2)).await.unwrap_err().is_transient());
}

// After FUNCTION FLUSH every operation still works (the function library reloads when a call finds it missing).
#[tokio::test]
async fn function_flush_is_transparent() {
    let (s, q) = setup("noscript").await;
    let mut c = raw(&s).await;
    let flush = || redis::cmd("FUNCTION").arg("FLUSH").to_owned();
    flush().exec_async(&mut c).await.unwrap();
    q.enqueue(&email(1)).await.unwrap();
    q.enqueue(&email(2)).await.unwrap();
    q.enqueue(&email(3)).await.unwrap();
    flush().exec_async(&mut c).await.unwrap();
    let mut l = q.claim(3, Duration::from_millis(30)).await.unwrap();
    assert_eq!(l.len(), 3);
    flush().exec_async(&mut c).await.unwrap();
    q.extend(&mut l[0], LEASE).await.unwrap();
    flush().exec_async(&mut c).await.unwrap();
    q.complete(&l[0]).await.unwrap();
    flush().exec_async(&mut c).await.unwrap();
    q.retry(&l[1], Some(Duration::ZERO), "e").await.unwrap();
    flush().exec_async(&mut c).await.unwrap();
    q.release(&q.claim(1, LEASE).await.unwrap()[0]).await.unwrap();
    flush().exec_async(&mut c).await.unwrap();
    past(&q, l[2].deadline_ms()).await;
    assert_eq!(Reaper::new(q.clone()).run_once().await.unwrap().requeued.len(), 1);
    flush().exec_async(&mut c).await.unwrap();
    let last = q.claim(5, LEASE).await.unwrap();
    assert_eq!(last.len(), 2);
    flush().exec_async(&mut c).await.unwrap();
    q.fail(&last[0], "done").await.unwrap();
    let c = q.counts().await.unwrap();
    assert_eq!((c.completed, c.failed, c.active), (1, 1, 1));
}
