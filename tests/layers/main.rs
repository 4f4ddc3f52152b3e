//! The import-cycle checker: reads the crate's `src/` tree, collects every
//! reference from one top-level module to another (`use crate::…` trees,
//! inline `crate::…` paths, `super::…` paths resolved, names re-exported
//! by `src/lib.rs` followed to their module), and fails on a cycle between
//! top-level modules or an import that runs up the layer table.
//!
//! Files within one top-level module may use each other freely; code under
//! `#[cfg(test)]` (tests may reach anywhere), comments and string literals
//! are not read. References to items defined in `src/lib.rs` itself, and
//! `src/lib.rs`'s own imports (the facade), are not arrows.
//!
//! `parse.rs` turns one file into arrows (a small lexer, the test-code
//! filter, use trees and path resolution), `graph.rs` checks the graph
//! (cycles, the layer table); each has its own tests on fixtures. Here:
//! the walk over `src/`, the layer table, and the checks of the real tree.
//! No dependencies, so this test binary builds in seconds.

mod graph;
mod parse;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use graph::{Graph, cycle_report, graph, layer_report};
use parse::{Arrow, Root, arrows_of};

/// The layers, lowest first: a module may use modules of its own layer or
/// of a lower one, never of a higher one. Every top-level module of `src/`
/// must be named. The crate docs (`src/lib.rs`, "Layers") and
/// ARCHITECTURE.md draw the same table.
const LAYERS: &[&[&str]] = &[
    // Foundations: the error type, the validation rules, key naming, the
    // negative controls' switch, and the guide (text only).
    &["error", "validate", "keys", "faults", "guide"],
    // Plain data, no I/O: a job's limits, the job as data, the lease,
    // settlements, the compressed payload format.
    &["limits", "job", "lease", "settlement", "compression"],
    // Trace context carried with a job (feature `otel`): a sink, no I/O.
    &["otel"],
    // The connection: single server, Sentinel, Cluster, TLS, durability
    // confirmations, the ACL an echomq user needs.
    &["conn", "durability", "acl"],
    // The store: the only code that knows KEYS, ARGV and reply codes.
    &["store"],
    // Queue: enqueue, claim/settle, inspect, over a link and an upkeep trait.
    &["queue"],
    // Features over Queue.
    &[
        "admin",
        "lanes",
        "throttle",
        "events",
        "schedule",
        "batch",
        "flow",
        "relay",
        "partition",
        "health",
        "metrics",
    ],
    // Maintenance services: reaper, sweep, looks, clock watch, scheduling passes.
    &["maintenance"],
    // The worker, handler adapters and kinds, and the handler-side effect tools.
    &["worker", "handlers", "kinds", "effect"],
    // Test support: inline drains, private servers.
    &["testing", "server"],
    // The top: the client wires the link and maintenance together.
    &["client"],
];

/// The module path of a file below `src/`: `a/b.rs` and `a/b/mod.rs` are
/// `a::b`, `lib.rs` is the root (empty).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".rs").to_owned();
    }
    if matches!(parts.last().map(String::as_str), Some("mod")) || parts == ["lib"] {
        parts.pop();
    }
    parts
}

/// Every `.rs` file below `dir`, as paths relative to it, sorted.
fn rust_files(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir.join(rel)).expect("read src/").flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let r = rel.join(e.file_name());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            rust_files(dir, &r, out);
        } else if r.extension().is_some_and(|x| x == "rs") {
            out.push(r);
        }
    }
}

/// Every arrow between the top-level modules of the crate at `crate_dir`,
/// and the top-level modules.
fn crate_arrows(crate_dir: &Path) -> (Vec<Arrow>, BTreeSet<String>) {
    let src = crate_dir.join("src");
    let mut files = Vec::new();
    rust_files(&src, Path::new(""), &mut files);
    let mut root = Root {
        modules: files
            .iter()
            .map(|f| module_path(f))
            .filter_map(|m| m.first().cloned())
            .collect(),
        exports: BTreeMap::new(),
    };
    root.read_exports(&std::fs::read_to_string(src.join("lib.rs")).expect("read src/lib.rs"));
    // Parents before children, so a test-only module is known before its files.
    files.sort_by_key(|f| (module_path(f).len(), f.clone()));
    let (mut arrows, mut test_only) = (Vec::new(), Vec::<Vec<String>>::new());
    for f in &files {
        let here = module_path(f);
        if test_only.iter().any(|t| here.starts_with(t)) {
            continue;
        }
        let source = std::fs::read_to_string(src.join(f)).expect("read a source file");
        let name = Path::new("src").join(f).display().to_string();
        let (a, test_mods) = arrows_of(&source, &name, &here, &root);
        arrows.extend(a);
        test_only.extend(test_mods.into_iter().map(|m| [here.clone(), vec![m]].concat()));
    }
    arrows.sort();
    (arrows, root.modules)
}

fn the_crate() -> (Graph, BTreeSet<String>) {
    let (arrows, modules) = crate_arrows(Path::new(env!("CARGO_MANIFEST_DIR")));
    (graph(&arrows), modules)
}

// No cycle between the crate's top-level modules (issue 23's layers).
#[test]
fn crate_has_no_import_cycle() {
    let (g, _) = the_crate();
    let report = cycle_report(&g);
    assert!(report.is_empty(), "import cycles between top-level modules:\n{report}");
}

// Every top-level module is in LAYERS, and none uses a module of a higher layer.
#[test]
fn layers_are_obeyed() {
    let (g, modules) = the_crate();
    let report = layer_report(&g, &modules, LAYERS);
    assert!(report.is_empty(), "the layer table is not obeyed:\n{report}");
}

// The walk reads the real tree: it finds the modules and arrows between
// them, so the two checks above cannot pass on nothing.
#[test]
fn the_real_tree_is_read() {
    let (arrows, modules) = crate_arrows(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(modules.len() > 3, "{modules:?}");
    assert!(!arrows.is_empty());
    assert!(
        arrows
            .iter()
            .all(|a| modules.contains(&a.from) && modules.contains(&a.to) && a.from != a.to)
    );
}

// Files map to module paths; lib.rs is the root.
#[test]
fn module_paths_of_files() {
    assert_eq!(module_path(Path::new("a/b.rs")), ["a", "b"]);
    assert_eq!(module_path(Path::new("a/b/mod.rs")), ["a", "b"]);
    assert_eq!(module_path(Path::new("a.rs")), ["a"]);
    assert!(module_path(Path::new("lib.rs")).is_empty());
}
