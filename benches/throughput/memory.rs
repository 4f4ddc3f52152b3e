//! Memory per pending job, with a 100-byte payload.

use super::*;

impl Bench {
    /// `used_memory` growth per pending job with a 100-byte JSON payload.
    pub(super) async fn memory(&mut self) {
        let n = self.cfg.mem_n;
        // Load the scripts first so the script cache is not counted.
        let warm = self.fresh("memwarm").await;
        let q = self.connect(&warm, Ret::Default).await;
        q.enqueue(&payload_100(0)).await.unwrap();
        drop(q);
        self.cleanup(&warm).await;
        let name = self.fresh("memory").await;
        let before = self.used_memory().await;
        let q = self.connect(&name, Ret::Default).await;
        fill(&q, n, payload_100).await;
        let after = self.used_memory().await;
        let job_key = format!("{}:{{{name}}}:job:1", echomq::keys::DEFAULT_PREFIX);
        let encoding: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(&job_key)
            .query_async(&mut self.admin)
            .await
            .unwrap_or_default();
        let pending = q.counts().await.unwrap().pending;
        drop(q);
        self.cleanup(&name).await;
        self.out.emit(json!({
            "op": "memory_per_pending_job", "n": n, "payload_bytes": MEM_PAYLOAD_BYTES,
            "bytes_per_job": round((after - before) as f64 / n as f64, 1),
            "used_memory_delta": after - before, "job_hash_encoding": encoding, "check_waiting": pending,
        }));
    }

    // ---- redelivery --------------------------------------------------------
}
