//! The fault suite (RELIABILITY.md): workers, reapers and producers run as
//! separate processes (`fault-worker`, `fault-producer`) against a private
//! server; the test injects faults; `fault-check` checks the histories and
//! the final state against the invariants I1–I11. Scenarios live in
//! `echomq_fault::scenarios`; here each runs once and its verdict is
//! asserted, plus the deterministic interleavings that need no process.
//!
//! Tiers: the CI tier (default) runs every scenario at a size that takes a
//! few minutes on 2 cores. The long tier, `ECHOMQ_FAULT_LONG=1 cargo test -p
//! echomq-fault --test faults -- --nocapture`, runs the soak sizes (100,000
//! jobs under random kills, 20 server restarts under 40,000 jobs, 10 more
//! with a torn AOF tail each under 20,000 jobs, longer partitions) and
//! prints each run's figures.
//!
//! Scenarios run one at a time (they load the machine; a parallel one would
//! only add lease losses). Set `ECHOMQ_FAULT_KEEP=1` to keep the histories.

use std::sync::Mutex;
use std::time::Duration;

use echomq::{JobState, Outcome as SettleOutcome, Queue, QueueOptions, Reaper, Retention};
use echomq_fault::harness::Bins;
use echomq_fault::scenarios::{self, AckLoss, Ctx, Cut, Outcome, Stale};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn long() -> bool {
    std::env::var("ECHOMQ_FAULT_LONG").is_ok_and(|v| v == "1")
}

fn ctx() -> Ctx {
    Ctx::new(Bins {
        worker: env!("CARGO_BIN_EXE_fault-worker").into(),
        producer: env!("CARGO_BIN_EXE_fault-producer").into(),
        check: env!("CARGO_BIN_EXE_fault-check").into(),
        env: Vec::new(),
    })
}

/// Prints the run's figures and asserts the checker passed and the queue drained.
fn passed(name: &str, out: &Outcome) {
    println!("[{name}] {}", out.summary());
    assert!(out.check.ok, "[{name}] checker failed:\n{}", out.check.text);
    assert!(out.drained, "[{name}] jobs left unsettled:\n{}", out.check.text);
    assert_eq!(out.check.n("lost"), 0, "[{name}] acknowledged jobs lost");
    assert_eq!(
        out.check.n("completed") + out.check.n("cancelled"),
        out.check.n("jobs"),
        "[{name}] not every job completed or was cancelled"
    );
}

fn job<'a>(out: &'a Outcome, id: &str) -> &'a echomq_fault::state::JobRecord {
    out.state.jobs.get(id).unwrap_or_else(|| panic!("job {id} missing"))
}

fn paused_job(out: &Outcome) -> String {
    out.notes["paused_job"][0].as_str().expect("a job paused").to_owned()
}

/// The fencing token of the attempt that paused at the kill point.
fn paused_token(out: &Outcome) -> u64 {
    out.notes["paused_job"][1].as_u64().expect("a paused token")
}

/// Asserts that job `j` was completed by its current (highest) token, and
/// returns that token. Tokens come from the queue-wide counter, so they are
/// compared with each other, never with a count of attempts.
fn completed_by_current_token(j: &echomq_fault::state::JobRecord) -> u64 {
    assert_eq!(j.state, "completed");
    assert_eq!(
        j.last_op.as_deref(),
        Some(format!("c:{}", j.token).as_str()),
        "not completed by its current token"
    );
    j.token
}

// Killed before its effect: the job is redelivered once and its effect happens once.
#[test]
fn kill_before_effect() {
    let _g = serial();
    let out = scenarios::kill_point(&ctx(), "before_effect");
    passed("kill_before_effect", &out);
    let id = paused_job(&out);
    let j = job(&out, &id);
    assert_eq!((j.attempts, j.stalls), (2, 1));
    assert!(
        completed_by_current_token(j) > paused_token(&out),
        "not completed by the redelivery"
    );
    assert_eq!(out.state.effects[&id], 1, "the effect ran twice");
    assert_eq!(out.state.guarded[&id], 1);
}

