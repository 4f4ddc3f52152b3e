//! Fault scenarios with real processes: relays (the `echomq-outbox-relay`
//! binary) SIGKILLed mid-batch, Valkey and Postgres restarted, the relays'
//! network to either cut, while a producer commits and rolls back. The
//! checker holds every committed row to exactly one job, every rolled-back
//! row to none, and the outbox to empty (nothing stuck); the negative
//! control (a relay that deletes before it enqueues) shows it catches a loss.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Proxy, jobs, rows, servers_with, wait_until};
use echomq::server::LocalServer;
use echomq_outbox::{JobOptions, Outbox};
use sqlx::PgPool;

const QUEUE: &str = "signups";

/// A relay process; killed (SIGKILL) and reaped on drop.
struct RelayProcess(Child);

impl RelayProcess {
    fn start(pg_port: u16, valkey_port: u16, extra: &[&str]) -> RelayProcess {
        let child = Command::new(env!("CARGO_BIN_EXE_echomq-outbox-relay"))
            .args([
                "--database-url",
                &format!("postgres://postgres@127.0.0.1:{pg_port}/postgres"),
            ])
            .args(["--valkey-url", &format!("redis://127.0.0.1:{valkey_port}/")])
            .args([
                "--batch-size",
                "40",
                "--poll-interval-ms",
                "100",
                "--batch-timeout-ms",
                "1000",
            ])
            .args(extra)
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the echomq-outbox-relay binary");
        RelayProcess(child)
    }

