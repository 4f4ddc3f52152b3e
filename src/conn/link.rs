//! [`Link`]: the process's connection to the server, made from a URL (or
//! several, for Sentinel and Cluster) and [`ClientOptions`]: the shared
//! multiplexed connection every queue call goes through, and what it takes
//! to open the dedicated connections blocking reads need.

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::options::ClientOptions;
use super::sentinel::{SentinelConn, Sentinels};
use super::{Conn, Dedicated};
use crate::error::{Error, Result};

/// A cheap `Clone` handle on one connection to the server (one server, the
/// master Sentinel names, or a cluster), shared by every queue a
/// [`Client`](crate::Client) opens.
#[derive(Clone)]
pub(crate) struct Link {
    inner: Arc<Inner>,
}

struct Inner {
    /// The shared connection; it also opens the dedicated connections
    /// consumers block on (BLPOP must not share the multiplexed
    /// connection, and needs its timeout off), to the same server with the
    /// same credentials and TLS settings.
    conn: Conn,
    /// How long opening a dedicated connection may take.
    connection_timeout: Duration,
}

impl Link {
    /// Whether `other` is this link (a handle of the same client).
    pub(crate) fn same(&self, other: &Link) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn new(conn: Conn, opts: &ClientOptions) -> Link {
        Link {
            inner: Arc::new(Inner {
                conn,
                connection_timeout: opts.connection_timeout,
            }),
        }
    }

    /// Connects to `url` with `opts` (a cluster node's URL gives a cluster
    /// connection, with feature `cluster`).
    pub(crate) async fn connect(url: &str, opts: &ClientOptions) -> Result<Link> {
        let redis = open(url, opts)?;
        Self::build(redis, opts).await
    }

    /// A link over a `redis::Client` the caller built; its TLS settings are
    /// the `redis::Client`'s own.
    pub(crate) async fn from_redis(redis: redis::Client, opts: &ClientOptions) -> Result<Link> {
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

    async fn build(redis: redis::Client, opts: &ClientOptions) -> Result<Link> {
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
            return Ok(Self::new(
                cluster(vec![redis.get_connection_info().clone()], opts).await?,
                opts,
            ));
            #[cfg(not(feature = "cluster"))]
            return Err(Error::InvalidOption {
                name: "url",
                reason: "the server is a Valkey Cluster node: turn on echomq's `cluster` feature \
                         (a plain connection would fail on every queue whose slot is on another node)"
                    .into(),
            });
        }
        Ok(Self::new(conn, opts))
    }

    /// Connects to the cluster that `nodes` (node URLs) belong to.
    #[cfg(feature = "cluster")]
    pub(crate) async fn connect_cluster(nodes: &[&str], opts: &ClientOptions) -> Result<Link> {
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
        Ok(Self::new(cluster(infos, opts).await?, opts))
    }

    /// Connects to the master the sentinels at `sentinels` name `master_name`.
    pub(crate) async fn connect_sentinel(sentinels: &[&str], master_name: &str, opts: &ClientOptions) -> Result<Link> {
        opts.check()?;
        #[cfg(feature = "tls")]
        install_crypto_provider();
        let found = self::sentinels(sentinels, master_name, opts)?;
        let conn = SentinelConn::connect(found).await.map_err(Error::from_redis)?;
        Ok(Self::new(Conn::sentinel(conn), opts))
    }

    /// The shared connection (not bound to any queue's slot).
    pub(crate) fn conn(&self) -> Conn {
        self.inner.conn.clone()
    }

    /// True when both are handles on the same link (clones of one): their
    /// queues share one server connection, so one blocking wait can serve
    /// them all.
    pub(crate) fn same_as(&self, other: &Link) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A dedicated connection with no response timeout, for blocking reads.
    pub(crate) async fn blocking_connection(&self) -> Result<Dedicated> {
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(self.inner.connection_timeout));
        self.inner.conn.dedicated(&config).await.map_err(Error::from_redis)
    }
}

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
        // One bound per call, retries and redirections included, and none
        // per attempt: with both, a process that was paused (a stop, a
        // frozen VM) found both expired at once, the redis crate sent the
        // timed-out command again before the call gave up, and the server
        // ran it twice (a script: an enqueue stored twice, a claim leasing
        // jobs nobody holds). The price: a call that meets a node that
        // hangs (stopped, cut off) waits for it until its bound instead of
        // being tried elsewhere within it; the next call is routed afresh.
        .overall_response_timeout(Some(opts.response_timeout))
        // Failovers and reshardings answer TRYAGAIN/CLUSTERDOWN/MOVED for
        // a while.
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

/// How [`Link::connect_sentinel`] finds the master: the sentinels at
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