// Killed between effect and ack: redelivered, the unguarded effect runs twice (explained), the guarded once.
#[test]
fn kill_between_effect_and_ack() {
    let _g = serial();
    let out = scenarios::kill_point(&ctx(), "after_effect_before_ack");
    passed("kill_between_effect_and_ack", &out);
    let id = paused_job(&out);
    let j = job(&out, &id);
    assert_eq!((j.attempts, j.stalls), (2, 1));
    assert!(
        completed_by_current_token(j) > paused_token(&out),
        "not completed by the redelivery"
    );
    assert_eq!(out.state.effects[&id], 2, "the duplicate window did not show");
    assert_eq!(out.state.guarded[&id], 1, "the effect marker let the effect run twice");
    assert!(out.check.report["duplicate_explained"]["worker killed"].as_u64() >= Some(1));
}

// Killed right after the ack: the job stays completed by the killed worker and is never redelivered.
#[test]
fn kill_after_ack() {
    let _g = serial();
    let out = scenarios::kill_point(&ctx(), "after_ack");
    passed("kill_after_ack", &out);
    let id = paused_job(&out);
    let j = job(&out, &id);
    assert_eq!((j.attempts, j.stalls), (1, 0));
    assert_eq!(
        completed_by_current_token(j),
        paused_token(&out),
        "not completed by the killed worker's token"
    );
    assert_eq!(out.state.effects[&id], 1);
}

// Thousands of jobs under random SIGKILLs and kill points: nothing lost, every invariant holds.
#[test]
fn random_kills_over_5000_jobs() {
    let _g = serial();
    let (jobs, limit) = if long() { (100_000, 2400) } else { (5_000, 240) };
    let out = scenarios::random_kills(&ctx(), jobs, 3, 400, Duration::from_secs(limit));
    passed("random_kills", &out);
    assert!(out.check.n("worker_kills") >= 10, "too few kills to mean anything");
    assert!(out.check.n("redeliveries") > 0);
}

// Lanes capped at 2, workers with 8 handlers each, SIGKILLed at random: no lane ever has 3 jobs active at once, every slot comes back, nothing is lost.
#[test]
fn lane_caps_hold_under_kills() {
    let _g = serial();
    let (jobs, limit) = if long() { (20_000, 900) } else { (1_500, 180) };
    let out = scenarios::lane_caps(&ctx(), jobs, 3, 2, 400, Duration::from_secs(limit));
    passed("lane_caps", &out);
    assert!(out.check.n("worker_kills") >= 3, "too few kills to mean anything");
    assert!(out.check.n("lane_claims") >= jobs, "the jobs were laned");
    let most = out.check.report["lane_max_active"].as_object().expect("lanes seen");
    assert_eq!(most.len(), 3);
    assert!(
        most.values().any(|n| n.as_u64() == Some(2)),
        "the caps never bound, so they proved nothing: {most:?}"
    );
}

// A global cap of 6, lane caps of 3, 30 claims per 300 ms for the queue and 5 per 100 ms per lane, with workers SIGKILLed at random: no cap and no rate limit is ever exceeded (claims counted on the server clock), each one binds, nothing is lost.
#[test]
fn limits_hold_under_kills() {
    let _g = serial();
    let o = scenarios::LimitsRun::short();
    let out = scenarios::limits(&ctx(), o, Duration::from_secs(90));
    passed("limits", &out);
    assert!(out.check.n("worker_kills") >= 2, "too few kills to mean anything");
    assert_eq!(
        out.notes["max_active"].as_u64(),
        Some(o.global_cap as u64),
        "the global cap never bound"
    );
    assert_eq!(
        out.notes["max_claims_per_window"].as_u64(),
        Some(o.rate.0 as u64),
        "the queue's rate limit never bound"
    );
    let lanes = out.notes["lane_max_claims_per_window"].as_object().expect("lanes seen");
    assert!(
        lanes.values().any(|n| n.as_u64() == Some(o.lane_rate.0 as u64)),
        "no lane's rate limit bound: {lanes:?}"
    );
}

// The server runs a complete but its reply is lost: the worker's retry answers "already settled".
#[test]
fn ack_reply_lost_in_flight() {
    let _g = serial();
    let out = scenarios::ack_lost(&ctx(), AckLoss::ReplyLost);
    passed("ack_reply_lost", &out);
    assert_eq!(out.notes["cuts"], 1);
    assert_eq!(out.notes["outcome"], "already_settled");
    assert_eq!(out.check.n("already_settled"), 1);
    assert_eq!((out.check.n("redeliveries"), out.check.n("duplicate_effects")), (0, 0));
}

