//! The outbox and its relay against a real Postgres and a real Valkey.

mod common;

use std::time::Duration;

use common::{jobs, rows, servers, wait_until};
use echomq::{Durability, JobState, QueueOptions};
use echomq_outbox::testing::{LocalPostgres, PgServerError};
use echomq_outbox::{Error, JobOptions, Outbox, Relay, RelayOptions};
use serde_json::json;

fn relay_opts() -> RelayOptions {
    RelayOptions::new().poll_interval(Duration::from_millis(50))
}

// Committed rows become jobs with their payload; rolled-back rows never do.
#[tokio::test]
async fn committed_rows_become_jobs_and_rolled_back_rows_never_do() {
    let s = servers().await;
    let outbox = Outbox::new();
    let mut tx = s.pool.begin().await.unwrap();
    let a = outbox
        .enqueue(&mut tx, "mail", &json!({"to": "a"}), &JobOptions::new())
        .await
        .unwrap();
    let b = outbox
        .enqueue(&mut tx, "mail", &json!({"to": "b"}), &JobOptions::new().id("b-1"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut tx = s.pool.begin().await.unwrap();
    let gone = outbox
        .enqueue(&mut tx, "mail", &json!({"to": "c"}), &JobOptions::new())
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(b.job_id, "b-1");

    let relay = Relay::new(s.pool.clone(), s.client.clone(), relay_opts()).unwrap();
    let report = relay.run_once().await.unwrap();
    assert_eq!((report.rows, report.created, report.existing), (2, 2, 0));
    let queue = s.client.queue("mail").await.unwrap();
    let job = queue.job(&a.job_id).await.unwrap();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&job.payload).unwrap(),
        json!({"to": "a"})
    );
    assert_eq!(job.state, JobState::Pending);
    queue.job("b-1").await.unwrap();
    assert!(matches!(
        queue.job(&gone.job_id).await,
        Err(echomq::Error::JobNotFound(_))
    ));
    assert_eq!(rows(&s.pool).await, 0);
    assert_eq!(relay.run_once().await.unwrap().rows, 0);
}

// The row's options reach the job: kind, lane, priority's order, limits, dedup.
#[tokio::test]
async fn options_reach_the_job() {
    let s = servers().await;
    let outbox = Outbox::new();
    let mut tx = s.pool.begin().await.unwrap();
    let opts = JobOptions::new()
        .id("opt-1")
        .kind("welcome")
        .lane("tenant-7")
        .max_attempts(4)
        .timeout(Duration::from_secs(9))
        .dedup("user-7");
    outbox.enqueue(&mut tx, "opts", &json!(1), &opts).await.unwrap();
    outbox
        .enqueue(&mut tx, "opts", &json!(2), &JobOptions::new().id("low").priority(-5))
        .await
        .unwrap();
    outbox
        .enqueue(&mut tx, "opts", &json!(3), &JobOptions::new().id("high").priority(5))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    Relay::new(s.pool.clone(), s.client.clone(), relay_opts())
        .unwrap()
        .run_once()
        .await
        .unwrap();

    let queue = s.client.queue("opts").await.unwrap();
    let job = queue.job("opt-1").await.unwrap();
    assert_eq!(job.kind.as_deref(), Some("welcome"));
    assert_eq!(job.lane.as_deref(), Some("tenant-7"));
    assert_eq!(job.limits.max_attempts, 4);
    assert_eq!(job.limits.timeout, Some(Duration::from_secs(9)));
    assert_eq!(queue.dedup_holder("user-7").await.unwrap().as_deref(), Some("opt-1"));
    // A row with a dedup id of its own gets no guard marker.
    assert_eq!(queue.dedup_holder("echomq-outbox:opt-1").await.unwrap(), None);
    assert_eq!(
        queue.dedup_holder("echomq-outbox:high").await.unwrap().as_deref(),
        Some("high")
    );
}

