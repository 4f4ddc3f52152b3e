//! The scripts' contract as the tests read it: `lua/README.md` (the
//! contract index) parsed, the scripts' `REPLY:` headers, and a small Lua
//! reader that finds what the Lua code really touches (the job-hash fields
//! it reads and writes, the names each file uses and defines), so that the
//! tests below hold the index, the scripts and the Rust side to each other.
//!
//! [`reply_shapes`] is the parsed table of every script's reply, for
//! checking a Rust decoder against the shape it decodes.

use std::collections::BTreeMap;
use std::fmt;

mod fields;
mod lua;
#[cfg(test)]
mod tests;

/// The contract index.
pub(crate) const README: &str = include_str!("../../lua/README.md");

// ---------------------------------------------------------------------------
// Reply shapes
// ---------------------------------------------------------------------------

/// What one reply item holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    /// An integer, sent as an integer or as a decimal string.
    Int,
    /// An integer, or "" for none.
    OptInt,
    /// Bytes (text, JSON, a cursor).
    Str,
    /// A reply code (`src/scripts/codes.rs`).
    Code,
}

/// A named reply item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub name: String,
    pub ty: Ty,
}

/// A part of an array reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    Item(Item),
    /// `(…)*`: the group again and again (how often, the request or the
    /// reply's end says).
    Repeat(Vec<Part>),
    /// `[…]`: present or not, as the text describing the script says.
    Optional(Vec<Part>),
}

/// A script's reply: `name:type` (not an array) or `{part, …}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Shape {
    Scalar(Item),
    Array(Vec<Part>),
}

impl Shape {
    /// Parses the form the `REPLY:` headers and `lua/README.md` use:
    /// `{now:int, (id:str, code:code)*, [more:int?]}` or `version:str`.
    pub(crate) fn parse(text: &str) -> Result<Shape, String> {
        let tokens = shape_tokens(text)?;
        let mut at = 0;
        let shape = if tokens.first().map(String::as_str) == Some("{") {
            at = 1;
            Shape::Array(parse_parts(&tokens, &mut at, "}")?)
        } else {
            Shape::Scalar(parse_item(&tokens, &mut at)?)
        };
        if at != tokens.len() {
            return Err(format!("{text:?}: unexpected {:?}", &tokens[at..]));
        }
        Ok(shape)
    }

    /// The array's parts (none for a scalar reply).
    pub(crate) fn parts(&self) -> &[Part] {
        match self {
            Shape::Array(parts) => parts,
            Shape::Scalar(_) => &[],
        }
    }
}

fn shape_tokens(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() || c == ',' {
            chars.next();
        } else if "{}()[]*:?".contains(c) {
            out.push(c.to_string());
            chars.next();
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let mut word = String::new();
            while let Some(&c) = chars.peek().filter(|c| c.is_ascii_alphanumeric() || **c == '_') {
                word.push(c);
                chars.next();
            }
            out.push(word);
        } else {
            return Err(format!("{text:?}: unexpected {c:?}"));
        }
    }
    Ok(out)
}

fn parse_item(tokens: &[String], at: &mut usize) -> Result<Item, String> {
    let word = |i: usize| tokens.get(i).map(String::as_str).unwrap_or("");
    let name = word(*at).to_owned();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || word(*at + 1) != ":" {
        return Err(format!(
            "expected name:type at {:?}",
            &tokens[(*at).min(tokens.len())..]
        ));
    }
    let mut ty = match word(*at + 2) {
        "int" => Ty::Int,
        "str" => Ty::Str,
        "code" => Ty::Code,
        other => return Err(format!("{name}: unknown type {other:?} (int, int?, str, code)")),
    };
    *at += 3;
    if word(*at) == "?" {
        if ty != Ty::Int {
            return Err(format!("{name}: only int may be optional"));
        }
        ty = Ty::OptInt;
        *at += 1;
    }
    Ok(Item { name, ty })
}

fn parse_parts(tokens: &[String], at: &mut usize, close: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    loop {
        match tokens.get(*at).map(String::as_str) {
            None => return Err(format!("missing {close:?}")),
            Some(t) if t == close => {
                *at += 1;
                return Ok(parts);
            }
            Some("(") => {
                *at += 1;
                let group = parse_parts(tokens, at, ")")?;
                if tokens.get(*at).map(String::as_str) != Some("*") {
                    return Err("a group (…) must be repeated: (…)*".into());
                }
                *at += 1;
                parts.push(Part::Repeat(group));
            }
            Some("[") => {
                *at += 1;
                parts.push(Part::Optional(parse_parts(tokens, at, "]")?));
            }
            Some(_) => parts.push(Part::Item(parse_item(tokens, at)?)),
        }
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ty::Int => "int",
            Ty::OptInt => "int?",
            Ty::Str => "str",
            Ty::Code => "code",
        })
    }
}

fn write_parts(f: &mut fmt::Formatter<'_>, parts: &[Part]) -> fmt::Result {
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        match p {
            Part::Item(it) => write!(f, "{}:{}", it.name, it.ty)?,
            Part::Repeat(g) => {
                f.write_str("(")?;
                write_parts(f, g)?;
                f.write_str(")*")?;
            }
            Part::Optional(g) => {
                f.write_str("[")?;
                write_parts(f, g)?;
                f.write_str("]")?;
            }
        }
    }
    Ok(())
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Scalar(it) => write!(f, "{}:{}", it.name, it.ty),
            Shape::Array(parts) => {
                f.write_str("{")?;
                write_parts(f, parts)?;
                f.write_str("}")
            }
        }
    }
}

/// The `REPLY:` block of a script's header: the text after `-- REPLY:`,
/// with the comment lines that continue it until its brackets close.
pub(crate) fn header_reply(source: &str) -> Option<String> {
    let mut lines = source.lines().take_while(|l| l.starts_with("--"));
    let first = lines.find_map(|l| l.strip_prefix("-- REPLY:"))?;
    let mut text = first.trim().to_owned();
    let open = |t: &str| t.matches(['{', '(', '[']).count() as i64 - t.matches(['}', ')', ']']).count() as i64;
    while open(&text) > 0 {
        let next = lines.next()?;
        text.push(' ');
        text.push_str(next.trim_start_matches('-').trim());
    }
    Some(text)
}

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
