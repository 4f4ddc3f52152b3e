//! The connection every queue call goes through ([`Link`], made from
//! [`ClientOptions`](options::ClientOptions)). Internal, so the kinds below
//! share the scripts and the API: every script is single-slot (a queue's
//! keys share its hash tag).
//!
//! Three kinds: one server (a [`ConnectionManager`], which reconnects
//! to the same address), the master that Sentinel names, found again
//! after a failover (see [`sentinel`]), and a Valkey Cluster (see
//! `cluster`, feature `cluster`), where a queue's handle is bound to its
//! slot so that even keyless commands reach the queue's node.

#[cfg(feature = "cluster")]
pub(crate) mod cluster;
mod link;
pub(crate) mod options;
pub(crate) mod sentinel;

pub(crate) use self::link::Link;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// A cheap `Clone` handle on a shared, auto-reconnecting connection.
#[derive(Clone)]
pub(crate) struct Conn {
    kind: Kind,
    /// On a cluster, the slot of the queue this handle serves: commands
    /// that name no key go to its master (see `cluster`).
    #[cfg(feature = "cluster")]
    home: Option<redis::cluster_routing::Route>,
}

#[derive(Clone)]
enum Kind {
    /// One server at a fixed address.
    Single {
        manager: ConnectionManager,
        /// Opens the dedicated connections (consumers' blocking reads),
        /// with the same address, credentials and TLS settings.
        client: Box<redis::Client>,
    },
    /// The master Sentinel names.
    Sentinel(std::sync::Arc<sentinel::SentinelConn>),
    /// A Valkey Cluster.
    #[cfg(feature = "cluster")]
    Cluster(Box<cluster::Cluster>),
}

impl Conn {
    fn new(kind: Kind) -> Conn {
        Conn {
            kind,
            #[cfg(feature = "cluster")]
            home: None,
        }
    }

    pub(crate) fn single(manager: ConnectionManager, client: redis::Client) -> Conn {
        Conn::new(Kind::Single {
            manager,
            client: Box::new(client),
        })
    }

    pub(crate) fn sentinel(conn: sentinel::SentinelConn) -> Conn {
        Conn::new(Kind::Sentinel(std::sync::Arc::new(conn)))
    }

    #[cfg(feature = "cluster")]
    pub(crate) fn cluster(conn: cluster::Cluster) -> Conn {
        Conn::new(Kind::Cluster(Box::new(conn)))
    }

    /// This connection, with commands that name no key sent to the node
    /// that holds `key` (on a cluster; the same connection otherwise).
    pub(crate) fn homed(&self, key: &str) -> Conn {
        #[cfg(feature = "cluster")]
        if matches!(self.kind, Kind::Cluster(_)) {
            let mut c = self.clone();
            c.home = Some(cluster::route_of(key));
            return c;
        }
        let _ = key;
        self.clone()
    }

    /// Which keys can share one command with `key`: those with the same
    /// answer (its slot on a cluster; all of them on one server).
    pub(crate) fn slot_group(&self, key: &str) -> Option<String> {
        // The redis crate's `Slot` shows its number only through `Debug`;
        // equal slots show equal text, which is all grouping needs.
        #[cfg(feature = "cluster")]
        if matches!(self.kind, Kind::Cluster(_)) {
            return Some(format!("{:?}", redis::cluster_routing::Slot::for_key(key.as_bytes())));
        }
        let _ = key;
        None
    }

    /// Sends `cmd` to every server that holds queues (the one server, or
    /// every master of a cluster); answers each one's address and reply.
    pub(crate) async fn each_node(&self, cmd: &Cmd) -> RedisResult<Vec<(String, Value)>> {
        match &self.kind {
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.each_master(cmd).await,
            _ => {
                let mut conn = self.clone();
                let v = conn.req_packed_command(cmd).await?;
                Ok(vec![(String::new(), v)])
            }
        }
    }

