//! Torn append-only-file tails: what a server killed in the middle of an
//! AOF write leaves on disk.
//!
//! With `appendfsync always` a write is acknowledged only after it reached
//! the file, so a write torn by a crash was never acknowledged. [`tear`]
//! builds that tail on a killed server's newest incremental AOF: it
//! appends the first bytes of one of the file's own transactions (the
//! `MULTI` … `EXEC` that a script's effects are written as), cut either
//! at a command boundary before the `EXEC` or at a random byte. The bytes
//! are an old transaction's, not a new one's, on purpose: if a loader
//! applied part of an incomplete transaction it would put an old state
//! back (a finished job active again, a claim's set moves done twice), and
//! the checker's state checks (I3, I4, L2) would see it. Both Valkey and
//! Redis 7.0 keep the multi-part layout read here (`appendonlydir/`, a
//! manifest naming the `incr` files) and drop such a tail when loading
//! (`aof-load-truncated yes`, their default).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// One top-level command of an AOF: where it starts and ends, and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Byte offset of its first byte (`*`).
    pub start: usize,
    /// Byte offset just past it.
    pub end: usize,
    /// The command name, upper case.
    pub name: String,
}

/// Splits `data` into its commands (RESP arrays of bulk strings; `#…`
/// annotation lines are skipped). Parsing stops at the first incomplete or
/// malformed command, so a tail that is already torn is left out.
pub fn commands(data: &[u8]) -> Vec<Command> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        if data[at] == b'#' {
            match line(data, at) {
                Some((_, next)) => at = next,
                None => break,
            }
            continue;
        }
        match command(data, at) {
            Some(c) => {
                at = c.end;
                out.push(c);
            }
            None => break,
        }
    }
    out
}

/// The line starting at `at` (without its CRLF) and the offset after it.
fn line(data: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = data.get(at..)?;
    let n = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..n], at + n + 2))
}

/// A number after a one-byte RESP prefix (`*3`, `$5`).
fn number(data: &[u8], at: usize, prefix: u8) -> Option<(usize, usize)> {
    let (l, next) = line(data, at)?;
    if l.first() != Some(&prefix) {
        return None;
    }
    let n = std::str::from_utf8(&l[1..]).ok()?.parse().ok()?;
    Some((n, next))
}

fn command(data: &[u8], start: usize) -> Option<Command> {
    let (argc, mut at) = number(data, start, b'*')?;
    let mut name = String::new();
    for i in 0..argc {
        let (len, body) = number(data, at, b'$')?;
        let end = body.checked_add(len)?;
        if data.get(end..end + 2)? != b"\r\n" {
            return None;
        }
        if i == 0 {
            name = String::from_utf8_lossy(&data[body..end]).to_uppercase();
        }
        at = end + 2;
    }
    Some(Command { start, end: at, name })
}

/// The `MULTI` … `EXEC` blocks of `cmds`, as (first, last) command indexes.
pub fn transactions(cmds: &[Command]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut open = None;
    for (i, c) in cmds.iter().enumerate() {
        match c.name.as_str() {
            "MULTI" => open = Some(i),
            "EXEC" => {
                if let Some(m) = open.take() {
                    out.push((m, i));
                }
            }
            _ => {}
        }
    }
    out
}

