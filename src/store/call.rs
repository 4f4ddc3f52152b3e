//! The transport every script file uses: a [`Call`] of a script's library
//! function (loading the library when the server has lost it, and on a
//! cluster declaring the queue's resharding guard; with a durability
//! setting, its confirmation in the same pipeline), and the [`Reply`] it
//! reads field by field.

use redis::aio::ConnectionLike;
use redis::{ToRedisArgs, Value};

use super::{Code, Spec, load_library, missing_function};
use crate::conn::Conn;
use crate::durability::{Confirmed, Durability};
use crate::error::{Error, Result};

/// One script call being built: keys first, then arguments.
pub(super) struct Call {
    spec: &'static Spec,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Call {
    pub(super) fn new(spec: &'static Spec) -> Call {
        Call {
            spec,
            keys: Vec::with_capacity(spec.keys.len()),
            args: Vec::with_capacity(spec.args.len()),
        }
    }

    pub(super) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    pub(super) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// Runs the call and opens its flat array reply.
    pub(super) async fn run(&self, conn: &mut Conn) -> Result<Reply> {
        let v = self.run_raw(conn).await?;
        Reply::new(self.spec, v)
    }

    /// Runs the call and, when `durability` waits for more than the
    /// primary, its confirmation right behind it in one pipeline: on the
    /// same connection to the node that ran the script, so it can only
    /// count that node's replicas (`durability.rs`). The confirmation's
    /// verdict comes beside the reply; a connection lost during the pair
    /// fails the whole call.
    pub(super) async fn run_confirmed(&self, conn: &mut Conn, durability: Durability) -> Result<(Reply, Confirmed)> {
        let Some(confirmation) = durability.confirmation() else {
            return Ok((self.run(conn).await?, Ok(None)));
        };
        let mut pipe = redis::pipe();
        pipe.add_command(self.command(conn, true)).add_command(confirmation);
        let mut reloaded = false;
        loop {
            let answers = conn.req_packed_commands(&pipe, 0, 2).await.map_err(Error::from_redis)?;
            let Ok::<[Value; 2], _>([reply, confirmed]) = answers.try_into() else {
                return Err(Error::Protocol {
                    script: self.spec.name,
                    detail: "a script call and its confirmation did not answer twice".into(),
                });
            };
            match reply.extract_error() {
                Err(e) if !reloaded && missing_function(&e) => {
                    load_library(conn).await?;
                    reloaded = true;
                }
                Err(e) => return Err(Error::from_redis(e)),
                Ok(v) => return Ok((Reply::new(self.spec, v)?, durability.read(confirmed))),
            }
        }
    }

    /// Runs the call and returns its reply as it is.
    pub(super) async fn run_raw(&self, conn: &mut Conn) -> Result<Value> {
        let cmd = self.command(conn, false);
        match cmd.query_async(conn).await {
            Err(e) if missing_function(&e) => {
                load_library(conn).await?;
                cmd.query_async(conn).await.map_err(Error::from_redis)
            }
            r => r.map_err(Error::from_redis),
        }
    }

    /// The `FCALL` of this call, with the resharding guard on a cluster;
    /// `confirmed`: a confirmation follows it, so the call declares its
    /// confirmation mark (see [`confirm_mark`]).
    fn command(&self, conn: &Conn, confirmed: bool) -> redis::Cmd {
        let spec = self.spec;
        debug_assert!(
            self.keys.len() == spec.keys.len() || (spec.more_keys && self.keys.len() > spec.keys.len()),
            "{}: {} keys passed, the header names {:?}",
            spec.name,
            self.keys.len(),
            spec.keys
        );
        debug_assert!(
            self.args.len() >= spec.args.len(),
            "{}: {} arguments passed, the header names {:?}",
            spec.name,
            self.args.len(),
            spec.args
        );
        let guard = reshard_guard(conn, &self.keys);
        let mark = if confirmed { confirm_mark(&self.keys) } else { None };
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(spec.function())
            .arg(self.keys.len() + usize::from(mark.is_some()) + usize::from(guard.is_some()));
        for k in &self.keys {
            cmd.arg(k.as_slice());
        }
        if let Some(m) = &mark {
            cmd.arg(m.as_slice());
        }
        if let Some(g) = &guard {
            cmd.arg(g.as_bytes());
        }
        for a in &self.args {
            cmd.arg(a.as_slice());
        }
        cmd
    }
}

