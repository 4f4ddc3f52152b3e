//! [`Client`]: one set of connections and one maintenance task shared by
//! every queue of a process.
//!
//! An application with fifty queues makes one `Client` and asks it for
//! each [`Queue`]: they share one multiplexed connection (consumers add one
//! blocking connection each for their wake-ups), and the consumers' queues
//! are reaped by one maintenance task instead of one reaper each.
//!
//! # Production connections
//!
//! - **TLS** (feature `tls`): a `rediss://` URL; the server's certificate
//!   is checked against the system's roots, or only against the CA given
//!   to `ClientOptions::tls_ca`; `ClientOptions::tls_client_cert`
//!   presents a client certificate (mutual TLS). A refused handshake is
//!   [`Error::Tls`]. Connecting makes ring rustls's process-wide crypto
//!   provider unless the program installed one.
//! - **ACL**: a user needs only the commands and keys
//!   [`crate::acl::rules`] lists (no `@dangerous` command).
//! - **Sentinel**: [`Client::connect_sentinel`] finds
//!   the master through the sentinels, and finds it again after a failover.
//!
//! Passwords never appear in this crate's `Debug` output, errors or logs.

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::conn::sentinel::{SentinelConn, Sentinels};
use crate::conn::{Conn, Dedicated};
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
///
/// Its `Debug` output shows no password and no key.
#[derive(Clone)]
#[must_use]
pub struct ClientOptions {
    response_timeout: Duration,
    connection_timeout: Duration,
    allow_eviction: bool,
    /// PEM certificates of the CA to trust instead of the system's roots.
    #[cfg(feature = "tls")]
    tls_ca: Option<Vec<u8>>,
    /// PEM certificate chain and private key presented to the server.
    #[cfg(feature = "tls")]
    tls_client: Option<(Vec<u8>, Vec<u8>)>,
    /// User and password on the master Sentinel names.
    master_auth: Option<(Option<String>, String)>,
    /// Database on the master Sentinel names.
    master_db: i64,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connection_timeout: DEFAULT_CONNECTION_TIMEOUT,
            allow_eviction: false,
            #[cfg(feature = "tls")]
            tls_ca: None,
            #[cfg(feature = "tls")]
            tls_client: None,
            master_auth: None,
            master_db: 0,
        }
    }
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("ClientOptions");
        d.field("response_timeout", &self.response_timeout)
            .field("connection_timeout", &self.connection_timeout)
            .field("allow_eviction", &self.allow_eviction);
        #[cfg(feature = "tls")]
        d.field("tls_ca", &self.tls_ca.as_ref().map(|_| "<set>"))
            .field("tls_client_cert", &self.tls_client.as_ref().map(|_| "<redacted>"));
        d.field(
            "master_auth",
            &self.master_auth.as_ref().map(|(user, _)| (user, "<redacted>")),
        )
        .field("master_db", &self.master_db);
        d.finish()
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

    /// Trusts only the CA certificates in `pem` (one or more PEM
    /// certificates) for the server's certificate, instead of the system's
    /// roots: for a server whose certificate a private CA signed. Only
    /// with a `rediss://` URL (else connecting refuses with
    /// [`Error::InvalidOption`]); a server whose certificate this CA did not
    /// sign is refused with [`Error::Tls`]. Feature `tls`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let opts = echomq::ClientOptions::new()
    ///     .tls_ca(std::fs::read("ca.crt")?)
    ///     .tls_client_cert(std::fs::read("client.crt")?, std::fs::read("client.key")?);
    /// let client = echomq::Client::connect_with("rediss://queue.internal:6380", opts).await?;
    /// # let _ = client; Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_ca = Some(pem.into());
        self
    }

    /// Presents this client certificate (a PEM chain, the client's own
    /// first) and its PEM private key to the server: mutual TLS, for a
    /// server with `tls-auth-clients yes`. Only with a `rediss://` URL.
    /// Feature `tls`. The key is kept in memory and never shown by `Debug`.
    #[cfg(feature = "tls")]
    pub fn tls_client_cert(mut self, cert_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        self.tls_client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// The user (`None` for the `default` user) and password with which
    /// [`Client::connect_sentinel`] logs in to the master the sentinels
    /// name (the sentinels' own user and password go in their URLs).
    pub fn master_auth(mut self, username: Option<&str>, password: &str) -> Self {
        self.master_auth = Some((username.map(str::to_owned), password.to_owned()));
        self
    }

    /// The database [`Client::connect_sentinel`] selects on the master
    /// (default 0).
    pub fn master_db(mut self, db: i64) -> Self {
        self.master_db = db;
        self
    }

    /// The certificates for the redis crate, if any were given.
    #[cfg(feature = "tls")]
    fn certificates(&self) -> Option<redis::TlsCertificates> {
        if self.tls_ca.is_none() && self.tls_client.is_none() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self.tls_client.as_ref().map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.tls_ca.clone(),
        })
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
    /// The shared connection; it also opens the dedicated connections
    /// consumers block on (BLPOP must not share the multiplexed
    /// connection, and needs its timeout off), to the same server with the
    /// same credentials and TLS settings.
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
    /// Connects to `url` (`redis://[user:password@]host:port/db`, or
    /// `rediss://` for TLS with feature `tls`) with
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
    /// As [`connect`](Self::connect); [`Error::InvalidOption`] for an
    /// option out of range, a URL that does not parse, a `rediss://` URL
    /// without feature `tls`, or TLS certificates with a `redis://` URL;
    /// [`Error::Tls`] when the TLS handshake fails. No error shows the
    /// URL's password.
    pub async fn connect_with(url: &str, opts: ClientOptions) -> Result<Client> {
        let redis = open(url, &opts)?;
        Self::build(redis, opts).await
    }

    /// Builds a client on a `redis::Client` (for connection settings the
    /// URL form and [`ClientOptions`] do not cover). Its TLS settings are
    /// the `redis::Client`'s own.
    ///
    /// # Errors
    /// As [`connect_with`](Self::connect_with); [`Error::InvalidOption`]
    /// when `opts` holds TLS certificates (give them to the
    /// `redis::Client` instead).
    pub async fn from_redis(redis: redis::Client, opts: ClientOptions) -> Result<Client> {
        #[cfg(feature = "tls")]
        if opts.certificates().is_some() {
            return Err(Error::InvalidOption {
                name: "tls_ca",
                reason: "Client::from_redis takes the redis::Client's TLS settings: \
                         build it with redis::Client::build_with_tls instead"
                    .into(),
            });
        }
        Self::build(redis, opts).await
    }

    async fn build(redis: redis::Client, opts: ClientOptions) -> Result<Client> {
        opts.check()?;
        #[cfg(feature = "tls")]
        install_crypto_provider();
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(opts.response_timeout))
            .set_connection_timeout(Some(opts.connection_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let manager = ConnectionManager::new_with_config(redis.clone(), config)
            .await
            .map_err(Error::from_redis)?;
        let conn = Conn::single(manager, redis.clone());
        if is_cluster_node(&conn).await {
            #[cfg(feature = "cluster")]
            return Self::start(cluster(vec![redis.get_connection_info().clone()], &opts).await?, opts).await;
            #[cfg(not(feature = "cluster"))]
            return Err(Error::InvalidOption {
                name: "url",
                reason: "the server is a Valkey Cluster node: turn on echomq's `cluster` feature \
                         (a plain connection would fail on every queue whose slot is on another node)"
                    .into(),
            });
        }
        Self::start(conn, opts).await
    }

    /// Connects to the Valkey (or Redis) Cluster that `nodes` belong to
    /// (feature `cluster`). Each of `nodes` is a node's URL
    /// (`redis://[user:password@]host:port`, or `rediss://` with feature
    /// `tls`; the first one's user, password and TLS mode are used for
    /// every node); one reachable node is enough, the others are asked if
    /// it is not. [`Client::connect`] to a cluster node does the same with
    /// that one node.
    ///
    /// Every queue lives in one hash slot (its keys share the hash tag
    /// `{name}`), so its scripts run on the master of that slot, and queues
    /// spread over the masters by their names. Calls follow the cluster's
    /// slot map: `MOVED` and `ASK` during a resharding are followed, and
    /// `TRYAGAIN` and `CLUSTERDOWN` during a failover are retried, all
    /// within the call's [`response_timeout`](ClientOptions::response_timeout).
    /// A worker serving queues on several masters waits for work on each
    /// of them (one blocking connection per slot it serves).
    ///
    /// Replication inside the cluster is asynchronous: writes a master
    /// acknowledged that had not reached its replica are lost when the
    /// replica takes over (see [`Durability`](crate::Durability) for
    /// `WAIT`, and the README's "Valkey Cluster" for measured figures).
    ///
    /// ```no_run
    /// # async fn demo() -> echomq::Result<()> {
    /// let nodes = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"];
    /// let client = echomq::Client::connect_cluster(&nodes, echomq::ClientOptions::new()).await?;
    /// let mail = client.queue("mail").await?; // on the master of slot of "mail"
    /// # let _ = mail; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for no node, a URL that does not parse, or
    /// URLs that differ in user, password or TLS mode; a server error when
    /// no node answers; then as [`connect`](Self::connect).
    #[cfg(feature = "cluster")]
    pub async fn connect_cluster(nodes: &[&str], opts: ClientOptions) -> Result<Client> {
        opts.check()?;
        #[cfg(feature = "tls")]
        install_crypto_provider();
        if nodes.is_empty() {
            return Err(Error::InvalidOption {
                name: "nodes",
                reason: "no cluster node URL given".into(),
            });
        }
        let infos = nodes
            .iter()
            .map(|url| redis::IntoConnectionInfo::into_connection_info(*url).map_err(|e| bad_url(url, e)))
            .collect::<Result<Vec<_>>>()?;
        let conn = cluster(infos, &opts).await?;
        Self::start(conn, opts).await
    }

    /// Wraps `conn` and runs the start-up self-check.
    async fn start(conn: Conn, opts: ClientOptions) -> Result<Client> {
        let client = Client {
            inner: Arc::new(Inner {
                conn,
                opts,
                maintenance: Arc::new(Maintenance::default()),
            }),
        };
        client.startup_check(client.inner.opts.allow_eviction).await?;
        Ok(client)
    }

    /// Connects to the master that the sentinels at `sentinels` name
    /// `master_name`, and follows it through failovers.
    ///
    /// Each of `sentinels` is a sentinel's URL (`redis://host:26379`,
    /// with its user and password if it requires one); they are asked in
    /// this order. The master's user and password are
    /// [`ClientOptions::master_auth`]. With `rediss://` sentinel URLs
    /// (feature `tls`), the master is reached over TLS too, with the same
    /// `tls_ca` and `tls_client_cert` options.
    ///
    /// Every call, and every consumer's blocking connection, goes to the
    /// master found. When a call fails in a way that says the master is
    /// gone or demoted (connection refused, dropped or timed out,
    /// `READONLY`, `MASTERDOWN`), that call returns its error
    /// ([`Error::is_transient`]) and the next one asks the sentinels again,
    /// so consumers, the maintenance task and producers that retry carry
    /// on against the promoted replica by themselves once Sentinel has
    /// promoted it. Replication is asynchronous: writes acknowledged by the
    /// old master that had not reached the replica are lost in a failover
    /// (the README's "Production connections" measures how many).
    ///
    /// ```no_run
    /// # async fn demo() -> echomq::Result<()> {
    /// let sentinels = ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"];
    /// let opts = echomq::ClientOptions::new().master_auth(Some("echomq"), "secret");
    /// let client = echomq::Client::connect_sentinel(&sentinels, "mymaster", opts).await?;
    /// # let _ = client; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for no sentinel, a URL that does not parse,
    /// or URLs that mix `redis://` and `rediss://`; a server error when
    /// no sentinel names a reachable master (no error shows a password);
    /// then as [`connect`](Self::connect).
    pub async fn connect_sentinel(sentinels: &[&str], master_name: &str, opts: ClientOptions) -> Result<Client> {
        opts.check()?;
        #[cfg(feature = "tls")]
        install_crypto_provider();
        let found = self::sentinels(sentinels, master_name, &opts)?;
        let conn = SentinelConn::connect(found).await.map_err(Error::from_redis)?;
        Self::start(Conn::sentinel(conn), opts).await
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

    /// True when both are handles on the same client (clones of one).
    pub(crate) fn same_as(&self, other: &Client) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn maintenance(&self) -> &Arc<Maintenance> {
        &self.inner.maintenance
    }

    /// A dedicated connection with no response timeout, for blocking reads.
    pub(crate) async fn blocking_connection(&self) -> Result<Dedicated> {
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(self.inner.opts.connection_timeout));
        self.inner.conn.dedicated(&config).await.map_err(Error::from_redis)
    }
}

