//! Exactly-once effects on at-least-once delivery (`src/effect/`) against a
//! real server: idempotency keys, effect markers and their fencing, atomic
//! completion, the demonstrations' readouts, and effects under SIGKILL.
//!
//! One module per concept: idempotency keys (`keys`), the effect marker
//! (`marker`), atomic completion (`atomic`), and the examples' readouts
//! (`examples`).

mod atomic;
#[path = "../common/mod.rs"]
mod common;
mod examples;
mod keys;
mod marker;

use std::time::Duration;

use common::past as wait_past;
use echomq::{Lease, Queue, Reaper};
use redis::AsyncCommands;

const LONG: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(60);

/// The worker holding `old` "crashes": it never settles. After the lease
/// deadline the reaper requeues the job and a new claim redelivers it.
async fn redeliver(q: &Queue, old: &Lease, lease: Duration) -> Lease {
    wait_past(q, old.deadline_ms()).await;
    let report = Reaper::new(q.clone()).run_once().await.unwrap();
    assert!(report.requeued.iter().any(|(id, _)| id == old.id()), "{report:?}");
    let new = q.claim(1, lease).await.unwrap().remove(0);
    assert_eq!((new.id(), new.attempt()), (old.id(), old.attempt() + 1));
    assert!(new.token() > old.token());
    new
}

async fn counter(c: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    c.get::<_, Option<i64>>(key).await.unwrap().unwrap_or(0)
}