/// On a cluster, the queue's resharding guard, `PREFIX:{Q}:reshard-guard`,
/// a key that never exists, declared last in every call (the function
/// wrapper drops it from `KEYS` again, `lua/lib/call.lua` `new_call`).
///
/// While a slot moves key by key (`CLUSTER SETSLOT ... MIGRATING` and
/// `MIGRATE`), a script that reads or creates a key already gone from the
/// node it runs on raises in mid-run, after some of its writes (the server
/// rolls nothing back), and a script sent on by `ASK` to the importing node
/// would read keys not moved yet as missing. A call declaring a key that
/// is missing on both nodes is refused with `TRYAGAIN` before it runs, on
/// the source and on the target alike (a multi-key request in a slot being
/// moved), so no script of the queue runs while its slot is split; the
/// cluster connection retries until the move ends, within the response
/// timeout. Outside a move the guard is just an absent key.
fn reshard_guard(conn: &Conn, keys: &[Vec<u8>]) -> Option<String> {
    let first = std::str::from_utf8(keys.first()?).ok()?;
    conn.slot_group(first)?;
    let close = first
        .find('{')
        .and_then(|open| first[open..].find('}').map(|c| open + c))?;
    Some(format!("{}:{}", &first[..=close], crate::keys::RESHARD_GUARD))
}

/// The confirmation mark of a call that a `WAIT` or `WAITAOF` follows:
/// its first key with `\0confirm` appended (the same hash slot; no key of
/// echomq's has a control character), declared after the call's own keys
/// (the function wrapper drops it from `KEYS` again, `lua/lib/call.lua`
/// `new_call`).
///
/// A confirmation counts the replicas that hold the writes *of its
/// connection*. A call that finds its work done already (an enqueue of an
/// id that exists, a delivery applied before, a settlement remembered)
/// writes nothing of its own, so its confirmation would pass at once while
/// the write it found, another connection's, may still be on the primary
/// alone: a relay would take a message off its outbox, a retried enqueue
/// would answer for a job, that a failover then loses. A call with the
/// mark writes and deletes that key as it ends, so it always writes, and
/// its confirmation covers all the primary held when it ran.
fn confirm_mark(keys: &[Vec<u8>]) -> Option<Vec<u8>> {
    let mut mark = keys.first()?.clone();
    mark.extend_from_slice(b"\0confirm");
    Some(mark)
}

/// What a decoder read from a reply, item by item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read {
    /// An integer (`Reply::int`, `Reply::uint`).
    Int,
    /// A reply code (`Reply::code`).
    Code,
    /// Bytes or text (`Reply::bytes`, `Reply::string`).
    Str,
}

/// Reads a script's flat array reply field by field. In debug builds it
/// records what its decoder reads, and checks the reads against the
/// script's reply shape when dropped (see `shape.rs`).
pub(super) struct Reply {
    script: &'static str,
    items: std::vec::IntoIter<Value>,
    #[cfg(debug_assertions)]
    spec: &'static Spec,
    #[cfg(debug_assertions)]
    reads: Vec<Read>,
}

impl Reply {
    fn new(spec: &'static Spec, v: Value) -> Result<Self> {
        match v {
            Value::Array(items) => Ok(Reply {
                script: spec.name,
                items: items.into_iter(),
                #[cfg(debug_assertions)]
                spec,
                #[cfg(debug_assertions)]
                reads: Vec::new(),
            }),
            other => Err(Error::Protocol {
                script: spec.name,
                detail: format!("expected an array, got {other:?}"),
            }),
        }
    }

