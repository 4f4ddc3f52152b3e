//! The connection every queue call goes through. Internal, so a cluster
//! connection can take its place without touching the scripts or the API:
//! every script is single-slot (a queue's keys share its hash tag).
//!
//! Two kinds today: one server (a [`ConnectionManager`], which reconnects
//! to the same address), and the master that Sentinel names, found again
//! after a failover (see [`sentinel`]).

pub(crate) mod sentinel;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// A cheap `Clone` handle on a shared, auto-reconnecting connection.
#[derive(Clone)]
pub(crate) struct Conn {
    kind: Kind,
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
}

impl Conn {
    pub(crate) fn single(manager: ConnectionManager, client: redis::Client) -> Conn {
        Conn {
            kind: Kind::Single {
                manager,
                client: Box::new(client),
            },
        }
    }

    pub(crate) fn sentinel(conn: sentinel::SentinelConn) -> Conn {
        Conn {
            kind: Kind::Sentinel(std::sync::Arc::new(conn)),
        }
    }

    /// A new connection of its own to the same server (for a consumer's
    /// blocking reads, which must not share the multiplexed connection).
    pub(crate) async fn dedicated(&self, config: &AsyncConnectionConfig) -> RedisResult<Dedicated> {
        match &self.kind {
            Kind::Single { client, .. } => Ok(Dedicated {
                conn: client.get_multiplexed_async_connection_with_config(config).await?,
                follow: None,
            }),
            Kind::Sentinel(s) => {
                let (number, conn) = s.dedicated(config).await?;
                Ok(Dedicated {
                    conn,
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
/// wait never stays on a demoted master that no enqueue wakes.
pub(crate) struct Dedicated {
    conn: MultiplexedConnection,
    follow: Option<Follow>,
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
            (f.number, self.conn) = (number, conn);
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
        }
    }

    fn get_db(&self) -> i64 {
        match &self.kind {
            Kind::Single { manager, .. } => manager.get_db(),
            Kind::Sentinel(s) => s.db(),
        }
    }
}