// The complete is lost before the server: the worker's retry completes the job, once.
#[test]
fn ack_request_lost_in_flight() {
    let _g = serial();
    let out = scenarios::ack_lost(&ctx(), AckLoss::RequestLost);
    passed("ack_request_lost", &out);
    assert_eq!(out.notes["cuts"], 1);
    assert_eq!(out.notes["outcome"], "completed");
    assert_eq!((out.check.n("redeliveries"), out.check.n("duplicate_effects")), (0, 0));
}

// The ack is lost and the worker stays cut off past its lease: the job is redone; the duplicate is explained.
#[test]
fn ack_lost_past_the_lease() {
    let _g = serial();
    let out = scenarios::ack_lost(&ctx(), AckLoss::CutOffPastLease);
    passed("ack_lost_past_lease", &out);
    assert_eq!(out.notes["settle_failed"], true);
    assert_eq!(out.check.n("redeliveries"), 1);
    assert_eq!(out.check.n("duplicate_effects"), 1);
    assert_eq!(out.check.report["duplicate_explained"]["ack lost"], 1);
    assert_eq!(out.check.n("guarded_duplicates"), 0);
}

// A SIGSTOPped worker whose job went to another: resumed, the server refuses its heartbeat and nothing changes.
#[test]
fn paused_worker_heartbeat_is_fenced() {
    let _g = serial();
    let out = scenarios::paused_takeover(&ctx(), Stale::Heartbeat);
    passed("paused_heartbeat", &out);
    assert_eq!(out.notes["b_holds"], true);
    assert!(
        out.notes["a_event"].as_str().unwrap().contains("LeaseLost")
            && out.notes["a_event"].as_str().unwrap().contains("confirmed: true"),
        "{:?}",
        out.notes
    );
    assert_eq!(out.notes["unchanged"], true, "the stale worker changed the queue");
    assert!(out.check.n("stale_heartbeats_rejected") >= 1);
}

// A SIGSTOPped worker whose job went to another: resumed, its complete gets LeaseLost and changes nothing.
#[test]
fn paused_worker_settle_is_fenced() {
    let _g = serial();
    let out = scenarios::paused_takeover(&ctx(), Stale::Settle);
    passed("paused_settle", &out);
    assert!(
        out.notes["a_event"].as_str().unwrap().contains("SettleFailed")
            && out.notes["a_event"].as_str().unwrap().contains("lease_lost: true"),
        "{:?}",
        out.notes
    );
    assert_eq!(out.notes["unchanged"], true, "the stale settle changed the queue");
    assert!(out.check.n("stale_settles_rejected") >= 1);
    let j = out.state.jobs.values().next().unwrap();
    assert_eq!(j.attempts, 2);
    let stale = out.notes["a_token"].as_u64().expect("A's token");
    assert!(
        completed_by_current_token(j) > stale,
        "completed by the stale token {stale}"
    );
}

// Paused past its lease with a reaper and nobody else: reaped within the interval, then rerun by the same worker.
#[test]
fn paused_worker_alone_with_reaper() {
    let _g = serial();
    let out = scenarios::paused_alone(&ctx(), true);
    passed("paused_alone_reaper", &out);
    assert_eq!(out.notes["state_while_paused"], "pending");
    let gap = out.notes["reap_after_deadline_ms"].as_i64().unwrap();
    assert!(
        (0..=100 + 600).contains(&gap),
        "reaped {gap} ms after the deadline (interval 100 ms)"
    );
    let j = out.state.jobs.values().next().unwrap();
    assert_eq!((j.attempts, j.stalls), (2, 1));
    assert_eq!(
        out.state.effects.values().sum::<i64>(),
        1,
        "the stale attempt ran its effect"
    );
}

// Paused past its lease with nobody reaping: the job stays active until a reaper runs; the stale attempt settles nothing.
#[test]
fn paused_worker_alone_without_reaper() {
    let _g = serial();
    let out = scenarios::paused_alone(&ctx(), false);
    passed("paused_alone_no_reaper", &out);
    assert_eq!(out.notes["state_while_paused"], "active");
    assert_eq!(out.notes["state_before_reaper"], "active");
    let j = out.state.jobs.values().next().unwrap();
    assert_eq!((j.attempts, j.stalls), (2, 1));
    assert_eq!(
        out.state.effects.values().sum::<i64>(),
        1,
        "the stale attempt ran its effect"
    );
}

