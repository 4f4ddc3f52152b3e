//! Pause and resume: once pause returns no consumer leases a job, and
//! resume drains the backlog.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::{Client, Consumer, Job, WorkerEvent};

use super::common::{eventually, setup};

// Once pause returns, no consumer leases a job (four consumers on two
// clients, each with its own connection, racing to claim): every claim
// ran on the server before the pause. Running jobs finish, enqueue works,
// counts say paused; resume wakes the consumers and the backlog drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_every_claim_until_resume() {
    let (s, q) = setup("pause").await;
    let other = Client::connect(&s.url()).await.unwrap().queue(q.name()).await.unwrap();
    let claims: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let mut consumers = Vec::new();
    for handle in [&q, &other, &q, &other] {
        let claims = claims.clone();
        consumers.push(
            Consumer::new(handle.clone(), |_job: Job<u32>| async {
                tokio::time::sleep(Duration::from_millis(2)).await;
                Ok(())
            })
            .concurrency(4)
            .observer(move |e| {
                if let WorkerEvent::Claimed { id, server_ms, .. } = e {
                    claims.lock().unwrap().push((id.to_string(), *server_ms));
                }
            })
            .spawn()
            .unwrap(),
        );
    }
    q.enqueue_bulk(&(0..3000u32).collect::<Vec<_>>()).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.counts().await.unwrap().completed > 100
        })
        .await
    );
    let paused_at = q.pause().await.unwrap();
    assert!(q.is_paused().await.unwrap());
    // What was leased before the pause finishes; nothing new is leased.
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.counts().await.unwrap().active == 0
        })
        .await
    );
    let late: Vec<u64> = claims
        .lock()
        .unwrap()
        .iter()
        .map(|(_, t)| *t)
        .filter(|&t| t > paused_at)
        .collect();
    assert!(
        late.is_empty(),
        "{} claims ran after the pause at {paused_at}: {late:?}",
        late.len()
    );
    let c = q.counts().await.unwrap();
    assert!(c.paused && c.pending > 0, "{c:?}");
    // Enqueue still works while paused; the jobs wait.
    q.enqueue(&9999).await.unwrap();
    assert_eq!(q.counts().await.unwrap().pending, c.pending + 1);
    assert!(
        q.claim(10, Duration::from_secs(30)).await.unwrap().is_empty(),
        "a plain claim leased while paused"
    );

    q.resume().await.unwrap();
    assert!(!q.is_paused().await.unwrap());
    assert!(
        eventually(Duration::from_secs(20), || async {
            let c = q.counts().await.unwrap();
            c.pending == 0 && c.active == 0
        })
        .await,
        "{:?}",
        q.counts().await.unwrap()
    );
    let ran: std::collections::HashSet<String> = claims.lock().unwrap().iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ran.len(), 3001, "every job ran");
    for c in consumers {
        c.shutdown().await.unwrap();
    }
}