    /// Sends `cmd` to the server at `addr`, as [`each_node`](Self::each_node)
    /// names it (for a walk of each node's keys with `SCAN`).
    pub(crate) async fn at_node(&self, cmd: &Cmd, addr: &str) -> RedisResult<Value> {
        match &self.kind {
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => c.at_address(cmd, addr).await,
            _ => {
                let _ = addr;
                let mut conn = self.clone();
                conn.req_packed_command(cmd).await
            }
        }
    }

    /// A new connection of its own to the same server (for a consumer's
    /// blocking reads, which must not share the multiplexed connection).
    pub(crate) async fn dedicated(&self, config: &AsyncConnectionConfig) -> RedisResult<Dedicated> {
        match &self.kind {
            Kind::Single { client, .. } => Ok(Dedicated {
                conn: Own::Node(client.get_multiplexed_async_connection_with_config(config).await?),
                follow: None,
            }),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => Ok(Dedicated {
                conn: Own::Cluster(c.blocking().await?),
                follow: None,
            }),
            Kind::Sentinel(s) => {
                let (number, conn) = s.dedicated(config).await?;
                Ok(Dedicated {
                    conn: Own::Node(conn),
                    follow: Some(Follow {
                        sentinel: s.clone(),
                        number,
                        config: config.clone(),
                    }),
                })
            }
        }
    }
}

/// A connection of its own (a consumer's, for `BLPOP`). Through
/// Sentinel, it follows the master: once the shared connection has moved
/// to a new master, its next command first reconnects to that one, so a
/// wait never stays on a demoted master that no enqueue wakes. On a
/// cluster it is a cluster connection of its own, which follows the slots
/// of the keys it blocks on.
pub(crate) struct Dedicated {
    conn: Own,
    follow: Option<Follow>,
}

enum Own {
    Node(MultiplexedConnection),
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

impl ConnectionLike for Own {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Own::Node(c) => c.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Own::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Own::Node(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "cluster")]
            Own::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Own::Node(c) => c.get_db(),
            #[cfg(feature = "cluster")]
            Own::Cluster(c) => c.get_db(),
        }
    }
}

struct Follow {
    sentinel: std::sync::Arc<sentinel::SentinelConn>,
    /// The master connection this one was opened beside.
    number: u64,
    config: AsyncConnectionConfig,
}

impl Dedicated {
    /// Reconnects to the current master if the shared connection moved.
    async fn follow(&mut self) -> RedisResult<()> {
        let Some(f) = self.follow.as_mut() else { return Ok(()) };
        if f.sentinel.current_number() != Some(f.number) {
            let (number, conn) = f.sentinel.dedicated(&f.config).await?;
            (f.number, self.conn) = (number, Own::Node(conn));
        }
        Ok(())
    }

    fn check(&self, e: &redis::RedisError) {
        if let Some(f) = &self.follow {
            f.sentinel.check(f.number, e);
        }
    }
}

impl ConnectionLike for Dedicated {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            self.follow().await?;
            let r = self.conn.req_packed_command(cmd).await;
            if let Err(e) = &r {
                self.check(e);
            }
            r
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.follow().await?;
            let r = self.conn.req_packed_commands(pipeline, offset, count).await;
            if let Err(e) = &r {
                self.check(e);
            }
            r
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.kind {
            Kind::Single { manager, .. } => manager.req_packed_command(cmd),
            Kind::Sentinel(s) => Box::pin(s.request(cmd)),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => {
                let home = self.home;
                Box::pin(async move { c.request(cmd, home).await })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.kind {
            Kind::Single { manager, .. } => manager.req_packed_commands(pipeline, offset, count),
            Kind::Sentinel(s) => Box::pin(s.request_pipeline(pipeline, offset, count)),
            #[cfg(feature = "cluster")]
            Kind::Cluster(c) => {
                let home = self.home;
                Box::pin(async move { c.request_pipeline(pipeline, offset, count, home).await })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match &self.kind {
            Kind::Single { manager, .. } => manager.get_db(),
            Kind::Sentinel(s) => s.db(),
            #[cfg(feature = "cluster")]
            Kind::Cluster(_) => 0,
        }
    }
}
