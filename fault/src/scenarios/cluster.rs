//! Faults on a Valkey Cluster (3 masters, a replica each): queues on every
//! master, half of them enqueued and settled with `WAIT 1`
//! (`Durability::Replicas`) and half without, workers SIGKILLed at random,
//! masters SIGKILLed so that their replica takes over (the killed master
//! restarted, to rejoin as the new master's replica), workers cut off
//! (SIGSTOP) for twice their lease and let back, queues' slots moved to
//! another master under load, every 50th job asked to be cancelled, and a
//! schedule ticking every second in each queue, raced by two schedulers,
//! flows and batches on the `WAIT` queues (spread, with
//! [`ClusterPlan::spread`], over a second queue on the next master, so
//! their steps, members and ends cross masters through the relays under
//! the failovers), and every node's clock stepped
//! forward at once (libfaketime). Each queue is its own run (its own
//! producer, reaper and workers, all connected to the cluster's seeds) and
//! is checked on its own: the checker reads it from the master that serves
//! its slot at the end. A queue without `WAIT` is checked with a loss
//! window (`fault-check --loss-window-ms`): an acknowledged enqueue gone
//! after a failover is counted, not a violation, when it was acknowledged
//! within the window before a kill of a master; a `WAIT` queue is held to
//! lost 0. Every queue is checked with a claim loss window
//! (`--claim-loss-window-ms`), since no queue's claims are confirmed: a
//! claim lost in a failover is claimed again with its delivery number.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use echomq::server::{LocalCluster, LocalServer};
use serde_json::{Value, json};

use super::{Ctx, Outcome, finish_with};
use crate::harness::{ProducerOpts, ReaperOpts, Run, WorkerOpts};

/// The loss window of queues without `WAIT`, ms: an acknowledged enqueue
/// lost to a failover must have been acknowledged at most this long before
/// a master was killed. Replication on one machine lags by well under a
/// millisecond; the window also covers the producer recording its ack
/// after the reply and the driver recording the kill after the signal.
pub const LOSS_WINDOW_MS: u64 = 1000;

/// How long a paused worker stays stopped: twice the workers' lease.
pub const PAUSE_MS: u64 = 2_000;

/// The sizes and faults of one [`cluster_faults`] run.
#[derive(Debug, Clone)]
pub struct ClusterPlan {
    /// Jobs over all queues.
    pub jobs: u64,
    /// Queues per master (even ones with `WAIT 1`, odd ones without).
    pub queues_per_master: usize,
    /// Workers per queue.
    pub workers_per_queue: usize,
    /// Mean time between two random worker SIGKILLs.
    pub kill_every_ms: u64,
    /// Masters to SIGKILL (each failed over and restarted), spread over the run.
    pub master_kills: usize,
    /// Slots (queues') to move to another master under load.
    pub migrations: usize,
    /// Steps of every node's clock forward by 3–30 s at once, spread over
    /// the run (past every lease; a schedule's ticks jump ahead).
    pub clock_steps: usize,
    /// Workers to cut off (SIGSTOP) for [`PAUSE_MS`], twice their lease,
    /// spread over the run: their leases lapse and are re-leased, and when
    /// they come back their settlements must be fenced.
    pub worker_pauses: usize,
    /// Flows (`crate::groups`) each `WAIT` queue's producer adds beside
    /// its jobs (the checker's F1–F3).
    pub flows_per_queue: u64,
    /// Batches of eight members each `WAIT` queue's producer adds (B1, B2).
    pub batches_per_queue: u64,
    /// Spread each `WAIT` queue's flows and batches over a second queue
    /// on the next master (`Run::spread_to`; steps `b` and `c` of every
    /// flow, the odd members of every batch), with workers and a reaper
    /// of its own, checked with its home queue.
    pub spread: bool,
    /// First job number (segments of one long run use disjoint ranges;
    /// flows and batches are numbered from it too).
    pub from: u64,
    /// How long to wait for the drain.
    pub limit: Duration,
    /// The throughput expected, to spread the master kills and migrations
    /// over the run.
    pub jobs_per_s: f64,
}

