//! Valkey Cluster (feature `cluster`): the redis crate's cluster
//! connection, which learns the slot map, sends each command to the master
//! of its key's slot, follows `MOVED`/`ASK` during resharding, retries
//! `TRYAGAIN`/`CLUSTERDOWN` during a failover, and refreshes the map.
//!
//! What echomq adds is routing for the commands that name no key. Each
//! queue lives in one slot (its keys share the hash tag `{Q}`), so a
//! queue's handle is bound to that slot (its *home*): a keyless command sent
//! through it (`TIME`, `CLIENT ID`, `SCAN` of its keys, `WAIT`) goes to the
//! master of that slot, the node that holds the queue and runs its scripts,
//! not to a random node.

use std::time::Duration;

use redis::cluster::ClusterConfig;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisResult, Value};

/// The longest a blocking connection's call may take (the consumers'
/// wake-up bounds its own waits; the cluster connection wants a bound).
const BLOCKING_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3_600);

/// The shared cluster connection and what opens blocking ones.
#[derive(Clone)]
pub(crate) struct Cluster {
    conn: ClusterConnection,
    client: redis::cluster::ClusterClient,
    connection_timeout: Duration,
}

/// The master of `key`'s slot.
pub(crate) fn route_of(key: &str) -> Route {
    Route::with_key(key.as_bytes(), SlotAddr::Master)
}

/// True when `cmd` is about the node it is sent to, not a key: the redis
/// crate would send it to a random node (`TIME`, `CLIENT ID`, `SCAN`,
/// `CONFIG GET`) or to every master (`WAIT`, `WAITAOF`, `INFO`, `PING`),
/// where a queue means its own node. (`FUNCTION LOAD` still goes to every
/// master, and keyed commands by their key.)
fn keyless(cmd: &Cmd) -> bool {
    let Some(redis::Arg::Simple(name)) = cmd.args_iter().next() else {
        return false;
    };
    const NODE_COMMANDS: [&[u8]; 9] = [
        b"TIME", b"CLIENT", b"SCAN", b"CONFIG", b"WAIT", b"WAITAOF", b"INFO", b"PING", b"DBSIZE",
    ];
    NODE_COMMANDS.iter().any(|c| c.eq_ignore_ascii_case(name))
}

impl Cluster {
    pub(crate) async fn connect(
        client: redis::cluster::ClusterClient,
        connection_timeout: Duration,
    ) -> RedisResult<Cluster> {
        let conn = client.get_async_connection().await?;
        Ok(Cluster {
            conn,
            client,
            connection_timeout,
        })
    }

    /// A cluster connection of its own with no practical response timeout,
    /// for one group of blocking reads (keys of one slot).
    pub(crate) async fn blocking(&self) -> RedisResult<ClusterConnection> {
        let config = ClusterConfig::new()
            .set_connection_timeout(self.connection_timeout)
            .set_response_timeout(BLOCKING_RESPONSE_TIMEOUT);
        self.client.get_async_connection_with_config(config).await
    }

    /// Sends `cmd`: by its key, or to `home`'s master if it names none
    /// (without a home, to one master).
    pub(crate) async fn request(&self, cmd: &Cmd, home: Option<Route>) -> RedisResult<Value> {
        let mut conn = self.conn.clone();
        if !keyless(cmd) {
            return redis::aio::ConnectionLike::req_packed_command(&mut conn, cmd).await;
        }
        // No queue's handle (the client's own checks): one master's answer,
        // not a map of every master's.
        let to = home.map_or(
            SingleNodeRoutingInfo::RandomPrimary,
            SingleNodeRoutingInfo::SpecificNode,
        );
        conn.route_command(cmd.clone(), RoutingInfo::SingleNode(to)).await
    }

    /// Sends `pipeline` (single-slot): by its keys, or to `home`'s master
    /// if none of its commands names a key.
    pub(crate) async fn request_pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
        home: Option<Route>,
    ) -> RedisResult<Vec<Value>> {
        let mut conn = self.conn.clone();
        if !pipeline.cmd_iter().all(keyless) {
            return redis::aio::ConnectionLike::req_packed_commands(&mut conn, pipeline, offset, count).await;
        }
        let to = home.map_or(
            SingleNodeRoutingInfo::RandomPrimary,
            SingleNodeRoutingInfo::SpecificNode,
        );
        conn.route_pipeline(pipeline.clone(), offset, count, to).await
    }

    /// Sends `cmd` to every master; answers each master's address
    /// (`host:port`) with its reply (a server error as a value).
    pub(crate) async fn each_master(&self, cmd: &Cmd) -> RedisResult<Vec<(String, Value)>> {
        let mut conn = self.conn.clone();
        let v = conn
            .route_command(
                cmd.clone(),
                RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
            )
            .await?;
        let Value::Map(pairs) = v else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "a command to every master answered no map",
            )));
        };
        Ok(pairs
            .into_iter()
            .filter_map(|(addr, v)| match addr {
                Value::BulkString(b) => Some((String::from_utf8_lossy(&b).into_owned(), v)),
                Value::SimpleString(s) => Some((s, v)),
                _ => None,
            })
            .collect())
    }

    /// Sends `cmd` to the node at `addr` (`host:port`, as
    /// [`each_master`](Self::each_master) names it).
    pub(crate) async fn at_address(&self, cmd: &Cmd, addr: &str) -> RedisResult<Value> {
        let (host, port) = addr
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_owned(), p.parse::<u16>().ok()?)))
            .ok_or_else(|| redis::RedisError::from((redis::ErrorKind::Client, "a node address without a port")))?;
        let mut conn = self.conn.clone();
        conn.route_command(
            cmd.clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port }),
        )
        .await
    }
}
