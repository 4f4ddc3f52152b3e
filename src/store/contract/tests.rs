//! The tests that hold `lua/README.md`, the scripts and the Rust side to
//! each other, and the scan of the Rust sources for the job-hash fields
//! they read.

use std::collections::{BTreeMap, BTreeSet};

use super::super::codes::CODES;
use super::super::{LIB, LIBRARY, specs};
use super::fields::job_fields;
use super::lua::*;
use super::*;

/// Every Rust source under `dir`, recursively: (path, text).
fn rust_sources(dir: &std::path::Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries {
        let path = e.unwrap().path();
        if path.is_dir() {
            out.extend(rust_sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((path.display().to_string(), std::fs::read_to_string(&path).unwrap()));
        }
    }
    out
}

/// The text of the Rust function `fn name(` in `source`, to the closing
/// brace at its own indentation.
fn rust_fn<'a>(source: &'a str, name: &str) -> Option<&'a str> {
    let start = source.find(&format!("fn {name}("))?;
    let line = source[..start].rsplit('\n').next().unwrap_or("");
    let close = format!("\n{}}}", " ".repeat(line.len() - line.trim_start().len()));
    let end = source[start..].find(&close).map_or(source.len(), |e| start + e);
    Some(&source[start..end])
}

/// The strings `"x"` that `text` quotes right before each ` =>`.
fn match_arms(text: &str) -> Vec<String> {
    text.match_indices("\" =>")
        .filter_map(|(i, _)| {
            let open = text[..i].rfind('"')?;
            Some(text[open + 1..i].to_owned())
        })
        .collect()
}

/// The quoted strings `"x"` right after each `pat` in `text`.
fn quoted_after(text: &str, pat: &str) -> Vec<String> {
    text.match_indices(pat)
        .filter_map(|(i, _)| {
            let rest = &text[i + pat.len()..];
            let end = rest.find('"')?;
            Some(rest[..end].to_owned())
        })
        .collect()
}

/// The fields read right after a job key: `.arg(k.job(id)).arg("f")`.
fn args_after_job_key(text: &str) -> Vec<String> {
    text.match_indices(".job(")
        .filter_map(|(i, _)| {
            let rest = &text[i..];
            let close = rest.find("))")?;
            let rest = rest[close + 2..].trim_start().strip_prefix(".arg(\"")?;
            Some(rest[..rest.find('"')?].to_owned())
        })
        .collect()
}

/// The job-hash fields the Rust side reads from a job record, with where:
/// the match arms of `job_info` (a record from `HGETALL`), the fault
/// suite's `JobRecord::from_fields`, and the single-field reads next to a
/// job key (`.arg(k.job(id)).arg("f")`, `(&jk, "f"`).
pub(crate) fn rust_job_fields() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let mut decoders = 0;
    let mut sources = rust_sources(&root.join("src"));
    sources.extend(rust_sources(&root.join("fault").join("src")));
    for (path, text) in &sources {
        if path.contains("src/store/contract") {
            continue;
        }
        if let Some(body) = rust_fn(text, "job_info") {
            decoders += 1;
            out.extend(match_arms(body).into_iter().map(|f| (f, format!("{path} job_info"))));
        }
        if let Some(body) = rust_fn(text, "from_fields") {
            out.extend(
                quoted_after(body, "f.get(\"")
                    .into_iter()
                    .map(|f| (f, format!("{path} from_fields"))),
            );
        }
        out.extend(args_after_job_key(text).into_iter().map(|f| (f, path.clone())));
        out.extend(quoted_after(text, "(&jk, \"").into_iter().map(|f| (f, path.clone())));
    }
    assert!(decoders >= 1, "no job_info decoder found under src/");
    out
}

/// Top-level name → the lib file defining it, for the files before `upto`.
fn lib_defs(upto: usize) -> BTreeMap<String, String> {
    let mut defs = BTreeMap::new();
    for (name, code) in &LIB[..upto] {
        for d in top_level_defs(&lua_tokens(code)) {
            defs.insert(d.name, (*name).to_owned());
        }
    }
    defs
}

/// `file → names` of a `needs` answer.
fn by_file(needs: BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, file) in needs {
        out.entry(file).or_default().insert(name);
    }
    out
}

