//! A script's reply shape, as its `-- REPLY:` header and `lua/README.md`
//! state it (`{now:int, (id:str, code:code)*, [more:int?]}`), and the check
//! that holds the Rust side to it: in debug builds every [`Reply`] records
//! what its decoder reads, and when it is dropped the reads must follow
//! the script's shape (all of it, when the decoder read the reply to its
//! end). So every test that runs a script checks its decoder too.
//!
//! [`Reply`]: super::call::Reply

use std::fmt;

use super::call::Read;

/// What one reply item holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    /// An integer, sent as an integer or as a decimal string.
    Int,
    /// An integer, or "" for none.
    OptInt,
    /// Bytes (text, JSON, a cursor).
    Str,
    /// A reply code (`src/store/codes.rs`).
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
    #[cfg(test)]
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

impl Ty {
    /// Whether a decoder may read an item of this type as `read`: an
    /// optional integer is sent as "" for none, so it is read as text or
    /// as an integer.
    fn accepts(self, read: Read) -> bool {
        matches!(
            (self, read),
            (Ty::Int, Read::Int) | (Ty::OptInt, Read::Int | Read::Str) | (Ty::Str, Read::Str) | (Ty::Code, Read::Code)
        )
    }
}

impl Shape {
    /// Whether `reads` follow this shape: as a prefix of one of its
    /// replies, or (`whole`) as a whole reply. A small automaton (one step
    /// per read, no recursion), since a reply of a thousand jobs is
    /// thousands of reads.
    pub(super) fn follows(&self, reads: &[Read], whole: bool) -> bool {
        let Shape::Array(parts) = self else {
            return reads.is_empty();
        };
        let mut prog = Vec::new();
        compile(parts, &mut prog);
        prog.push(Op::Match);
        let mut now = closure(&prog, [0]);
        for r in reads {
            let next = now
                .iter()
                .filter(|&&pc| matches!(prog[pc], Op::Item(ty) if ty.accepts(*r)))
                .map(|pc| pc + 1);
            now = closure(&prog, next);
            if now.is_empty() {
                return false;
            }
        }
        !whole || now.iter().any(|&pc| matches!(prog[pc], Op::Match))
    }
}

/// One step of the automaton a shape compiles to.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// Takes one read of this type.
    Item(Ty),
    /// Goes on at both.
    Split(usize, usize),
    Jump(usize),
    /// The whole reply.
    Match,
}

/// Appends the steps of `parts`: a repeated group loops back to a split
/// before it, an optional part is a split around it.
fn compile(parts: &[Part], prog: &mut Vec<Op>) {
    for part in parts {
        match part {
            Part::Item(it) => prog.push(Op::Item(it.ty)),
            Part::Optional(group) => {
                let split = prog.len();
                prog.push(Op::Split(0, 0));
                compile(group, prog);
                prog[split] = Op::Split(split + 1, prog.len());
            }
            Part::Repeat(group) => {
                let split = prog.len();
                prog.push(Op::Split(0, 0));
                compile(group, prog);
                prog.push(Op::Jump(split));
                prog[split] = Op::Split(split + 1, prog.len());
            }
        }
    }
}

/// The steps reachable from `from` without taking a read (sorted, each once).
fn closure(prog: &[Op], from: impl IntoIterator<Item = usize>) -> Vec<usize> {
    let mut seen = vec![false; prog.len()];
    let mut stack: Vec<usize> = from.into_iter().collect();
    let mut out = Vec::new();
    while let Some(pc) = stack.pop() {
        if std::mem::replace(&mut seen[pc], true) {
            continue;
        }
        match prog[pc] {
            Op::Split(a, b) => stack.extend([a, b]),
            Op::Jump(a) => stack.push(a),
            Op::Item(_) | Op::Match => out.push(pc),
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::Read::{Code, Int, Str};
    use super::*;

    // Reads follow a shape's items, groups and optional tails, as a prefix or as a whole; a read of the wrong type does not.
    #[test]
    fn reads_follow_the_shape() {
        let s = Shape::parse("{now:int, (code:code, due:int)*, [deadline:int, (id:str, n:int?)*]}").unwrap();
        assert!(s.follows(&[Int], true));
        assert!(s.follows(&[Int, Code, Int, Code, Int], true));
        assert!(s.follows(&[Int, Code, Int, Int, Str, Int, Str, Str], true));
        assert!(s.follows(&[Int, Code], false), "a prefix");
        assert!(!s.follows(&[Int, Code], true), "a group cut short");
        assert!(!s.follows(&[Str], false), "now is an int");
        assert!(!s.follows(&[Int, Int, Code], false), "a code read as an int");
        assert!(
            !s.follows(&[Int, Code, Int, Int, Str, Code], false),
            "a text read as a code"
        );
        let many: Vec<_> = std::iter::once(Int).chain([Code, Int].repeat(50_000)).collect();
        assert!(s.follows(&many, true), "a long reply, without deep recursion");
        let scalar = Shape::parse("version:str").unwrap();
        assert!(scalar.follows(&[], true));
        assert!(!scalar.follows(&[Str], false));
    }
}