/// A `redis::Client` for `url` with the TLS settings of `opts`. Errors
/// name what is wrong without repeating the URL (it may hold a password).
fn open(url: &str, opts: &ClientOptions) -> Result<redis::Client> {
    let info = redis::IntoConnectionInfo::into_connection_info(url).map_err(|e| bad_url(url, e))?;
    #[cfg(feature = "tls")]
    if let Some(certs) = opts.certificates() {
        if !matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            return Err(Error::InvalidOption {
                name: "tls_ca",
                reason: format!(
                    "TLS certificates were given for a URL without TLS ({}): use rediss://",
                    crate::error::redact_url(url)
                ),
            });
        }
        return redis::Client::build_with_tls(info, certs).map_err(Error::from_redis);
    }
    let _ = opts;
    redis::Client::open(info).map_err(Error::from_redis)
}

/// True when the server answers that it is a cluster node (`INFO cluster`;
/// a user not allowed `INFO` is taken for a single server).
async fn is_cluster_node(conn: &Conn) -> bool {
    let info: redis::RedisResult<String> = redis::cmd("INFO").arg("cluster").query_async(&mut conn.clone()).await;
    info.is_ok_and(|i| i.lines().any(|l| l.trim() == "cluster_enabled:1"))
}

/// A cluster connection through `seeds`, with the timeouts (and TLS
/// certificates) of `opts`.
#[cfg(feature = "cluster")]
async fn cluster(seeds: Vec<redis::ConnectionInfo>, opts: &ClientOptions) -> Result<Conn> {
    let builder = redis::cluster::ClusterClientBuilder::new(seeds)
        .connection_timeout(opts.connection_timeout)
        .response_timeout(opts.response_timeout)
        // Failovers and reshardings answer TRYAGAIN/CLUSTERDOWN/MOVED for
        // a while; the call's overall bound is the response timeout.
        .retries(CLUSTER_RETRIES);
    #[cfg(feature = "tls")]
    let builder = match opts.certificates() {
        Some(certs) => builder.certs(certs),
        None => builder,
    };
    let client = builder.build().map_err(|e| Error::InvalidOption {
        name: "nodes",
        reason: e.to_string(),
    })?;
    let c = crate::conn::cluster::Cluster::connect(client, opts.connection_timeout)
        .await
        .map_err(Error::from_redis)?;
    Ok(Conn::cluster(c))
}

