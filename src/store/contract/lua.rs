//! A small Lua reader, enough of Lua for echomq's scripts: their tokens,
//! the names a chunk defines and uses (to check the lib files' order and
//! `Needs:` lines, and count locals and upvalues), and the job-hash fields
//! the code reads and writes. A construct it does not know is a test
//! failure, not a guess.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    Name(String),
    Str(String),
    Num(String),
    Punct(&'static str),
}

/// A token and the line it is on.
#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub tok: Tok,
    pub line: usize,
}

const PUNCT: &[&str] = &[
    "...", "..", "==", "~=", "<=", ">=", "+", "-", "*", "/", "%", "^", "#", "<", ">", "=", "(", ")", "{", "}", "[",
    "]", ";", ":", ",", ".",
];

/// Lua's tokens, comments left out.
pub(crate) fn lua_tokens(source: &str) -> Vec<Token> {
    let b = source.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let long_close = |from: usize| -> Option<(usize, usize)> {
        // `[[` or `[==[` at `from`: where its body starts and its closing.
        let eq = b[from + 1..].iter().take_while(|c| **c == b'=').count();
        if b.get(from + 1 + eq) != Some(&b'[') {
            return None;
        }
        let close = format!("]{}]", "=".repeat(eq));
        let body = from + eq + 2;
        let end = source[body..].find(&close).map(|e| body + e)?;
        Some((body, end + close.len()))
    };
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if source[i..].starts_with("--") {
            if b.get(i + 2) == Some(&b'[')
                && let Some((_, end)) = long_close(i + 2)
            {
                line += source[i..end].matches('\n').count();
                i = end;
            } else {
                i = source[i..].find('\n').map_or(b.len(), |e| i + e);
            }
        } else if c == b'\'' || c == b'"' {
            let mut s = String::new();
            let mut j = i + 1;
            while j < b.len() && b[j] != c {
                if b[j] == b'\\' {
                    j += 1;
                }
                let ch = source[j..].chars().next().unwrap();
                s.push(ch);
                j += ch.len_utf8();
            }
            out.push(Token { tok: Tok::Str(s), line });
            i = j + 1;
        } else if c == b'['
            && let Some((body, end)) = long_close(i)
        {
            out.push(Token {
                tok: Tok::Str(source[body..end - 2].to_owned()),
                line,
            });
            line += source[i..end].matches('\n').count();
            i = end;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let end = i + b[i..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .count();
            out.push(Token {
                tok: Tok::Name(source[i..end].to_owned()),
                line,
            });
            i = end;
        } else if c.is_ascii_digit() {
            // digits (hex too), a fraction and an exponent; never `..`
            let mut end = i;
            while end < b.len()
                && (b[end].is_ascii_alphanumeric()
                    || (b[end] == b'.' && b.get(end + 1).is_some_and(u8::is_ascii_digit)))
            {
                end += 1;
            }
            out.push(Token {
                tok: Tok::Num(source[i..end].to_owned()),
                line,
            });
            i = end;
        } else {
            let p = PUNCT
                .iter()
                .find(|p| source[i..].starts_with(**p))
                .unwrap_or_else(|| panic!("line {line}: unexpected {:?}", c as char));
            out.push(Token {
                tok: Tok::Punct(p),
                line,
            });
            i += p.len();
        }
    }
    out
}

const KEYWORDS: &[&str] = &[
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in", "local", "nil", "not", "or",
    "repeat", "return", "then", "true", "until", "while",
];

/// What the scripts may use without defining it: Lua's and the server's.
const GLOBALS: &[&str] = &[
    "redis", "cjson", "bit", "string", "math", "table", "tonumber", "tostring", "type", "pairs", "ipairs", "unpack",
    "pcall", "error", "select", "next", "KEYS", "ARGV",
];

pub(crate) fn is_name(t: &Token, name: &str) -> bool {
    matches!(&t.tok, Tok::Name(n) if n == name)
}

pub(crate) fn is_punct(t: Option<&Token>, p: &str) -> bool {
    matches!(t, Some(Token { tok: Tok::Punct(q), .. }) if *q == p)
}

/// For each token, the index just past the `end` (or `until`) of the block
/// it opens (`function`, `if`, `do`, `repeat`), else 0.
fn block_ends(toks: &[Token]) -> Vec<usize> {
    let mut ends = vec![0; toks.len()];
    let mut open = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        if let Tok::Name(n) = &t.tok {
            match n.as_str() {
                "function" | "if" | "do" | "repeat" => open.push(i),
                "end" | "until" => {
                    let o = open.pop().unwrap_or_else(|| panic!("line {}: unbalanced {n}", t.line));
                    ends[o] = i + 1;
                }
                _ => {}
            }
        }
    }
    assert!(open.is_empty(), "a block is not closed");
    ends
}

/// The block depth (`function`/`if`/`do`/`repeat` … `end`) before each token.
fn depths(toks: &[Token]) -> Vec<usize> {
    let mut d = 0usize;
    toks.iter()
        .map(|t| {
            let here = d;
            match &t.tok {
                Tok::Name(n) if matches!(n.as_str(), "function" | "if" | "do" | "repeat") => d += 1,
                Tok::Name(n) if matches!(n.as_str(), "end" | "until") => d -= 1,
                _ => {}
            }
            here
        })
        .collect()
}

/// A name a chunk defines at its top level, and the token that defines it.
#[derive(Debug)]
pub(crate) struct Def {
    pub name: String,
    pub at: usize,
    /// The defining function's tokens, for `local function`.
    pub body: Option<std::ops::Range<usize>>,
}