/// The newest incremental AOF in `dir` (a server's `--dir`), from the
/// manifest in `dir/appendonlydir`.
pub fn newest_incr(dir: &Path) -> Result<PathBuf, String> {
    let aof_dir = dir.join("appendonlydir");
    let manifest = fs::read_dir(&aof_dir)
        .map_err(|e| format!("{}: {e}", aof_dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "manifest"))
        .ok_or_else(|| format!("no manifest in {}", aof_dir.display()))?;
    let text = fs::read_to_string(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let name = text
        .lines()
        .rev()
        .filter(|l| l.split_whitespace().collect::<Vec<_>>().ends_with(&["type", "i"]))
        .find_map(|l| l.split_whitespace().nth(1))
        .ok_or_else(|| format!("no incremental file in {}", manifest.display()))?;
    Ok(aof_dir.join(name))
}

/// What [`tear`] appended.
#[derive(Debug, Clone)]
pub struct Tear {
    /// The file torn (its name).
    pub file: String,
    /// Bytes appended.
    pub bytes: usize,
    /// Length of the transaction they were cut from.
    pub of: usize,
    /// Whole commands of it appended (`MULTI` included).
    pub whole_commands: usize,
    /// Cut at a command boundary (else inside a command).
    pub at_boundary: bool,
}

/// Where [`tear`] may cut a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cut {
    /// Anywhere before its end: half the time after whole commands with
    /// no `EXEC`, half inside a command.
    Anywhere,
    /// Inside its `MULTI`, so no command of it is whole. Redis 7.0 needs
    /// this: it truncates a tail torn later in a transaction after the
    /// last whole command, leaving `MULTI` and those commands in the file,
    /// and the next load runs them with the next transaction's `EXEC`
    /// (Valkey truncates before the `MULTI`). See fault/README.md.
    InMulti,
}

/// Appends a torn transaction to the newest incremental AOF of the
/// (killed) server whose `--dir` is `dir`: the first bytes of a random
/// `MULTI` … `EXEC` block of that file, never the whole of it, cut as
/// `cut` allows.
pub fn tear(dir: &Path, cut: Cut) -> Result<Tear, String> {
    let path = newest_incr(dir)?;
    let data = fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let cmds = commands(&data);
    let txs = transactions(&cmds);
    if txs.is_empty() {
        return Err(format!("no MULTI/EXEC block in {} yet", path.display()));
    }
    let (first, last) = txs[fastrand::usize(0..txs.len())];
    let block = &data[cmds[first].start..cmds[last].end];
    // Half the tears end cleanly after whole commands with no EXEC (the
    // loader must undo the open transaction); half inside a command.
    let at_boundary = cut == Cut::Anywhere && last - first >= 2 && fastrand::bool();
    let (bytes, whole_commands) = if cut == Cut::InMulti {
        let multi = cmds[first].end - cmds[first].start;
        (fastrand::usize(1..multi), 0)
    } else if at_boundary {
        let k = fastrand::usize(first + 1..last);
        (cmds[k].start - cmds[first].start, k - first)
    } else {
        let b = fastrand::usize(1..block.len());
        let whole = cmds[first..last]
            .iter()
            .filter(|c| c.end - cmds[first].start <= b)
            .count();
        (b, whole)
    };
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(&block[..bytes])
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Tear {
        file: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        bytes,
        of: block.len(),
        whole_commands,
        at_boundary,
    })
}

/// How many times the server's log (`server.log` in `dir`) says it dropped
/// a torn tail when loading.
pub fn tails_dropped(dir: &Path) -> usize {
    let log = fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    // One such line per load that truncated (Valkey also logs a revert of
    // the open MULTI before it; Redis 7.0 names the file in it).
    log.lines()
        .filter(|l| l.contains("loaded anyway because aof-load-truncated is enabled"))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(args: &[&str]) -> String {
        let mut s = format!("*{}\r\n", args.len());
        for a in args {
            s.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s
    }

    // The parser finds every command and each MULTI/EXEC block, skips annotations, and stops at a torn one.
    #[test]
    fn parses_commands_and_transactions() {
        let mut s = resp(&["SELECT", "0"]);
        s.push_str("#TS:1700000000\r\n");
        s.push_str(&resp(&["multi"]));
        s.push_str(&resp(&["HSET", "k", "f", "a\r\nb"]));
        s.push_str(&resp(&["EXEC"]));
        s.push_str(&resp(&["SET", "x", "1"]));
        let whole = s.len();
        s.push_str("*3\r\n$3\r\nSET\r\n$1\r\ny");
        let cmds = commands(s.as_bytes());
        let names: Vec<&str> = cmds.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["SELECT", "MULTI", "HSET", "EXEC", "SET"]);
        assert_eq!(cmds.last().unwrap().end, whole);
        assert_eq!(transactions(&cmds), vec![(1, 3)]);
    }
}
