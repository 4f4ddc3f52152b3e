//! Redelivery after a consumer is killed: how long until its jobs run again.

use super::*;

impl Bench {
    /// A child process (this binary, see [`victim`]) claims a job and hangs
    /// in its handler; it is SIGKILLed, and a consumer here (default reap
    /// interval, same lease) runs the job again. Timed from the kill to the
    /// second handler start. The lease left at the kill is read from the
    /// job's deadline and the server clock just before it.
    ///
    /// The surviving consumer starts (idle, long before the deadline) at a
    /// different phase of its reap interval in each run, spread evenly over
    /// the interval: the client's maintenance task reaps the queue when the
    /// consumer starts and then every interval (the queue holds a lease), so with a lease that is a multiple of the interval and a
    /// fixed start, every run would land on the same, lucky, phase.
    pub(super) async fn redelivery(&mut self) {
        let lease = self.cfg.redelivery_lease;
        let reap = DEFAULT_REAP_INTERVAL;
        let mut delays = Vec::new();
        let mut after = Vec::new();
        for run in 1..=self.cfg.redelivery_runs {
            let name = self.fresh("redelivery").await;
            let q = self.connect(&name, Ret::Default).await;
            let id = q.enqueue(&payload(0)).await.unwrap();
            let exe = std::env::current_exe().expect("the bench binary");
            let mut child = tokio::process::Command::new(exe)
                .env(VICTIM_ENV, &self.cfg.url)
                .env(VICTIM_QUEUE_ENV, &name)
                .env(VICTIM_LEASE_ENV, lease.as_millis().to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("start the victim");
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let line = timeout(Duration::from_secs(30), lines.next_line())
                .await
                .expect("the victim starts the job within 30 s")
                .unwrap()
                .expect("a line from the victim");
            assert!(line.starts_with("started"), "victim said {line:?}");

            let deadline_ms = q.job(&id).await.unwrap().deadline_ms.expect("the job is active");
            let now_ms = q.server_time_ms().await.unwrap();
            child.start_kill().expect("SIGKILL the victim");
            let killed = Instant::now();
            child.wait().await.expect("reap the victim");
            let lease_left = (deadline_ms as f64 - now_ms as f64) / 1000.0;

            // A surviving consumer, idle and waiting well before the deadline,
            // started at an evenly spread phase of its reap interval.
            let phase = reap.mul_f64((run as f64 - 0.5) / self.cfg.redelivery_runs as f64);
            tokio::time::sleep(phase).await;
            let began: Arc<OnceLock<(Instant, u64)>> = Arc::new(OnceLock::new());
            let again = Arc::new(Notify::new());
            let handler = {
                let (began, again) = (began.clone(), again.clone());
                move |job: Job<Payload>| {
                    let _ = began.set((Instant::now(), job.attempt()));
                    again.notify_one();
                    async { Ok::<(), HandlerError>(()) }
                }
            };
            let survivor = Consumer::new(q.clone(), handler)
                .lease(lease)
                .spawn()
                .expect("spawn the survivor");

            let limit = lease + reap * 4 + Duration::from_secs(10);
            if timeout(limit, again.notified()).await.is_err() {
                panic!("redelivery: the job did not run again within {limit:?} of the kill");
            }
            let (at, attempt) = *began.get().unwrap();
            survivor.shutdown().await.expect("a clean shutdown");
            drop(q);
            self.cleanup(&name).await;
            let delay = at.duration_since(killed).as_secs_f64();
            delays.push(delay);
            self.out.emit(json!({
                "op": "redelivery_after_kill", "run": run, "seconds": round(delay, 4),
                "lease_s": lease.as_secs_f64(), "reap_interval_s": reap.as_secs_f64(),
                "lease_left_at_kill_s": round(lease_left, 4),
                "after_deadline_s": round(delay - lease_left, 4),
                "bound_s": round(lease_left + reap.as_secs_f64(), 4), "attempt": attempt,
                "survivor_start_after_kill_s": round(phase.as_secs_f64(), 4),
            }));
            after.push(delay - lease_left);
        }
        self.out.emit(json!({
            "op": "redelivery_after_kill", "run": "median", "runs": delays.len(),
            "seconds": round(median(&delays), 4), "lease_s": lease.as_secs_f64(),
            "reap_interval_s": reap.as_secs_f64(),
            "after_deadline_s": round(median(&after), 4),
            "after_deadline_mean_s": round(after.iter().sum::<f64>() / after.len().max(1) as f64, 4),
            "after_deadline_max_s": round(after.iter().copied().fold(f64::MIN, f64::max), 4),
        }));
    }

    // ---- the table ---------------------------------------------------------
}