// A delay counts from the insert by Postgres's clock, not from the relay's enqueue.
#[tokio::test]
async fn delay_counts_from_the_insert() {
    let s = servers().await;
    let mut tx = s.pool.begin().await.unwrap();
    let e = Outbox::new()
        .enqueue(
            &mut tx,
            "later",
            &json!(1),
            &JobOptions::new().delay(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // As if the relay came 28 s after the insert.
    sqlx::query("UPDATE echomq_outbox SET run_at = run_at - interval '28 seconds', created_at = created_at - interval '28 seconds'")
        .execute(&s.pool)
        .await
        .unwrap();
    Relay::new(s.pool.clone(), s.client.clone(), relay_opts())
        .unwrap()
        .run_once()
        .await
        .unwrap();
    let queue = s.client.queue("later").await.unwrap();
    let job = queue.job(&e.job_id).await.unwrap();
    assert_eq!(job.state, JobState::Delayed);
    let left = job
        .deadline_ms
        .unwrap()
        .saturating_sub(queue.server_time_ms().await.unwrap());
    assert!((1_000..=2_500).contains(&left), "due in {left} ms, want about 2 s");
}

// A row relayed again (its relay died before the delete) makes no second job,
// and the guard marker stands for it.
#[tokio::test]
async fn a_row_relayed_twice_makes_one_job() {
    let s = servers().await;
    let mut tx = s.pool.begin().await.unwrap();
    let e = Outbox::new()
        .enqueue(&mut tx, "twice", &json!({"n": 1}), &JobOptions::new())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let relay = Relay::new(s.pool.clone(), s.client.clone(), relay_opts()).unwrap();
    assert_eq!(relay.run_once().await.unwrap().created, 1);
    // The row as it was before the delete.
    sqlx::query("INSERT INTO echomq_outbox (queue, job_id, payload) VALUES ('twice', $1, '{\"n\": 1}')")
        .bind(&e.job_id)
        .execute(&s.pool)
        .await
        .unwrap();
    let again = relay.run_once().await.unwrap();
    assert_eq!((again.created, again.existing), (0, 1));
    let queue = s.client.queue("twice").await.unwrap();
    assert_eq!(jobs(&queue).await, 1);
    assert_eq!(
        queue
            .dedup_holder(&format!("echomq-outbox:{}", e.job_id))
            .await
            .unwrap(),
        Some(e.job_id)
    );
    assert_eq!(rows(&s.pool).await, 0);
}

// NOTIFY wakes an idle relay whose poll interval would never fire in the test.
#[tokio::test]
async fn notify_wakes_the_relay() {
    let s = servers().await;
    let opts = RelayOptions::new().poll_interval(Duration::from_secs(3600));
    let relay = Relay::new(s.pool.clone(), s.client.clone(), opts).unwrap().spawn();
    let queue = s.client.queue("woken").await.unwrap();
    for round in 0..3 {
        let mut tx = s.pool.begin().await.unwrap();
        Outbox::new()
            .enqueue(&mut tx, "woken", &json!(round), &JobOptions::new())
            .await
            .unwrap();
        tx.commit().await.unwrap();
        wait_until("the notified relay", Duration::from_secs(10), || async {
            jobs(&queue).await == round + 1
        })
        .await;
    }
    relay.shutdown().await;
}

// Without LISTEN the poll finds committed rows.
#[tokio::test]
async fn polling_alone_finds_rows() {
    let s = servers().await;
    let opts = RelayOptions::new()
        .listen(false)
        .poll_interval(Duration::from_millis(50));
    let relay = Relay::new(s.pool.clone(), s.client.clone(), opts).unwrap().spawn();
    let mut tx = s.pool.begin().await.unwrap();
    Outbox::new()
        .enqueue(&mut tx, "polled", &json!(1), &JobOptions::new())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let queue = s.client.queue("polled").await.unwrap();
    wait_until("the polling relay", Duration::from_secs(10), || async {
        jobs(&queue).await == 1
    })
    .await;
    relay.shutdown().await;
}

// Several relays at once share the rows: each row is one job, none is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_relays_make_one_job_per_row() {
    let s = servers().await;
    let relays: Vec<_> = (0..4)
        .map(|_| {
            Relay::new(s.pool.clone(), s.client.clone(), relay_opts().batch_size(50))
                .unwrap()
                .spawn()
        })
        .collect();
    let outbox = Outbox::new();
    for chunk in 0..20 {
        let mut tx = s.pool.begin().await.unwrap();
        let batch: Vec<_> = (0..100).map(|i| (json!(chunk * 100 + i), JobOptions::new())).collect();
        outbox.enqueue_bulk(&mut tx, "shared", &batch).await.unwrap();
        tx.commit().await.unwrap();
    }
    wait_until("an empty outbox", Duration::from_secs(30), || async {
        rows(&s.pool).await == 0
    })
    .await;
    let queue = s.client.queue("shared").await.unwrap();
    assert_eq!(jobs(&queue).await, 2000);
    for r in relays {
        r.shutdown().await;
    }
}

// A row echomq refuses is set aside as failed, listed with its error, and
// blocks none of its batch; retry_failed puts it back in line.
#[tokio::test]
async fn refused_rows_are_set_aside() {
    let s = servers().await;
    let mut tx = s.pool.begin().await.unwrap();
    Outbox::new()
        .enqueue(&mut tx, "mixed", &json!("ok"), &JobOptions::new().id("good"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // Rows a newer (or broken) writer made: an unknown layout, a bad queue name.
    sqlx::query(
        "INSERT INTO echomq_outbox (queue, job_id, payload, options) VALUES \
         ('mixed', 'newer', '1', '{\"v\": 2}'), ('bad{name}', 'braces', '1', '{\"v\": 1}')",
    )
    .execute(&s.pool)
    .await
    .unwrap();
    let report = Relay::new(s.pool.clone(), s.client.clone(), relay_opts())
        .unwrap()
        .run_once()
        .await
        .unwrap();
    assert_eq!((report.rows, report.created, report.failed), (3, 1, 2));
    let outbox = Outbox::new();
    let failed = outbox.failed(&s.pool, 10).await.unwrap();
    let names: Vec<_> = failed.iter().map(|f| f.job_id.as_str()).collect();
    assert_eq!(names, ["newer", "braces"]);
    assert!(failed[0].error.contains("layout 2"), "{}", failed[0].error);
    let backlog = outbox.backlog(&s.pool).await.unwrap();
    assert_eq!((backlog.rows, backlog.failed), (0, 2));
    assert_eq!(outbox.retry_failed(&s.pool).await.unwrap(), 2);
    assert_eq!(outbox.backlog(&s.pool).await.unwrap().rows, 2);
}

// The backlog counts waiting rows and the age of the oldest.
#[tokio::test]
async fn backlog_counts_rows_and_age() {
    let s = servers().await;
    let outbox = Outbox::new();
    assert_eq!(outbox.backlog(&s.pool).await.unwrap().rows, 0);
    let mut tx = s.pool.begin().await.unwrap();
    outbox
        .enqueue(&mut tx, "aged", &json!(1), &JobOptions::new())
        .await
        .unwrap();
    outbox
        .enqueue(&mut tx, "aged", &json!(2), &JobOptions::new())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    sqlx::query("UPDATE echomq_outbox SET created_at = created_at - interval '90 seconds' WHERE id = (SELECT min(id) FROM echomq_outbox)")
        .execute(&s.pool)
        .await
        .unwrap();
    let b = outbox.backlog(&s.pool).await.unwrap();
    assert_eq!(b.rows, 2);
    assert!((90..100).contains(&b.oldest_age.as_secs()), "{b:?}");
}

// A queue that asks for a replica's acknowledgement keeps its rows until
// one acknowledges, then deletes them; no row makes two jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_wait_for_the_queues_durability() {
    let s = servers().await;
    let durable = QueueOptions::new().durability(Durability::Replicas {
        count: 1,
        timeout: Duration::from_millis(100),
    });
    let queue = s.client.queue_with("durable", durable).await.unwrap();
    let relay = Relay::new(s.pool.clone(), s.client.clone(), relay_opts())
        .unwrap()
        .with_queue(queue.clone());
    let mut tx = s.pool.begin().await.unwrap();
    Outbox::new()
        .enqueue(&mut tx, "durable", &json!(1), &JobOptions::new().id("d-1"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    match relay.run_once().await {
        Err(e @ Error::Queue(echomq::Error::NotDurable { .. })) => assert!(e.is_transient()),
        other => panic!("want NotDurable, got {other:?}"),
    }
    assert_eq!(rows(&s.pool).await, 1);
    let replica = echomq::server::LocalServer::builder()
        .replica_of(s.valkey.port())
        .start()
        .unwrap();
    wait_until("the replica's acknowledgement", Duration::from_secs(20), || async {
        relay.run_once().await.is_ok_and(|r| r.existing == 1)
    })
    .await;
    assert_eq!(rows(&s.pool).await, 0);
    assert_eq!(jobs(&queue).await, 1);
    drop(replica);
}

// Bad input is a typed error naming the option, before anything is written.
#[tokio::test]
async fn bad_input_is_refused_before_the_insert() {
    let s = servers().await;
    let outbox = Outbox::new();
    let mut conn = s.pool.acquire().await.unwrap();
    let bad_queue = outbox.enqueue(&mut conn, "a{b}", &json!(1), &JobOptions::new()).await;
    assert!(
        matches!(bad_queue, Err(Error::InvalidOption { name: "queue name", .. })),
        "{bad_queue:?}"
    );
    let bad_id = outbox
        .enqueue(&mut conn, "q", &json!(1), &JobOptions::new().id("42"))
        .await;
    assert!(
        matches!(bad_id, Err(Error::InvalidOption { name: "job id", .. })),
        "{bad_id:?}"
    );
    let empty = outbox.enqueue_bulk::<i32>(&mut conn, "q", &[]).await;
    assert!(
        matches!(empty, Err(Error::InvalidOption { name: "jobs", .. })),
        "{empty:?}"
    );
    assert!(matches!(
        Relay::new(s.pool.clone(), s.client.clone(), RelayOptions::new().batch_size(0)),
        Err(Error::InvalidOption { name: "batch_size", .. })
    ));
    assert_eq!(rows(&s.pool).await, 0);
}

// Missing Postgres binaries are an error naming what to install, never a pass.
#[test]
fn missing_postgres_names_the_package() {
    let err = LocalPostgres::builder()
        .bin_dir("/nonexistent/pg/bin")
        .start()
        .unwrap_err();
    assert!(matches!(err, PgServerError::MissingBinaries { .. }));
    let msg = err.to_string();
    assert!(msg.contains("postgresql") && msg.contains("initdb"), "{msg}");
}

// The Postgres helper's restart keeps committed rows (the fault tests lean on it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_postgres_restart_keeps_committed_rows() {
    let mut s = servers().await;
    let mut tx = s.pool.begin().await.unwrap();
    Outbox::new()
        .enqueue(&mut tx, "kept", &json!(1), &JobOptions::new())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    tokio::task::block_in_place(|| s.pg.restart()).unwrap();
    wait_until("postgres back", Duration::from_secs(20), || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM echomq_outbox")
            .fetch_one(&s.pool)
            .await
            .ok()
            == Some(1)
    })
    .await;
}

// The relay's LISTEN comes back after Postgres restarts: a commit after the
// restart still wakes a relay whose poll would never fire in the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_wakes_the_relay_after_a_postgres_restart() {
    let mut s = servers().await;
    let opts = RelayOptions::new()
        .poll_interval(Duration::from_secs(3600))
        .error_backoff(Duration::from_millis(50));
    let relay = Relay::new(s.pool.clone(), s.client.clone(), opts).unwrap().spawn();
    let queue = s.client.queue("relisten").await.unwrap();
    tokio::task::block_in_place(|| s.pg.restart()).unwrap();
    // The relay reconnects and wakes once by itself (rows may have committed
    // unheard); what follows can only be seen through a fresh LISTEN.
    for round in 0..3u64 {
        let outbox = Outbox::new();
        let inserted = async {
            let mut tx = s.pool.begin().await?;
            outbox
                .enqueue(&mut tx, "relisten", &json!(round), &JobOptions::new())
                .await?;
            tx.commit().await?;
            Ok::<_, Error>(())
        };
        if inserted.await.is_err() {
            // The test's own pool still held a connection from before the restart.
            let mut tx = s.pool.begin().await.unwrap();
            outbox
                .enqueue(&mut tx, "relisten", &json!(round), &JobOptions::new())
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
        wait_until("the relay woken after the restart", Duration::from_secs(15), || async {
            jobs(&queue).await == round + 1
        })
        .await;
    }
    relay.shutdown().await;
}

// An expiry counts from the insert: a row relayed in time becomes a job
// with what is left of it; a row relayed after it becomes a job that ends
// expired at its first claim and never runs. A by-states unique id keeps a
// second row's job out while the first waits.
#[tokio::test]
async fn expiries_and_unique_modes_reach_the_job() {
    let s = servers().await;
    let outbox = Outbox::new();
    let queue = s.client.queue("lifetimes").await.unwrap();
    let mut tx = s.pool.begin().await.unwrap();
    let in_time = JobOptions::new().id("in-time").discard_after(Duration::from_secs(600));
    outbox.enqueue(&mut tx, "lifetimes", &json!(1), &in_time).await.unwrap();
    let late = JobOptions::new().id("late").discard_after(Duration::from_millis(50));
    outbox.enqueue(&mut tx, "lifetimes", &json!(2), &late).await.unwrap();
    let once = JobOptions::new().unique("sync:1", echomq::Unique::until_started());
    outbox.enqueue(&mut tx, "lifetimes", &json!(3), &once).await.unwrap();
    outbox.enqueue(&mut tx, "lifetimes", &json!(4), &once).await.unwrap();
    tx.commit().await.unwrap();
    let committed = queue.server_time_ms().await.unwrap();
    // The short expiry passes (on Postgres's clock) before the relay looks.
    wait_until("the late row's expiry to pass", Duration::from_secs(5), || async {
        sqlx::query_scalar::<_, bool>(
            "SELECT clock_timestamp() - created_at > interval '60 milliseconds' FROM echomq_outbox WHERE job_id = 'late'",
        )
        .fetch_one(&s.pool)
        .await
        .unwrap()
    })
    .await;

    let relay = Relay::new(s.pool.clone(), s.client.clone(), relay_opts()).unwrap();
    let report = relay.run_once().await.unwrap();
    assert_eq!((report.rows, report.created), (4, 3), "{report:?}");
    assert_eq!(rows(&s.pool).await, 0);
    let xa = queue.job("in-time").await.unwrap().expires_at_ms.unwrap();
    // What was left at the relay's take, counted on from the enqueue: the
    // insert's time + 10 min, give or take the take-to-enqueue time.
    assert!(
        xa > committed + 590_000 && xa <= committed + 601_000,
        "{xa} - {committed} = {}: the insert's time + 10 min",
        xa as i64 - committed as i64
    );
    let leases = queue.claim(10, Duration::from_secs(30)).await.unwrap();
    let mut ids: Vec<&str> = leases.iter().map(|l| l.id()).collect();
    ids.sort();
    assert_eq!(ids.len(), 2, "in-time and one sync job: {ids:?}");
    assert!(ids.contains(&"in-time"));
    assert_eq!(queue.job("late").await.unwrap().state, JobState::Expired);
    // Bad values fail the insert, naming the option.
    let mut tx = s.pool.begin().await.unwrap();
    for (o, name) in [
        (JobOptions::new().discard_after(Duration::ZERO), "discard_after"),
        (
            JobOptions::new()
                .delay(Duration::from_secs(60))
                .discard_after(Duration::from_secs(30)),
            "discard_after",
        ),
        (
            JobOptions::new().unique("x", echomq::Unique::by_states(&[])),
            "unique states",
        ),
    ] {
        match outbox.enqueue(&mut tx, "lifetimes", &json!(5), &o).await {
            Err(Error::InvalidOption { name: n, .. }) => assert_eq!(n, name),
            other => panic!("{o:?}: {other:?}"),
        }
    }
}

// The relay's link to Valkey blackholed mid-batch (no reset, no reply: the
// case a cut connection does not cover): the batch gives up at its
// timeout, deletes nothing and holds no row's lock; once the link heals,
// the held-back enqueue lands late and the next batches find its jobs
// standing: one job per row.
#[tokio::test]
async fn a_blackholed_valkey_link_times_the_batch_out_and_loses_nothing() {
    let s = servers().await;
    let proxy = common::Proxy::start(s.valkey.port()).await;
    let through = echomq::Client::connect(&format!("redis://127.0.0.1:{}", proxy.port))
        .await
        .unwrap();
    let outbox = Outbox::new();
    let mut tx = s.pool.begin().await.unwrap();
    for i in 0..20 {
        outbox
            .enqueue(&mut tx, "held", &json!(i), &JobOptions::new())
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let relay = Relay::new(
        s.pool.clone(),
        through,
        relay_opts().batch_timeout(Duration::from_secs(1)),
    )
    .unwrap();

    proxy.stall();
    let started = std::time::Instant::now();
    let r = relay.run_once().await;
    assert!(matches!(r, Err(Error::Timeout(_))), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(rows(&s.pool).await, 20, "no row deleted");
    let free: i64 =
        sqlx::query_scalar("SELECT count(*) FROM (SELECT id FROM echomq_outbox FOR UPDATE SKIP LOCKED) AS t")
            .fetch_one(&s.pool)
            .await
            .unwrap();
    assert_eq!(free, 20, "the timed-out batch holds no row");

    proxy.unstall();
    wait_until("the outbox to empty", Duration::from_secs(20), || async {
        let _ = relay.run_once().await;
        rows(&s.pool).await == 0
    })
    .await;
    let queue = s.client.queue("held").await.unwrap();
    assert_eq!(jobs(&queue).await, 20, "one job per row");
}
