//! Helpers of the throughput benchmark: environment settings, server
//! statistics (`INFO commandstats`, `INFO cpu`, `INFO memory`), client CPU
//! time, medians and percentiles, and the JSON lines it prints.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Instant;

use serde_json::{Map, Value};

/// Reads `name` from the environment, or `default` when it is unset or empty.
///
/// # Panics
/// When the variable is set but does not parse: a typo must not silently
/// run the default sizes.
pub fn env_or<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} does not parse")),
        _ => default,
    }
}

/// A comma-separated list from the environment (`CONCS=1,16,64`).
pub fn env_list<T: FromStr>(name: &str, default: &str) -> Vec<T> {
    let raw = std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let raw = raw.as_deref().unwrap_or(default);
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap_or_else(|_| panic!("{name}: {s:?} does not parse")))
        .collect()
}

/// `INFO` text as `field -> value` (section headers and blanks skipped).
pub fn parse_info(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Per-command counters from `INFO commandstats`: calls and microseconds.
/// Commands run inside scripts are counted too (under their own names).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CmdStat {
    pub calls: u64,
    pub usec: u64,
}

/// One snapshot of the server's counters and both sides' CPU time.
#[derive(Debug, Clone)]
pub struct Snap {
    pub cmds: BTreeMap<String, CmdStat>,
    /// Server CPU seconds (main thread when the server reports it).
    pub server_cpu: f64,
    /// This process's CPU seconds (all threads).
    pub client_cpu: f64,
    pub at: Instant,
}

impl Snap {
    /// Builds a snapshot from `INFO commandstats` and `INFO cpu` texts.
    pub fn parse(commandstats: &str, cpu: &str) -> Snap {
        let mut cmds = BTreeMap::new();
        for line in commandstats.lines() {
            let Some(rest) = line.trim().strip_prefix("cmdstat_") else {
                continue;
            };
            let Some((name, fields)) = rest.split_once(':') else {
                continue;
            };
            let mut s = CmdStat::default();
            for f in fields.split(',') {
                match f.split_once('=') {
                    Some(("calls", v)) => s.calls = v.parse().unwrap_or(0),
                    Some(("usec", v)) => s.usec = v.parse().unwrap_or(0),
                    _ => {}
                }
            }
            cmds.insert(name.to_owned(), s);
        }
        let info = parse_info(cpu);
        let num = |k: &str| info.get(k).and_then(|v| v.parse::<f64>().ok());
        let server_cpu = match (num("used_cpu_user_main_thread"), num("used_cpu_sys_main_thread")) {
            (Some(u), Some(s)) => u + s,
            _ => num("used_cpu_user").unwrap_or(0.0) + num("used_cpu_sys").unwrap_or(0.0),
        };
        Snap {
            cmds,
            server_cpu,
            client_cpu: client_cpu_seconds(),
            at: Instant::now(),
        }
    }

    /// What happened between `before` and `self`. The benchmark's own
    /// `INFO` calls are left out.
    pub fn since(&self, before: &Snap) -> Delta {
        let mut cmds = BTreeMap::new();
        for (name, after) in &self.cmds {
            if name == "info" {
                continue;
            }
            let b = before.cmds.get(name).copied().unwrap_or_default();
            let d = CmdStat {
                calls: after.calls.saturating_sub(b.calls),
                usec: after.usec.saturating_sub(b.usec),
            };
            if d.calls > 0 {
                cmds.insert(name.clone(), d);
            }
        }
        Delta {
            cmds,
            server_cpu: self.server_cpu - before.server_cpu,
            client_cpu: self.client_cpu - before.client_cpu,
            wall: self.at.duration_since(before.at).as_secs_f64(),
        }
    }
}

/// Script commands (one client round trip each).
pub const SCRIPT_CMDS: &[&str] = &["evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"];
/// Blocking waits a consumer may use (one round trip each).
pub const BLOCKING_CMDS: &[&str] = &[
    "blpop",
    "brpop",
    "blmove",
    "blmpop",
    "brpoplpush",
    "bzpopmin",
    "bzpopmax",
    "bzmpop",
    "xread",
    "xreadgroup",
];

