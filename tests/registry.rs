//! The worker registry against a real server: a running worker is listed
//! by every queue it serves, with its name, host, concurrency and queues;
//! it leaves the list when it stops.

mod common;

use std::time::Duration;

use common::eventually;
use echomq::{Client, Job, Worker};

#[tokio::test]
async fn a_running_worker_is_listed_until_it_stops() {
    let server = echomq::server::LocalServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let mail = client.queue("mail").await.unwrap();
    let bills = client.queue("bills").await.unwrap();
    assert!(mail.workers().await.unwrap().is_empty());
    let w = Worker::new()
        .queue(mail.clone(), |_job: Job<u32>| async move {
            Ok::<_, echomq::HandlerError>(())
        })
        .queue(bills.clone(), |_job: Job<u32>| async move {
            Ok::<_, echomq::HandlerError>(())
        })
        .name("reports-1")
        .concurrency(3)
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            mail.workers().await.unwrap().len() == 1
        })
        .await,
        "the worker announces itself at once"
    );
    let listed = mail.workers().await.unwrap().remove(0);
    assert_eq!(listed.name, "reports-1");
    assert_eq!(listed.concurrency, 3);
    assert_eq!(listed.queues, ["mail", "bills"]);
    assert_eq!(listed.pid, std::process::id());
    assert!(listed.running <= 3);
    let now = mail.server_time_ms().await.unwrap();
    assert!(
        listed.last_seen_ms <= now && now - listed.last_seen_ms < 15_000,
        "{listed:?}"
    );
    assert!(listed.started_ms <= listed.last_seen_ms);
    let other = bills.workers().await.unwrap().remove(0);
    assert_eq!((other.name, other.started_ms), (listed.name, listed.started_ms));
    w.shutdown().await.unwrap();
    assert!(mail.workers().await.unwrap().is_empty(), "withdrawn at shutdown");
    assert!(bills.workers().await.unwrap().is_empty());
}
