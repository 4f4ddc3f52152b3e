//! Enqueue and processing throughput: bulk and single enqueues, and a backlog processed at each concurrency.

use super::*;

impl Bench {
    pub(super) async fn repeat_enqueue(&mut self, bulk: bool) {
        let (op, conc) = if bulk {
            ("enqueue_bulk_chunk1000", 1)
        } else {
            ("enqueue_add_64inflight", IN_FLIGHT)
        };
        let mut rates = Vec::new();
        let mut lines = Vec::new();
        for run in 1..=self.cfg.runs {
            let n = self.cfg.n;
            let name = self.fresh("enqueue").await;
            let q = self.connect(&name, Ret::Default).await;
            let before = self.snap().await;
            let t0 = Instant::now();
            if bulk {
                fill(&q, n, payload).await;
            } else {
                add_in_flight(&q, n, IN_FLIGHT).await;
            }
            let s = t0.elapsed().as_secs_f64();
            let d = self.snap().await.since(&before);
            let waiting = q.counts().await.unwrap().pending;
            drop(q);
            self.cleanup(&name).await;
            rates.push(n as f64 / s);
            let mut line = json!({
                "op": op, "n": n, "conc": conc, "run": run, "seconds": round(s, 4),
                "jobs_per_s": round(n as f64 / s, 1), "check_waiting": waiting,
            });
            cost_fields(&mut line, &d, n);
            lines.push(line.clone());
            self.out.emit(line);
        }
        self.out.emit(median_line(op, &lines, json!({ "conc": conc })));
    }

    // ---- process -----------------------------------------------------------

    pub(super) async fn repeat_process(&mut self, conc: usize, ret: Ret) {
        let mut lines = Vec::new();
        for run in 1..=self.cfg.runs {
            let line = self.process_once(run, conc, ret).await;
            lines.push(line.clone());
            self.out.emit(line);
        }
        let extra = json!({ "conc": conc, "retention": ret.name(), "retention_detail": ret.detail() });
        self.out.emit(median_line("process_noop", &lines, extra));
    }

    /// A backlog of N no-op jobs, pre-filled untimed; one consumer at
    /// `conc`. Timed from the first handler start to the moment every job
    /// is settled on the server: when the N-th handler has started, the
    /// consumer is shut down gracefully, which returns once every running
    /// job's settlement has been answered (no job is left active or
    /// pending, as the checks confirm). The end time is taken when `shutdown`
    /// returns, so it can only overstate the time, never understate it.
    pub(super) async fn process_once(&mut self, run: usize, conc: usize, ret: Ret) -> Value {
        let n = self.cfg.n;
        let name = self.fresh("process").await;
        let q = self.connect(&name, ret).await;
        fill(&q, n, payload).await;

        let started = Arc::new(AtomicUsize::new(0));
        let first: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
        let all_started = Arc::new(Notify::new());
        let handler = {
            let (started, first, all_started) = (started.clone(), first.clone(), all_started.clone());
            move |_job: Job<Payload>| {
                let (started, first, all_started) = (started.clone(), first.clone(), all_started.clone());
                async move {
                    first.get_or_init(Instant::now);
                    if started.fetch_add(1, Ordering::Relaxed) + 1 == n {
                        all_started.notify_one();
                    }
                    Ok::<(), HandlerError>(())
                }
            }
        };
        let before = self.snap().await;
        let spawned = Instant::now();
        let mut consumer = Consumer::new(q.clone(), handler).concurrency(conc);
        if let Some(n) = self.cfg.prefetch {
            consumer = consumer.prefetch(n);
        }
        let consumer = consumer.spawn().expect("spawn the consumer");
        let prefetch = self.cfg.prefetch.map_or(json!("auto"), |n| json!(n));
        let limit = Duration::from_secs(120 + (n / 200) as u64);
        if timeout(limit, all_started.notified()).await.is_err() {
            panic!(
                "process_noop conc {conc}: only {} of {n} jobs started within {limit:?}",
                started.load(Ordering::Relaxed)
            );
        }
        consumer.shutdown().await.expect("a clean shutdown");
        let end = Instant::now();
        let d = self.snap().await.since(&before);
        let counts = q.counts().await.unwrap();
        let handled = started.load(Ordering::Relaxed);
        drop(q);
        self.cleanup(&name).await;

        let first = *first.get().expect("a handler ran");
        let s = end.duration_since(first).as_secs_f64();
        let mut line = json!({
            "op": "process_noop", "retention": ret.name(), "retention_detail": ret.detail(),
            "n": n, "conc": conc, "prefetch": prefetch, "run": run, "seconds": round(s, 4), "jobs_per_s": round(n as f64 / s, 1),
            "startup_s": round(first.duration_since(spawned).as_secs_f64(), 4),
            "check_completed_kept": counts.completed, "check_failed": counts.failed,
            "check_left": counts.pending + counts.active + counts.delayed, "check_handler_calls": handled,
        });
        cost_fields(&mut line, &d, n);
        // Claim and settle calls, worked out from the scripts' own commands
        // (tied to today's scripts): each plain claim runs ZRANGEBYSCORE
        // once (its promote step), each reap pass twice and ZRANGE once,
        // each consistency sweep step one SCAN or ZSCAN, settling (with or
        // without a claim folded in) none of these. So reaps = ZRANGE calls,
        // claims = z - 2 reaps, and settle calls = script calls - claims -
        // reaps - sweep steps.
        let e = d.calls(SCRIPT_CMDS) as i64;
        let z = d.calls(&["zrangebyscore"]) as i64;
        let reaps = d.calls(&["zrange"]) as i64;
        let sweeps = d.calls(&["scan", "zscan"]) as i64;
        let claims = z - 2 * reaps;
        let settles = e - claims - reaps - sweeps;
        if claims > 0 && settles > 0 {
            let m = line.as_object_mut().unwrap();
            m.insert("est_claim_calls".into(), claims.into());
            m.insert("est_jobs_per_claim".into(), round(n as f64 / claims as f64, 2).into());
            m.insert("est_settle_calls".into(), settles.into());
            m.insert("est_jobs_per_settle".into(), round(n as f64 / settles as f64, 2).into());
        }
        line
    }

    // ---- latency -----------------------------------------------------------
}
