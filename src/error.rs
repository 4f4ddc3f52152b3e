//! The one error type of the crate.

#[cfg(feature = "axum")]
mod http_response;

use std::time::Duration;

/// `Result` with echomq's [`Error`].
pub type Result<T = (), E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in echomq, each with a message a user can act on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The queue name cannot be used in a key.
    #[error("invalid queue name {name:?}: {reason}")]
    InvalidQueueName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A job id, dedup id or key prefix cannot be used.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidId {
        /// Which kind of id ("job id", "dedup id", "key prefix").
        what: &'static str,
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An option is out of range.
    #[error("invalid option {name}: {reason}")]
    InvalidOption {
        /// The option.
        name: &'static str,
        /// The allowed range.
        reason: String,
    },
    /// The encoded payload is larger than the queue's limit.
    #[error("payload of {size} bytes exceeds the limit of {limit} bytes")]
    PayloadTooLarge {
        /// Encoded size.
        size: usize,
        /// The configured limit (`QueueOptions::max_payload_bytes`).
        limit: usize,
    },
    /// The payload could not be encoded as JSON.
    #[error("could not encode payload: {0}")]
    Encode(#[source] serde_json::Error),
    /// A stored payload does not decode into the requested type.
    #[error("payload of job {id} does not decode: {source}")]
    Decode {
        /// The job.
        id: String,
        /// The decoder's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// The caller no longer owns the job: its lease expired and was reaped,
    /// or a newer claim holds it. Nothing was changed.
    #[error("lease lost on job {id} (token {token}): it was reaped or is owned by a newer claim")]
    LeaseLost {
        /// The job.
        id: String,
        /// The stale fencing token.
        token: u64,
    },
    /// No job with this id exists (never enqueued, or removed by retention).
    #[error("job {0} not found")]
    JobNotFound(String),
    /// No batch with this id exists on the queue (never opened, or its
    /// record expired after the batch ended: `BatchOptions::keep`).
    #[error("batch {0} not found")]
    BatchNotFound(String),
    /// A batch with this id is already open (or ended and still kept):
    /// nothing was written. A retried open that finds its own batch can
    /// go on with [`Queue::batch`](crate::Queue::batch).
    #[error("batch {0} exists")]
    BatchExists(String),
    /// The batch is closed: no job joins it after its close, and it closes
    /// once. Nothing was written.
    #[error("batch {0} is closed")]
    BatchClosed(String),
    /// No flow with this id exists on the queue (never added, or its
    /// record expired after every node ended: `FlowSpec::keep`), or the
    /// flow has no node of that name.
    #[error("flow {0} not found")]
    FlowNotFound(String),
    /// A flow with this id, or a job with the id one of its nodes would
    /// have (`FLOW:NAME`), exists: nothing was written.
    #[error("flow or job {0} exists")]
    FlowExists(String),
    /// A flow's graph cannot be added: what is wrong with it (a cycle, an
    /// edge to a name not in the flow, two nodes of one name, no nodes,
    /// more than `flow::MAX_NODES`, an option a node cannot take).
    /// Nothing was sent.
    #[error("invalid flow: {0}")]
    InvalidFlow(String),
    /// An operator call left this job alone because it is active (leased
    /// to a worker): wait for it to finish, or let its lease lapse.
    #[error("job {0} is active (leased to a worker); it was left alone")]
    JobActive(String),
    /// [`Queue::obliterate`](crate::Queue::obliterate) refused: jobs of
    /// the queue are leased to workers. Nothing was deleted.
    #[error("queue {queue} has {active} active jobs; obliterate refused (force it to go on)")]
    QueueActive {
        /// The queue.
        queue: String,
        /// Jobs leased to workers.
        active: u64,
    },
    /// A lease, job or marker of one queue was handed to another queue's
    /// handle. Ids and tokens are per queue, so nothing was sent.
    #[error("job {id} was leased from queue {leased_from}, not from queue {queue}")]
    WrongQueue {
        /// The job.
        id: String,
        /// The queue the lease came from (`PREFIX:{NAME}`).
        leased_from: String,
        /// The queue it was handed to.
        queue: String,
    },
    /// The server's ACL refused a command or key this user needs.
    #[error("permission denied by the server's ACL: {detail} (needs {needs})")]
    NoPermission {
        /// What was refused: a command (`command 'config|get'`), access
        /// to a key, or a command or key used inside one of the scripts.
        needs: String,
        /// The server's message.
        detail: String,
    },
    /// One of the library's own tasks (a consumer's settler or claim loop)
    /// died. The consumer stopped claiming and handed back what it held.
    #[error("internal task {task} failed: {detail}")]
    Internal {
        /// The task.
        task: &'static str,
        /// What happened.
        detail: String,
    },
    /// The queue was written by another, incompatible version of echomq
    /// (0.1 wrote layout 1; drain such a queue with 0.1 first).
    #[error("queue {queue} has layout version {found}; this echomq reads layout {supported} only")]
    LayoutMismatch {
        /// The queue.
        queue: String,
        /// The version stored in the queue's meta hash.
        found: String,
        /// The version this crate writes.
        supported: u32,
    },
    /// The server is configured so that jobs could be lost (see `Queue::self_check`).
    #[error("unsafe server configuration: {0}")]
    UnsafeServer(String),
    /// The TLS handshake with the server failed: its certificate is not
    /// signed by a trusted CA ([`ClientOptions::tls_ca`]) or names another
    /// host, or the server refused the client's certificate, or asked for
    /// one and got none ([`ClientOptions::tls_client_cert`]). Retrying does
    /// not help.
    ///
    /// [`ClientOptions::tls_ca`]: crate::ClientOptions
    /// [`ClientOptions::tls_client_cert`]: crate::ClientOptions
    #[error("TLS handshake failed: {detail}")]
    Tls {
        /// What the TLS layer said, e.g. `invalid peer certificate: UnknownIssuer`.
        detail: String,
        /// The error as the redis crate gave it.
        #[source]
        source: redis::RedisError,
    },
    /// A call did not finish within its timeout.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The jobs were stored (or cancelled) on the primary, but fewer
    /// replicas (or fsyncs) than the queue's
    /// [`Durability`](crate::Durability) asks confirmed it in time: it may
    /// be lost if the primary fails now. Transient: do it again with the
    /// same ids once replicas are back. An enqueue with an existing id
    /// ([`EnqueueOptions::id`](crate::EnqueueOptions::id)) does not
    /// duplicate the job; a cancel of a cancelled job answers
    /// [`Cancel::Finished`](crate::admin::Cancel::Finished).
    #[error("{} job(s) written on the primary but confirmed by {acked} of {wanted} (see Durability)", ids.len())]
    NotDurable {
        /// The jobs written (ids the server minted included).
        ids: Vec<String>,
        /// Replicas (or fsyncs) that confirmed.
        acked: u32,
        /// Replicas (or fsyncs) asked for.
        wanted: u32,
    },
    /// The server or the connection failed.
    #[error("server error: {0}")]
    Redis(#[source] redis::RedisError),
    /// An effect given to atomic completion ([`Queue::complete_with`](crate::Queue::complete_with))
    /// cannot be applied: its key lies outside the queue's hash slot or
    /// inside echomq's own keys, or its target holds another type or a
    /// counter out of range. Nothing was applied; the job is still leased.
    #[error("effect {index} ({effect}) refused: {reason}; nothing was applied")]
    EffectRefused {
        /// Which effect (1 for the first).
        index: usize,
        /// The effect, as a command.
        effect: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An effect marker ([`EffectMarker`](crate::EffectMarker)) belongs to
    /// another attempt of the job: a newer attempt took it over, or an
    /// attempt finished the effect. Nothing was changed.
    #[error(
        "effect marker {effect:?} of job {id} is {} by attempt {holder}, not by attempt {token}",
        held_or_done(*.done)
    )]
    MarkerLost {
        /// The job.
        id: String,
        /// The effect name.
        effect: String,
        /// The caller's attempt (fencing token).
        token: u64,
        /// The attempt the marker belongs to.
        holder: u64,
        /// True when `holder` finished the effect; false while it holds it.
        done: bool,
    },
    /// An [`EventReader`](crate::EventReader) resumed from an event the
    /// queue's capped event stream no longer holds: events after it may
    /// have been trimmed away unread. The reader goes on from the oldest
    /// event left.
    #[error(
        "events of queue {queue} after {after} may have been trimmed (the stream is capped); reading on from the oldest left"
    )]
    EventsTrimmed {
        /// The queue.
        queue: String,
        /// The last event id the reader had.
        after: String,
    },
    /// A script answered something this version does not understand.
    #[error("unexpected reply from {script}: {detail}")]
    Protocol {
        /// The script or command.
        script: &'static str,
        /// What was wrong.
        detail: String,
    },
}

