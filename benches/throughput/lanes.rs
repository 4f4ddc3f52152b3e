//! What lanes cost a claim: few and many lanes, with caps and without.

use super::*;

impl Bench {
    /// What a claim costs while lanes are in use: server µs per script call
    /// and server commands per call, for `LANES_CLAIMS` claims of one job
    /// (`claim_1`) and as many calls of the consumer's hot path (one
    /// `settle_and_claim` that completes one job and leases the next:
    /// `settle1_claim1`), with no lanes, 10 lanes, `LANES_MANY` lanes, and
    /// `LANES_MANY` lanes under a default cap (which adds the cap's reads).
    /// The claim looks at a bounded number of lanes, so the cost should not
    /// grow with the number of lanes. Jobs go in with `enqueue_bulk_with`
    /// (at least two per lane); that cost is reported too (`enqueue_1000`).
    pub(super) async fn lanes(&mut self) {
        let claims = self.cfg.lanes_claims;
        let many = self.cfg.lanes_many;
        let lease = Duration::from_secs(600);
        let cases: [(&str, usize, Option<u32>); 4] = [
            ("none", 0, None),
            ("10", 10, None),
            ("many", many, None),
            ("many_capped", many, Some(1_000)),
        ];
        for (label, lanes, cap) in cases {
            let name = self.fresh("lanes").await;
            let q = self.connect(&name, Ret::Default).await;
            if let Some(cap) = cap {
                q.set_lane_default_cap(Some(cap)).await.unwrap();
            }
            let jobs = (2 * claims + 1).max(2 * lanes);
            let before = self.snap().await;
            for start in (0..jobs).step_by(CHUNK) {
                let batch: Vec<(Payload, echomq::EnqueueOptions)> = (start..(start + CHUNK).min(jobs))
                    .map(|i| {
                        let opts = echomq::EnqueueOptions::new();
                        let opts = if lanes > 0 {
                            opts.lane(format!("l{}", i % lanes))
                        } else {
                            opts
                        };
                        (payload(i), opts)
                    })
                    .collect();
                q.enqueue_bulk_with(&batch).await.unwrap();
            }
            let d = self.snap().await.since(&before);
            self.lanes_line(label, lanes, "enqueue_1000", jobs, &d);

            let before = self.snap().await;
            let mut held = Vec::with_capacity(claims);
            for _ in 0..claims {
                held.extend(q.claim(1, lease).await.unwrap());
            }
            let d = self.snap().await.since(&before);
            assert_eq!(held.len(), claims, "claimed one job per call");
            self.lanes_line(label, lanes, "claim_1", claims, &d);

            let before = self.snap().await;
            let complete = Settle::Complete;
            for l in &mut held {
                let (done, mut next) = q.settle_and_claim(&[(&*l, &complete)], 1, lease).await.unwrap();
                done.into_iter().for_each(|r| {
                    r.unwrap();
                });
                *l = next.pop().expect("a job leased in the settle call");
            }
            let d = self.snap().await.since(&before);
            self.lanes_line(label, lanes, "settle1_claim1", claims, &d);
            drop(q);
            self.cleanup(&name).await;
        }
    }

    pub(super) fn lanes_line(&mut self, label: &str, lanes: usize, phase: &str, calls_made: usize, d: &Delta) {
        let calls = d.calls(SCRIPT_CMDS);
        let usec = d.usec(SCRIPT_CMDS) as f64;
        self.out.emit(json!({
            "op": "lanes", "lanes": label, "lane_count": lanes, "phase": phase,
            "items": calls_made, "calls": calls,
            "usec_per_call": round(usec / calls.max(1) as f64, 2),
            "server_us_per_item": round(usec / calls_made.max(1) as f64, 2),
            "server_cmds_per_call": round((d.all_calls() - calls) as f64 / calls.max(1) as f64, 2),
            "wall_us_per_item": round(d.wall * 1e6 / calls_made.max(1) as f64, 1),
            "server_busy": round(d.server_cpu / d.wall, 3),
        }));
    }

    // ---- memory ------------------------------------------------------------
}
