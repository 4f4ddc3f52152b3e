//! [`Client`]: one set of connections and one maintenance task shared by
//! every queue of a process.
//!
//! An application with fifty queues makes one `Client` and asks it for
//! each [`Queue`]: they share one multiplexed connection (consumers add one
//! blocking connection each for their wake-ups), and the consumers' queues
//! are reaped by one maintenance task instead of one reaper each.

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};

use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::maintenance::Maintenance;
use crate::queue::{Queue, QueueOptions};
use crate::settings;

/// Default time a server call may take before it fails with a timeout.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time to establish a connection.
pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest response or connection timeout accepted.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3_600);

/// Connection settings of a [`Client`], checked when it connects.
///
/// ```
/// use std::time::Duration;
/// let opts = echomq::ClientOptions::new().response_timeout(Duration::from_secs(2));
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct ClientOptions {
    response_timeout: Duration,
    connection_timeout: Duration,
    allow_eviction: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connection_timeout: DEFAULT_CONNECTION_TIMEOUT,
            allow_eviction: false,
        }
    }
}

impl ClientOptions {
    /// The defaults (see each setter).
    pub fn new() -> Self {
        Self::default()
    }
    /// How long a server call may take (default
    /// [`DEFAULT_RESPONSE_TIMEOUT`]; 1 ms to [`MAX_TIMEOUT`]).
    pub fn response_timeout(mut self, d: Duration) -> Self {
        self.response_timeout = d;
        self
    }
    /// How long connecting may take (default
    /// [`DEFAULT_CONNECTION_TIMEOUT`]; 1 ms to [`MAX_TIMEOUT`]).
    pub fn connection_timeout(mut self, d: Duration) -> Self {
        self.connection_timeout = d;
        self
    }
    /// Connect even when the server's `maxmemory-policy` may evict keys
    /// (default false: connecting refuses with [`Error::UnsafeServer`],
    /// since an evicted job record is a lost job).
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    fn check(&self) -> Result<()> {
        let min = Duration::from_millis(1);
        settings::duration("response_timeout", self.response_timeout, min, MAX_TIMEOUT)?;
        settings::duration("connection_timeout", self.connection_timeout, min, MAX_TIMEOUT)?;
        Ok(())
    }
}

/// A cheap `Clone` handle on the connections and maintenance shared by the
/// queues of a process.
///
/// ```no_run
/// # async fn demo() -> echomq::Result<()> {
/// let client = echomq::Client::connect("redis://127.0.0.1:6379").await?;
/// let mail = client.queue("mail").await?;
/// let billing = client.queue("billing").await?; // same connection
/// # let _ = (mail, billing); Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    /// Opens the dedicated connections consumers block on (BLPOP must not
    /// share the multiplexed connection, and needs its timeout off).
    redis: redis::Client,
    conn: Conn,
    opts: ClientOptions,
    /// Reaps (and sweeps) the queues that consumers of this client serve.
    maintenance: Arc<Maintenance>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to `url` (`redis://[user:password@]host:port/db`) with
    /// default options and runs the server self-check
    /// ([`Queue::self_check`]), which logs what the server's persistence
    /// settings let echomq promise.
    ///
    /// # Errors
    /// A connection error ([`Error::Redis`]) if the server cannot be
    /// reached; [`Error::UnsafeServer`] for a server that may evict keys;
    /// [`Error::NoPermission`] for a user the server's ACL does not allow
    /// to run scripts.
    pub async fn connect(url: &str) -> Result<Client> {
        Self::connect_with(url, ClientOptions::default()).await
    }

    /// Connects to `url` with `opts`.
    ///
    /// # Errors
    /// As [`connect`](Self::connect), and [`Error::InvalidOption`].
    pub async fn connect_with(url: &str, opts: ClientOptions) -> Result<Client> {
        let redis = redis::Client::open(url).map_err(Error::from_redis)?;
        Self::from_redis(redis, opts).await
    }

    /// Builds a client on a `redis::Client` (for TLS, auth or any
    /// connection settings the URL form does not cover).
    ///
    /// # Errors
    /// As [`connect_with`](Self::connect_with).
    pub async fn from_redis(redis: redis::Client, opts: ClientOptions) -> Result<Client> {
        opts.check()?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(opts.response_timeout))
            .set_connection_timeout(Some(opts.connection_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let manager = ConnectionManager::new_with_config(redis.clone(), config)
            .await
            .map_err(Error::from_redis)?;
        let client = Client {
            inner: Arc::new(Inner {
                redis,
                conn: Conn::new(manager),
                opts,
                maintenance: Arc::new(Maintenance::default()),
            }),
        };
        client.startup_check(client.inner.opts.allow_eviction).await?;
        Ok(client)
    }

    /// A handle on queue `name` with default options.
    ///
    /// # Errors
    /// [`Error::InvalidQueueName`], [`Error::LayoutMismatch`], server errors.
    pub async fn queue(&self, name: &str) -> Result<Queue> {
        self.queue_with(name, QueueOptions::default()).await
    }

    /// A handle on queue `name` with `opts`.
    ///
    /// # Errors
    /// As [`queue`](Self::queue), and [`Error::InvalidOption`].
    pub async fn queue_with(&self, name: &str, opts: QueueOptions) -> Result<Queue> {
        Queue::open(self.clone(), name, opts).await
    }

    pub(crate) fn conn(&self) -> Conn {
        self.inner.conn.clone()
    }

    pub(crate) fn maintenance(&self) -> &Arc<Maintenance> {
        &self.inner.maintenance
    }

    /// A dedicated connection with no response timeout, for blocking reads.
    pub(crate) async fn blocking_connection(&self) -> Result<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(self.inner.opts.connection_timeout));
        self.inner
            .redis
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(Error::from_redis)
    }
}
