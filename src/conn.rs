//! The connection every queue call goes through. Internal, so a cluster
//! connection can take its place without touching the scripts or the API:
//! every script is single-slot (a queue's keys share its hash tag).

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// A cheap `Clone` handle on a shared, auto-reconnecting connection.
#[derive(Clone)]
pub(crate) struct Conn {
    inner: ConnectionManager,
    /// Opens the dedicated connections (consumers' blocking reads), with
    /// the same address, credentials and TLS settings.
    client: redis::Client,
}

impl Conn {
    pub(crate) fn new(inner: ConnectionManager, client: redis::Client) -> Conn {
        Conn { inner, client }
    }

    /// A new connection of its own to the same server (for a consumer's
    /// blocking reads, which must not share the multiplexed connection).
    pub(crate) async fn dedicated(&self, config: &AsyncConnectionConfig) -> RedisResult<MultiplexedConnection> {
        self.client.get_multiplexed_async_connection_with_config(config).await
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.inner.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}