/// Longest user-supplied value an error message repeats, in bytes.
pub const MAX_ECHO_BYTES: usize = 80;

/// `value` as an error message shows it: whole when short, else its first
/// [`MAX_ECHO_BYTES`] (cut at a character boundary) and its length.
pub(crate) fn excerpt(value: &str) -> String {
    truncate(value, MAX_ECHO_BYTES)
}

/// `text` cut to at most `max` bytes at a character boundary, saying how
/// long it was when it is cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub(32);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

/// `url` with its password, if any, replaced by `<redacted>`
/// (`redis://user:<redacted>@host:6379/0`), for messages and `Debug`
/// output. Handles the `user:password@` of every scheme and the `pass=`
/// query parameter of `unix://` URLs.
pub(crate) fn redact_url(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(start) = out.find("://").map(|i| i + 3) {
        let end = out[start..].find(['/', '?', '#']).map_or(out.len(), |i| start + i);
        if let Some(at) = out[start..end].rfind('@').map(|i| start + i)
            && let Some(colon) = out[start..at].find(':').map(|i| start + i)
        {
            out.replace_range(colon + 1..at, "<redacted>");
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password") => {
                    format!("{k}=<redacted>")
                }
                _ => kv.to_owned(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

/// What went wrong in a TLS handshake, if `e` is a failed one: rustls's
/// error inside the I/O error the redis crate keeps (behind an `Arc`).
#[cfg(feature = "tls")]
fn tls_failure(e: &redis::RedisError) -> Option<String> {
    use std::error::Error as StdError;
    type Shared = std::sync::Arc<dyn StdError + Send + Sync>;
    let source = StdError::source(e)?;
    let inner: &(dyn StdError + 'static) = match source.downcast_ref::<Shared>() {
        Some(shared) => shared.as_ref(),
        None => source,
    };
    let io = inner.downcast_ref::<std::io::Error>()?;
    let tls = io.get_ref()?.downcast_ref::<rustls::Error>()?;
    Some(tls.to_string())
}

#[cfg(not(feature = "tls"))]
fn tls_failure(_: &redis::RedisError) -> Option<String> {
    None
}

fn held_or_done(done: bool) -> &'static str {
    if done { "done" } else { "held" }
}

impl Error {
    /// A copy of this error for each of several callers that shared one
    /// failed server call (the coalesced enqueue). Transport and server
    /// errors keep their kind; the rest keep their message.
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Redis(e) => Error::Redis(e.clone()),
            Error::Tls { detail, source } => Error::Tls {
                detail: detail.clone(),
                source: source.clone(),
            },
            Error::Timeout(d) => Error::Timeout(*d),
            Error::NotDurable { ids, acked, wanted } => Error::NotDurable {
                ids: ids.clone(),
                acked: *acked,
                wanted: *wanted,
            },
            Error::Protocol { script, detail } => Error::Protocol {
                script,
                detail: detail.clone(),
            },
            other => Error::Protocol {
                script: "enqueue",
                detail: other.to_string(),
            },
        }
    }

    /// Maps a server error, turning an ACL refusal into
    /// [`Error::NoPermission`] and leaving the rest [`Error::Redis`]. An ACL
    /// refusal reads `NOPERM ...` for a command sent directly, and
    /// `ERR ...` for a command or key refused inside a script:
    ///
    /// | server | refused | message |
    /// | --- | --- | --- |
    /// | Valkey 9 | command | `NOPERM User u has no permissions to run the 'info' command` |
    /// | Valkey 9 | key | `NOPERM No permissions to access a key` |
    /// | Valkey 9 | in a script | `ERR ACL failure in script: <one of the above> script: ...` |
    /// | Redis 7.0 | command | `NOPERM this user has no permissions to run the 'info' command` |
    /// | Redis 7.0 | key | `NOPERM this user has no permissions to access one of the keys used as arguments` |
    /// | Redis 7.0 | command in a script | `ERR The user executing the script can't run this command or subcommand script: ...` |
    /// | Redis 7.0 | key in a script | `ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: ...` |
    pub(crate) fn from_redis(e: redis::RedisError) -> Error {
        if let Some(detail) = tls_failure(&e) {
            return Error::Tls { detail, source: e };
        }
        let text = e.detail().map_or_else(|| e.to_string(), str::to_owned);
        let in_script = e.code() == Some("ERR")
            && (text.starts_with("ACL failure in script") || text.starts_with("The user executing the script can't"));
        if e.code() != Some("NOPERM") && !in_script {
            return Error::Redis(e);
        }
        let needs = if let Some(cmd) = text
            .split_once("to run the '")
            .and_then(|(_, rest)| rest.split_once('\''))
            .map(|(cmd, _)| cmd)
        {
            format!("command '{cmd}'")
        } else if text.contains("run this command") {
            "a command that one of echomq's scripts runs".to_owned()
        } else if text.contains("access a key")
            || text.contains("access one of the keys")
            || text.contains("keys mentioned")
        {
            "access to a key this call uses (the user's key patterns must cover the queue's keys)".to_owned()
        } else if text.contains("channel") {
            "access to a channel".to_owned()
        } else {
            "a permission the server did not name".to_owned()
        };
        let detail = match e.code() {
            Some(code) if !text.starts_with(code) => format!("{code} {text}"),
            _ => text,
        };
        Error::NoPermission { needs, detail }
    }

    /// The HTTP status that fits this error when a web handler passes it
    /// on: 400 for bad input, 413 for a payload over the limit, 404 for a
    /// missing job, 409 for a lost lease or a job of another queue, 503
    /// when the server is unreachable or busy (retry later), 500 otherwise.
    /// With the `axum` feature, `Error` is an axum response itself (this
    /// status and a JSON body; see its `IntoResponse` impl), so a handler
    /// returns `Result<_, echomq::Error>`; elsewhere:
    ///
    /// ```
    /// # fn demo(e: echomq::Error) -> (u16, String) {
    /// (e.http_status(), e.to_string())
    /// # }
    /// ```
    pub fn http_status(&self) -> u16 {
        match self {
            _ if self.is_transient() => 503,
            Error::InvalidQueueName { .. } | Error::InvalidId { .. } | Error::InvalidOption { .. } => 400,
            Error::Encode(_) | Error::EffectRefused { .. } | Error::InvalidFlow(_) => 400,
            Error::PayloadTooLarge { .. } => 413,
            Error::NoPermission { .. } => 403,
            Error::JobNotFound(_) | Error::BatchNotFound(_) | Error::FlowNotFound(_) => 404,
            Error::LeaseLost { .. }
            | Error::BatchExists(_)
            | Error::BatchClosed(_)
            | Error::FlowExists(_)
            | Error::WrongQueue { .. }
            | Error::MarkerLost { .. }
            | Error::JobActive(_)
            | Error::QueueActive { .. } => 409,
            _ => 500,
        }
    }

    /// True for failures of the transport (connection refused or dropped,
    /// timeouts, a server still loading) and of a cluster in motion (a
    /// failover's `CLUSTERDOWN`, a resharding's `TRYAGAIN`, or `MOVED`/`ASK`
    /// not followed within the call's bound): the same call may succeed later.
    /// Settlements and enqueues with a caller-chosen id are safe to retry.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Timeout(_) | Error::NotDurable { .. } => true,
            Error::Redis(e) => transient_redis(e),
            _ => false,
        }
    }
}

/// A transport failure (refused, dropped, timed out), a server still
/// loading or busy, or a server or cluster in motion (a failover's
/// `READONLY`, `MASTERDOWN` or `CLUSTERDOWN`, a resharding's `TRYAGAIN`,
/// `MOVED`/`ASK` not followed in time): the same call may succeed later.
pub(crate) fn transient_redis(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.code(),
            Some("LOADING" | "BUSY" | "TRYAGAIN" | "MASTERDOWN" | "READONLY" | "CLUSTERDOWN" | "MOVED" | "ASK")
        )
        || e.kind() == redis::ErrorKind::ClusterConnectionNotFound
}

/// Every server error becomes ours through one mapping, so an ACL
/// refusal is [`Error::NoPermission`] wherever `?` meets it.
impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        Error::from_redis(e)
    }
}
