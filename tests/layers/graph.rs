//! The module graph's checks: its cycles (strongly connected components,
//! and the shortest cycle through each of their arrows) and the arrows
//! that run up a layer table.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;

use super::parse::Arrow;

/// The module graph: `from → to → the arrows` (in file and line order).
pub(crate) type Graph = BTreeMap<String, BTreeMap<String, Vec<Arrow>>>;

/// The graph of `arrows`.
pub(crate) fn graph(arrows: &[Arrow]) -> Graph {
    let mut g = Graph::new();
    for a in arrows {
        g.entry(a.from.clone())
            .or_default()
            .entry(a.to.clone())
            .or_default()
            .push(a.clone());
    }
    g
}

/// The strongly connected components of more than one module, each sorted.
fn components(g: &Graph) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = g.keys().chain(g.values().flat_map(|m| m.keys())).collect();
    let reach = |from: &String| -> BTreeSet<String> {
        let (mut seen, mut todo) = (BTreeSet::new(), vec![from.clone()]);
        while let Some(n) = todo.pop() {
            for next in g.get(&n).into_iter().flat_map(|m| m.keys()) {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> = nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for n in &nodes {
        let comp: Vec<String> = nodes
            .iter()
            .filter(|m| reaches[*n].contains(**m) && reaches[*m].contains(*n))
            .map(|m| (*m).clone())
            .collect();
        if comp.len() > 1 && !out.contains(&comp) {
            out.push(comp);
        }
    }
    out
}

/// Within each component, the shortest cycle through each of its arrows,
/// each once (rotated to start at its least module): every arrow that
/// takes part in a cycle lies on one of them. Returned as `a, b, …, a`.
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    let mut out = BTreeSet::new();
    for comp in components(g) {
        let inside = |n: &String| comp.contains(n);
        for a in &comp {
            for b in g[a].keys().filter(|b| inside(b)) {
                // Breadth-first from b back to a, inside the component.
                let mut prev: BTreeMap<String, String> = BTreeMap::new();
                let mut queue = VecDeque::from([b.clone()]);
                while let Some(n) = queue.pop_front() {
                    if &n == a {
                        break;
                    }
                    for next in g.get(&n).into_iter().flat_map(|m| m.keys()).filter(|m| inside(m)) {
                        if next != b && !prev.contains_key(next) {
                            prev.insert(next.clone(), n.clone());
                            queue.push_back(next.clone());
                        }
                    }
                }
                let mut path = vec![a.clone()];
                while path.last() != Some(b) {
                    path.push(prev[path.last().unwrap()].clone());
                }
                path.reverse(); // b … a
                path.insert(0, a.clone()); // a b … a
                path.pop();
                let least = (0..path.len()).min_by_key(|&k| &path[k]).unwrap();
                path.rotate_left(least);
                path.push(path[0].clone());
                out.insert(path);
            }
        }
    }
    let mut out: Vec<_> = out.into_iter().collect();
    out.sort_by_key(|c| (c.len(), c.clone()));
    out
}

/// How many elementary cycles `g` has (each counted once, from its least
/// module), stopping at `cap`: a figure of how tangled a component is.
fn count_cycles(g: &Graph, cap: usize) -> usize {
    fn walk(g: &Graph, start: &String, at: &String, path: &mut Vec<String>, count: &mut usize, cap: usize) {
        for next in g.get(at).into_iter().flat_map(|m| m.keys()) {
            if *count >= cap {
                return;
            }
            if next == start {
                *count += 1;
            } else if next > start && !path.contains(next) {
                path.push(next.clone());
                walk(g, start, next, path, count, cap);
                path.pop();
            }
        }
    }
    let mut count = 0;
    for start in g.keys() {
        walk(g, start, start, &mut vec![start.clone()], &mut count, cap);
    }
    count
}

/// Where `count_cycles` stops counting in a report.
const CYCLE_COUNT_CAP: usize = 1_000_000;

/// What `crate_has_no_import_cycle` prints: each component, and the cycles
/// with one `file:line` of each arrow. Empty when there is no cycle.
pub(crate) fn cycle_report(g: &Graph) -> String {
    let mut out = String::new();
    for comp in components(g) {
        let _ = writeln!(out, "{} modules in one import cycle: {}", comp.len(), comp.join(", "));
    }
    if !out.is_empty() {
        let n = count_cycles(g, CYCLE_COUNT_CAP);
        let more = if n >= CYCLE_COUNT_CAP { " or more" } else { "" };
        let _ = writeln!(
            out,
            "{n}{more} elementary cycles; the shortest through each arrow of a cycle:"
        );
    }
    for c in cycles(g) {
        let _ = writeln!(out, "cycle: {}", c.join(" -> "));
        for w in c.windows(2) {
            let a = &g[&w[0]][&w[1]][0];
            let _ = writeln!(out, "    {} -> {}: {}:{}", w[0], w[1], a.file, a.line);
        }
    }
    out
}

/// What `layers_are_obeyed` prints: every arrow from a lower layer to a
/// higher one (with every place it is written), every module the table
/// does not name, and every name of the table that is no module. Empty
/// when the table is obeyed.
pub(crate) fn layer_report(g: &Graph, modules: &BTreeSet<String>, layers: &[&[&str]]) -> String {
    let layer_of = |m: &str| layers.iter().position(|l| l.contains(&m));
    let mut out = String::new();
    for (from, tos) in g {
        for (to, arrows) in tos {
            let (Some(lf), Some(lt)) = (layer_of(from), layer_of(to)) else {
                continue;
            };
            if lt > lf {
                let mut at: Vec<String> = arrows.iter().map(|a| format!("{}:{}", a.file, a.line)).collect();
                at.dedup();
                let _ = writeln!(out, "up: {from} (layer {lf}) -> {to} (layer {lt}): {}", at.join(", "));
            }
        }
    }
    for m in modules.iter().filter(|m| layer_of(m).is_none()) {
        let _ = writeln!(out, "not in the layer table: {m}");
    }
    for m in layers.iter().flat_map(|l| l.iter()).filter(|m| !modules.contains(**m)) {
        let _ = writeln!(out, "in the layer table but not a module of src/: {m}");
    }
    out
}

fn arrow(from: &str, to: &str, line: usize) -> Arrow {
    Arrow {
        from: from.into(),
        to: to.into(),
        file: format!("src/{from}.rs"),
        line,
    }
}

// The cycle a -> b -> c -> a is found (with one place of each arrow); the arrows leading into and out of it are not part of it.
#[test]
fn finds_a_known_cycle() {
    let g = graph(&[
        arrow("a", "b", 1),
        arrow("b", "c", 2),
        arrow("c", "a", 3),
        arrow("d", "a", 4),
        arrow("c", "e", 5),
    ]);
    assert_eq!(components(&g), [["a", "b", "c"]]);
    assert_eq!(cycles(&g), [["a", "b", "c", "a"]]);
    assert_eq!(count_cycles(&g, 100), 1);
    let report = cycle_report(&g);
    assert!(report.contains("cycle: a -> b -> c -> a"), "{report}");
    assert!(report.contains("c -> a: src/c.rs:3"), "{report}");
    // Two cycles sharing b: each arrow lies on one reported cycle.
    let g = graph(&[
        arrow("a", "b", 1),
        arrow("b", "a", 2),
        arrow("b", "c", 3),
        arrow("c", "b", 4),
    ]);
    assert_eq!(cycles(&g), [["a", "b", "a"], ["b", "c", "b"]]);
    // With c -> a too: a-b-a, b-c-b, a-b-c-a.
    let mut g = g;
    g.entry("c".into())
        .or_default()
        .insert("a".into(), vec![arrow("c", "a", 5)]);
    assert_eq!(count_cycles(&g, 100), 3);
    assert_eq!(count_cycles(&g, 2), 2);
    let acyclic = graph(&[arrow("a", "b", 1), arrow("b", "c", 2), arrow("a", "c", 3)]);
    assert!(cycles(&acyclic).is_empty() && cycle_report(&acyclic).is_empty());
    assert_eq!(count_cycles(&acyclic, 100), 0);
}

// An arrow up the table, a module missing from it, and a name that is no module are reported; arrows down or within a layer are not.
#[test]
fn layer_violations_are_reported() {
    let g = graph(&[
        arrow("low", "high", 7),
        arrow("high", "low", 8),
        arrow("high", "peer", 9),
        arrow("z", "low", 1),
    ]);
    let modules: BTreeSet<String> = ["low", "high", "peer", "z"].map(String::from).into();
    let report = layer_report(&g, &modules, &[&["low"], &["high", "peer", "gone"]]);
    assert_eq!(
        report,
        "up: low (layer 0) -> high (layer 1): src/low.rs:7\nnot in the layer table: z\n\
         in the layer table but not a module of src/: gone\n"
    );
}
