//! The job-hash fields the Lua code reads and writes, found where the code
//! names them (see [`job_fields`]).

use std::collections::{BTreeMap, BTreeSet};

use super::lua::{Tok, Token, is_name, is_punct, lua_tokens, top_level_defs};

/// The top-level comma-separated arguments of the call whose `(` is at
/// `open`, and the index after its `)`.
fn call_args(toks: &[Token], open: usize) -> (Vec<std::ops::Range<usize>>, usize) {
    let mut args = Vec::new();
    let (mut depth, mut start) = (0usize, open + 1);
    for (i, t) in toks.iter().enumerate().skip(open) {
        match &t.tok {
            Tok::Punct("(" | "{" | "[") => depth += 1,
            Tok::Punct(")" | "}" | "]") => {
                depth -= 1;
                if depth == 0 {
                    if i > start {
                        args.push(start..i);
                    }
                    return (args, i + 1);
                }
            }
            Tok::Punct(",") if depth == 1 => {
                args.push(start..i);
                start = i + 1;
            }
            _ => {}
        }
    }
    panic!("line {}: unclosed call", toks[open].line)
}

fn lit(toks: &[Token], r: &std::ops::Range<usize>) -> Option<String> {
    match &toks[r.clone()] {
        [Token { tok: Tok::Str(s), .. }] => Some(s.clone()),
        _ => None,
    }
}

/// `unpack(NAME)`: NAME.
fn unpacked(toks: &[Token], r: &std::ops::Range<usize>) -> Option<String> {
    match &toks[r.clone()] {
        [
            Token { tok: Tok::Name(u), .. },
            Token {
                tok: Tok::Punct("("), ..
            },
            Token { tok: Tok::Name(n), .. },
            Token {
                tok: Tok::Punct(")"), ..
            },
        ] if u == "unpack" => Some(n.clone()),
        _ => None,
    }
}

/// A job record's key, as the scripts write it: `jk`, or built with `'job:'`.
fn is_job_key(toks: &[Token], r: &std::ops::Range<usize>) -> bool {
    let t = &toks[r.clone()];
    matches!(t, [Token { tok: Tok::Name(n), .. }] if n == "jk")
        || t.iter().any(|t| matches!(&t.tok, Tok::Str(s) if s == "job:"))
}

/// A job-hash field and where the code names it.
#[derive(Debug, Clone)]
pub(crate) struct FieldUse {
    pub field: String,
    pub file: String,
    pub line: usize,
}

/// Every job-hash field the Lua sources (`(file, source)`) read or write.
///
/// Found where the code names them: the field arguments of a hash command
/// (`HGET`, `HMGET`, `HSET`, `HDEL`, `HINCRBY`, …; `hfields`) on a job key
/// (`jk`, or a key built with `'job:'`), and the field/value lists such a
/// command unpacks (`rcall('HSET', jk, unpack(h))`): their table
/// constructors, `h[#h + 1] = 'f'; h[#h + 1] = v` pairs (one pair to a
/// line) and `h[3] = 'f'` (odd places), in the same file, or passed in
/// the same place of a call to the function that unpacks them (`finish`'s
/// `fields`). Any other form of naming a job field is an error, so the
/// scan cannot silently miss one.
pub(crate) fn job_fields(sources: &[(String, &str)]) -> Result<Vec<FieldUse>, String> {
    let files: Vec<(String, Vec<Token>)> = sources.iter().map(|(f, s)| (f.clone(), lua_tokens(s))).collect();
    let mut found = Vec::new();
    // (file, name) of the field lists a job HSET unpacks
    let mut lists: BTreeSet<(String, String)> = BTreeSet::new();
    let field = |file: &str, toks: &[Token], r: &std::ops::Range<usize>, what: &str| -> Result<FieldUse, String> {
        let line = toks[r.start.min(toks.len() - 1)].line;
        lit(toks, r)
            .map(|field| FieldUse {
                field,
                file: file.to_owned(),
                line,
            })
            .ok_or_else(|| format!("{file}:{line}: {what} is not a field name in quotes"))
    };
    for (file, toks) in &files {
        for i in 0..toks.len() {
            let (cmd, open, key_at) = if is_name(&toks[i], "rcall") && is_punct(toks.get(i + 1), "(") {
                (None, i + 1, 1)
            } else if is_name(&toks[i], "redis")
                && is_punct(toks.get(i + 1), ".")
                && (toks
                    .get(i + 2)
                    .is_some_and(|t| is_name(t, "call") || is_name(t, "pcall")))
                && is_punct(toks.get(i + 3), "(")
            {
                (None, i + 3, 1)
            } else if is_name(&toks[i], "hfields") && is_punct(toks.get(i + 1), "(") {
                (Some("HMGET".to_owned()), i + 1, 0)
            } else {
                continue;
            };
            let (args, _) = call_args(toks, open);
            let cmd = match cmd {
                Some(c) => c,
                None => match args.first().and_then(|a| lit(toks, a)) {
                    Some(c) => c.to_ascii_uppercase(),
                    None => continue,
                },
            };
            let Some(key) = args.get(key_at) else { continue };
            if !cmd.starts_with('H') || !is_job_key(toks, key) {
                continue;
            }
            let rest = &args[key_at + 1..];
            let places: Vec<&std::ops::Range<usize>> = match cmd.as_str() {
                "HMGET" | "HDEL" | "HEXISTS" => rest.iter().collect(),
                "HGET" | "HINCRBY" | "HSETNX" | "HSTRLEN" => rest.iter().take(1).collect(),
                "HSET" => rest.iter().step_by(2).collect(),
                "HGETALL" | "HLEN" => Vec::new(),
                other => return Err(format!("{file}: {other} on a job key: teach the scan")),
            };
            for r in places {
                if let Some(list) = unpacked(toks, r) {
                    lists.insert((file.clone(), list));
                } else {
                    found.push(field(file, toks, r, &format!("a {cmd} field"))?);
                }
            }
        }
    }
    // The field lists, and the lists passed to a function that unpacks its parameter.
    let mut done: BTreeSet<(String, String)> = BTreeSet::new();
    while let Some(next) = lists.iter().find(|l| !done.contains(*l)).cloned() {
        done.insert(next.clone());
        let (file, list) = &next;
        let toks = &files.iter().find(|(f, _)| f == file).unwrap().1;
        for def in top_level_defs(toks) {
            let Some(body) = def.body.clone() else { continue };
            let open = body.start + 2;
            let (params, _) = call_args(toks, open);
            let Some(place) = params.iter().position(|p| lit_name(toks, p).as_deref() == Some(list)) else {
                continue;
            };
            for (caller, ctoks) in &files {
                for i in 0..ctoks.len() {
                    if !is_name(&ctoks[i], &def.name)
                        || !is_punct(ctoks.get(i + 1), "(")
                        || i.checked_sub(1).is_some_and(|p| is_name(&ctoks[p], "function"))
                    {
                        continue;
                    }
                    let (args, _) = call_args(ctoks, i + 1);
                    let Some(arg) = args.get(place) else { continue };
                    if let Some(n) = lit_name(ctoks, arg) {
                        lists.insert((caller.clone(), n));
                    } else if is_punct(ctoks.get(arg.start), "{") {
                        found.extend(constructor_fields(caller, ctoks, arg.start)?);
                    } else {
                        return Err(format!(
                            "{caller}:{}: a field list that is not a name or a {{…}}",
                            ctoks[i].line
                        ));
                    }
                }
            }
        }
        found.extend(list_builders(file, toks, list)?);
    }
    Ok(found)
}

