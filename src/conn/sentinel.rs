//! The master that Sentinel names, found again after a failover.
//!
//! A `ConnectionManager` reconnects to one address forever, so after a
//! failover it would keep dialling the dead master (or write to the old
//! master demoted to a replica). The redis crate's `SentinelClient` finds
//! the master once, and only for a user allowed `ROLE` (a `@dangerous`
//! command). This is the smallest mechanism that follows the master
//! instead, as the Sentinel client guidelines describe:
//!
//! - a lookup asks each sentinel in turn `SENTINEL GET-MASTER-ADDR-BY-NAME`,
//!   connects to the address the first one that answers names, and checks
//!   with `ROLE` that it is a master (where the user's ACL refuses `ROLE`,
//!   the sentinel's word is taken, and a demoted master is noticed by its
//!   `READONLY` answers instead);
//! - a call that fails in a way that says "this is not (or no longer) the
//!   master" — the connection refused, dropped or timed out, a `READONLY`
//!   or `MASTERDOWN` reply — forgets the connection and returns its error
//!   (a transient one: callers retry, as they do on any dropped
//!   connection);
//! - the next call looks the master up again. During a failover the
//!   sentinels still name the old master (it refuses connections) until
//!   they have promoted a replica; then calls reach the new master.
//!
//! One lookup runs at a time; callers that waited for a lookup that failed
//! get its error instead of starting another, so a burst of calls costs
//! one lookup, not one each.

use std::sync::Mutex;
use std::time::Instant;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, IntoConnectionInfo, Pipeline, RedisConnectionInfo, RedisError,
    RedisResult, Value,
};
use tracing::{debug, info, warn};

/// Where the sentinels are and how to reach the master they name.
pub(crate) struct Sentinels {
    /// One client per sentinel, in the order given.
    pub(crate) sentinels: Vec<redis::Client>,
    /// The name the sentinels monitor the master under.
    pub(crate) master_name: String,
    /// User, password and database on the master.
    pub(crate) master: RedisConnectionInfo,
    /// Whether the master is reached over TLS.
    pub(crate) tls: bool,
    /// The CA and client certificate for a TLS master.
    #[cfg(feature = "tls")]
    pub(crate) certs: Option<redis::TlsCertificates>,
    /// Timeouts of the connections to the sentinels and the master.
    pub(crate) config: AsyncConnectionConfig,
}

/// One connection to the master Sentinel named, shared by every queue call.
pub(crate) struct SentinelConn {
    /// Locked for the length of one lookup, so lookups never run side by side.
    lookup: tokio::sync::Mutex<Lookup>,
    /// The master's connection, once found; `None` after a failure that
    /// says it may no longer be the master.
    current: Mutex<Option<Master>>,
    db: i64,
}

struct Lookup {
    sentinels: Sentinels,
    /// Number of the next connection (tells an old one from a newer one).
    next: u64,
    /// When the last lookup failed, and why: callers that were waiting
    /// for it share its answer.
    failed: Option<(Instant, RedisError)>,
}

/// A connection to the master, numbered.
#[derive(Clone)]
struct Master {
    number: u64,
    /// Opens dedicated connections to the same master.
    client: redis::Client,
    conn: MultiplexedConnection,
}

/// True when `e` says the connection may not reach the master any more.
fn lost_master(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_unrecoverable_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(e.code(), Some("READONLY" | "MASTERDOWN"))
}

/// An error that says no master could be reached (transient: an I/O
/// error, as a refused connection is).
fn unreachable(detail: String) -> RedisError {
    std::io::Error::new(std::io::ErrorKind::NotConnected, detail).into()
}