// Each lib file opens with its name, uses only what earlier files define (its own names after their definition), and its `Needs:` line names exactly that.
#[test]
fn lib_files_load_in_order_and_say_what_they_need() {
    for (i, (name, code)) in LIB.iter().enumerate() {
        assert!(code.starts_with(&format!("-- lib/{name}.lua: ")), "{name}: header");
        let toks = lua_tokens(code);
        let needs = needs(&toks, &lib_defs(i)).unwrap_or_else(|e| panic!("lib/{name}.lua {e}"));
        let said = needs_line(code).unwrap_or_else(|e| panic!("lib/{name}.lua: {e}"));
        assert_eq!(said, by_file(needs), "lib/{name}.lua: its `Needs:` line");
        for d in top_level_defs(&toks) {
            if let Some((_, at)) = used(&toks[..d.at]).into_iter().find(|(n, _)| *n == d.name) {
                panic!(
                    "lib/{name}.lua:{}: {} is used before its definition",
                    toks[at].line, d.name
                );
            }
        }
    }
}

// The library stays within Lua 5.1's limits: 200 locals in its chunk, 60 upvalues a function.
#[test]
fn library_fits_lua_limits() {
    let defs = lib_defs(LIB.len());
    let locals: usize = LIB.iter().map(|(_, c)| top_level_defs(&lua_tokens(c)).len()).sum();
    assert!(locals < 200, "{locals} top-level locals: group helpers in tables");
    let mut most = (0, String::new());
    for (name, code) in LIB {
        let toks = lua_tokens(code);
        for d in top_level_defs(&toks) {
            if let Some(body) = d.body {
                let n = upvalues(&toks[body], &defs);
                most = most.max((n, format!("lib/{name}.lua {}", d.name)));
            }
        }
    }
    for (spec, source) in specs().into_iter().map(|s| (s, s.body)) {
        // the body's closure, and new_call and end_call in its wrapper
        let n = upvalues(&lua_tokens(source), &defs) + 2;
        most = most.max((n, format!("{}.lua", spec.name)));
    }
    assert!(most.0 <= 60, "{} uses {} upvalues", most.1, most.0);
    println!("{locals} top-level locals; most upvalues: {} ({})", most.0, most.1);
}

// lua/README.md lists the lib files in load order, and for each script the lib files it uses.
#[test]
fn readme_lists_the_lib_files_each_script_uses() {
    let names: Vec<&str> = LIB.iter().map(|(n, _)| *n).collect();
    assert_eq!(readme_lib(), names, "lua/README.md \"The library\"");
    let defs = lib_defs(LIB.len());
    let docs = script_docs();
    let mut wrong = Vec::new();
    for (spec, source) in specs().into_iter().map(|s| (s, s.body)) {
        let needs = needs(&lua_tokens(source), &defs).unwrap_or_else(|e| panic!("{}.lua {e}", spec.name));
        let uses = by_file(needs);
        let want: Vec<&str> = names.iter().copied().filter(|n| uses.contains_key(*n)).collect();
        if docs[spec.name].lib != want {
            wrong.push(format!("{}: Lib: {}", spec.name, want.join(", ")));
        }
    }
    assert!(
        wrong.is_empty(),
        "lua/README.md's `Lib:` lines should say:\n{}",
        wrong.join("\n")
    );
}

// Every job-hash field the Lua code reads or writes is in lua/README.md's schema and every field there is used; the Rust side reads only schema fields.
#[test]
fn job_fields_match_the_schema() {
    let mut sources: Vec<(String, &str)> = LIB.iter().map(|(n, c)| (format!("lib/{n}.lua"), *c)).collect();
    sources.extend(specs().into_iter().map(|s| (format!("{}.lua", s.name), s.body)));
    let used = job_fields(&sources).unwrap();
    let schema: BTreeSet<String> = schema_fields().into_iter().collect();
    for u in &used {
        assert!(
            schema.contains(&u.field),
            "{}:{}: job field {:?} is not in lua/README.md",
            u.file,
            u.line,
            u.field
        );
    }
    let seen: BTreeSet<String> = used.iter().map(|u| u.field.clone()).collect();
    let unused: Vec<&String> = schema.difference(&seen).collect();
    assert!(
        unused.is_empty(),
        "lua/README.md lists job fields no script touches: {unused:?}"
    );
    let rust = rust_job_fields();
    assert!(rust.len() > 15, "found too few Rust reads: {rust:?}");
    for (f, at) in rust {
        assert!(
            schema.contains(&f),
            "{at} reads job field {f:?}, which lua/README.md does not list"
        );
    }
}

// lua/README.md's reply codes are src/scripts/codes.rs's, name for name and number for number.
#[test]
fn readme_codes_match_rust() {
    let mut readme = readme_codes();
    let mut rust: Vec<(String, i64)> = CODES.iter().map(|(n, v, _)| ((*n).to_owned(), *v)).collect();
    readme.sort();
    rust.sort();
    assert_eq!(readme, rust);
}