    fn kill(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The producer's side table: the ids of rows whose transaction committed
/// (written in that same transaction, so it is the truth even when a
/// commit's answer was lost to a restart).
async fn ledger(pool: &PgPool) {
    sqlx::query("CREATE TABLE produced (job_id text PRIMARY KEY)")
        .execute(pool)
        .await
        .unwrap();
}

/// Commits (three of four) or rolls back (the fourth) transactions of two
/// rows each until `stop`; answers every id it tried. Errors (a restart)
/// end that transaction and it carries on.
async fn produce(pool: PgPool, stop: Arc<AtomicBool>) -> Vec<String> {
    let outbox = Outbox::new();
    let mut tried = Vec::new();
    let mut n = 0u32;
    while !stop.load(Ordering::Relaxed) && n < 8000 {
        n += 1;
        let ids = [format!("p-{n}-a"), format!("p-{n}-b")];
        tried.extend(ids.iter().cloned());
        let attempt = async {
            let mut tx = pool.begin().await?;
            for id in &ids {
                outbox
                    .enqueue(&mut tx, QUEUE, &serde_json::json!({"n": n}), &JobOptions::new().id(id))
                    .await?;
                sqlx::query("INSERT INTO produced (job_id) VALUES ($1)")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
            }
            if n.is_multiple_of(4) {
                tx.rollback().await?;
            } else {
                tx.commit().await?;
            }
            Ok::<_, echomq_outbox::Error>(())
        };
        if attempt.await.is_err() {
            // Postgres is restarting: give it a moment rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if n.is_multiple_of(8) {
            tokio::task::yield_now().await;
        }
    }
    tried
}

/// Every committed row is exactly one job, no rolled-back row is a job,
/// and the outbox is empty; otherwise each problem found.
async fn check(pool: &PgPool, queue: &echomq::Queue, tried: &[String]) -> Result<usize, Vec<String>> {
    let committed: HashSet<String> = sqlx::query_scalar("SELECT job_id FROM produced")
        .fetch_all(pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
    let mut problems = Vec::new();
    for id in tried {
        let found = match queue.job(id).await {
            Ok(_) => true,
            Err(echomq::Error::JobNotFound(_)) => false,
            Err(e) => panic!("reading job {id}: {e}"),
        };
        match (committed.contains(id), found) {
            (true, false) => problems.push(format!("committed row {id} has no job")),
            (false, true) => problems.push(format!("rolled-back row {id} became a job")),
            _ => {}
        }
    }
    let total = jobs(queue).await;
    if total != committed.len() as u64 {
        problems.push(format!("{total} jobs for {} committed rows", committed.len()));
    }
    let left = rows(pool).await;
    if left != 0 {
        problems.push(format!("{left} rows stuck in the outbox"));
    }
    if problems.is_empty() {
        Ok(committed.len())
    } else {
        Err(problems)
    }
}

async fn wait_for_file(path: &Path, what: &str) {
    wait_until(what, Duration::from_secs(20), || async { path.exists() }).await;
}

fn marker(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}-{}", std::process::id()))
}

/// Waits until the queue holds more jobs than it did.
async fn progress(queue: &echomq::Queue, what: &str) {
    let before = jobs(queue).await;
    wait_until(what, Duration::from_secs(20), || async { jobs(queue).await > before }).await;
}

/// Waits until the producer has committed `n` more rows.
async fn commits(pool: &PgPool, n: i64) {
    let count = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM produced")
            .fetch_one(pool)
            .await
            .unwrap_or(0)
    };
    let before = count().await;
    wait_until("the producer's commits", Duration::from_secs(20), || async {
        count().await >= before + n
    })
    .await;
}

// Kills, restarts and cuts links under a running producer: exactly one job
// per committed row, none for a rolled-back one, nothing stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_committed_row_becomes_one_job_through_faults() {
    let valkey = LocalServer::builder().aof(true).appendfsync("always");
    let mut s = servers_with(valkey).await;
    ledger(&s.pool).await;
    let queue = s.client.queue(QUEUE).await.unwrap();
    let pg_proxy = Proxy::start(s.pg.port()).await;
    let valkey_proxy = Proxy::start(s.valkey.port()).await;
    let tmp = std::env::temp_dir();

    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce(common::pool(&s.pg.url()).await, stop.clone()));

    // 1. A relay killed between its enqueue and its delete.
    let m = marker(&tmp, "outbox-after-enqueue");
    let _ = std::fs::remove_file(&m);
    let first = RelayProcess::start(
        pg_proxy.port,
        valkey_proxy.port,
        &[
            "--fault-pause-at",
            "after-enqueue",
            "--fault-marker",
            m.to_str().unwrap(),
        ],
    );
    wait_for_file(&m, "the relay to reach after-enqueue").await;
    first.kill();
    let _ = std::fs::remove_file(&m);
    let enqueued_by_the_dead = jobs(&queue).await;
    assert!(enqueued_by_the_dead > 0, "the killed relay enqueued nothing");

    // 2. Two relays take over; one is killed at an arbitrary point later.
    let mut b = Some(RelayProcess::start(pg_proxy.port, valkey_proxy.port, &[]));
    let _c = RelayProcess::start(pg_proxy.port, valkey_proxy.port, &[]);
    progress(&queue, "relays taking over").await;

    // 3. Valkey restarted (its append-only file replayed).
    tokio::task::block_in_place(|| s.valkey.restart()).unwrap();
    progress(&queue, "relaying after the Valkey restart").await;

    // 4. Postgres restarted (an immediate shutdown: crash recovery).
    tokio::task::block_in_place(|| s.pg.restart()).unwrap();
    progress(&queue, "relaying after the Postgres restart").await;

    // 5. The relays' network to Valkey cut while rows commit, then restored.
    valkey_proxy.cut();
    commits(&s.pool, 40).await;
    valkey_proxy.restore();
    progress(&queue, "relaying after the Valkey link came back").await;

    // 6. The relays' network to Postgres cut, then restored.
    pg_proxy.cut();
    commits(&s.pool, 40).await;
    pg_proxy.restore();
    progress(&queue, "relaying after the Postgres link came back").await;

    // 6b. Each link blackholed (no reset, no reply) past the relays' batch
    // timeout while rows commit, then healed: the held-back traffic lands
    // late, the batches that gave up left their rows to later ones.
    for proxy in [&valkey_proxy, &pg_proxy] {
        proxy.stall();
        commits(&s.pool, 40).await;
        // the blackhole lasts past the relays' batch timeout (1 s)
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        proxy.unstall();
        progress(&queue, "relaying after a blackholed link healed").await;
    }

    // 7. A relay SIGKILLed wherever it is, and replaced.
    b.take().unwrap().kill();
    let _d = RelayProcess::start(pg_proxy.port, valkey_proxy.port, &[]);
    commits(&s.pool, 40).await;

    stop.store(true, Ordering::Relaxed);
    let tried = producer.await.unwrap();
    wait_until("an empty outbox", Duration::from_secs(30), || async {
        rows(&s.pool).await == 0
    })
    .await;
    match check(&s.pool, &queue, &tried).await {
        Ok(committed) => {
            eprintln!("{committed} committed rows of {} tried, one job each", tried.len());
            assert!(committed > 100, "only {committed} rows committed");
        }
        Err(problems) => panic!("{} problems: {:?}", problems.len(), &problems[..problems.len().min(20)]),
    }
}

// The negative control: a relay that deletes its rows before enqueueing
// them, killed in between, loses them, and the checker says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_a_relay_that_deletes_first() {
    let s = servers_with(LocalServer::builder()).await;
    ledger(&s.pool).await;
    let queue = s.client.queue(QUEUE).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce(s.pool.clone(), stop.clone()));
    commits(&s.pool, 20).await;

    let m = marker(&std::env::temp_dir(), "outbox-after-delete");
    let _ = std::fs::remove_file(&m);
    let bad = RelayProcess::start(
        s.pg.port(),
        s.valkey.port(),
        &[
            "--fault-delete-before-enqueue",
            "--fault-pause-at",
            "after-delete",
            "--fault-marker",
            m.to_str().unwrap(),
        ],
    );
    wait_for_file(&m, "the relay to reach after-delete").await;
    bad.kill();
    let _ = std::fs::remove_file(&m);

    let _good = RelayProcess::start(s.pg.port(), s.valkey.port(), &[]);
    commits(&s.pool, 20).await;
    stop.store(true, Ordering::Relaxed);
    let tried = producer.await.unwrap();
    wait_until("an empty outbox", Duration::from_secs(30), || async {
        rows(&s.pool).await == 0
    })
    .await;
    let problems = check(&s.pool, &queue, &tried)
        .await
        .expect_err("the checker missed the lost rows");
    assert!(problems.iter().any(|p| p.contains("has no job")), "{problems:?}");
}
