//! Removing jobs, draining a queue and obliterating it, also racing
//! claims.

use std::time::Duration;

use echomq::admin::Moved;
use echomq::{Client, Error};

use super::common;
use super::common::setup;

// Jobs in any state but active are removed with their dedup markers; an
// active job is refused; drain removes every pending and delayed job.
#[tokio::test]
async fn jobs_are_removed_and_queues_drained() {
    let (_s, q) = setup("remove").await;
    let opts = |d: &str| echomq::EnqueueOptions::new().dedup(d);
    let a = q.enqueue_with(&1u32, &opts("a")).await.unwrap().id;
    let b = q.enqueue(&2u32).await.unwrap();
    let active = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    let later = q
        .enqueue_with(&3u32, &echomq::EnqueueOptions::new().delay(Duration::from_secs(60)))
        .await
        .unwrap()
        .id;
    let r = q.remove(&[&b, &later, active.id(), "nope"]).await.unwrap();
    assert!(matches!(r[0].1, Ok(Moved::Done)), "{r:?}");
    assert!(matches!(r[1].1, Ok(Moved::Done)), "{r:?}");
    assert!(
        matches!(&r[2].1, Err(Error::JobActive(id)) if id == active.id()),
        "{r:?}"
    );
    assert!(matches!(r[3].1, Ok(Moved::NotFound)), "{r:?}");
    assert!(q.job(&b).await.is_err() && q.job(&later).await.is_err());
    assert_eq!(active.id(), a);
    // The active job finishes normally; removing it then frees its dedup id.
    q.complete(&active).await.unwrap();
    q.remove(&[&a]).await.unwrap();
    assert_eq!(
        q.enqueue_with(&4u32, &opts("a")).await.unwrap().status,
        echomq::EnqueueStatus::Created
    );

    q.enqueue_bulk(&(0..2500u32).collect::<Vec<_>>()).await.unwrap();
    q.enqueue_with(&5u32, &echomq::EnqueueOptions::new().delay(Duration::from_secs(60)))
        .await
        .unwrap();
    let held = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    assert_eq!(q.drain().await.unwrap(), 2501);
    let c = q.counts().await.unwrap();
    assert_eq!((c.pending, c.delayed, c.active), (0, 0, 1));
    q.complete(&held).await.unwrap();

    // Bad input is a typed error.
    assert!(matches!(q.remove(&[]).await, Err(Error::InvalidOption { .. })));
    assert!(matches!(q.retry_failed(&[""]).await, Err(Error::InvalidId { .. })));
}

// Remove racing claims over the same jobs: every job ends either removed
// (no record, never leased) or leased (active, and `remove` refused it),
// never both; the sets agree with the records afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_races_claims() {
    let (_s, q) = setup("remove-race").await;
    let ids = q.enqueue_bulk(&(0..2000u32).collect::<Vec<_>>()).await.unwrap();
    let claimer = {
        let q = q.clone();
        tokio::spawn(async move {
            let mut leased = Vec::new();
            loop {
                let got = q.claim(16, Duration::from_secs(60)).await.unwrap();
                if got.is_empty() {
                    return leased;
                }
                leased.extend(got.into_iter().map(|l| l.id().to_owned()));
            }
        })
    };
    let remover = {
        let (q, ids) = (q.clone(), ids.clone());
        tokio::spawn(async move {
            let mut removed = Vec::new();
            for chunk in ids.chunks(16).rev() {
                let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
                for (id, r) in q.remove(&refs).await.unwrap() {
                    match r {
                        Ok(Moved::Done) => removed.push(id),
                        Err(Error::JobActive(_)) | Ok(Moved::NotFound) => {}
                        other => panic!("{id}: {other:?}"),
                    }
                }
            }
            removed
        })
    };
    let (leased, removed) = (claimer.await.unwrap(), remover.await.unwrap());
    let leased: std::collections::HashSet<String> = leased.into_iter().collect();
    for id in &removed {
        assert!(!leased.contains(id), "job {id} was removed and leased");
        assert!(q.job(id).await.is_err());
    }
    assert_eq!(
        leased.len() + removed.len(),
        2000,
        "a job was neither leased nor removed"
    );
    assert_eq!(q.counts().await.unwrap().active as usize, leased.len());
    assert_eq!(
        q.sweep(1000).await.unwrap().repaired,
        0,
        "the sets disagree with the records"
    );
}

// Obliterate deletes every key of the queue and nothing of another (whose
// name the first one's matches as a glob pattern); it refuses while a job
// is leased unless forced; the queue works again afterwards.
#[tokio::test]
async fn obliterate_deletes_the_queue_and_only_it() {
    let (s, _) = setup("unused").await;
    let client = Client::connect(&s.url()).await.unwrap();
    let name = common::unique("ob?");
    let q = client.queue(&name).await.unwrap();
    let other = client.queue(&name.replace('?', "x")).await.unwrap();
    q.enqueue_bulk(&(0..2500u32).collect::<Vec<_>>()).await.unwrap();
    other.enqueue(&1u32).await.unwrap();
    let held = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    let mut c = common::raw(&s).await;
    let _: () = redis::cmd("SET")
        .arg(q.user_key("mine").unwrap())
        .arg(1)
        .query_async(&mut c)
        .await
        .unwrap();
    let keys = |pattern: String| {
        let mut c = c.clone();
        async move {
            let k: Vec<String> = redis::cmd("KEYS").arg(pattern).query_async(&mut c).await.unwrap();
            k.len()
        }
    };
    let mine = format!("emq:{{{}}}:*", name.replace('?', "\\?"));
    let before = keys(mine.clone()).await;
    assert!(matches!(
        q.obliterate(false).await,
        Err(Error::QueueActive { active: 1, .. })
    ));
    assert_eq!(
        keys(mine.clone()).await,
        before,
        "a refused obliterate deleted something"
    );

    let deleted = q.obliterate(true).await.unwrap();
    assert_eq!(deleted as usize, before);
    assert_eq!(keys(mine).await, 0);
    assert_eq!(other.counts().await.unwrap().pending, 1, "the other queue was touched");
    // The stale lease is fenced; the queue starts again as new.
    assert!(q.complete(&held).await.is_err());
    q.enqueue(&7u32).await.unwrap();
    let l = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    assert!(
        l.token() > held.token(),
        "tokens never repeat, not even after obliterate"
    );
    assert!(!q.counts().await.unwrap().paused);
}