/// What [`cluster_faults`] found: each queue's verdict, and the run's figures.
#[derive(Debug)]
pub struct ClusterOutcome {
    /// (queue, waits for replicas, outcome) per queue.
    pub queues: Vec<(String, bool, Outcome)>,
    /// The run's figures, one JSON object (see [`ClusterOutcome::ok`]).
    pub figures: Value,
}

impl ClusterOutcome {
    /// Every queue passed its checker and drained.
    pub fn ok(&self) -> bool {
        self.queues.iter().all(|(_, _, o)| o.check.ok && o.drained)
    }
}

/// A queue name starting with `stem` whose slot the master on `port` serves.
fn name_on(cluster: &LocalCluster, port: u16, stem: &str) -> String {
    loop {
        let name = Run::queue_name(stem);
        if cluster
            .master_of_slot(LocalCluster::slot_of(&format!("{{{name}}}")))
            .ok()
            == Some(port)
        {
            return name;
        }
    }
}

/// The clock of every node of a [`fault_cluster`]: libfaketime reads its
/// offset from one file at every call (the monotonic clock left alone), so
/// one write steps every node at once, and a node restarted after a kill
/// keeps the offset. Stepping the whole cluster together keeps the nodes'
/// clocks agreeing, as I6 needs across a failover; the cluster bus stays
/// up through a step (checked: no failover, every node settled).
pub struct ClusterClock {
    file: PathBuf,
    /// Seconds ahead of the machine's clock.
    pub offset_s: u64,
    /// Why the nodes run on the machine's clock instead (a server that
    /// does not start under libfaketime: Debian's jemalloc-linked Redis
    /// 7.0); steps are then skipped and the run says so.
    pub unavailable: Option<String>,
}

impl ClusterClock {
    fn set(&self, offset_s: u64) -> std::io::Result<()> {
        std::fs::write(&self.file, format!("+{offset_s}\n"))
    }

    /// Steps every node's clock `by_s` seconds forward.
    pub fn step(&mut self, by_s: u64) -> std::io::Result<()> {
        self.set(self.offset_s + by_s)?;
        self.offset_s += by_s;
        Ok(())
    }
}

impl Drop for ClusterClock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// A 3-master, 3-replica cluster for the fault runs, every node under
/// libfaketime with one [`ClusterClock`]; on the machine's clock when the
/// server does not start under libfaketime (the clock says why). Panics
/// without libfaketime (`scripts/test` installs it) or a server.
pub fn fault_cluster() -> (LocalCluster, ClusterClock) {
    let lib = super::server::faketime_mt()
        .expect("libfaketime is missing (libfaketimeMT.so.1; scripts/test installs the faketime packages)");
    let mut clock = ClusterClock {
        file: std::env::temp_dir().join(format!(
            "echomq-fault-cluster-clock-{}-{}.faketime",
            std::process::id(),
            fastrand::u64(..)
        )),
        offset_s: 0,
        unavailable: None,
    };
    clock.set(0).expect("write the clock's offset file");
    let file = clock.file.display().to_string();
    let node = LocalServer::builder()
        .env("LD_PRELOAD", lib)
        .env("FAKETIME_TIMESTAMP_FILE", &file)
        .env("FAKETIME_NO_CACHE", "1")
        .env("DONT_FAKE_MONOTONIC", "1");
    let cluster = || LocalCluster::builder().masters(3).replicas_per_master(1);
    let started = match cluster().node(node).start() {
        Err(e) if e.to_string().contains("libfaketime") => {
            clock.unavailable = Some(format!("the server does not start under libfaketime: {e}"));
            cluster().start()
        }
        other => other,
    };
    let cluster = started.expect("start a local cluster (run scripts/test, which installs a server)");
    (cluster, clock)
}