/// The `local`s at the top level of a chunk.
pub(crate) fn top_level_defs(toks: &[Token]) -> Vec<Def> {
    let depth = depths(toks);
    let ends = block_ends(toks);
    let mut out = Vec::new();
    for i in 0..toks.len() {
        if depth[i] != 0 || !is_name(&toks[i], "local") {
            continue;
        }
        if toks.get(i + 1).is_some_and(|t| is_name(t, "function")) {
            if let Some(Tok::Name(n)) = toks.get(i + 2).map(|t| &t.tok) {
                out.push(Def {
                    name: n.clone(),
                    at: i + 2,
                    body: Some(i + 1..ends[i + 1]),
                });
            }
            continue;
        }
        let mut j = i + 1;
        while let Some(Tok::Name(n)) = toks.get(j).map(|t| &t.tok) {
            out.push(Def {
                name: n.clone(),
                at: j,
                body: None,
            });
            if !is_punct(toks.get(j + 1), ",") {
                break;
            }
            j += 2;
        }
    }
    out
}

/// Every name the tokens declare (locals at any depth, function
/// parameters, loop variables).
fn declared(toks: &[Token]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let names_from = |mut j: usize, out: &mut BTreeSet<String>| {
        while let Some(Tok::Name(n)) = toks.get(j).map(|t| &t.tok) {
            if KEYWORDS.contains(&n.as_str()) {
                break;
            }
            out.insert(n.clone());
            if !is_punct(toks.get(j + 1), ",") {
                break;
            }
            j += 2;
        }
    };
    for (i, t) in toks.iter().enumerate() {
        let Tok::Name(n) = &t.tok else { continue };
        match n.as_str() {
            "local" => {
                let j = if toks.get(i + 1).is_some_and(|t| is_name(t, "function")) {
                    i + 2
                } else {
                    i + 1
                };
                names_from(j, &mut out);
            }
            "for" => names_from(i + 1, &mut out),
            "function" => {
                let open = (i..toks.len()).find(|&j| is_punct(toks.get(j), "(")).unwrap();
                names_from(open + 1, &mut out);
            }
            _ => {}
        }
    }
    out
}

/// The names the tokens use as variables (not fields after `.` or `:`,
/// not keys of a table constructor, not keywords), with their positions.
pub(crate) fn used(toks: &[Token]) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut braces = 0usize;
    for (i, t) in toks.iter().enumerate() {
        match &t.tok {
            Tok::Punct("{") => braces += 1,
            Tok::Punct("}") => braces = braces.saturating_sub(1),
            Tok::Name(n) if !KEYWORDS.contains(&n.as_str()) => {
                let prev = i.checked_sub(1).and_then(|p| toks.get(p));
                if is_punct(prev, ".") || is_punct(prev, ":") {
                    continue;
                }
                let key = braces > 0
                    && is_punct(toks.get(i + 1), "=")
                    && (is_punct(prev, "{") || is_punct(prev, ",") || is_punct(prev, ";"));
                if !key {
                    out.push((n.clone(), i));
                }
            }
            _ => {}
        }
    }
    out
}

/// The top-level names of other lib files that `toks` uses: name → the
/// file that defines it (`defs`: name → file).
pub(crate) fn needs(toks: &[Token], defs: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String> {
    let own = declared(toks);
    let mut out = BTreeMap::new();
    for (n, i) in used(toks) {
        if own.contains(&n) || GLOBALS.contains(&n.as_str()) {
            continue;
        }
        match defs.get(&n) {
            Some(file) => {
                out.insert(n, file.clone());
            }
            None => return Err(format!("line {}: {n} is not defined before", toks[i].line)),
        }
    }
    Ok(out)
}

/// How many distinct names of `defs` the tokens use (a function's
/// upvalues, when they are its chunk's top-level locals).
pub(crate) fn upvalues(toks: &[Token], defs: &BTreeMap<String, String>) -> usize {
    let own = declared(toks);
    used(toks)
        .into_iter()
        .filter(|(n, _)| !own.contains(n) && defs.contains_key(n))
        .map(|(n, _)| n)
        .collect::<BTreeSet<_>>()
        .len()
}

/// A lib file's `Needs:` line: file → the names it takes from there.
pub(crate) fn needs_line(source: &str) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let head: Vec<&str> = source.lines().take_while(|l| l.starts_with("--")).collect();
    let start = head
        .iter()
        .position(|l| l.starts_with("-- Needs:"))
        .ok_or("no `-- Needs:` line")?;
    let mut text = head[start]["-- Needs:".len()..].trim().to_owned();
    for l in &head[start + 1..] {
        if text.ends_with('.') {
            break;
        }
        text.push(' ');
        text.push_str(l.trim_start_matches('-').trim());
    }
    let text = text.strip_suffix('.').ok_or("the `Needs:` line ends with a period")?;
    let mut out = BTreeMap::new();
    if text == "nothing" {
        return Ok(out);
    }
    let mut rest = text;
    while !rest.is_empty() {
        let open = rest.find('(').ok_or(format!("expected `file (names)` at {rest:?}"))?;
        let close = rest.find(')').ok_or("unclosed (")?;
        let file = rest[..open].trim().trim_start_matches(',').trim().to_owned();
        let names = rest[open + 1..close].split(',').map(|n| n.trim().to_owned()).collect();
        out.insert(file, names);
        rest = rest[close + 1..].trim_start_matches(',').trim();
    }
    Ok(out)
}