fn lit_name(toks: &[Token], r: &std::ops::Range<usize>) -> Option<String> {
    match &toks[r.clone()] {
        [Token { tok: Tok::Name(n), .. }] => Some(n.clone()),
        _ => None,
    }
}

/// The field names (odd places) of the table constructor at `open`.
fn constructor_fields(file: &str, toks: &[Token], open: usize) -> Result<Vec<FieldUse>, String> {
    let (elems, _) = call_args(toks, open);
    elems
        .iter()
        .step_by(2)
        .map(|r| {
            let line = toks[r.start].line;
            lit(toks, r)
                .map(|field| FieldUse {
                    field,
                    file: file.to_owned(),
                    line,
                })
                .ok_or_else(|| format!("{file}:{line}: a field list's field is not a name in quotes"))
        })
        .collect()
}

/// The field names that `list`'s builders in `toks` put in it.
fn list_builders(file: &str, toks: &[Token], list: &str) -> Result<Vec<FieldUse>, String> {
    let mut out = Vec::new();
    let mut pushes_on_line: BTreeMap<usize, usize> = BTreeMap::new();
    for i in 0..toks.len() {
        if !is_name(&toks[i], list) {
            continue;
        }
        let prev = i.checked_sub(1).map(|p| &toks[p]);
        if prev.is_some_and(|p| matches!(p.tok, Tok::Punct("." | ":"))) {
            continue;
        }
        // list = {…}
        if is_punct(toks.get(i + 1), "=") && is_punct(toks.get(i + 2), "{") {
            out.extend(constructor_fields(file, toks, i + 2)?);
            continue;
        }
        if !is_punct(toks.get(i + 1), "[") {
            continue;
        }
        let (index, after) = call_args(toks, i + 1);
        if !is_punct(toks.get(after), "=") {
            continue;
        }
        let value = after + 1..after + 2;
        let line = toks[i].line;
        let index = &toks[index[0].clone()];
        let is_field = match index {
            [Token { tok: Tok::Num(n), .. }] => n.parse::<usize>().map_err(|e| e.to_string())? % 2 == 1,
            [
                Token {
                    tok: Tok::Punct("#"), ..
                },
                Token { tok: Tok::Name(n), .. },
                Token {
                    tok: Tok::Punct("+"), ..
                },
                Token { tok: Tok::Num(one), .. },
            ] if n == list && one == "1" => {
                let k = pushes_on_line.entry(line).or_default();
                *k += 1;
                *k % 2 == 1
            }
            _ => continue,
        };
        if is_field {
            let next = toks.get(after + 2);
            let alone = !matches!(next, Some(t) if t.line == line);
            let paired = matches!(index, [Token { tok: Tok::Num(_), .. }]) || !alone;
            if !paired {
                return Err(format!("{file}:{line}: push a field and its value on one line"));
            }
            out.push(FieldUse {
                field: lit(toks, &value)
                    .ok_or_else(|| format!("{file}:{line}: a field that is not a name in quotes"))?,
                file: file.to_owned(),
                line,
            });
        }
    }
    Ok(out)
}
