//! What the server spends per job: script calls, round trips and CPU per phase, and what lifecycle events cost.

use super::*;

impl Bench {
    /// The server time of each script, measured alone through the low-level
    /// API (one phase per script, `INFO commandstats` deltas around it):
    /// `enqueue` (one job per call, 64 in flight, and 1,000 jobs per call),
    /// `claim` (64 per call), `complete` (one job per call, 64 in flight)
    /// and `settle_many` (64 per call), with each retention; then claim 64 →
    /// settle those 64 (64 concurrent `complete`s, or one `settle_many`),
    /// in lock step: what a consumer at concurrency 64 could reach without
    /// its own overhead. The consumer's own cost per job is in the
    /// `process_noop` lines (repeated here as phase `consumer`).
    pub(super) async fn server_cost(&mut self) {
        let n = self.cfg.cost_n;
        let lease = Duration::from_secs(600);
        for ret in self.cfg.retentions.clone() {
            let name = self.fresh("cost").await;
            let q = self.connect(&name, ret).await;
            if ret == Ret::Default {
                let before = self.snap().await;
                add_in_flight(&q, n, IN_FLIGHT).await;
                let d = self.snap().await.since(&before);
                self.cost_line("enqueue", "enqueue_1_per_call_64inflight", ret, n, &d);
                let before = self.snap().await;
                fill(&q, n, payload).await;
                let d = self.snap().await.since(&before);
                self.cost_line("enqueue", "enqueue_1000_per_call", ret, n, &d);
            } else {
                fill(&q, 2 * n, payload).await;
            }
            let total = 2 * n;
            let before = self.snap().await;
            let mut leases = Vec::with_capacity(total);
            loop {
                let got = q.claim(CLAIM_BATCH, lease).await.unwrap();
                if got.is_empty() {
                    break;
                }
                leases.extend(got);
            }
            let d = self.snap().await.since(&before);
            assert_eq!(leases.len(), total, "claimed every job");
            self.cost_line("claim", "claim_64_per_call", ret, total, &d);
            // Half the leases one by one, the other half in batches.
            let batched = leases.split_off(n);
            let before = self.snap().await;
            complete_in_flight(&q, leases, IN_FLIGHT).await;
            let d = self.snap().await.since(&before);
            self.cost_line("complete", "complete_64inflight", ret, n, &d);
            let before = self.snap().await;
            for chunk in batched.chunks(CLAIM_BATCH) {
                settle_all(&q, chunk).await;
            }
            let d = self.snap().await.since(&before);
            self.cost_line("settle", "settle_many_64_per_call", ret, n, &d);

            // Lock step: claim 64, settle them (64 concurrent `complete`s, or
            // one `settle_many`), repeat.
            for many in [false, true] {
                fill(&q, n, payload).await;
                let before = self.snap().await;
                loop {
                    let got = q.claim(CLAIM_BATCH, lease).await.unwrap();
                    if got.is_empty() {
                        break;
                    }
                    if many {
                        settle_all(&q, &got).await;
                    } else {
                        let k = got.len();
                        complete_in_flight(&q, got, k).await;
                    }
                }
                let d = self.snap().await.since(&before);
                if many {
                    self.cost_line("claim+settle", "lockstep_claim64_settle_many64", ret, n, &d);
                } else {
                    self.cost_line("claim+complete", "lockstep_claim64_complete64", ret, n, &d);
                }
            }
            drop(q);
            self.cleanup(&name).await;
        }
        // The consumer's figures, from the process_noop medians.
        let medians: Vec<Map<String, Value>> = self
            .out
            .lines
            .iter()
            .filter(|l| field(l, "op") == "process_noop" && field(l, "run") == "median")
            .cloned()
            .collect();
        for m in medians {
            let mut line = json!({ "op": "server_cost", "phase": "consumer", "script": "all" });
            let obj = line.as_object_mut().unwrap();
            for k in [
                "conc",
                "retention",
                "n",
                "jobs_per_s",
                "script_calls_per_job",
                "round_trips_per_job",
                "blocking_calls_per_job",
                "server_cmds_per_job",
                "server_usec_per_job",
                "server_cpu_us_per_job",
                "client_cpu_us_per_job",
                "est_jobs_per_claim",
                "est_jobs_per_settle",
            ] {
                if let Some(v) = m.get(k) {
                    obj.insert(k.into(), v.clone());
                }
            }
            self.out.emit(line);
        }
    }

    /// What lifecycle events cost the server: a job's life through the
    /// low-level API (enqueue 1,000 per call, claim 64 per call, settle 64
    /// per call: three events per job) with the queue's events on and off
    /// (`Queue::set_events`), `COST_N` jobs each; server µs per job over
    /// the three scripts, and their difference.
    pub(super) async fn events_cost(&mut self) {
        let n = self.cfg.cost_n;
        let lease = Duration::from_secs(600);
        let mut per_job = Vec::new();
        for on in [true, false] {
            let name = self.fresh("events").await;
            let q = self.connect(&name, Ret::Default).await;
            q.set_events(&echomq::EventSettings::default().enabled(on))
                .await
                .unwrap();
            let before = self.snap().await;
            fill(&q, n, payload).await;
            loop {
                let got = q.claim(CLAIM_BATCH, lease).await.unwrap();
                if got.is_empty() {
                    break;
                }
                settle_all(&q, &got).await;
            }
            let d = self.snap().await.since(&before);
            let usec = d.usec(SCRIPT_CMDS) as f64 / n as f64;
            per_job.push(usec);
            let mut line = json!({
                "op": "events_cost", "events": if on { "on" } else { "off" }, "jobs": n,
                "usec_per_job": round(usec, 2),
                "server_cmds_per_job": round((d.all_calls() - d.calls(SCRIPT_CMDS)) as f64 / n as f64, 2),
                "wall_s": round(d.wall, 4),
            });
            cost_fields(&mut line, &d, n);
            self.out.emit(line);
            drop(q);
            self.cleanup(&name).await;
        }
        self.out.emit(json!({
            "op": "events_cost", "events": "on_minus_off",
            "usec_per_job": round(per_job[0] - per_job[1], 2),
        }));
    }

    pub(super) fn cost_line(&mut self, script: &str, phase: &str, ret: Ret, jobs: usize, d: &Delta) {
        let calls = d.calls(SCRIPT_CMDS);
        let usec = d.usec(SCRIPT_CMDS) as f64;
        let mut line = json!({
            "op": "server_cost", "phase": phase, "script": script, "retention": ret.name(),
            "jobs": jobs, "calls": calls,
            "usec_per_call": round(usec / calls.max(1) as f64, 2),
            "usec_per_job": round(usec / jobs as f64, 2),
            "server_cmds_per_call": round((d.all_calls() - calls) as f64 / calls.max(1) as f64, 2),
            "wall_s": round(d.wall, 4), "jobs_per_s": round(jobs as f64 / d.wall, 1),
            "server_busy": round(d.server_cpu / d.wall, 3),
            "top": d.top(8),
        });
        cost_fields(&mut line, d, jobs);
        self.out.emit(line);
    }

    // ---- lanes -------------------------------------------------------------
}
