//! One file's arrows: the source blanked of comments and literals,
//! tokenised, stripped of test-only code, its `use` trees and inline paths
//! resolved to the top-level modules they reach.

use std::collections::{BTreeMap, BTreeSet};

/// A reference from code of one top-level module to another.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Arrow {
    pub(crate) from: String,
    pub(crate) to: String,
    /// The file (relative to the crate) and line it is written on.
    pub(crate) file: String,
    pub(crate) line: usize,
}

/// A token of blanked source: an identifier, `::`, `->`, `=>` or one
/// punctuation character, with its line.
#[derive(Debug, Clone, PartialEq)]
struct Tok {
    text: String,
    line: usize,
}

/// `src` with comments (`//`, `///`, `//!`, nested `/* */`) and string,
/// byte-string, raw-string and char literals replaced by spaces; newlines
/// stay, so lines keep their numbers.
fn blank(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    // Blank c[from..to], keeping newlines.
    let put = |out: &mut String, from: usize, to: usize| {
        for &ch in &c[from..to.min(c.len())] {
            out.push(if ch == '\n' { '\n' } else { ' ' });
        }
    };
    while i < c.len() {
        let at = |k: usize| c.get(i + k).copied().unwrap_or('\0');
        let word_before = i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
        if at(0) == '/' && at(1) == '/' {
            let end = (i..c.len()).find(|&k| c[k] == '\n').unwrap_or(c.len());
            put(&mut out, i, end);
            i = end;
        } else if at(0) == '/' && at(1) == '*' {
            let (mut k, mut depth) = (i + 2, 1);
            while k < c.len() && depth > 0 {
                if c[k] == '/' && c.get(k + 1) == Some(&'*') {
                    depth += 1;
                    k += 2;
                } else if c[k] == '*' && c.get(k + 1) == Some(&'/') {
                    depth -= 1;
                    k += 2;
                } else {
                    k += 1;
                }
            }
            put(&mut out, i, k);
            i = k;
        } else if !word_before && (at(0) == 'r' || (at(0) == 'b' && at(1) == 'r')) && {
            let s = if at(0) == 'b' { 2 } else { 1 };
            let hashes = (0..).take_while(|&h| at(s + h) == '#').count();
            at(s + hashes) == '"'
        } {
            // A raw string: r"…", r#"…"#, br"…".
            let s = if at(0) == 'b' { 2 } else { 1 };
            let hashes = (0..).take_while(|&h| at(s + h) == '#').count();
            let mut k = i + s + hashes + 1;
            while k < c.len() && !(c[k] == '"' && (1..=hashes).all(|h| c.get(k + h) == Some(&'#'))) {
                k += 1;
            }
            put(&mut out, i, k + 1 + hashes);
            i = k + 1 + hashes;
        } else if at(0) == '"' || (!word_before && matches!(at(0), 'b' | 'c') && at(1) == '"') {
            let mut k = i + if at(0) == '"' { 1 } else { 2 };
            while k < c.len() && c[k] != '"' {
                k += if c[k] == '\\' { 2 } else { 1 };
            }
            put(&mut out, i, k + 1);
            i = k + 1;
        } else if at(0) == '\'' && (at(1) == '\\' || at(2) == '\'') {
            // A char literal ('x', '\n', '\''); a lifetime ('a) has no closing quote.
            let mut k = i + 1;
            if at(1) == '\\' {
                k += 2;
                while k < c.len() && c[k] != '\'' {
                    k += 1;
                }
            } else {
                k += 1;
            }
            put(&mut out, i, k + 1);
            i = k + 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// The tokens of blanked source. `$crate` is read as `crate`, `r#name` as `name`.
fn tokens(blanked: &str) -> Vec<Tok> {
    let c: Vec<char> = blanked.chars().collect();
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphanumeric() || ch == '_' || (ch == '$' && c.get(i + 1).is_some_and(|n| n.is_alphabetic())) {
            let start = i;
            i += 1;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let mut text: String = c[start..i].iter().collect();
            if text == "r" && c.get(i) == Some(&'#') {
                // A raw identifier.
                let s = i + 1;
                i = s;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                text = c[s..i].iter().collect();
            }
            let text = if text == "$crate" { "crate".to_owned() } else { text };
            out.push(Tok { text, line });
        } else {
            let two: String = c[i..(i + 2).min(c.len())].iter().collect();
            let len = if matches!(two.as_str(), "::" | "->" | "=>") {
                2
            } else {
                1
            };
            out.push(Tok {
                text: c[i..i + len].iter().collect(),
                line,
            });
            i += len;
        }
    }
    out
}

/// Whether a `cfg` predicate (the tokens between its parentheses) holds
/// only in test builds: `test`, `all(…, test, …)`, `any(…)` of such.
fn test_only(pred: &[Tok]) -> bool {
    let Some(head) = pred.first() else { return false };
    if pred.len() == 1 {
        return head.text == "test";
    }
    if pred.get(1).map(|t| t.text.as_str()) != Some("(") {
        return false;
    }
    // Split the arguments at top-level commas.
    let inner = &pred[2..pred.len() - 1];
    let (mut args, mut depth, mut start) = (Vec::new(), 0, 0);
    for (k, t) in inner.iter().enumerate() {
        match t.text.as_str() {
            "(" => depth += 1,
            ")" => depth -= 1,
            "," if depth == 0 => {
                args.push(&inner[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    args.push(&inner[start..]);
    args.retain(|a| !a.is_empty());
    match head.text.as_str() {
        "all" => args.iter().any(|a| test_only(a)),
        "any" => !args.is_empty() && args.iter().all(|a| test_only(a)),
        _ => false,
    }
}

/// The tokens with every item under a test-only `#[cfg(…)]` removed, and
/// the names of the file modules declared that way (`#[cfg(test)] mod
/// tests;`), whose files are test code too. `#![cfg(test)]` drops all.
fn strip_test_code(toks: &[Tok]) -> (Vec<Tok>, Vec<String>) {
    let (mut out, mut test_mods, mut i) = (Vec::new(), Vec::new(), 0);
    let text = |k: usize| toks.get(k).map_or("", |t| t.text.as_str());
    // The end (exclusive) of the attribute opening at `k` (`#`), if it is one.
    let attr_end = |k: usize| -> Option<usize> {
        let open = if text(k + 1) == "!" { k + 2 } else { k + 1 };
        if text(k) != "#" || text(open) != "[" {
            return None;
        }
        let mut depth = 0;
        for (j, t) in toks.iter().enumerate().skip(open) {
            match t.text.as_str() {
                "[" | "(" | "{" => depth += 1,
                "]" | ")" | "}" => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(j + 1);
                    }
                }
                _ => {}
            }
        }
        None
    };
    while i < toks.len() {
        let Some(end) = attr_end(i) else {
            out.push(toks[i].clone());
            i += 1;
            continue;
        };
        let open = if text(i + 1) == "!" { i + 2 } else { i + 1 };
        let is_test = text(open + 1) == "cfg" && text(open + 2) == "(" && test_only(&toks[open + 3..end - 2]);
        if !is_test {
            out.extend_from_slice(&toks[i..end]);
            i = end;
            continue;
        }
        if text(i + 1) == "!" {
            return (Vec::new(), Vec::new());
        }
        // Skip the other attributes of the item, then the item itself.
        let mut k = end;
        while let Some(e) = attr_end(k) {
            k = e;
        }
        let item = k;
        let (mut depth, mut angle) = (0i32, 0i32);
        while k < toks.len() {
            let t = text(k);
            match t {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" if depth == 0 => break,
                ")" | "]" | "}" => depth -= 1,
                "<" if depth == 0 => angle += 1,
                ">" if depth == 0 => angle -= 1,
                _ => {}
            }
            k += 1;
            let done = depth == 0 && (t == ";" || t == "}" || (t == "," && angle <= 0));
            if done {
                break;
            }
        }
        // `mod NAME;` (visibility first, if any): a test-only file module.
        let words: Vec<&str> = (item..k).map(text).collect();
        if words.last() == Some(&";")
            && let Some(m) = words.iter().position(|w| *w == "mod")
        {
            test_mods.push(words[m + 1].to_owned());
        }
        i = k;
    }
    (out, test_mods)
}

/// One path of a `use` tree: its segments, its `as` name, whether it ends in `*`.
#[derive(Debug, Clone, PartialEq)]
struct Leaf {
    path: Vec<String>,
    alias: Option<String>,
    glob: bool,
    line: usize,
    /// Read from a `use` tree (not an inline path).
    in_use: bool,
}

/// Parses the use tree at `toks[*k..]` under `prefix` into `out`.
fn use_tree(toks: &[Tok], k: &mut usize, prefix: &[String], out: &mut Vec<Leaf>) {
    let text = |k: usize| toks.get(k).map_or("", |t| t.text.as_str());
    let mut path = prefix.to_vec();
    if text(*k) == "::" {
        *k += 1;
    }
    loop {
        match text(*k) {
            "{" => {
                *k += 1;
                while !matches!(text(*k), "}" | "" | ";") {
                    use_tree(toks, k, &path, out);
                    if text(*k) == "," {
                        *k += 1;
                    }
                }
                *k += 1;
                return;
            }
            "*" => {
                out.push(Leaf {
                    path,
                    alias: None,
                    glob: true,
                    line: toks[*k].line,
                    in_use: true,
                });
                *k += 1;
                return;
            }
            "" | ";" => return,
            seg => {
                let line = toks[*k].line;
                // `self` in a group names the group's own path.
                if seg != "self" || path.is_empty() {
                    path.push(seg.to_owned());
                }
                *k += 1;
                if text(*k) == "::" {
                    *k += 1;
                    continue;
                }
                let alias = (text(*k) == "as").then(|| text(*k + 1).to_owned());
                if alias.is_some() {
                    *k += 2;
                }
                out.push(Leaf {
                    path,
                    alias,
                    glob: false,
                    line,
                    in_use: true,
                });
                return;
            }
        }
    }
}

/// The absolute path (below the crate root) of `path` written in module
/// `here`, or `None` when it names an extern crate or a name in scope.
fn absolute(path: &[String], here: &[String]) -> Option<Vec<String>> {
    let (first, rest) = path.split_first()?;
    match first.as_str() {
        "crate" => Some(rest.to_vec()),
        "self" => Some([here, rest].concat()),
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let base = here.get(..here.len().checked_sub(ups)?)?;
            Some([base, &path[ups..]].concat())
        }
        _ => None,
    }
}

/// What the crate root offers: its top-level modules, and the module each
/// name it imports (`pub use x::Name;`, `use x::Name as Other;`) comes from.
#[derive(Debug, Default)]
pub(crate) struct Root {
    pub(crate) modules: BTreeSet<String>,
    pub(crate) exports: BTreeMap<String, String>,
}

impl Root {
    /// The top-level module an absolute path lands in, through the root's names.
    pub(crate) fn module_of(&self, abs: &[String]) -> Option<&str> {
        let first = abs.first()?;
        if let Some(m) = self.modules.get(first) {
            return Some(m);
        }
        self.exports.get(first).map(String::as_str)
    }

    /// Reads `src/lib.rs`'s imports into `exports`.
    pub(crate) fn read_exports(&mut self, lib_rs: &str) {
        let (toks, _) = strip_test_code(&tokens(&blank(lib_rs)));
        for leaf in collect(&toks, &[]).0.into_iter().filter(|l| l.in_use) {
            let first = leaf.path.first().map(String::as_str);
            let first = if first == Some("crate") {
                leaf.path.get(1)
            } else {
                leaf.path.first()
            };
            let Some(module) = first.filter(|m| self.modules.contains(*m)) else {
                continue;
            };
            let name = leaf.alias.clone().or_else(|| leaf.path.last().cloned());
            if let Some(name) = name.filter(|n| !leaf.glob && n != module) {
                self.exports.insert(name, module.clone());
            }
        }
    }
}

/// Every path of file module `here` that may name another module: the
/// leaves of its `use` trees, and inline `crate::`/`super::`/`self::`
/// paths, each with the module path (inline `mod x { … }` included) it
/// is written in.
fn collect(toks: &[Tok], here: &[String]) -> (Vec<Leaf>, Vec<Vec<String>>) {
    let text = |k: usize| toks.get(k).map_or("", |t| t.text.as_str());
    let (mut leaves, mut wheres) = (Vec::new(), Vec::new());
    // Open inline modules: (name, brace depth inside them).
    let (mut stack, mut depth): (Vec<(String, usize)>, usize) = (Vec::new(), 0);
    let module = |stack: &[(String, usize)]| -> Vec<String> {
        here.iter()
            .cloned()
            .chain(stack.iter().map(|(n, _)| n.clone()))
            .collect()
    };
    let mut k = 0;
    while k < toks.len() {
        match text(k) {
            "{" => depth += 1,
            "}" => {
                if stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                }
                depth = depth.saturating_sub(1);
            }
            "mod" if text(k + 2) == "{" => {
                stack.push((text(k + 1).to_owned(), depth + 1));
                depth += 1;
                k += 3;
                continue;
            }
            "use" => {
                k += 1;
                let before = leaves.len();
                use_tree(toks, &mut k, &[], &mut leaves);
                wheres.resize(wheres.len() + leaves.len() - before, module(&stack));
                continue;
            }
            "crate" | "super" | "self" if text(k + 1) == "::" && text(k.wrapping_sub(1)) != "::" => {
                let (line, mut path) = (toks[k].line, Vec::new());
                while matches!(text(k + 1), "::") && !matches!(text(k), "::") {
                    path.push(text(k).to_owned());
                    k += 2;
                    if !text(k).starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                        break;
                    }
                }
                if text(k).starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                    path.push(text(k).to_owned());
                }
                leaves.push(Leaf {
                    path,
                    alias: None,
                    glob: false,
                    line,
                    in_use: false,
                });
                wheres.push(module(&stack));
            }
            _ => {}
        }
        k += 1;
    }
    (leaves, wheres)
}

/// The arrows out of one file of module `here` (its path below the root).
pub(crate) fn arrows_of(source: &str, file: &str, here: &[String], root: &Root) -> (Vec<Arrow>, Vec<String>) {
    let (toks, test_mods) = strip_test_code(&tokens(&blank(source)));
    let Some(from) = here.first() else {
        return (Vec::new(), test_mods);
    };
    let (leaves, wheres) = collect(&toks, here);
    let mut out = Vec::new();
    for (leaf, module) in leaves.iter().zip(&wheres) {
        let Some(abs) = absolute(&leaf.path, module) else {
            continue;
        };
        if let Some(to) = root.module_of(&abs).filter(|to| to != from) {
            out.push(Arrow {
                from: from.clone(),
                to: to.to_owned(),
                file: file.to_owned(),
                line: leaf.line,
            });
        }
    }
    (out, test_mods)
}

fn root() -> Root {
    let mut r = Root {
        modules: ["a", "b", "c", "d", "e", "f", "g", "k", "q", "kinds"]
            .map(String::from)
            .into(),
        ..Root::default()
    };
    r.read_exports("pub use q::{Queue, Options as QOpts};\npub use redis;\nuse crate::b::Hidden;\npub fn local() {}\n");
    r
}

/// `(to, line)` of each arrow out of `source`, written in module `here`.
fn refs(source: &str, here: &str) -> Vec<(String, usize)> {
    let here: Vec<String> = here.split("::").map(String::from).collect();
    arrows_of(source, "x.rs", &here, &root())
        .0
        .into_iter()
        .map(|a| (a.to, a.line))
        .collect()
}

fn to(pairs: &[(&str, usize)]) -> Vec<(String, usize)> {
    pairs.iter().map(|(m, l)| ((*m).to_owned(), *l)).collect()
}

// Grouped and nested use trees across lines give one arrow per leaf, on the leaf's line.
#[test]
fn grouped_uses_across_lines() {
    let src = "use crate::{a::A, b::{B, C}};\nuse crate::{\n    c::{self, x::{Y, Z}},\n    d::*,\n    e::E as F,\n};\nuse std::io;\n";
    assert_eq!(
        refs(src, "z"),
        to(&[
            ("a", 1),
            ("b", 1),
            ("b", 1),
            ("c", 3),
            ("c", 3),
            ("c", 3),
            ("d", 4),
            ("e", 5)
        ])
    );
}

// Paths written in code count; comments, doc comments and strings (raw, byte, with quotes) do not.
#[test]
fn inline_paths_but_not_comments_or_strings() {
    let src = "// use crate::a::X;\n/// [`crate::b::Y`]\n//! crate::c\n/* crate::d /* crate::e */ crate::d */\n\
               fn f<'a>(s: &'a str) -> char { let _ = \"crate::a \\\" crate::b\"; let _ = r#\"a \" crate::c \"#;\n\
               let _ = b\"crate::d\"; let q = '\"'; crate::f::g(crate::g::H); $crate::k::m!(); q }\n";
    assert_eq!(refs(src, "z"), to(&[("f", 6), ("g", 6), ("k", 6)]));
}

// super:: resolves from the file's module (and inline modules); a path inside the same top-level module is no arrow.
#[test]
fn super_paths_resolve() {
    let src = "use super::super::k::K;\nuse super::inner::X;\nfn f() { super::super::a::g(); }\n\
               mod inner2 {\n    use super::super::super::b::B;\n}\nuse self::x::Y;\n";
    assert_eq!(refs(src, "q::settle"), to(&[("k", 1), ("a", 3), ("b", 5)]));
    assert_eq!(refs("use super::kinds::Raw;\n", "lease"), to(&[("kinds", 1)]));
}

// A name the root imports leads to its module; extern crates and the root's own items lead nowhere.
#[test]
fn root_names_lead_to_their_module() {
    let src = "use crate::Queue;\nfn f() -> crate::QOpts { crate::local(); crate::redis::cmd(\"x\"); crate::Hidden }\n";
    assert_eq!(refs(src, "z"), to(&[("q", 1), ("q", 2), ("b", 2)]));
}

// Code under a test-only cfg is not read; any(test, feature) and not(test) code is.
#[test]
fn test_code_is_skipped() {
    let src = "#[cfg(test)]\nmod tests {\n    use crate::a::X;\n    mod inner { fn f() { crate::b::y(); } }\n}\n\
               #[cfg(all(test, feature = \"x\"))]\n#[allow(unused)]\nuse crate::c::{Z, W};\n\
               #[cfg(any(test, feature = \"x\"))]\nuse crate::d::W;\n#[cfg(not(test))]\nuse crate::e::V;\n\
               #[cfg(test)]\nfn helper<A, B>(a: A, b: B) { crate::a::f(); }\n\
               struct S {\n    #[cfg(test)]\n    x: crate::a::A,\n    y: crate::f::F,\n}\n#[cfg(test)]\nmod more;\n";
    assert_eq!(refs(src, "z"), to(&[("d", 10), ("e", 12), ("f", 18)]));
    let (_, test_mods) = strip_test_code(&tokens(&blank(src)));
    assert_eq!(test_mods, ["more"]);
    assert!(refs("#![cfg(test)]\nuse crate::a::X;\n", "z").is_empty());
}
