//! `doctor`: the server self-check and a full consistency sweep of each
//! queue, with the problems found.

use std::fmt::Write as _;

use echomq::maintenance::SWEEP_STEP;
use serde_json::json;

use crate::ctx::{Ctx, Output};
use crate::exit::{FAILED, Failure, PROBLEMS};
use crate::render::table;

/// The oldest Redis echomq runs on.
const MIN_REDIS_MAJOR: u32 = 7;

/// Checks the server and sweeps the queue given, or every queue; exits 4
/// when it finds problems, or (`strict`) warnings.
///
/// # Errors
/// A [`Failure`]: no such queue, a lost connection.
pub async fn doctor(ctx: &Ctx, strict: bool) -> Result<Output, Failure> {
    let report = ctx.client.self_check().await.map_err(|e| ctx.err(e))?;
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    match report.maxmemory_policy.as_str() {
        "noeviction" => {}
        "unknown" => {
            warnings.push("the eviction policy could not be read: make sure maxmemory-policy is noeviction".to_owned())
        }
        other => problems.push(format!(
            "maxmemory-policy is {other}: the server may evict job records, losing jobs (set it to noeviction)"
        )),
    }
    let major = report.version.split('.').next().and_then(|m| m.parse::<u32>().ok());
    if report.server == "redis" && major.is_some_and(|m| m < MIN_REDIS_MAJOR) {
        problems.push(format!(
            "Redis {} is older than {MIN_REDIS_MAJOR}.0, the oldest echomq runs on",
            report.version
        ));
    }
    if !report.appendonly && report.persistence_known() {
        warnings.push(
            "no append-only file (appendonly no): a server restart can lose acknowledged jobs (set appendonly yes)"
                .to_owned(),
        );
    }
    if report.connected_replicas > 0 {
        warnings.push(format!(
            "{} replicas: replication is asynchronous, so a failover can lose acknowledged jobs",
            report.connected_replicas
        ));
    }
    for u in &report.unverified {
        warnings.push(format!("could not verify {u}"));
    }
    // Each echomq build loads its own function library; older builds' stay.
    let libraries = match ctx.client.script_libraries().await {
        Ok(libs) => {
            if !libs.others.is_empty() {
                warnings.push(format!(
                    "function libraries of other echomq builds are loaded ({}): delete each with \
                     FUNCTION DELETE NAME once no process of that build runs",
                    libs.others.join(", ")
                ));
            }
            json!({"current": libs.current, "loaded": libs.loaded, "others": libs.others})
        }
        Err(e) => {
            warnings.push(format!("could not list the function libraries: {e}"));
            serde_json::Value::Null
        }
    };

    let names = ctx.queue_names().await?;
    let mut queues = Vec::new();
    let mut rows = Vec::new();
    for name in &names {
        let swept = match ctx.open(name).await {
            Ok(q) => q.sweep(SWEEP_STEP).await.map_err(|e| ctx.err(e)),
            Err(f) => Err(f),
        };
        match swept {
            Ok(s) => {
                let mut verdict = Vec::new();
                if s.repaired > 0 {
                    problems.push(format!(
                        "queue {name}: the sweep repaired {} inconsistencies (a torn write, or keys changed by hand); \
                         they are repaired now",
                        s.repaired
                    ));
                    verdict.push(format!("{} repaired", s.repaired));
                }
                if s.skipped > 0 {
                    problems.push(format!(
                        "queue {name}: {} keys are not what echomq wrote (a job key that is not a hash, or a set \
                         of another type); left alone: look at them",
                        s.skipped
                    ));
                    verdict.push(format!("{} skipped", s.skipped));
                }
                queues.push(json!({
                    "queue": name,
                    "checked": s.checked,
                    "repaired": s.repaired,
                    "skipped": s.skipped,
                }));
                rows.push(vec![
                    name.clone(),
                    s.checked.to_string(),
                    s.repaired.to_string(),
                    s.skipped.to_string(),
                    if verdict.is_empty() {
                        "ok".to_owned()
                    } else {
                        verdict.join(", ")
                    },
                ]);
            }
            Err(f) if f.code != FAILED => return Err(f),
            Err(f) => {
                problems.push(format!("queue {name}: {}", f.message));
                queues.push(json!({"queue": name, "error": f.message}));
                rows.push(vec![name.clone(), "-".into(), "-".into(), "-".into(), "error".into()]);
            }
        }
    }

    let json = json!({
        "server": {
            "url": ctx.url.shown(),
            "server": report.server,
            "version": report.version,
            "appendonly": report.appendonly,
            "appendfsync": report.appendfsync,
            "maxmemory_policy": report.maxmemory_policy,
            "connected_replicas": report.connected_replicas,
            "hash_max_listpack_value": report.hash_max_listpack_value,
            "unverified": report.unverified,
            "durability": report.durability(),
            "function_libraries": libraries,
        },
        "prefix": ctx.prefix,
        "queues": queues,
        "problems": problems,
        "warnings": warnings,
    });
    let mut text = String::new();
    let _ = writeln!(
        text,
        "server      {} {} at {}",
        report.server,
        report.version,
        ctx.url.shown()
    );
    let _ = writeln!(text, "durability  {}", report.durability());
    let _ = writeln!(
        text,
        "eviction    {}",
        match report.maxmemory_policy.as_str() {
            "noeviction" => "noeviction (no job record is evicted)".to_owned(),
            other => other.to_owned(),
        }
    );
    let _ = writeln!(text, "replicas    {}", report.connected_replicas);
    if let Some(v) = report.hash_max_listpack_value {
        let suggested = echomq::health::SUGGESTED_HASH_MAX_LISTPACK_VALUE;
        let note = if v < suggested {
            format!(" (job records with larger payloads take about 1.6x the memory; {suggested} keeps them compact)")
        } else {
            String::new()
        };
        let _ = writeln!(text, "records     hash-max-listpack-value {v}{note}");
    }
    text.push('\n');
    if names.is_empty() {
        text.push_str(&ctx.no_queues());
    } else {
        text.push_str(&table(&["QUEUE", "CHECKED", "REPAIRED", "SKIPPED", "SWEEP"], &rows));
    }
    text.push('\n');
    for w in &warnings {
        let _ = writeln!(text, "warning: {w}");
    }
    for p in &problems {
        let _ = writeln!(text, "problem: {p}");
    }
    let count = |n: usize, what: &str| match n {
        0 => format!("no {what}s"),
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    };
    let _ = writeln!(
        text,
        "{}, {}",
        count(problems.len(), "problem"),
        count(warnings.len(), "warning")
    );
    let mut out = Output::ok(json, text);
    if !problems.is_empty() || (strict && !warnings.is_empty()) {
        out.code = PROBLEMS;
    }
    Ok(out)
}
