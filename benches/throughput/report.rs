//! The readable table that closes a run, and the median line of a
//! throughput figure.

use super::*;

impl Bench {
    pub(super) fn table(&self) {
        let lines = &self.out.lines;
        let f = |l: &Map<String, Value>, k: &str| l.get(k).and_then(Value::as_f64);
        let show = |v: Option<f64>, digits: usize| v.map_or("-".to_owned(), |x| format!("{x:.digits$}"));
        println!();
        println!(
            "echomq benchmark ({}; medians of RUNS={})",
            self.out_server(),
            self.cfg.runs
        );
        println!(
            "{:<26} {:>5} {:<9} {:>11} {:>9} {:>12} {:>12} {:>11}",
            "figure", "conc", "retention", "jobs/s", "seconds", "scripts/job", "trips/job", "server µs/job"
        );
        for l in lines
            .iter()
            .filter(|l| field(l, "run") == "median" && l.contains_key("jobs_per_s"))
        {
            println!(
                "{:<26} {:>5} {:<9} {:>11} {:>9} {:>12} {:>12} {:>11}",
                field(l, "op").as_str().unwrap_or("?"),
                show(f(l, "conc"), 0),
                l.get("retention").and_then(Value::as_str).unwrap_or("-"),
                show(f(l, "jobs_per_s"), 0),
                show(f(l, "seconds"), 3),
                show(f(l, "script_calls_per_job"), 3),
                show(f(l, "round_trips_per_job"), 3),
                show(f(l, "server_usec_per_job"), 1),
            );
        }
        for l in lines.iter().filter(|l| field(l, "op") == "latency_enqueue_to_start") {
            println!(
                "latency enqueue→start at {}/s: p50 {} ms, p99 {} ms, max {} ms (enqueue ack p50 {} ms)",
                show(f(l, "rate_per_s"), 0),
                show(f(l, "p50_ms"), 3),
                show(f(l, "p99_ms"), 3),
                show(f(l, "max_ms"), 3),
                show(f(l, "enqueue_ack_p50_ms"), 3),
            );
        }
        for l in lines
            .iter()
            .filter(|l| field(l, "op") == "server_cost" && field(l, "phase") != "consumer")
        {
            println!(
                "server cost {:<30} {:<8} {:>8} µs/call {:>7} µs/job {:>6} cmds/call",
                l.get("phase").and_then(Value::as_str).unwrap_or("?"),
                l.get("retention").and_then(Value::as_str).unwrap_or("-"),
                show(f(l, "usec_per_call"), 1),
                show(f(l, "usec_per_job"), 2),
                show(f(l, "server_cmds_per_call"), 1),
            );
        }
        for l in lines.iter().filter(|l| field(l, "op") == "memory_per_pending_job") {
            println!(
                "memory per pending job ({}-byte payload): {} bytes (job hash encoding {})",
                show(f(l, "payload_bytes"), 0),
                show(f(l, "bytes_per_job"), 0),
                l.get("job_hash_encoding").and_then(Value::as_str).unwrap_or("?"),
            );
        }
        let kills: BTreeMap<String, &Map<String, Value>> = lines
            .iter()
            .filter(|l| field(l, "op") == "redelivery_after_kill")
            .map(|l| match field(l, "run") {
                Value::String(s) => (s.clone(), l),
                other => (other.to_string(), l),
            })
            .collect();
        for (run, l) in kills {
            println!(
                "redelivery after SIGKILL (run {run}): {} s (lease {} s, left at kill {} s, {} s after the deadline; reaper every {} s)",
                show(f(l, "seconds"), 3),
                show(f(l, "lease_s"), 1),
                show(f(l, "lease_left_at_kill_s"), 3),
                show(f(l, "after_deadline_s"), 3),
                show(f(l, "reap_interval_s"), 1),
            );
        }
    }

    pub(super) fn out_server(&self) -> String {
        self.out
            .lines
            .first()
            .and_then(|l| l.get("server"))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned()
    }
}

/// A field of an emitted line, `null` when absent.
pub(super) fn field<'a>(line: &'a Map<String, Value>, key: &str) -> &'a Value {
    line.get(key).unwrap_or(&Value::Null)
}

/// The median line of a throughput figure: numeric fields are medians over
/// the runs; `extra` names the figure.
pub(super) fn median_line(op: &str, runs: &[Value], extra: Value) -> Value {
    let mut line = json!({ "op": op, "run": "median", "runs": runs.len() });
    let m = line.as_object_mut().unwrap();
    if let Value::Object(e) = extra {
        m.extend(e);
    }
    m.insert("n".into(), runs[0]["n"].clone());
    for key in [
        "seconds",
        "jobs_per_s",
        "script_calls_per_job",
        "round_trips_per_job",
        "blocking_calls_per_job",
        "server_cmds_per_job",
        "server_usec_per_job",
        "server_cpu_us_per_job",
        "client_cpu_us_per_job",
        "server_busy",
        "est_jobs_per_claim",
        "est_jobs_per_settle",
        "startup_s",
    ] {
        let v: Vec<f64> = runs.iter().filter_map(|r| r.get(key).and_then(Value::as_f64)).collect();
        if v.len() == runs.len() {
            m.insert(key.into(), round(median(&v), 4).into());
        }
    }
    line
}