/// Starts a [`fault_cluster`] and runs [`cluster_faults_on`] on it.
pub fn cluster_faults(ctx: &Ctx, plan: &ClusterPlan) -> ClusterOutcome {
    let (mut cluster, mut clock) = fault_cluster();
    cluster_faults_on(ctx, &mut cluster, &mut clock, plan, &std::env::temp_dir())
}

/// One fault run on `cluster` (its clock `clock`), the histories under `under`.
pub fn cluster_faults_on(
    ctx: &Ctx,
    cluster: &mut LocalCluster,
    clock: &mut ClusterClock,
    plan: &ClusterPlan,
    under: &Path,
) -> ClusterOutcome {
    let t0 = Instant::now();
    let seeds = cluster.urls().join(",");
    let masters = cluster.master_ports().expect("the cluster's masters");
    let mut runs: Vec<(Run, bool)> = Vec::new();
    // The checker's limits per queue (see below).
    let mut limits: Vec<Vec<String>> = Vec::new();
    for (m, port) in masters.iter().enumerate() {
        for i in 0..plan.queues_per_master {
            let waits = i % 2 == 0;
            let stem = format!("cl{m}{}", if waits { "w" } else { "n" });
            let name = name_on(cluster, *port, &stem);
            let mut run = Run::named(&ctx.bins, &seeds, &name, under);
            // A WAIT queue's flows and batches span a second queue on the
            // next master: steps and members made there, and their ends
            // told home, cross masters through the outboxes' relays.
            if waits && plan.spread {
                let other = masters[(m + 1) % masters.len()];
                run.spread_to(&name_on(cluster, other, &format!("{stem}f")));
            }
            runs.push((run, waits));
        }
    }
    let per_queue = plan.jobs / runs.len() as u64;
    let worker = |waits: bool, queue: Option<&String>| WorkerOpts {
        concurrency: 8,
        lease_ms: 1000,
        work_ms: 2,
        response_timeout_ms: 2000,
        prefetch: [None, Some(4), Some(0)][fastrand::usize(0..3)],
        wait_replicas: u32::from(waits),
        queue: queue.cloned(),
        ..WorkerOpts::default()
    };
    // Per run: worker → the queue it works (`None`: the run's own), so a
    // killed worker is replaced by one on the same queue.
    let mut works: Vec<BTreeMap<String, Option<String>>> = Vec::new();
    for (k, (run, waits)) in runs.iter_mut().enumerate() {
        // Reaps and relays wait for a replica on a WAIT queue: a message
        // delivered to a master that fails over before its replica has
        // it must not have been taken off its outbox.
        for queue in run.queues() {
            run.reaper_with(&ReaperOpts {
                queue: Some(queue),
                wait_replicas: u32::from(*waits),
                ..ReaperOpts::default()
            });
        }
        // Every other queue spreads its jobs over three lanes capped at 3
        // (L1, L2); of the others, one has a global cap of 6 (G1) and one
        // a rate limit of 50 claims per 200 ms (R1).
        let mut p = ProducerOpts {
            from: plan.from,
            count: per_queue,
            concurrency: 4,
            dedup_every: 97,
            wait_replicas: u32::from(*waits),
            // Every 50th job is asked to be cancelled within 100 ms of its
            // enqueue: waiting, running or done by then (C1, C2).
            cancel_every: 50,
            cancel_within_ms: 100,
            ..ProducerOpts::default()
        };
        // Flows and batches on the queues whose writes wait for a
        // replica: without WAIT a failover may lose a flow's or a batch's
        // write as it may lose an enqueue (docs/flows.md).
        if *waits {
            p.flows = plan.flows_per_queue;
            p.batches = plan.batches_per_queue;
        }
        let mut check = Vec::new();
        if k % 2 == 0 {
            p.lanes = 3;
            p.lane_cap = Some(3);
            check.push("--lane-cap=3".to_owned());
        } else if k == 1 {
            p.max_active = Some(6);
            check.push("--global-cap=6".to_owned());
        } else if k == 3 {
            p.rate = Some((50, 200));
            check.push("--rate=50:200".to_owned());
        }
        run.producer(&p);
        // A schedule ticking every second, raced by two schedulers (K1).
        run.scheduler("tick", "* * * * * *");
        run.scheduler("tick", "* * * * * *");
        limits.push(check);
        let mut of_run = BTreeMap::new();
        for queue in std::iter::once(None).chain(run.far.clone().map(Some)) {
            for _ in 0..plan.workers_per_queue {
                of_run.insert(run.worker(&worker(*waits, queue.as_ref())), queue.clone());
            }
        }
        works.push(of_run);
    }

    // Master kills and migrations are spread over the time the jobs are
    // expected to take (`jobs_per_s`), at least 3 s apart; the run does not
    // end before they all happened.
    let expected = Duration::from_secs_f64(plan.jobs as f64 / plan.jobs_per_s.max(1.0));
    let steps = plan.master_kills + plan.migrations;
    let gap = (expected / (steps as u32 + 1)).max(Duration::from_secs(3));
    let mut plan_steps: Vec<&str> = Vec::new();
    for s in 0..steps {
        // Alternate: kill, migrate, kill, ... while both remain.
        let kills_left = plan.master_kills - plan_steps.iter().filter(|s| **s == "kill").count();
        let migs_left = plan.migrations - plan_steps.iter().filter(|s| **s == "migrate").count();
        plan_steps.push(if (s % 2 == 0 && kills_left > 0) || migs_left == 0 {
            "kill"
        } else {
            "migrate"
        });
    }
    let mut next_step = Instant::now() + gap;
    let pause_gap = (expected / (plan.worker_pauses as u32 + 1)).max(Duration::from_millis(PAUSE_MS + 500));
    let mut pauses_left = plan.worker_pauses;
    let mut next_pause = Instant::now() + pause_gap;
    // (queue index, worker, when to resume it)
    let mut paused: Vec<(usize, String, Instant)> = Vec::new();
    let mut worker_pauses = 0u64;
    let clock_gap = (expected / (plan.clock_steps as u32 + 1)).max(Duration::from_secs(1));
    let mut next_clock_step = Instant::now() + clock_gap;
    let (mut clock_steps, mut stepped_s) = (0u64, 0u64);
    // The schedulers stop once every producer is done, so the queues drain.
    let mut schedulers_stopped = false;
    let mut next_kill = Instant::now() + Duration::from_millis(plan.kill_every_ms);
    let (mut worker_kills, mut failovers, mut migrations) = (0u64, 0u64, 0u64);
    let mut failover_ms: Vec<u64> = Vec::new();
    let mut events: Vec<Value> = Vec::new();
    let until = Instant::now() + plan.limit;
    let drained = loop {
        if !schedulers_stopped && runs.iter_mut().all(|(r, _)| r.live("producer").is_empty()) {
            for (run, _) in runs.iter_mut() {
                run.term_all("scheduler", Duration::from_secs(5));
            }
            schedulers_stopped = true;
        }
        if plan_steps.is_empty()
            && schedulers_stopped
            && (clock_steps as usize >= plan.clock_steps || clock.unavailable.is_some())
            && pauses_left == 0
            && paused.is_empty()
            && runs.iter_mut().all(|(r, _)| r.drained())
        {
            break true;
        }
        if Instant::now() > until {
            break false;
        }
        if Instant::now() >= next_clock_step && (clock_steps as usize) < plan.clock_steps && clock.unavailable.is_none()
        {
            let by = fastrand::u64(3..=30);
            clock.step(by).expect("step the cluster's clock");
            for (run, _) in runs.iter_mut() {
                run.fault("clock_step", "cluster", &format!("+{by} s"));
            }
            clock_steps += 1;
            stepped_s += by;
            next_clock_step = Instant::now() + clock_gap;
        }
        if Instant::now() >= next_pause && pauses_left > 0 {
            let k = fastrand::usize(0..runs.len());
            let run = &mut runs[k].0;
            let live = running_workers(run, k, &paused);
            if !live.is_empty() {
                let w = live[fastrand::usize(0..live.len())].clone();
                run.pause(&w);
                paused.push((k, w, Instant::now() + Duration::from_millis(PAUSE_MS)));
                worker_pauses += 1;
                pauses_left -= 1;
                next_pause = Instant::now() + pause_gap;
            }
        }
        paused.retain(|(k, w, at)| {
            if Instant::now() < *at {
                return true;
            }
            runs[*k].0.resume(w);
            false
        });
        if Instant::now() >= next_kill {
            let k = fastrand::usize(0..runs.len());
            let (run, waits) = &mut runs[k];
            // A paused worker is left to come back (a kill would end its pause).
            let live = running_workers(run, k, &paused);
            if !live.is_empty() {
                let w = &live[fastrand::usize(0..live.len())];
                run.kill(w);
                let queue = works[k].get(w).cloned().flatten();
                let new = run.worker(&worker(*waits, queue.as_ref()));
                works[k].insert(new, queue);
                worker_kills += 1;
            }
            next_kill = Instant::now()
                + Duration::from_millis(fastrand::u64(plan.kill_every_ms / 2..=plan.kill_every_ms * 3 / 2));
        }
        if Instant::now() >= next_step && !plan_steps.is_empty() {
            let step = plan_steps.remove(0);
            if step == "kill" {
                let ms = kill_a_master(cluster, &mut runs);
                failovers += 1;
                failover_ms.push(ms);
                events.push(json!({"kill_master_failover_ms": ms}));
            } else {
                let (slot, from, to, ms) = migrate_a_slot(cluster, &mut runs);
                migrations += 1;
                events.push(json!({"migrate": {"slot": slot, "from": from, "to": to, "ms": ms}}));
            }
            next_step = Instant::now() + gap;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = cluster.wait_until_settled(Duration::from_secs(30));
    let wall = t0.elapsed();
    let server_ahead_s = server_ahead_s(&seeds);
    let mut queues = Vec::new();
    let window = format!("--loss-window-ms={LOSS_WINDOW_MS}");
    let claim_window = format!("--claim-loss-window-ms={LOSS_WINDOW_MS}");
    for ((run, waits), check) in runs.into_iter().zip(&limits) {
        let name = run.queue.clone();
        let all = run.queues();
        let mut extra: Vec<&str> = check.iter().map(String::as_str).collect();
        // no queue's claims are confirmed
        extra.push(claim_window.as_str());
        if !waits {
            extra.push(window.as_str());
        }
        let mut notes = BTreeMap::new();
        if let Some(far) = &run.far {
            notes.insert("far_jobs".into(), json!(super::groups::job_records(&run, far)));
        }
        let out = finish_with(run, drained, notes, &extra);
        // Checked: free the cluster's memory for the next segment (the
        // verdict keeps the final state).
        if out.check.ok && out.drained {
            for queue in &all {
                drop_queue(&seeds, queue);
            }
        }
        queues.push((name, waits, out));
    }
    let sum = |f: &str, w: Option<bool>| -> u64 {
        queues
            .iter()
            .filter(|(_, waits, _)| w.is_none_or(|w| w == *waits))
            .map(|(_, _, o)| o.check.n(f))
            .sum()
    };
    let mut dups: BTreeMap<String, u64> = BTreeMap::new();
    for (_, _, o) in &queues {
        if let Some(m) = o.check.report["duplicate_explained"].as_object() {
            for (k, v) in m {
                *dups.entry(k.clone()).or_default() += v.as_u64().unwrap_or(0);
            }
        }
    }
    let jobs = sum("jobs", None);
    // The limits' highest marks (each must stay within its limit: the checker's L1, G1, R1).
    let lane_max = queues
        .iter()
        .filter_map(|(_, _, o)| o.check.report["lane_max_active"].as_object())
        .flat_map(|m| m.values().filter_map(Value::as_u64))
        .max();
    let marks = json!({
        "lane_cap": 3,
        "lane_max_active": lane_max,
        "global_cap": 6,
        "max_active": queues.get(1).map(|(_, _, o)| o.check.n("max_active")),
        "rate": "50/200ms",
        "max_claims_per_window": queues.get(3).map(|(_, _, o)| o.check.n("max_claims_per_window")),
    });
    let figures = json!({
        "ok": queues.iter().all(|(_, _, o)| o.check.ok && o.drained),
        "drained": drained,
        "queues": queues.len(),
        "far_queues": queues.iter().filter(|(_, _, o)| o.notes.contains_key("far_jobs")).count(),
        "far_jobs": queues.iter().filter_map(|(_, _, o)| o.notes.get("far_jobs").and_then(Value::as_u64)).sum::<u64>(),
        "jobs": jobs,
        "completed": sum("completed", None),
        "worker_kills": worker_kills,
        "worker_pauses_past_lease": worker_pauses,
        "clock_steps": clock_steps,
        "clock_stepped_s": stepped_s,
        "clock_offset_s": clock.offset_s,
        "clock_unavailable": clock.unavailable,
        "server_ahead_s": server_ahead_s,
        "pause_ms": PAUSE_MS,
        "master_kills": failovers,
        "failovers": failovers,
        "failover_ms": failover_ms,
        "migrations": migrations,
        "events": events,
        "lost_with_wait": sum("lost", Some(true)),
        "lost_without_wait": sum("lost", Some(false)) + sum("lost_unconfirmed", Some(false)),
        "lost_without_wait_in_window": sum("lost_unconfirmed", Some(false)),
        "loss_window_ms": LOSS_WINDOW_MS,
        "limits": marks,
        "cron_jobs_created": sum("cron_jobs_created", None),
        "cron_jobs_unrecorded": sum("cron_jobs_unrecorded", None),
        "cancels_asked": sum("cancels_asked", None),
        "cancelled": sum("cancelled", None),
        "cancels_lost_unconfirmed": sum("cancels_lost_unconfirmed", None),
        "claims_lost_unconfirmed": sum("claims_lost_unconfirmed", None),
        "redeliveries": sum("redeliveries", None),
        "duplicate_effects": sum("duplicate_effects", None),
        "duplicates_by_cause": dups,
        "guarded_duplicates": sum("guarded_duplicates", None),
        "stale_settles_rejected": sum("stale_settles_rejected", None),
        "violation_samples": queues
            .iter()
            .filter(|(_, _, o)| !o.check.ok)
            .map(|(q, _, o)| (q.clone(), o.check.report["violations"].as_array().map(|v| v.iter().take(5).cloned().collect::<Vec<_>>()).unwrap_or_default()))
            .collect::<BTreeMap<String, Vec<Value>>>(),
        "violations": queues.iter().map(|(_, _, o)| o.check.report["violations"].as_array().map_or(0, Vec::len)).sum::<usize>(),
        "wall_s": wall.as_secs_f64(),
        "jobs_per_s": jobs as f64 / wall.as_secs_f64(),
    });
    ClusterOutcome { queues, figures }
}

/// The live workers of queue `k`'s run that are not paused.
fn running_workers(run: &mut Run, k: usize, paused: &[(usize, String, Instant)]) -> Vec<String> {
    run.live("worker")
        .into_iter()
        .filter(|w| !paused.iter().any(|(i, p, _)| *i == k && p == w))
        .collect()
}

/// SIGKILLs the master of a random queue's slot, waits for its replica to
/// take over, restarts it (it rejoins as the new master's replica) and
/// waits until every node agrees. Records the kill and the restart in the
/// driver history of every queue on that master. Returns the ms from the
/// kill to the promotion.
fn kill_a_master(cluster: &mut LocalCluster, runs: &mut [(Run, bool)]) -> u64 {
    let k = fastrand::usize(0..runs.len());
    let slot = LocalCluster::slot_of(&format!("{{{}}}", runs[k].0.queue));
    let old = cluster.master_of_slot(slot).expect("the master of a queue's slot");
    // The runs with a queue on that master (their own or their far one).
    let on_it: Vec<usize> = (0..runs.len())
        .filter(|&i| {
            runs[i]
                .0
                .queues()
                .iter()
                .any(|q| cluster.master_of_slot(LocalCluster::slot_of(&format!("{{{q}}}"))).ok() == Some(old))
        })
        .collect();
    let killed = Instant::now();
    cluster.node_mut(old).expect("the master's node").kill();
    for &i in &on_it {
        runs[i]
            .0
            .fault("kill_server", &old.to_string(), "SIGKILL (cluster master)");
    }
    let new = cluster
        .wait_for_failover(old, Duration::from_secs(60))
        .expect("a replica takes over");
    let ms = killed.elapsed().as_millis() as u64;
    cluster
        .node_mut(old)
        .expect("the old master's node")
        .restart()
        .expect("restart the old master");
    for &i in &on_it {
        runs[i].0.fault(
            "restart_server",
            &old.to_string(),
            &format!("rejoins as a replica of {new}"),
        );
    }
    cluster
        .wait_until_settled(Duration::from_secs(60))
        .expect("the cluster settles after the failover");
    ms
}

/// Moves a random queue's slot (a run's own or far one) to another master
/// under load. Returns (slot, from port, to port, ms).
fn migrate_a_slot(cluster: &mut LocalCluster, runs: &mut [(Run, bool)]) -> (u16, u16, u16, u64) {
    let k = fastrand::usize(0..runs.len());
    let queues = runs[k].0.queues();
    let slot = LocalCluster::slot_of(&format!("{{{}}}", queues[fastrand::usize(0..queues.len())]));
    let from = cluster.master_of_slot(slot).expect("the slot's master");
    let masters = cluster.master_ports().expect("the masters");
    let others: Vec<u16> = masters.into_iter().filter(|p| *p != from).collect();
    let to = others[fastrand::usize(0..others.len())];
    runs[k]
        .0
        .fault("migrate_slot", &slot.to_string(), &format!("{from} -> {to}"));
    let t = Instant::now();
    cluster.migrate_slot(slot, to).expect("migrate the slot");
    (slot, from, to, t.elapsed().as_millis() as u64)
}

/// How far a master's clock (`TIME`) is ahead of this machine's, s: the
/// clock steps took hold.
fn server_ahead_s(seeds: &str) -> Option<i64> {
    let url = seeds.split(',').next()?;
    let mut c = redis::Client::open(url).ok()?.get_connection().ok()?;
    let (s, _): (i64, u64) = redis::cmd("TIME").query(&mut c).ok()?;
    let ours = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(s - ours.as_secs() as i64)
}

/// Deletes every key of `queue` (and the fault suite's effect hashes) from
/// the master that serves its slot.
fn drop_queue(seeds: &str, queue: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let res: redis::RedisResult<()> = rt.block_on(async {
        let url = crate::state::queue_url(seeds, queue).await?;
        let mut c = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
        for pattern in [format!("emq:{{{queue}}}:*"), format!("fault:{{{queue}}}:*")] {
            let keys: Vec<String> = {
                let mut it: redis::AsyncIter<String> = redis::AsyncCommands::scan_match(&mut c, pattern).await?;
                let mut keys = Vec::new();
                while let Some(k) = it.next_item().await {
                    keys.push(k?);
                }
                keys
            };
            for chunk in keys.chunks(500) {
                redis::cmd("UNLINK").arg(chunk).query_async::<()>(&mut c).await?;
            }
        }
        Ok(())
    });
    if let Err(e) = res {
        eprintln!("could not delete the keys of {queue}: {e}");
    }
}