/// How often a cluster call is tried again after a redirection or a
/// `TRYAGAIN`/`CLUSTERDOWN` answer (with a growing pause, bounded by the
/// response timeout).
#[cfg(feature = "cluster")]
const CLUSTER_RETRIES: u32 = 16;

/// The error for a URL the redis crate refused.
fn bad_url(url: &str, e: redis::RedisError) -> Error {
    let url = crate::error::redact_url(url);
    let tls = url.starts_with("rediss://") || url.starts_with("valkeys://");
    let reason = if tls && !cfg!(feature = "tls") {
        format!("{url}: a TLS URL needs echomq's `tls` feature")
    } else {
        format!("{url}: {e}")
    };
    Error::InvalidOption { name: "url", reason }
}

/// Makes ring the process's rustls crypto provider unless one is set:
/// rustls cannot choose by itself when another crate of the program turns
/// on a second provider.
#[cfg(feature = "tls")]
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// How [`Client::connect_sentinel`] finds the master: the sentinels at
/// `sentinels`, the master's credentials and TLS settings from `opts`.
fn sentinels(sentinels: &[&str], master_name: &str, opts: &ClientOptions) -> Result<Sentinels> {
    let invalid = |reason: String| Error::InvalidOption {
        name: "sentinels",
        reason,
    };
    if sentinels.is_empty() {
        return Err(invalid("no sentinel URL given".into()));
    }
    let mut clients = Vec::new();
    let mut tls = Vec::new();
    for url in sentinels {
        let client = open(url, opts)?;
        tls.push(matches!(
            client.get_connection_info().addr(),
            redis::ConnectionAddr::TcpTls { .. }
        ));
        clients.push(client);
    }
    if tls.iter().any(|t| *t != tls[0]) {
        return Err(invalid("the sentinels' URLs mix redis:// and rediss://".into()));
    }
    let mut master = redis::RedisConnectionInfo::default().set_db(opts.master_db);
    if let Some((user, password)) = &opts.master_auth {
        if let Some(user) = user {
            master = master.set_username(user);
        }
        master = master.set_password(password);
    }
    Ok(Sentinels {
        sentinels: clients,
        master_name: master_name.to_owned(),
        master,
        tls: tls[0],
        #[cfg(feature = "tls")]
        certs: opts.certificates(),
        config: AsyncConnectionConfig::new()
            .set_response_timeout(Some(opts.response_timeout))
            .set_connection_timeout(Some(opts.connection_timeout)),
    })
}
