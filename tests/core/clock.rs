//! The server's clock decides: lease deadlines, a skewed server clock,
//! run_at.

use std::time::Duration;

use echomq::{EnqueueOptions, Error, JobState, Queue, Reaper};

use super::common;
use super::common::{past, setup};
use super::{Email, LEASE, email};

// Deadlines are computed from the server's TIME: the lease deadline lies between server clock readings.
#[tokio::test]
async fn deadlines_follow_the_server_clock() {
    let (_s, q) = setup("clock").await;
    q.enqueue(&email(1)).await.unwrap();
    let lease_len = Duration::from_millis(700);
    let t0 = q.server_time_ms().await.unwrap();
    let mut lease = q.claim(1, lease_len).await.unwrap().remove(0);
    let t1 = q.server_time_ms().await.unwrap();
    assert!(
        (t0 + 700..=t1 + 700).contains(&lease.deadline_ms()),
        "{t0} {} {t1}",
        lease.deadline_ms()
    );
    let t2 = q.server_time_ms().await.unwrap();
    let d = q.extend(&mut lease, Duration::from_secs(5)).await.unwrap();
    let t3 = q.server_time_ms().await.unwrap();
    assert!((t2 + 5000..=t3 + 5000).contains(&d));
    // Delays are resolved on the server too.
    let t4 = q.server_time_ms().await.unwrap();
    let id = q
        .enqueue_with(&email(2), &EnqueueOptions::new().delay(Duration::from_secs(60)))
        .await
        .unwrap()
        .id;
    let due = q.job(&id).await.unwrap().deadline_ms.unwrap();
    assert!(due >= t4 + 60_000 && due <= q.server_time_ms().await.unwrap() + 60_000);
}

/// libfaketime, to run the server with a skewed clock; None where not installed.
fn faketime_lib() -> Option<&'static str> {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
}

// With the server's clock an hour off the client's, leases and reaping follow the server's clock.
#[tokio::test]
async fn skewed_server_clock_decides() {
    let lib = faketime_lib().expect("libfaketime is missing: apt-get install faketime (scripts/test installs it)");
    for skew in ["+1h", "-1h"] {
        let started = echomq::server::LocalServer::builder()
            .env("LD_PRELOAD", lib)
            .env("FAKETIME", skew)
            .start();
        // Debian's jemalloc-linked redis-server recurses in libfaketime's
        // clock_gettime and never starts under it; scripts/test runs this
        // test on Valkey, and .ci/run says so for its Redis 7.0 pass.
        let Ok(server) = started else {
            println!("SKIPPED: this server binary does not start under libfaketime (jemalloc): {started:?}");
            return;
        };
        let q = Queue::connect(&server.url(), &common::unique("skew")).await.unwrap();
        let client_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let server_ms = q.server_time_ms().await.unwrap();
        assert!(
            server_ms.abs_diff(client_ms) > 3_000_000,
            "faketime did not skew the server ({skew})"
        );

        let id = q.enqueue(&email(1)).await.unwrap();
        let lease = q.claim(1, Duration::from_millis(300)).await.unwrap().remove(0);
        assert!(
            lease.deadline_ms().abs_diff(server_ms + 300) < 2_000,
            "deadline not on the server clock ({skew})"
        );
        // The lease expires 300 ms later by the server's clock, whatever the client's says.
        assert!(Reaper::new(q.clone()).run_once().await.unwrap().requeued.is_empty());
        past(&q, lease.deadline_ms()).await;
        assert_eq!(
            Reaper::new(q.clone()).run_once().await.unwrap().requeued,
            vec![(id.clone(), 1)],
            "{skew}"
        );

        // A consumer works normally against the skewed server.
        assert!(common::complete_with_noop::<Email>(&q, 1).await);
    }
}

// run_at schedules on the server's clock: a time past runs now, a future
// one is due exactly then, not before; with a delay it is refused.
#[tokio::test]
async fn run_at_is_due_on_the_server_clock() {
    let (_s, q) = setup("run-at").await;
    let server_now = q.server_time_ms().await.unwrap();
    let at = |ms: u64| std::time::UNIX_EPOCH + Duration::from_millis(ms);
    let overdue = q
        .enqueue_with(&email(1), &EnqueueOptions::new().run_at(at(server_now - 60_000)))
        .await
        .unwrap()
        .id;
    assert_eq!(q.job(&overdue).await.unwrap().state, JobState::Pending);
    let due = server_now + 400;
    let later = q
        .enqueue_with(&email(2), &EnqueueOptions::new().run_at(at(due)))
        .await
        .unwrap()
        .id;
    let info = q.job(&later).await.unwrap();
    assert_eq!((info.state, info.deadline_ms), (JobState::Delayed, Some(due)));
    assert_eq!(q.claim(10, LEASE).await.unwrap().len(), 1, "only the past one is due");
    past(&q, due).await;
    let l = q.claim(10, LEASE).await.unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].id(), later);
    let both = EnqueueOptions::new().run_at(at(due)).delay(Duration::from_secs(1));
    assert!(matches!(
        q.enqueue_with(&email(3), &both).await,
        Err(Error::InvalidOption { .. })
    ));
    let far = EnqueueOptions::new().run_at(at(server_now + 400 * 86_400_000));
    assert!(matches!(
        q.enqueue_with(&email(3), &far).await,
        Err(Error::InvalidOption { .. })
    ));
}
