//! Enqueueing: caller ids and dedup ids, dedup TTLs, bulk enqueues with
//! per-job options, coalesced concurrent enqueues, the traceparent.

use std::time::Duration;

use echomq::{Consumer, EnqueueOptions, EnqueueStatus, Error, Job, JobState};

use super::common::{eventually, past, raw, setup};
use super::{Email, LEASE, email};

// Caller-chosen ids and dedup ids make enqueue idempotent.
#[tokio::test]
async fn ids_and_dedup_make_enqueue_idempotent() {
    let (_s, q) = setup("dedup").await;
    let o = EnqueueOptions::new().id("order-7");
    let a = q.enqueue_with(&email(1), &o).await.unwrap();
    let b = q.enqueue_with(&email(2), &o).await.unwrap();
    assert_eq!((a.status, b.status), (EnqueueStatus::Created, EnqueueStatus::Existing));
    assert_eq!(a.id, "order-7");
    assert_eq!(q.job("order-7").await.unwrap().decode::<Email>().unwrap(), email(1));
    // All-digit ids are the minted ones: a caller cannot take one.
    let e = q
        .enqueue_with(&email(3), &EnqueueOptions::new().id("2"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidId { .. }), "{e:?}");
    q.enqueue(&email(4)).await.unwrap();

    let d = EnqueueOptions::new().dedup("user-9");
    let first = q.enqueue_with(&email(5), &d).await.unwrap();
    let second = q.enqueue_with(&email(6), &d).await.unwrap();
    assert_eq!(second.status, EnqueueStatus::Deduplicated);
    assert_eq!(second.id, first.id);
    // The marker goes when its job finishes.
    let mut leases = q.claim(10, LEASE).await.unwrap();
    leases.retain(|l| l.id() == first.id);
    q.complete(&leases[0]).await.unwrap();
    let third = q.enqueue_with(&email(7), &d).await.unwrap();
    assert_eq!(third.status, EnqueueStatus::Created);
    let c = q.counts().await.unwrap();
    assert_eq!((c.active, c.completed, c.pending), (2, 1, 1));
}

// A dedup marker with a TTL stands for its TTL whatever the job does, and
// a later enqueue with the same dedup id makes a new job.
#[tokio::test]
async fn dedup_with_a_ttl_stands_for_the_ttl() {
    let (s, q) = setup("dedup-ttl").await;
    let opts = EnqueueOptions::new().dedup_for("report-7", Duration::from_millis(300));
    let first = q.enqueue_with(&email(1), &opts).await.unwrap();
    assert_eq!(first.status, EnqueueStatus::Created);
    let again = q.enqueue_with(&email(2), &opts).await.unwrap();
    assert_eq!(
        (again.status, again.id.as_str()),
        (EnqueueStatus::Deduplicated, first.id.as_str())
    );
    // Finishing the job does not release a TTL marker...
    let l = q.claim(1, LEASE).await.unwrap().remove(0);
    q.complete(&l).await.unwrap();
    assert_eq!(
        q.enqueue_with(&email(3), &opts).await.unwrap().status,
        EnqueueStatus::Deduplicated
    );
    // ...its TTL does.
    let mut c = raw(&s).await;
    let marker = format!("emq:{{{}}}:de:report-7", q.name());
    let ttl: i64 = redis::cmd("PTTL").arg(&marker).query_async(&mut c).await.unwrap();
    assert!((1..=300).contains(&ttl), "{ttl}");
    past(&q, q.server_time_ms().await.unwrap() + ttl as u64).await;
    assert!(
        eventually(Duration::from_secs(2), || async {
            let e: i64 = redis::cmd("EXISTS")
                .arg(&marker)
                .query_async(&mut raw(&s).await)
                .await
                .unwrap();
            e == 0
        })
        .await
    );
    let later = q.enqueue_with(&email(4), &opts).await.unwrap();
    assert_eq!(later.status, EnqueueStatus::Created);
    assert_ne!(later.id, first.id);
}

