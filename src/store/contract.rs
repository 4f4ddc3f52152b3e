//! The scripts' contract as the tests read it: `lua/README.md` (the
//! contract index) parsed, the scripts' `REPLY:` headers, and a small Lua
//! reader that finds what the Lua code really touches (the job-hash fields
//! it reads and writes, the names each file uses and defines), so that the
//! tests below hold the index, the scripts and the Rust side to each other.
//!
//! [`reply_shapes`] is the parsed table of every script's reply, for
//! checking a Rust decoder against the shape it decodes.

use std::collections::BTreeMap;

mod fields;
mod lua;
#[cfg(test)]
mod tests;

/// The contract index.
pub(crate) const README: &str = include_str!("../../lua/README.md");

pub(crate) use super::shape::{Part, Shape, header_reply};

// ---------------------------------------------------------------------------
// lua/README.md
// ---------------------------------------------------------------------------

/// The text of the README's section `## title`, up to the next `## `.
fn section(title: &str) -> &'static str {
    let head = format!("\n## {title}\n");
    let start = README
        .find(&head)
        .unwrap_or_else(|| panic!("lua/README.md has no section {title:?}"))
        + head.len();
    let end = README[start..].find("\n## ").map_or(README.len(), |e| start + e);
    &README[start..end]
}

/// The cells of the markdown table rows in `text` (header and rule rows
/// left out), backticks removed.
fn table_rows(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut header_seen = false;
    for line in text.lines().map(str::trim) {
        if !line.starts_with('|') {
            header_seen = false;
            continue;
        }
        let cells: Vec<String> = line
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().replace('`', ""))
            .collect();
        if cells
            .iter()
            .all(|c| c.chars().all(|ch| ch == '-' || ch == ':' || ch == ' '))
        {
            continue;
        }
        if !header_seen {
            header_seen = true;
            continue;
        }
        rows.push(cells);
    }
    rows
}

/// One script's section of `lua/README.md`.
#[derive(Debug)]
pub(crate) struct ScriptDoc {
    pub keys: Vec<String>,
    /// A `KEYS[n..]` row follows the named keys.
    pub more_keys: bool,
    pub args: Vec<String>,
    pub reply: String,
    pub lib: Vec<String>,
}

/// Every script's section of `lua/README.md` ("## Scripts", one `### name`
/// each), by name.
pub(crate) fn script_docs() -> BTreeMap<String, ScriptDoc> {
    let mut out = BTreeMap::new();
    for chunk in section("Scripts").split("\n### ").skip(1) {
        let name = chunk.lines().next().unwrap().trim().trim_matches('`').to_owned();
        let mut doc = ScriptDoc {
            keys: Vec::new(),
            more_keys: false,
            args: Vec::new(),
            reply: String::new(),
            lib: Vec::new(),
        };
        for row in table_rows(chunk) {
            let (what, index) = match row[0].split_once('[') {
                Some((w, rest)) => (w, rest.trim_end_matches(']')),
                None => continue,
            };
            let list = match what {
                "KEYS" => &mut doc.keys,
                "ARGV" => &mut doc.args,
                _ => continue,
            };
            if let Ok(n) = index.parse::<usize>() {
                assert_eq!(n, list.len() + 1, "{name}: {} out of order", row[0]);
                list.push(row[1].clone());
            } else if what == "KEYS" && index.ends_with("..") {
                doc.more_keys = true;
            }
        }
        for line in chunk.lines() {
            if let Some(r) = line.strip_prefix("Reply: ") {
                doc.reply = r.trim().trim_matches('`').to_owned();
            } else if let Some(l) = line.strip_prefix("Lib: ") {
                doc.lib = l
                    .trim()
                    .trim_end_matches('.')
                    .split(',')
                    .map(|s| s.trim().trim_matches('`').to_owned())
                    .filter(|s| !s.is_empty() && s != "none")
                    .collect();
            }
        }
        assert!(!doc.reply.is_empty(), "{name}: no `Reply:` line in lua/README.md");
        out.insert(name, doc);
    }
    out
}

/// Every script's reply shape, by script name, as `lua/README.md` lists
/// them (each script's `REPLY:` header says the same: a test checks it).
pub(crate) fn reply_shapes() -> BTreeMap<String, Shape> {
    script_docs()
        .into_iter()
        .map(|(name, doc)| {
            let shape = Shape::parse(&doc.reply).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, shape)
        })
        .collect()
}

/// The job hash's fields, as the README's "Job hash" table lists them.
pub(crate) fn schema_fields() -> Vec<String> {
    table_rows(section("Job hash"))
        .into_iter()
        .map(|r| r[0].clone())
        .collect()
}

/// The reply codes, as the README's "Reply codes" table lists them.
pub(crate) fn readme_codes() -> Vec<(String, i64)> {
    table_rows(section("Reply codes"))
        .into_iter()
        .map(|r| (r[0].clone(), r[1].parse().expect("a code's number")))
        .collect()
}

/// The lib files, as the README's "The library" table lists them.
pub(crate) fn readme_lib() -> Vec<String> {
    table_rows(section("The library"))
        .into_iter()
        .filter_map(|r| Some(r[0].strip_prefix("lib/")?.strip_suffix(".lua")?.to_owned()))
        .collect()
}