// settle's claim after its items answers what claim answers after its `now`.
#[test]
fn settle_claims_as_claim_does() {
    let shapes = reply_shapes();
    let claim = &shapes["claim"].parts()[1..];
    let Some(Part::Optional(tail)) = shapes["settle"].parts().last() else {
        panic!("settle's reply ends with the optional claim")
    };
    assert_eq!(tail.as_slice(), claim);
}

// Every pattern of every fault of src/faults.rs still finds its text in
// the library as often as it was written for.
#[cfg(not(echomq_faults))]
#[test]
fn fault_patterns_match_the_library() {
    let faults = include_str!("../../faults.rs");
    let lib = &LIBRARY.code;
    let (mut faults_seen, mut patterns) = (0, 0);
    for chunk in faults.split("if active(\"").skip(1) {
        let fault = &chunk[..chunk.find('"').unwrap()];
        let mut any = false;
        for at in chunk.match_indices("src.replace(").map(|(i, _)| i) {
            let rest = chunk[at + "src.replace(".len()..].trim_start();
            let pattern = &rest[1..rest[1..].find('"').unwrap() + 1];
            // `local deadline = now + lease` is claim's and extend's
            let want = if fault == "client-clock" { 2 } else { 1 };
            assert_eq!(lib.matches(pattern).count(), want, "{fault}: {pattern:?}");
            patterns += 1;
            any = true;
        }
        faults_seen += usize::from(any);
    }
    assert_eq!((faults_seen, patterns), (12, 15), "a fault's pattern went unchecked");
}

// The values lib/defaults.lua mirrors from Rust agree with it.
#[test]
fn lua_defaults_mirror_rust() {
    let lua = include_str!("../../../lua/lib/defaults.lua");
    let value = |name: &str| -> u64 {
        let line = lua
            .lines()
            .find_map(|l| l.strip_prefix(&format!("local {name} = ")))
            .unwrap();
        line.trim().parse().unwrap()
    };
    assert_eq!(value("ERRORS_KEEP"), crate::job::ERRORS_KEPT as u64);
    assert_eq!(value("EVENTS_MAX"), crate::events::DEFAULT_EVENTS_MAX_LEN);
    assert_eq!(value("EVENT_TEXT_MAX"), crate::events::EVENT_TEXT_MAX_BYTES as u64);
}

// The shape reader takes what the headers write and refuses what they must not.
#[test]
fn shapes_parse() {
    let s = Shape::parse("{now:int, (id:str, code:code)*, [more:int?]}").unwrap();
    assert_eq!(s.to_string(), "{now:int, (id:str, code:code)*, [more:int?]}");
    assert_eq!(Shape::parse("version:str").unwrap().to_string(), "version:str");
    for bad in [
        "{now:int",
        "{now}",
        "{now:float}",
        "{(a:int)}",
        "{a:str?}",
        "a:int b:int",
    ] {
        assert!(Shape::parse(bad).is_err(), "{bad}");
    }
    let src = "-- x\n-- REPLY: {a:int, (b:str,\n--   c:int)*}\n-- prose\nlocal x = 1\n";
    assert_eq!(header_reply(src).unwrap(), "{a:int, (b:str, c:int)*}");
}

// The field scan finds fields in each form the scripts write, and refuses a form it cannot read.
#[test]
fn field_scan_reads_each_form() {
    let src = "local function fin(jk, fields) rcall('HSET', jk, 'st', 'x', unpack(fields)) end\n\
               local function put(jk) local h = {'p', 1}\n h[#h + 1] = 'lm'; h[#h + 1] = 'v'\n h[3] = 'ln'\n\
               rcall('HSET', jk, unpack(h)) fin(jk, {'err', 'e'}) end\n\
               hfields(prefix .. 'job:' .. id, 'a', 'tk') rcall('HGET', other, 'zz')\n";
    let mut got: Vec<String> = job_fields(&[("t".into(), src)])
        .unwrap()
        .into_iter()
        .map(|u| u.field)
        .collect();
    got.sort();
    assert_eq!(got, ["a", "err", "lm", "ln", "p", "st", "tk"]);
    assert!(job_fields(&[("t".into(), "rcall('HGET', jk, name)")]).is_err());
    assert!(
        job_fields(&[(
            "t".into(),
            "rcall('HSET', jk, unpack(h))\nh[#h + 1] = 'x'\nh[#h + 1] = 1\n"
        )])
        .is_err()
    );
}
