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
//!   [`Error::Tls`](crate::Error::Tls). Connecting makes ring rustls's process-wide crypto
//!   provider unless the program installed one.
//! - **ACL**: a user needs only the commands and keys
//!   [`crate::acl::rules`] lists (no `@dangerous` command).
//! - **Sentinel**: [`Client::connect_sentinel`](crate::Client::connect_sentinel) finds
//!   the master through the sentinels, and finds it again after a failover.
//!
//! Passwords never appear in this crate's `Debug` output, errors or logs.

use std::sync::Arc;

use crate::conn::Link;
pub use crate::conn::options::{ClientOptions, DEFAULT_CONNECTION_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT, MAX_TIMEOUT};
use crate::error::Result;
use crate::health::{ScriptLibraries, ServerReport};
use crate::maintenance::Maintenance;
use crate::partition::PartitionedQueue;
use crate::queue::{Backing, Queue, QueueOptions};

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
    /// The link to the server, and the maintenance task that reaps (and
    /// sweeps, and schedules) the queues that workers of this client serve:
    /// what every queue it opens stands on.
    backing: Backing,
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
    /// A connection error ([`Error::Redis`](crate::Error::Redis)) if the server cannot be
    /// reached; [`Error::UnsafeServer`](crate::Error::UnsafeServer) for a server that may evict keys;
    /// [`Error::NoPermission`](crate::Error::NoPermission) for a user the server's ACL does not allow
    /// to run scripts.
    pub async fn connect(url: &str) -> Result<Client> {
        Self::connect_with(url, ClientOptions::default()).await
    }

    /// Connects to `url` with `opts`.
    ///
    /// # Errors
    /// As [`connect`](Self::connect); [`Error::InvalidOption`](crate::Error::InvalidOption) for an
    /// option out of range, a URL that does not parse, a `rediss://` URL
    /// without feature `tls`, or TLS certificates with a `redis://` URL;
    /// [`Error::Tls`](crate::Error::Tls) when the TLS handshake fails. No error shows the
    /// URL's password.
    pub async fn connect_with(url: &str, opts: ClientOptions) -> Result<Client> {
        Self::start(Link::connect(url, &opts).await?, &opts).await
    }

    /// Builds a client on a `redis::Client` (for connection settings the
    /// URL form and [`ClientOptions`] do not cover). Its TLS settings are
    /// the `redis::Client`'s own.
    ///
    /// # Errors
    /// As [`connect_with`](Self::connect_with); [`Error::InvalidOption`](crate::Error::InvalidOption)
    /// when `opts` holds TLS certificates (give them to the
    /// `redis::Client` instead).
    pub async fn from_redis(redis: redis::Client, opts: ClientOptions) -> Result<Client> {
        Self::start(Link::from_redis(redis, &opts).await?, &opts).await
    }

    /// Connects to the Valkey (or Redis) Cluster that `nodes` belong to
    /// (feature `cluster`). Each of `nodes` is a node's URL
    /// (`redis://[user:password@]host:port`, or `rediss://` with feature
    /// `tls`; the first one's user, password and TLS mode are used for
    /// every node); one reachable node is enough, the others are asked if
    /// it is not. [`Client::connect`](crate::Client::connect) to a cluster node does the same with
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
    /// `WAIT`, and the guide's [Valkey Cluster](crate::guide::cluster) for measured figures).
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
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for no node, a URL that does not parse, or
    /// URLs that differ in user, password or TLS mode; a server error when
    /// no node answers; then as [`connect`](Self::connect).
    #[cfg(feature = "cluster")]
    pub async fn connect_cluster(nodes: &[&str], opts: ClientOptions) -> Result<Client> {
        Self::start(Link::connect_cluster(nodes, &opts).await?, &opts).await
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
    /// ([`Error::is_transient`](crate::Error::is_transient)) and the next one asks the sentinels again,
    /// so consumers, the maintenance task and producers that retry carry
    /// on against the promoted replica by themselves once Sentinel has
    /// promoted it. Replication is asynchronous: writes acknowledged by the
    /// old master that had not reached the replica are lost in a failover
    /// (the guide's [Production connections](crate::guide::production_connections) measures how many).
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
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for no sentinel, a URL that does not parse,
    /// or URLs that mix `redis://` and `rediss://`; a server error when
    /// no sentinel names a reachable master (no error shows a password);
    /// then as [`connect`](Self::connect).
    pub async fn connect_sentinel(sentinels: &[&str], master_name: &str, opts: ClientOptions) -> Result<Client> {
        Self::start(Link::connect_sentinel(sentinels, master_name, &opts).await?, &opts).await
    }

    /// Wires `link` and a maintenance task together and runs the start-up
    /// self-check.
    async fn start(link: Link, opts: &ClientOptions) -> Result<Client> {
        crate::health::startup_check(link.conn(), opts.allow_eviction).await?;
        let upkeep = Arc::new(Arc::new(Maintenance::default()));
        Ok(Client {
            backing: Backing { link, upkeep },
        })
    }

    /// A handle on queue `name` with default options.
    ///
    /// # Errors
    /// [`Error::InvalidQueueName`](crate::Error::InvalidQueueName), [`Error::LayoutMismatch`](crate::Error::LayoutMismatch), server errors.
    pub async fn queue(&self, name: &str) -> Result<Queue> {
        self.queue_with(name, QueueOptions::default()).await
    }

    /// A handle on queue `name` with `opts`.
    ///
    /// # Errors
    /// As [`queue`](Self::queue), and [`Error::InvalidOption`](crate::Error::InvalidOption).
    pub async fn queue_with(&self, name: &str, opts: QueueOptions) -> Result<Queue> {
        self.backing.open(name, opts).await
    }

    /// A handle on the queue `name` spread over `partitions` partitions
    /// (1 to [`MAX_PARTITIONS`](crate::partition::MAX_PARTITIONS)), with default options: see
    /// [`partition`](crate::partition).
    ///
    /// ```no_run
    /// # async fn demo(client: echomq::Client) -> echomq::Result<()> {
    /// let orders = client.partitioned_queue("orders", 12).await?;
    /// orders.enqueue(&"order 1").await?;
    /// let worker = echomq::Worker::new()
    ///     .partitioned(&orders, |job: echomq::Job<String>| async move {
    ///         let _ = job.payload();
    ///         Ok(())
    ///     })
    ///     .spawn()?;
    /// # let _ = worker; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a count out of range or fewer
    /// partitions than the queue has; [`Error::InvalidQueueName`](crate::Error::InvalidQueueName) for a
    /// name that is not valid, or too long with its partition suffix;
    /// server errors.
    pub async fn partitioned_queue(&self, name: &str, partitions: usize) -> Result<PartitionedQueue> {
        self.partitioned_queue_with(name, partitions, QueueOptions::default())
            .await
    }

    /// As [`partitioned_queue`](Self::partitioned_queue), every partition
    /// with `opts`.
    ///
    /// # Errors
    /// As [`partitioned_queue`](Self::partitioned_queue), and
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for `opts`.
    pub async fn partitioned_queue_with(
        &self,
        name: &str,
        partitions: usize,
        opts: QueueOptions,
    ) -> Result<PartitionedQueue> {
        PartitionedQueue::open(&self.backing, name, partitions, opts).await
    }

    /// Reads the server's persistence, eviction and replication settings.
    /// Connecting runs it and refuses an eviction policy other than
    /// `noeviction` unless [`ClientOptions::allow_eviction`] is set.
    ///
    /// A user whose ACL denies `INFO` or `CONFIG` (any `-@dangerous` user)
    /// gets a report with the settings it could not read listed in
    /// [`ServerReport::unverified`], not an error.
    ///
    /// [`ClientOptions::allow_eviction`]: crate::ClientOptions::allow_eviction
    ///
    /// # Errors
    /// Server errors other than an ACL refusal of `INFO`, `CONFIG GET` or `HELLO`.
    pub async fn self_check(&self) -> Result<ServerReport> {
        crate::health::self_check(self.backing.link.conn()).await
    }

    /// The echomq function libraries loaded in the server: each echomq
    /// build loads its own (named after a hash of its scripts), and the
    /// server keeps them all until they are deleted. Delete another
    /// build's (`FUNCTION DELETE echomq_HASH`) once no process of that
    /// build runs; one still running would load it again at its next call.
    ///
    /// # Errors
    /// Server errors (an ACL user needs `+function|list`).
    pub async fn script_libraries(&self) -> Result<ScriptLibraries> {
        crate::health::script_libraries(self.backing.link.conn()).await
    }

    /// The names of the queues under key prefix `prefix`
    /// ([`DEFAULT_PREFIX`](crate::keys::DEFAULT_PREFIX) unless the queues
    /// were opened with [`QueueOptions::prefix`](crate::QueueOptions::prefix)),
    /// sorted, each once.
    ///
    /// A queue is known by its meta hash (`PREFIX:{NAME}:meta`), which any
    /// handle writes when it opens the queue ([`Client::queue`](crate::Client::queue)): every
    /// queue opened by echomq 0.2 or later is listed, with jobs or without,
    /// until it is [obliterated](crate::Queue::obliterate). A queue whose
    /// keys were obliterated while a producer went on enqueueing holds jobs
    /// without a meta hash and is not listed
    /// ([`queue_exists`](Self::queue_exists) still finds it).
    ///
    /// The server has no index of queues, so this walks the database's
    /// keyspace with `SCAN ... MATCH PREFIX:{*}:meta TYPE hash`, about
    /// [`DISCOVERY_STEP`](crate::admin::DISCOVERY_STEP) keys per round trip: the server is never held
    /// for more than one step, and the whole walk costs about one round
    /// trip per thousand keys of the database (jobs included). Meant for
    /// operators' tools, not for a hot path.
    ///
    /// ```no_run
    /// # async fn demo(client: echomq::Client) -> echomq::Result<()> {
    /// for name in client.queue_names(echomq::keys::DEFAULT_PREFIX).await? {
    ///     let counts = client.queue(&name).await?.counts().await?;
    ///     println!("{name}: {} pending", counts.pending);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidId`](crate::Error::InvalidId) for a bad prefix; server errors.
    pub async fn queue_names(&self, prefix: &str) -> Result<Vec<String>> {
        crate::admin::queues::queue_names(self.backing.link.conn(), prefix).await
    }

    /// The server's clock (ms since the Unix epoch), the time base of every
    /// deadline, as [`Queue::server_time_ms`](crate::Queue::server_time_ms)
    /// reads it, without a queue.
    ///
    /// # Errors
    /// Server errors.
    pub async fn server_time_ms(&self) -> Result<u64> {
        let (s, us): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.backing.link.conn())
            .await
            .map_err(crate::error::Error::from_redis)?;
        Ok(s * 1000 + us / 1000)
    }

    /// Whether queue `name` under key prefix `prefix` has any key on the
    /// server (its meta hash, a set of jobs, a counter, its schedules), in
    /// one `EXISTS` call and without creating anything, as opening it with
    /// [`Client::queue`](crate::Client::queue) would (opening stamps a new queue's meta hash).
    /// An operator's tool asks this first, so a mistyped name is reported
    /// rather than made into a new, empty queue. Job records alone are not
    /// looked at: a queue whose only keys are job records (its sets were
    /// deleted by hand) answers false.
    ///
    /// ```no_run
    /// # async fn demo(client: echomq::Client) -> echomq::Result<()> {
    /// if !client.queue_exists(echomq::keys::DEFAULT_PREFIX, "mial").await? {
    ///     eprintln!("no queue mial");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidQueueName`](crate::Error::InvalidQueueName), [`Error::InvalidId`](crate::Error::InvalidId) for a bad prefix;
    /// server errors.
    pub async fn queue_exists(&self, prefix: &str, name: &str) -> Result<bool> {
        crate::admin::queues::queue_exists(self.backing.link.conn(), prefix, name).await
    }
}