// A bulk enqueue with per-job options stores each job as its options say
// and answers in order, Existing for an id already there.
#[tokio::test]
async fn bulk_enqueue_with_per_job_options() {
    let (_s, q) = setup("bulk-opts").await;
    q.enqueue_with(&email(0), &EnqueueOptions::new().id("b-2"))
        .await
        .unwrap();
    let jobs = vec![
        (email(1), EnqueueOptions::new().id("b-1").priority(-1)),
        (email(2), EnqueueOptions::new().id("b-2")),
        (email(3), EnqueueOptions::new().delay(Duration::from_secs(60))),
        (email(4), EnqueueOptions::new().max_attempts(9).priority(5)),
    ];
    let r = q.enqueue_bulk_with(&jobs).await.unwrap();
    let statuses: Vec<EnqueueStatus> = r.iter().map(|e| e.status).collect();
    assert_eq!(
        statuses,
        [
            EnqueueStatus::Created,
            EnqueueStatus::Existing,
            EnqueueStatus::Created,
            EnqueueStatus::Created
        ]
    );
    assert_eq!((r[0].id.as_str(), r[1].id.as_str()), ("b-1", "b-2"));
    assert_eq!(q.job(&r[2].id).await.unwrap().state, JobState::Delayed);
    assert_eq!(q.job(&r[3].id).await.unwrap().limits.max_attempts, 9);
    // Priority decides the claim order: the max_attempts(9) job, then b-2, then b-1.
    let order: Vec<String> = q
        .claim(10, LEASE)
        .await
        .unwrap()
        .iter()
        .map(|l| l.id().to_owned())
        .collect();
    assert_eq!(order, [r[3].id.clone(), "b-2".to_owned(), "b-1".to_owned()]);
    let bad = vec![
        (email(5), EnqueueOptions::new()),
        (email(6), EnqueueOptions::new().id("")),
    ];
    assert!(matches!(q.enqueue_bulk_with(&bad).await, Err(Error::InvalidId { .. })));
    assert_eq!(
        q.counts().await.unwrap().pending,
        0,
        "nothing of a refused batch was stored"
    );
}

// Concurrent single enqueues are coalesced into fewer script calls, and each caller still gets its own answer.
#[tokio::test]
async fn concurrent_enqueues_coalesce_with_exact_answers() {
    let (s, q) = setup("coalesce").await;
    let mut c = raw(&s).await;
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut c).await.unwrap();
    let tasks: Vec<_> = (0..200u32)
        .map(|i| {
            let q = q.clone();
            tokio::spawn(async move {
                let opts = EnqueueOptions::new().id(format!("c-{}", i % 100));
                (i, q.enqueue_with(&email(i), &opts).await.unwrap())
            })
        })
        .collect();
    let mut created = 0;
    for t in tasks {
        let (i, e) = t.await.unwrap();
        assert_eq!(e.id, format!("c-{}", i % 100));
        if e.status == EnqueueStatus::Created {
            created += 1;
        } else {
            assert_eq!(e.status, EnqueueStatus::Existing);
        }
    }
    assert_eq!(created, 100);
    assert_eq!(q.counts().await.unwrap().pending, 100);
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    let calls: u64 = stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_fcall:"))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum();
    assert!(calls < 200, "200 concurrent enqueues took {calls} script calls");
}

// A job's W3C traceparent travels from the enqueue to every claim of it
// and to the handler's Job; a malformed one is refused and stores nothing.
#[tokio::test]
async fn the_traceparent_travels_with_the_job() {
    let (_s, q) = setup("traceparent").await;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let opts = echomq::EnqueueOptions::new().id("t1").traceparent(tp);
    q.enqueue_with(&1u32, &opts).await.unwrap();
    q.enqueue_with(&2u32, &echomq::EnqueueOptions::new().id("t2"))
        .await
        .unwrap();
    let leases = q.claim(2, Duration::from_secs(30)).await.unwrap();
    assert_eq!(leases[0].traceparent(), Some(tp));
    assert_eq!(leases[1].traceparent(), None);
    q.retry(&leases[0], Some(Duration::ZERO), "again").await.unwrap();
    q.complete(&leases[1]).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let c = Consumer::new(q.clone(), move |job: Job<u32>| {
        let tx = tx.clone();
        async move {
            tx.send(job.traceparent().map(str::to_owned)).unwrap();
            Ok(())
        }
    })
    .spawn()
    .unwrap();
    assert_eq!(rx.recv().await.unwrap().as_deref(), Some(tp));
    c.shutdown().await.unwrap();
    for bad in [
        "",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-abc-def-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
    ] {
        let r = q
            .enqueue_with(&3u32, &echomq::EnqueueOptions::new().traceparent(bad))
            .await;
        assert!(
            matches!(
                r,
                Err(Error::InvalidId {
                    what: "traceparent",
                    ..
                })
            ),
            "{bad:?}: {r:?}"
        );
    }
    assert_eq!(q.counts().await.unwrap().pending, 0);
}