/// Counter differences between two snapshots.
#[derive(Debug, Clone)]
pub struct Delta {
    pub cmds: BTreeMap<String, CmdStat>,
    pub server_cpu: f64,
    pub client_cpu: f64,
    pub wall: f64,
}

impl Delta {
    pub fn calls(&self, names: &[&str]) -> u64 {
        names.iter().filter_map(|n| self.cmds.get(*n)).map(|s| s.calls).sum()
    }
    pub fn usec(&self, names: &[&str]) -> u64 {
        names.iter().filter_map(|n| self.cmds.get(*n)).map(|s| s.usec).sum()
    }
    /// Every command the server ran, including those inside scripts.
    pub fn all_calls(&self) -> u64 {
        self.cmds.values().map(|s| s.calls).sum()
    }
    /// Client round trips: script calls, blocking waits, `EXEC` (a
    /// MULTI/EXEC pipeline is one trip) and script loads. Commands run
    /// inside scripts are not round trips and are not counted here.
    pub fn round_trips(&self) -> u64 {
        self.calls(SCRIPT_CMDS) + self.calls(BLOCKING_CMDS) + self.calls(&["exec", "script|load"])
    }
    /// The busiest commands by server time: `{name: {calls, usec, usec_per_call}}`.
    pub fn top(&self, n: usize) -> Value {
        let mut v: Vec<_> = self.cmds.iter().collect();
        v.sort_by_key(|(_, s)| std::cmp::Reverse(s.usec));
        let mut m = Map::new();
        for (name, s) in v.into_iter().take(n) {
            m.insert(
                name.clone(),
                serde_json::json!({
                    "calls": s.calls,
                    "usec": s.usec,
                    "usec_per_call": round(s.usec as f64 / s.calls.max(1) as f64, 2),
                }),
            );
        }
        Value::Object(m)
    }
}

/// CPU seconds of this process (all threads): the sum of each thread's
/// time on CPU from `/proc/self/task/*/schedstat` (nanoseconds), or the
/// coarser `/proc/self/stat` ticks where that is missing; 0 off Linux.
/// Threads that already exited are not counted (the runtime's workers live
/// for the whole run).
pub fn client_cpu_seconds() -> f64 {
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        let mut ns = 0u64;
        let mut any = false;
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat"))
                && let Some(v) = s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok())
            {
                ns += v;
                any = true;
            }
        }
        if any {
            return ns as f64 / 1e9;
        }
    }
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // utime and stime are the 14th and 15th fields, in clock ticks (100 per
    // second on Linux unless the kernel says otherwise).
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

/// The median (the mean of the two middle values for an even count).
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Nearest-rank percentile `p` (0..=100) of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Rounds to `digits` decimals (keeps the JSON lines readable).
pub fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// Prints JSON lines (and appends them to `BENCH_OUT` when set), and keeps
/// them for the closing table.
pub struct Emitter {
    common: Map<String, Value>,
    out: Option<PathBuf>,
    pub lines: Vec<Map<String, Value>>,
}

impl Emitter {
    pub fn new(common: Map<String, Value>, out: Option<PathBuf>) -> Self {
        Emitter {
            common,
            out,
            lines: Vec::new(),
        }
    }

    /// Emits one figure: `suite` and the common fields first, then `rec`.
    pub fn emit(&mut self, rec: Value) {
        let mut line = Map::new();
        line.insert("suite".into(), "echomq".into());
        line.extend(self.common.clone());
        if let Value::Object(m) = rec {
            line.extend(m);
        }
        // The machine is shared: say how busy it was.
        if let Some(load) = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()))
        {
            line.insert("loadavg_1m".into(), load.into());
        }
        let text = Value::Object(line.clone()).to_string();
        println!("{text}");
        if let Some(path) = &self.out {
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap_or_else(|e| panic!("BENCH_OUT={}: {e}", path.display()));
            writeln!(f, "{text}").expect("append to BENCH_OUT");
        }
        self.lines.push(line);
    }
}
