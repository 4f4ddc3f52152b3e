//! End-to-end latency: enqueue to handler start at a steady rate, with several consumers.

use super::*;

impl Bench {
    /// Enqueue → handler start at a steady rate, with idle consumers
    /// waiting. Timed from just before `enqueue` is called (so it includes
    /// the enqueue's own round trip) to the first line of the handler.
    pub(super) async fn latency(&mut self) {
        let (n, rate) = (self.cfg.lat_n, self.cfg.lat_rate);
        let name = self.fresh("latency").await;
        let q = self.connect(&name, Ret::Default).await;
        let base = Instant::now();
        let ns = move |t: Instant| t.duration_since(base).as_nanos() as u64;
        let sent: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
        let acked: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
        let began: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
        let count = Arc::new(AtomicUsize::new(0));
        let all = Arc::new(Notify::new());
        let mut consumers = Vec::new();
        for _ in 0..self.cfg.lat_consumers.max(1) {
            let (began, count, all) = (began.clone(), count.clone(), all.clone());
            let handler = move |job: Job<Payload>| {
                let at = ns(Instant::now());
                let i = job.payload().i as usize;
                began[i].store(at, Ordering::Relaxed);
                if count.fetch_add(1, Ordering::Relaxed) + 1 == n {
                    all.notify_one();
                }
                async { Ok::<(), HandlerError>(()) }
            };
            let consumer = Consumer::new(q.clone(), handler).concurrency(self.cfg.lat_conc);
            consumers.push(consumer.spawn().expect("spawn a consumer"));
        }
        // Let the consumers find the queue empty and block on their wake-ups.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = self.snap().await;
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
        let mut producers = JoinSet::new();
        let t0 = Instant::now();
        for i in 0..n {
            tick.tick().await;
            let (q, sent, acked) = (q.clone(), sent.clone(), acked.clone());
            producers.spawn(async move {
                sent[i].store(ns(Instant::now()), Ordering::Relaxed);
                q.enqueue(&payload(i)).await.unwrap();
                acked[i].store(ns(Instant::now()), Ordering::Relaxed);
            });
        }
        let offered = t0.elapsed().as_secs_f64();
        while let Some(r) = producers.join_next().await {
            r.unwrap();
        }
        if timeout(Duration::from_secs(60), all.notified()).await.is_err() {
            panic!("latency: only {} of {n} jobs started", count.load(Ordering::Relaxed));
        }
        let d = self.snap().await.since(&before);
        for c in consumers {
            c.shutdown().await.expect("a clean shutdown");
        }
        drop(q);
        self.cleanup(&name).await;

        let ms =
            |a: &AtomicU64, b: &AtomicU64| (a.load(Ordering::Relaxed) as f64 - b.load(Ordering::Relaxed) as f64) / 1e6;
        let mut lat: Vec<f64> = (0..n).map(|i| ms(&began[i], &sent[i])).collect();
        let mut ack: Vec<f64> = (0..n).map(|i| ms(&acked[i], &sent[i])).collect();
        lat.sort_by(f64::total_cmp);
        ack.sort_by(f64::total_cmp);
        let mut line = json!({
            "op": "latency_enqueue_to_start", "n": n, "rate_per_s": rate,
            "achieved_rate_per_s": round(n as f64 / offered, 1),
            "consumers": self.cfg.lat_consumers.max(1), "conc": self.cfg.lat_conc,
            "p50_ms": round(percentile(&lat, 50.0), 3), "p90_ms": round(percentile(&lat, 90.0), 3),
            "p99_ms": round(percentile(&lat, 99.0), 3), "max_ms": round(lat[n - 1], 3),
            "mean_ms": round(lat.iter().sum::<f64>() / n as f64, 3),
            "enqueue_ack_p50_ms": round(percentile(&ack, 50.0), 3),
            "enqueue_ack_p99_ms": round(percentile(&ack, 99.0), 3),
        });
        cost_fields(&mut line, &d, n);
        self.out.emit(line);
    }

    // ---- server cost -------------------------------------------------------
}