impl Queue {
    /// Connects to `url` (`redis://host:port/db`) with default options and
    /// opens queue `name` (a shorthand for [`Client::connect`] then
    /// [`Client::queue`]; make one [`Client`] for many queues).
    ///
    /// # Errors
    /// [`Error::InvalidQueueName`](crate::Error::InvalidQueueName), a
    /// connection error ([`Error::Redis`](crate::Error::Redis)) if the
    /// server cannot be reached,
    /// [`Error::LayoutMismatch`](crate::Error::LayoutMismatch),
    /// [`Error::UnsafeServer`](crate::Error::UnsafeServer) for a server
    /// that may evict keys.
    pub async fn connect(url: &str, name: &str) -> Result<Queue> {
        Self::connect_with(url, name, QueueOptions::default()).await
    }

    /// Connects to `url` and opens queue `name` with `opts`.
    ///
    /// # Errors
    /// As [`connect`](Self::connect), and
    /// [`Error::InvalidOption`](crate::Error::InvalidOption).
    pub async fn connect_with(url: &str, name: &str, opts: QueueOptions) -> Result<Queue> {
        crate::keys::Keys::new(&opts.prefix, name)?;
        opts.check()?;
        Client::connect_with(url, ClientOptions::default())
            .await?
            .queue_with(name, opts)
            .await
    }
}