impl Sentinels {
    /// Asks the sentinels for the master and connects to it.
    async fn find_master(&self) -> RedisResult<(redis::Client, MultiplexedConnection)> {
        let mut last: Option<RedisError> = None;
        let mut tried: Vec<(String, u16)> = Vec::new();
        for sentinel in &self.sentinels {
            let named = async {
                let mut c = sentinel
                    .get_multiplexed_async_connection_with_config(&self.config)
                    .await?;
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.master_name)
                    .query_async::<Option<(String, u16)>>(&mut c)
                    .await
            }
            .await;
            let addr = match named {
                Ok(Some(addr)) => addr,
                Ok(None) => {
                    last = Some(RedisError::from((
                        redis::ErrorKind::MasterNameNotFoundBySentinel,
                        "no sentinel monitors a master by this name",
                        self.master_name.clone(),
                    )));
                    continue;
                }
                Err(e) => {
                    debug!(error = %e, "a sentinel did not answer");
                    last = Some(e);
                    continue;
                }
            };
            if tried.contains(&addr) {
                continue;
            }
            tried.push(addr.clone());
            match self.connect(&addr.0, addr.1).await {
                Ok(found) => return Ok(found),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| unreachable("no sentinel given".into())))
    }

    /// Connects to `host:port` and checks that it is a master.
    async fn connect(&self, host: &str, port: u16) -> RedisResult<(redis::Client, MultiplexedConnection)> {
        let addr = if self.tls {
            ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host.to_owned(), port)
        };
        let info = addr.into_connection_info()?.set_redis_settings(self.master.clone());
        #[cfg(feature = "tls")]
        let client = match (&self.certs, self.tls) {
            (Some(certs), true) => redis::Client::build_with_tls(info, certs.clone())?,
            _ => redis::Client::open(info)?,
        };
        #[cfg(not(feature = "tls"))]
        let client = redis::Client::open(info)?;
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        match redis::cmd("ROLE").query_async::<Value>(&mut conn).await {
            Ok(Value::Array(role)) => match role.first() {
                Some(Value::BulkString(r)) if r == b"master" => Ok((client, conn)),
                _ => Err(unreachable(format!(
                    "{host}:{port}, which the sentinels name as master {}, is not a master (yet)",
                    self.master_name
                ))),
            },
            Ok(_) => Err(unreachable(format!(
                "{host}:{port} answered ROLE with something unexpected"
            ))),
            // The ACL refuses ROLE (a @dangerous command): take the
            // sentinel's word; a demoted master answers READONLY later.
            Err(e) if e.code() == Some("NOPERM") => Ok((client, conn)),
            Err(e) => Err(e),
        }
    }
}

impl SentinelConn {
    /// Finds the master through `sentinels` and connects to it.
    pub(crate) async fn connect(sentinels: Sentinels) -> RedisResult<SentinelConn> {
        let db = sentinels.master.db();
        let conn = SentinelConn {
            lookup: tokio::sync::Mutex::new(Lookup {
                sentinels,
                next: 1,
                failed: None,
            }),
            current: Mutex::new(None),
            db,
        };
        conn.master().await?;
        Ok(conn)
    }

    pub(crate) fn db(&self) -> i64 {
        self.db
    }

    /// The number of the master connection in use, if any.
    pub(crate) fn current_number(&self) -> Option<u64> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|m| m.number)
    }

    fn current(&self) -> Option<Master> {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The master's connection: the one in use, or a new one to the master
    /// the sentinels name now.
    async fn master(&self) -> RedisResult<Master> {
        if let Some(m) = self.current() {
            return Ok(m);
        }
        let asked = Instant::now();
        let mut lookup = self.lookup.lock().await;
        // Found, or failed, while this call waited for the lock.
        if let Some(m) = self.current() {
            return Ok(m);
        }
        if let Some((at, e)) = &lookup.failed
            && *at >= asked
        {
            return Err(e.clone());
        }
        match lookup.sentinels.find_master().await {
            Ok((client, conn)) => {
                let m = Master {
                    number: lookup.next,
                    client,
                    conn,
                };
                lookup.next += 1;
                lookup.failed = None;
                info!(master = %address(&m.client), "connected to the master the sentinels name");
                *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(m.clone());
                Ok(m)
            }
            Err(e) => {
                lookup.failed = Some((Instant::now(), e.clone()));
                Err(e)
            }
        }
    }

    /// Forgets connection `number` (not a newer one) after `e`, if `e`
    /// says it may no longer reach the master.
    pub(crate) fn check(&self, number: u64, e: &RedisError) {
        if !lost_master(e) {
            return;
        }
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.as_ref().is_some_and(|m| m.number == number) {
            warn!(error = %e, "lost the master; the next call asks the sentinels again");
            *current = None;
        }
    }

    pub(crate) async fn request(&self, cmd: &Cmd) -> RedisResult<Value> {
        let mut m = self.master().await?;
        let r = m.conn.req_packed_command(cmd).await;
        if let Err(e) = &r {
            self.check(m.number, e);
        }
        r
    }

    pub(crate) async fn request_pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let mut m = self.master().await?;
        let r = m.conn.req_packed_commands(pipeline, offset, count).await;
        if let Err(e) = &r {
            self.check(m.number, e);
        }
        r
    }

    /// A new connection to the current master, with the number of the
    /// master connection it was opened beside.
    pub(crate) async fn dedicated(&self, config: &AsyncConnectionConfig) -> RedisResult<(u64, MultiplexedConnection)> {
        let m = self.master().await?;
        match m.client.get_multiplexed_async_connection_with_config(config).await {
            Ok(conn) => Ok((m.number, conn)),
            Err(e) => {
                self.check(m.number, &e);
                Err(e)
            }
        }
    }
}

/// `host:port` of a client, for logs (never its credentials).
fn address(client: &redis::Client) -> String {
    match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}"),
        _ => "a unix socket".to_owned(),
    }
}
