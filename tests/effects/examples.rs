//! The examples' readouts (`delivery_modes`, `crash_window`,
//! `idempotent_consumer`, `effect_worker` under SIGKILLs), run as
//! processes.

use std::process::Command;

// delivery_modes: a crash loses the job under at-most-once (1 lost, never run again) and runs it twice under at-least-once (0 lost).
#[test]
fn delivery_modes_readout() {
    let r = run_example("delivery_modes", &[]);
    let rows: Vec<(String, String, u64, i64, u64)> = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["mode"].as_str().unwrap().to_owned(),
                row["crash"].as_str().unwrap().to_owned(),
                row["deliveries"].as_u64().unwrap(),
                row["runs"].as_i64().unwrap(),
                row["lost"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = [
        ("at-most-once", "before the effect", 1, 0, 1),
        ("at-most-once", "after the effect, before the ack", 1, 1, 0),
        ("at-least-once", "before the effect", 2, 1, 0),
        ("at-least-once", "after the effect, before the ack", 2, 2, 0),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|&(m, c, d, n, l)| (m.to_owned(), c.to_owned(), d, n, l))
        .collect();
    assert_eq!(rows, want);
}

// crash_window: only a crash between the effect and its record duplicates; asking the provider or atomic completion never does.
#[test]
fn crash_window_readout() {
    let r = run_example("crash_window", &[]);
    let plain: Vec<(&str, i64)> = r["plain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| (row["crash"].as_str().unwrap(), row["effects"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        plain,
        [
            ("after lease", 1),
            ("after effect", 2),
            ("after complete", 1),
            ("no crash", 1)
        ]
    );
    let marker: Vec<(&str, i64, i64)> = r["marker"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let n = |k: &str| row[k].as_i64().unwrap();
            (row["crash"].as_str().unwrap(), n("redo"), n("ask"))
        })
        .collect();
    assert_eq!(
        marker,
        [
            ("after lease", 1, 1),
            ("after marker claim", 1, 1),
            ("after effect", 2, 1),
            ("after mark done", 1, 1),
            ("after complete", 1, 1),
            ("no crash", 1, 1),
        ]
    );
    let atomic: Vec<i64> = r["atomic"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["effects"].as_i64().unwrap())
        .collect();
    assert_eq!(atomic, [1, 1, 1]);
}

// idempotent_consumer: replaying a job 1, 2, 3 times multiplies a naive consumer's effects and leaves the idempotent ones at 1.
#[test]
fn idempotent_consumer_readout() {
    let r = run_example("idempotent_consumer", &[]);
    let rows: Vec<[i64; 4]> = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| ["deliveries", "non_idempotent", "marker", "atomic"].map(|k| row[k].as_i64().unwrap()))
        .collect();
    assert_eq!(rows, [[1, 1, 1, 1], [2, 2, 1, 1], [3, 3, 1, 1]]);
}

// Under random SIGKILLs of worker processes, every job completes and its marker-guarded external effect happens exactly once.
#[test]
fn effects_under_kills_are_exactly_once_with_the_marker() {
    let jobs = 300;
    let r = run_example("effect_worker", &["--jobs", &jobs.to_string()]);
    let run = |mode: &str| {
        r["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|run| run["mode"] == mode)
            .unwrap()
            .clone()
    };
    let n = |run: &serde_json::Value, k: &str| run[k].as_u64().unwrap();
    let (guarded, unguarded) = (run("guarded"), run("unguarded"));
    assert!(n(&guarded, "kills") > 0, "{guarded}");
    assert_eq!(n(&guarded, "completed"), jobs, "{guarded}");
    assert_eq!(
        (n(&guarded, "once"), n(&guarded, "missing"), n(&guarded, "duplicated")),
        (jobs, 0, 0),
        "seed {}: {guarded}",
        r["seed"]
    );
    assert_eq!(n(&guarded, "effects"), jobs);
    // Without the marker nothing is lost either (at-least-once); duplicates depend on where kills land.
    assert_eq!(n(&unguarded, "completed"), jobs, "{unguarded}");
    assert_eq!(n(&unguarded, "missing"), 0, "{unguarded}");
}

/// Runs an example binary (building it if needed) and returns its
/// `readout: {json}` line. The example starts its own private server.
fn run_example(name: &str, args: &[&str]) -> serde_json::Value {
    // scripts/test and CI run `cargo test --all-features`, which has built
    // the examples already: with the same features this build is a no-op.
    let features = "--all-features";
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build = Command::new(cargo)
        // --workspace, as scripts/test's `cargo test --workspace`: the same
        // features unify, so the example it built is reused (with the root
        // package alone, redis, rcgen and echomq were rebuilt: 16 s).
        .args([
            "build",
            "--quiet",
            "--workspace",
            "--message-format=json",
            "--example",
            name,
            features,
        ])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .expect("run cargo build");
    assert!(
        build.status.success(),
        "building example {name} failed:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let exe = String::from_utf8_lossy(&build.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["target"]["name"] == name)
        .find_map(|m| m["executable"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("cargo did not report the {name} executable"));
    let out = Command::new(&exe)
        .args(args)
        .env_remove("ECHOMQ_URL")
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{stdout}");
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("readout: "))
        .unwrap_or_else(|| panic!("{name} printed no readout:\n{stdout}"));
    serde_json::from_str(line).unwrap()
}