    /// Records a read of the decoder's (debug builds).
    fn read(&mut self, _what: Read) {
        #[cfg(debug_assertions)]
        self.reads.push(_what);
    }

    fn bad(&self, what: &str, got: Option<Value>) -> Error {
        Error::Protocol {
            script: self.script,
            detail: format!("expected {what}, got {got:?}"),
        }
    }

    /// The error for a reply element that is not `what` (`got`, as read).
    pub(super) fn malformed(&self, what: &str, got: &str) -> Error {
        self.bad(what, Some(Value::BulkString(got.as_bytes().to_vec())))
    }

    pub(super) fn remaining(&self) -> usize {
        self.items.len()
    }

    pub(super) fn int(&mut self) -> Result<i64> {
        self.read(Read::Int);
        self.next_int()
    }

    fn next_int(&mut self) -> Result<i64> {
        match self.items.next() {
            Some(Value::Int(n)) => Ok(n),
            Some(Value::BulkString(b)) => std::str::from_utf8(&b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| self.bad("an integer", Some(Value::BulkString(b)))),
            other => Err(self.bad("an integer", other)),
        }
    }

    pub(super) fn uint(&mut self) -> Result<u64> {
        let n = self.int()?;
        u64::try_from(n).map_err(|_| self.bad("a non-negative integer", Some(Value::Int(n))))
    }

    /// A reply code (see `codes.rs`).
    pub(super) fn code(&mut self) -> Result<Code> {
        self.read(Read::Code);
        let n = self.next_int()?;
        Code::of(self.script, n)
    }

    pub(super) fn bytes(&mut self) -> Result<Vec<u8>> {
        self.read(Read::Str);
        self.next_bytes()
    }

    fn next_bytes(&mut self) -> Result<Vec<u8>> {
        match self.items.next() {
            Some(Value::BulkString(b)) => Ok(b),
            Some(Value::SimpleString(s)) => Ok(s.into_bytes()),
            other => Err(self.bad("a string", other)),
        }
    }

    pub(super) fn string(&mut self) -> Result<String> {
        self.read(Read::Str);
        let b = self.next_bytes()?;
        String::from_utf8(b).map_err(|e| self.bad("UTF-8", Some(Value::BulkString(e.into_bytes()))))
    }
}

/// The decoder's reads follow the script's reply shape: a prefix of it, or
/// all of it when the decoder read the reply to its end. A decoder that
/// reads what the script does not send is a bug of this build.
#[cfg(debug_assertions)]
impl Drop for Reply {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Some(shape) = self.spec.reply_shape() {
            let whole = self.items.len() == 0;
            assert!(
                shape.follows(&self.reads, whole),
                "{}: the decoder read {:?}{}, which does not follow the reply shape {shape}",
                self.script,
                self.reads,
                if whole { " (the whole reply)" } else { "" }
            );
        }
    }
}

/// A reply code that is not among a script's answers: the server runs
/// other code than this build's.
pub(super) fn unexpected(script: &'static str, code: Code) -> Error {
    Error::Protocol {
        script,
        detail: format!("unexpected status {code:?}"),
    }
}

/// A settling script's code for the lease of job `id` under `token`: `Ok`
/// for a move made or already made, the typed error for a missing job or a
/// lost lease.
pub(super) fn fenced(script: &'static str, id: &str, token: u64, code: Code) -> Result<Code> {
    match code {
        Code::NotFound => Err(Error::JobNotFound(id.to_owned())),
        Code::LeaseLost => Err(Error::LeaseLost {
            id: id.to_owned(),
            token,
        }),
        c @ (Code::Ok | Code::Already | Code::Failed | Code::Cancelled | Code::Expired) => Ok(c),
        other => Err(unexpected(script, other)),
    }
}