// Reaper processes racing over thousands of simultaneously expired leases reap each exactly once.
#[test]
fn reapers_race_over_thousands_of_expired_leases() {
    let _g = serial();
    let jobs = if long() { 10_000 } else { 3_000 };
    let out = scenarios::racing_reapers(&ctx(), jobs, 4);
    passed("racing_reapers", &out);
    assert_eq!(out.notes["all_leased"], true);
    assert!(
        out.state.jobs.values().all(|j| j.stalls == 1),
        "a job did not count exactly one stall"
    );
    assert_eq!(out.check.n("stalls"), jobs);
}

// The server is SIGKILLed and restarted under full load (appendfsync always): no acknowledged enqueue is lost.
#[test]
fn server_killed_and_restarted_under_load() {
    let _g = serial();
    let (jobs, restarts) = if long() { (40_000, 20) } else { (3_000, 3) };
    let out = scenarios::server_restarts(&ctx(), jobs, restarts, Duration::from_secs(600));
    passed("server_restarts", &out);
    assert_eq!(out.notes["restarts"], restarts);
    assert_eq!(out.notes["restart_error"], serde_json::Value::Null);
    assert_eq!(out.check.n("server_restarts"), restarts as u64);
    assert!(
        out.notes["restarts_while_producing"].as_u64() >= Some(1),
        "no restart under load"
    );
}

// The server SIGKILLed under load with a torn transaction left at the AOF's tail each time (long tier only): every restart drops the tail, nothing acknowledged is lost, no partial transaction is applied.
#[test]
fn torn_aof_tails_under_load() {
    let _g = serial();
    if !long() {
        println!("SKIPPED torn AOF tails: long tier only (ECHOMQ_FAULT_LONG=1)");
        return;
    }
    let (jobs, restarts) = (20_000, 10);
    let out = scenarios::torn_aof_tails(&ctx(), jobs, restarts, Duration::from_secs(600));
    passed("torn_aof_tails", &out);
    assert_eq!(out.notes["restart_error"], serde_json::Value::Null);
    assert_eq!(out.check.n("torn_tails"), restarts as u64, "{:?}", out.notes["tears"]);
    assert_eq!(
        out.notes["tails_dropped"].as_u64(),
        Some(restarts as u64),
        "the server did not report dropping every torn tail"
    );
}

// Flows and batches while workers are SIGKILLed at random and the server is SIGKILLed and restarted with a torn transaction at its AOF's tail: no step is created or starts before the steps it waits on ended, every step and callback is created once, callbacks only after every member ended, the records are whole (F1-F3, B1, B2).
#[test]
fn flows_and_batches_under_kills_and_torn_restarts() {
    let _g = serial();
    groups_under_kills_and_torn_restarts(false);
}

// The same with two steps of every flow and half of every batch's members on a second queue, worked by its own workers: the makings and ends that cross between the queues (the outboxes' messages and their relays) hold F1-F3, B1 and B2 through the kills and torn restarts too, and no batch is left waiting on a member of the other queue.
#[test]
fn flows_and_batches_across_queues_under_kills_and_torn_restarts() {
    let _g = serial();
    groups_under_kills_and_torn_restarts(true);
}

fn groups_under_kills_and_torn_restarts(spread: bool) {
    let plan = if long() {
        scenarios::GroupsPlan {
            flows: 400,
            batches: 100,
            jobs: 4_000,
            kill_every_ms: 400,
            restarts: 8,
            torn: true,
            limit: Duration::from_secs(600),
            spread,
        }
    } else {
        scenarios::GroupsPlan {
            flows: 60,
            batches: 15,
            jobs: 300,
            kill_every_ms: 500,
            restarts: 2,
            torn: true,
            limit: Duration::from_secs(180),
            spread,
        }
    };
    let out = scenarios::flows_and_batches(&ctx(), &plan);
    passed(
        if spread {
            "flows_and_batches_across_queues"
        } else {
            "flows_and_batches"
        },
        &out,
    );
    assert_eq!(out.check.n("flows"), plan.flows);
    assert_eq!(out.check.n("batches"), plan.batches);
    assert_eq!(
        out.check.n("batch_callbacks"),
        2 * plan.batches,
        "a success and a complete callback each"
    );
    for inv in ["F1", "F2", "F3", "B1", "B2"] {
        assert_eq!(out.check.report["invariants"][inv], "full", "{inv} checked in full");
    }
    assert_eq!(out.notes["restart_error"], serde_json::Value::Null);
    assert_eq!(
        out.check.n("torn_tails"),
        plan.restarts as u64,
        "{:?}",
        out.notes["tears"]
    );
    assert!(out.check.n("worker_kills") >= 3, "{}", out.summary());
    assert!(
        out.notes["restarts_while_producing"].as_u64() >= Some(1),
        "no restart while flows were being added"
    );
    let far = if spread { 2 * plan.flows + 4 * plan.batches } else { 0 };
    assert_eq!(
        out.notes["far_jobs"].as_u64(),
        Some(far),
        "jobs made on the second queue: two steps a flow, four members a batch"
    );
}

// The server's clock steps forward past every lease, again and again, under load (long tier only): leases lost to it are fenced, every duplicate explained, guarded effects once, nothing lost.
#[test]
fn server_clock_steps_under_load() {
    let _g = serial();
    if !long() {
        println!("SKIPPED clock steps: long tier only (ECHOMQ_FAULT_LONG=1)");
        return;
    }
    let (jobs, steps) = (5_000, 8);
    match scenarios::clock_steps(&ctx(), jobs, steps) {
        Err(why) => println!("SKIPPED clock steps: {why}"),
        Ok(out) => {
            passed("clock_steps", &out);
            assert_eq!(out.notes["errors"], serde_json::json!([]));
            assert_eq!(out.check.n("clock_steps"), steps as u64);
            assert!(
                out.check.n("stalls") >= 1,
                "no step cost a lease, so they proved nothing"
            );
            let (ahead, offset) = (out.notes["server_ahead_s"].as_i64(), out.notes["offset_s"].as_i64());
            assert!(
                ahead.zip(offset).is_some_and(|(a, o)| (a - o).abs() <= 5),
                "the server's clock did not step: {:?}",
                out.notes
            );
        }
    }
}

// A blackhole partition longer than the lease, in a network namespace (root + iptables), under load.
#[test]
fn namespace_partition_longer_than_the_lease() {
    let _g = serial();
    let (jobs, rounds) = if long() { (6_000, 4) } else { (1_500, 2) };
    match scenarios::partition(&ctx(), Cut::Namespace, jobs, rounds, 2500) {
        Err(why) => println!("SKIPPED namespace partition: {why} (the proxy variant still runs)"),
        Ok(out) => {
            passed("namespace_partition", &out);
            assert_eq!(out.notes["errors"], serde_json::json!([]));
            assert_eq!(out.check.n("partitions"), rounds as u64);
        }
    }
}

// The loopback variant: a proxy blackholes every connection longer than the lease, under load.
#[test]
fn proxy_partition_longer_than_the_lease() {
    let _g = serial();
    let (jobs, rounds) = if long() { (6_000, 4) } else { (1_500, 2) };
    let out = scenarios::partition(&ctx(), Cut::Proxy, jobs, rounds, 2500).unwrap();
    passed("proxy_partition", &out);
    assert_eq!(out.check.n("partitions"), rounds as u64);
}

// Connections dropped every 0.5-1.5 s (proxy) and CLIENT KILL every 2 s under load.
#[test]
fn connection_drops_under_load() {
    let _g = serial();
    let out = scenarios::connection_drops(&ctx(), if long() { 10_000 } else { 2_000 });
    passed("connection_drops", &out);
    assert!(out.check.n("connection_drops") >= 3);
}

// FUNCTION FLUSH every 100 ms under load: the scripts' library reloads transparently.
#[test]
fn script_flush_under_load() {
    let _g = serial();
    let out = scenarios::script_flush(&ctx(), if long() { 10_000 } else { 2_000 });
    passed("script_flush", &out);
    assert!(out.check.n("script_flushes") >= 5);
}

// SIGTERM under load: quick handlers finish, slow ones are released within the grace period; no stall.
// Every 5th job asked to be cancelled while waiting, running or done, and
// a schedule ticking every second raced by two schedulers, under worker
// SIGKILLs: only a job asked ends cancelled, one cancelled while waiting
// never runs (C1, C2), no tick's job is made twice (K1).
#[test]
fn cancels_and_schedules_under_kills() {
    let _g = serial();
    let out = scenarios::cancels_and_schedules(&ctx(), if long() { 3_000 } else { 600 });
    println!("[cancels_and_schedules] cancels {}", out.check.report["cancel_answers"]);
    passed("cancels_and_schedules", &out);
    assert!(out.check.n("cancelled") > 0, "no cancel took: {}", out.check.text);
    assert!(
        out.check.n("cron_jobs_created") > 0,
        "no tick made a job: {}",
        out.check.text
    );
}

#[test]
fn graceful_shutdown_under_load() {
    let _g = serial();
    let out = scenarios::graceful_shutdown(&ctx(), 300);
    passed("graceful_shutdown", &out);
    assert_eq!(out.notes["busy_before_stop"], true);
    for (w, ms) in out.notes["exit_ms"].as_object().unwrap() {
        let grace = out.notes["grace_ms"][w].as_u64().unwrap();
        let ms = ms.as_u64().unwrap_or_else(|| panic!("{w} did not exit"));
        assert!(ms <= grace + 2000, "{w} took {ms} ms to stop (grace {grace} ms)");
    }
    assert!(
        out.notes["released_by_slow"].as_u64().unwrap() >= 1,
        "nothing was released"
    );
    assert_eq!(out.check.n("stalls"), 0, "a graceful stop caused a stall");
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn queue(server: &echomq::server::LocalServer, name: &str) -> Queue {
    let opts = QueueOptions::new().keep_completed(Retention::All);
    Queue::connect_with(&server.url(), &format!("{name}-{}", std::process::id()), opts)
        .await
        .unwrap()
}

/// Sleeps until the server clock passes `deadline_ms`.
async fn past(q: &Queue, deadline_ms: u64) {
    while q.server_time_ms().await.unwrap() <= deadline_ms {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

// At the deadline, ack then reap: the ack wins (completed) and the reaper finds nothing.
#[test]
fn ack_before_reap_at_the_deadline() {
    let _g = serial();
    rt().block_on(async {
        let server = echomq::server::LocalServer::start().unwrap();
        let q = queue(&server, "ackfirst").await;
        let id = q.enqueue(&1).await.unwrap();
        let lease = q.claim(1, Duration::from_millis(100)).await.unwrap().remove(0);
        past(&q, lease.deadline_ms()).await;
        assert_eq!(q.complete(&lease).await.unwrap().outcome, SettleOutcome::Completed);
        let rep = Reaper::new(q.clone()).run_once().await.unwrap();
        assert!(rep.requeued.is_empty() && rep.failed.is_empty(), "{rep:?}");
        let j = q.job(&id).await.unwrap();
        assert_eq!((j.state, j.stalls, j.attempts), (JobState::Completed, 0, 1));
    });
}

// At the deadline, reap then ack: the reap wins (pending, one stall) and the ack gets LeaseLost.
#[test]
fn reap_before_ack_at_the_deadline() {
    let _g = serial();
    rt().block_on(async {
        let server = echomq::server::LocalServer::start().unwrap();
        let q = queue(&server, "reapfirst").await;
        let id = q.enqueue(&1).await.unwrap();
        let lease = q.claim(1, Duration::from_millis(100)).await.unwrap().remove(0);
        past(&q, lease.deadline_ms()).await;
        let rep = Reaper::new(q.clone()).run_once().await.unwrap();
        assert_eq!(rep.requeued, vec![(id.clone(), 1)]);
        assert!(matches!(q.complete(&lease).await, Err(echomq::Error::LeaseLost { .. })));
        let j = q.job(&id).await.unwrap();
        assert_eq!((j.state, j.stalls, j.attempts), (JobState::Pending, 1, 1));
    });
}

// Acks and reapers fired together at a shared deadline: each job ends exactly one way, never both.
#[test]
fn reaper_races_acks_at_the_deadline() {
    let _g = serial();
    rt().block_on(async {
        let server = echomq::server::LocalServer::start().unwrap();
        let q = queue(&server, "ackrace").await;
        let n = 400;
        q.enqueue_bulk(&(0..n).collect::<Vec<u32>>()).await.unwrap();
        let mut leases = Vec::new();
        while leases.len() < n as usize {
            leases.extend(q.claim(64, Duration::from_millis(300)).await.unwrap());
        }
        let last = leases.iter().map(|l| l.deadline_ms()).max().unwrap();
        past(&q, last).await;
        let acks = {
            let q = q.clone();
            tokio::spawn(async move {
                let mut won = Vec::new();
                for l in leases {
                    match q.complete(&l).await {
                        Ok(s) => {
                            assert_eq!(s.outcome, SettleOutcome::Completed);
                            won.push(l.id().to_owned());
                        }
                        Err(echomq::Error::LeaseLost { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                won
            })
        };
        let mut reapers = Vec::new();
        for _ in 0..3 {
            let r = Reaper::new(q.clone()).batch(7);
            reapers.push(tokio::spawn(async move {
                let mut reaped = Vec::new();
                for _ in 0..200 {
                    let rep = r.run_once().await.unwrap();
                    if rep.requeued.is_empty() {
                        tokio::task::yield_now().await;
                    }
                    reaped.extend(rep.requeued.into_iter().map(|(id, _)| id));
                }
                reaped
            }));
        }
        let won = acks.await.unwrap();
        let mut reaped = Vec::new();
        for r in reapers {
            reaped.extend(r.await.unwrap());
        }
        let mut all: Vec<&String> = won.iter().chain(reaped.iter()).collect();
        all.sort();
        let total = all.len();
        all.dedup();
        assert_eq!(
            all.len(),
            total,
            "a job was both acknowledged and reaped, or reaped twice"
        );
        assert_eq!(total, n as usize, "a job was neither acknowledged nor reaped");
        for id in &won {
            let j = q.job(id).await.unwrap();
            assert_eq!((j.state, j.stalls), (JobState::Completed, 0), "{id}");
        }
        for id in &reaped {
            let j = q.job(id).await.unwrap();
            assert_eq!((j.state, j.stalls), (JobState::Pending, 1), "{id}");
        }
        println!("ack race: {} acknowledged, {} reaped", won.len(), reaped.len());
    });
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

// The cluster scenario's CI-tier smoke: 1,800 jobs over 6 queues on 3
// masters, the WAIT queues' flows and batches spread over a second queue on
// the next master, workers SIGKILLed at random, one master SIGKILLed and
// failed over, one slot moved under load; every queue passes, the WAIT ones
// with lost 0.
#[test]
fn cluster_smoke() {
    let _g = serial();
    let plan = scenarios::ClusterPlan {
        jobs: 1_800,
        queues_per_master: 2,
        workers_per_queue: 2,
        kill_every_ms: 400,
        master_kills: 1,
        migrations: 1,
        worker_pauses: 1,
        clock_steps: 1,
        flows_per_queue: 20,
        batches_per_queue: 5,
        spread: true,
        from: 0,
        limit: Duration::from_secs(90),
        jobs_per_s: 300.0,
    };
    let out = scenarios::cluster_faults(&ctx(), &plan);
    println!("[cluster_smoke] {}", out.figures);
    match out.figures["clock_unavailable"].as_str() {
        None => assert_eq!(
            out.figures["clock_steps"].as_u64(),
            Some(plan.clock_steps as u64),
            "not every clock step ran"
        ),
        Some(why) => println!("[cluster_smoke] SKIPPED the clock steps: {why}"),
    }
    for (q, waits, o) in &out.queues {
        passed(&format!("cluster {q}"), o);
        assert!(o.check.n("jobs") > 0, "[cluster {q}] no job read back from its master");
        if *waits {
            assert_eq!(o.check.n("lost_unconfirmed"), 0, "[cluster {q}] a WAIT queue lost jobs");
            assert_eq!(o.check.n("flows"), plan.flows_per_queue, "[cluster {q}] flows");
            assert_eq!(
                o.check.n("batch_callbacks"),
                2 * plan.batches_per_queue,
                "[cluster {q}]"
            );
            for inv in ["F1", "F2", "F3", "B1", "B2"] {
                assert_eq!(o.check.report["invariants"][inv], "full", "[cluster {q}] {inv}");
            }
            // Two steps of every flow and four members of every batch
            // were made on the far queue, another master's.
            assert_eq!(
                o.notes["far_jobs"].as_u64(),
                Some(2 * plan.flows_per_queue + 4 * plan.batches_per_queue),
                "[cluster {q}] far_jobs"
            );
        }
    }
    assert_eq!(out.figures["failovers"], 1, "{}", out.figures);
    assert_eq!(out.figures["migrations"], 1, "{}", out.figures);
    assert!(out.figures["worker_kills"].as_u64() > Some(0), "{}", out.figures);
}

// A 3-master, 3-replica Valkey Cluster (not in the CI tier: set
// ECHOMQ_FAULT_CLUSTER=1): queues on every master, half with WAIT 1, workers
// SIGKILLed at random, masters SIGKILLed and failed over (the old master
// restarted as a replica), slots moved under load. Every queue passes the
// checker, read from the master of its slot; WAIT queues lose nothing, and
// the others lose only enqueues acknowledged within the loss window before a
// master's kill. ECHOMQ_FAULT_CLUSTER_SEGMENTS=N runs N segments against the
// same cluster (ECHOMQ_FAULT_CLUSTER_JOBS jobs each, disjoint ids from
// ECHOMQ_FAULT_CLUSTER_FROM), appending each segment's figures as a JSON line
// to ECHOMQ_FAULT_CLUSTER_RESULTS (scripts/fault-cluster-long).
#[test]
fn cluster_failovers_and_migrations() {
    if std::env::var("ECHOMQ_FAULT_CLUSTER").ok().as_deref() != Some("1") {
        println!("SKIPPED: set ECHOMQ_FAULT_CLUSTER=1 to run the cluster scenario");
        return;
    }
    let _g = serial();
    let jobs = env_u64("ECHOMQ_FAULT_CLUSTER_JOBS", 12_000);
    let segments = env_u64("ECHOMQ_FAULT_CLUSTER_SEGMENTS", 1);
    let from = env_u64("ECHOMQ_FAULT_CLUSTER_FROM", 0);
    let results = std::env::var("ECHOMQ_FAULT_CLUSTER_RESULTS").ok();
    let (mut cluster, mut clock) = scenarios::fault_cluster();
    let ctx = ctx();
    for seg in 0..segments {
        let plan = scenarios::ClusterPlan {
            jobs,
            queues_per_master: 2,
            workers_per_queue: 2,
            kill_every_ms: env_u64("ECHOMQ_FAULT_CLUSTER_KILL_EVERY_MS", 400),
            master_kills: env_u64("ECHOMQ_FAULT_CLUSTER_MASTER_KILLS", 2) as usize,
            migrations: env_u64("ECHOMQ_FAULT_CLUSTER_MIGRATIONS", 1) as usize,
            worker_pauses: env_u64("ECHOMQ_FAULT_CLUSTER_WORKER_PAUSES", 3) as usize,
            clock_steps: env_u64("ECHOMQ_FAULT_CLUSTER_CLOCK_STEPS", 3) as usize,
            flows_per_queue: env_u64("ECHOMQ_FAULT_CLUSTER_FLOWS", jobs / 60),
            batches_per_queue: env_u64("ECHOMQ_FAULT_CLUSTER_BATCHES", jobs / 300),
            spread: env_u64("ECHOMQ_FAULT_CLUSTER_SPREAD", 1) == 1,
            from: from + seg * jobs,
            limit: Duration::from_secs(60 + jobs / 100),
            jobs_per_s: env_u64("ECHOMQ_FAULT_CLUSTER_JOBS_PER_S", 500) as f64,
        };
        let under = std::env::var("ECHOMQ_FAULT_CLUSTER_DIR").map_or_else(|_| std::env::temp_dir(), Into::into);
        let out = scenarios::cluster_faults_on(&ctx, &mut cluster, &mut clock, &plan, &under);
        let mut figures = out.figures.clone();
        figures["segment_from"] = plan.from.into();
        figures["segment_jobs"] = jobs.into();
        figures["commit"] = std::env::var("ECHOMQ_FAULT_COMMIT").unwrap_or_default().into();
        let line = serde_json::to_string(&figures).expect("figures");
        println!("[cluster segment {seg}] {line}");
        if let Some(path) = &results {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("open the results file");
            writeln!(f, "{line}").expect("append the figures");
        }
        for (q, waits, o) in &out.queues {
            println!("[cluster {q} wait={waits}] {}", o.summary());
            if !o.check.ok {
                println!("[cluster {q}] checker failed:\n{}", o.check.text);
            }
        }
        for (q, waits, o) in &out.queues {
            assert!(o.check.ok, "[cluster {q}] checker failed:\n{}", o.check.text);
            assert!(o.drained, "[cluster {q}] jobs left unsettled:\n{}", o.check.text);
            assert_eq!(o.check.n("lost"), 0, "[cluster {q}] acknowledged jobs lost");
            if *waits {
                assert_eq!(o.check.n("lost_unconfirmed"), 0, "[cluster {q}] a WAIT queue lost jobs");
            }
        }
        assert!(
            figures["failovers"].as_u64() == Some(plan.master_kills as u64),
            "not every master kill was failed over: {line}"
        );
        assert!(
            figures["migrations"].as_u64() == Some(plan.migrations as u64),
            "not every migration ran: {line}"
        );
    }
}
