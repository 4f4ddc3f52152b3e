//! A Sentinel group on loopback for tests: one master, its replicas and
//! the sentinels that watch them, each a [`LocalServer`].

use std::time::{Duration, Instant};

use super::resp::{info_field, resp, roundtrips};
use super::{LocalServer, LocalServerBuilder, ServerError};

/// Default `down-after-milliseconds` of a test group: short, so a
/// failover starts about a second after the master dies.
pub const DEFAULT_DOWN_AFTER: Duration = Duration::from_millis(1_000);
/// Default `failover-timeout` of a test group.
pub const DEFAULT_FAILOVER_TIMEOUT: Duration = Duration::from_millis(5_000);
/// How long [`SentinelGroupBuilder::start`] waits for the group to form.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// A master, its replicas and the sentinels watching them, all on
/// `127.0.0.1`, each a private [`LocalServer`] (dropped with the group).
///
/// ```no_run
/// use echomq::server::SentinelGroup;
///
/// let mut group = SentinelGroup::builder().replicas(1).sentinels(3).start()?;
/// let old = group.master_port().expect("a sentinel names the master");
/// group.node_mut(old).unwrap().kill();
/// let new = group.wait_for_failover(old, std::time::Duration::from_secs(30))?;
/// assert_ne!(new, old);
/// # Ok::<(), echomq::server::ServerError>(())
/// ```
#[derive(Debug)]
pub struct SentinelGroup {
    name: String,
    /// The data nodes; the first was the master at start.
    nodes: Vec<LocalServer>,
    sentinels: Vec<LocalServer>,
}

/// Configures and starts a [`SentinelGroup`].
#[derive(Debug, Clone)]
pub struct SentinelGroupBuilder {
    name: String,
    replicas: usize,
    sentinels: usize,
    quorum: Option<u32>,
    down_after: Duration,
    failover_timeout: Duration,
    node: LocalServerBuilder,
}

impl SentinelGroup {
    /// A builder: master `mymaster`, 1 replica, 3 sentinels (quorum 2),
    /// [`DEFAULT_DOWN_AFTER`] and [`DEFAULT_FAILOVER_TIMEOUT`].
    pub fn builder() -> SentinelGroupBuilder {
        SentinelGroupBuilder {
            name: "mymaster".to_owned(),
            replicas: 1,
            sentinels: 3,
            quorum: None,
            down_after: DEFAULT_DOWN_AFTER,
            failover_timeout: DEFAULT_FAILOVER_TIMEOUT,
            node: LocalServer::builder(),
        }
    }

    /// The name the sentinels monitor the master under.
    pub fn master_name(&self) -> &str {
        &self.name
    }

    /// The sentinels' URLs, `redis://127.0.0.1:PORT/`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(LocalServer::url).collect()
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[LocalServer] {
        &self.sentinels
    }

    /// The data nodes (the first was the master at start).
    pub fn nodes(&self) -> &[LocalServer] {
        &self.nodes
    }

    /// The data node on `port`, to kill, pause or restart.
    pub fn node_mut(&mut self, port: u16) -> Option<&mut LocalServer> {
        self.nodes.iter_mut().find(|n| n.port() == port)
    }

    /// The port of the master, as the first sentinel that answers names it.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels
            .iter()
            .find_map(|s| sentinel_view(s.port()).map(|v| v.master))
    }

    /// Waits until every sentinel names a master other than `old`, and that
    /// node says it is a master (its `ROLE`); returns its port.
    ///
    /// # Errors
    /// [`ServerError::NotReady`] after `timeout`, saying what the
    /// sentinels named last.
    pub fn wait_for_failover(&self, old: u16, timeout: Duration) -> Result<u16, ServerError> {
        let deadline = Instant::now() + timeout;
        loop {
            let views: Vec<Option<View>> = self.sentinels.iter().map(|s| sentinel_view(s.port())).collect();
            let named: Vec<Option<u16>> = views.iter().map(|v| v.as_ref().map(|v| v.master)).collect();
            if let Some(Some(new)) = named.first()
                && *new != old
                && named.iter().all(|n| *n == Some(*new))
                && role(*new).as_deref() == Some("master")
            {
                return Ok(*new);
            }
            if Instant::now() >= deadline {
                return Err(ServerError::NotReady(format!(
                    "no failover away from port {old} within {timeout:?}; the sentinels name {named:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl SentinelGroupBuilder {
    /// The master's name in the sentinels' configuration.
    pub fn master_name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// How many replicas of the master to start (default 1).
    pub fn replicas(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    /// How many sentinels to start (default 3).
    pub fn sentinels(mut self, n: usize) -> Self {
        self.sentinels = n;
        self
    }

    /// How many sentinels must agree the master is down (default: a
    /// majority of them).
    pub fn quorum(mut self, q: u32) -> Self {
        self.quorum = Some(q);
        self
    }

    /// `down-after-milliseconds`: how long the master must not answer
    /// before a sentinel thinks it down (default [`DEFAULT_DOWN_AFTER`]).
    pub fn down_after(mut self, d: Duration) -> Self {
        self.down_after = d;
        self
    }

    /// `failover-timeout` (default [`DEFAULT_FAILOVER_TIMEOUT`]).
    pub fn failover_timeout(mut self, d: Duration) -> Self {
        self.failover_timeout = d;
        self
    }

    /// The builder each data node starts from (AOF, binary, arguments);
    /// without a password (the group does not pass one on).
    pub fn node(mut self, node: LocalServerBuilder) -> Self {
        self.node = node;
        self
    }

    /// Starts the master, then its replicas, then the sentinels, and waits
    /// until every replica is in sync and every sentinel sees the master
    /// as up with all its replicas and the other sentinels.
    ///
    /// # Errors
    /// As [`LocalServerBuilder::start`]; [`ServerError::NotReady`] when
    /// the group does not form within 30 s.
    pub fn start(self) -> Result<SentinelGroup, ServerError> {
        let master = self.node.clone().start()?;
        let binary = master.binary().to_path_buf();
        let master_port = master.port();
        let mut nodes = vec![master];
        for _ in 0..self.replicas {
            nodes.push(self.node.clone().replica_of(master_port).start()?);
        }
        let deadline = Instant::now() + FORM_TIMEOUT;
        wait(deadline, "the replicas to sync", || {
            let master_sees = info(master_port, "replication")
                .and_then(|i| info_field(i.as_bytes(), "connected_slaves"))
                .and_then(|n| n.parse::<usize>().ok())
                == Some(self.replicas);
            let synced = nodes[1..].iter().all(|r| {
                info(r.port(), "replication").and_then(|i| info_field(i.as_bytes(), "master_link_status"))
                    == Some("up".to_owned())
            });
            (master_sees && synced).then_some(())
        })?;
        let quorum = self.quorum.unwrap_or(self.sentinels as u32 / 2 + 1);
        let mut sentinels = Vec::new();
        for _ in 0..self.sentinels {
            let s = LocalServer::builder()
                .binary(&binary)
                .sentinel(&self.name, master_port, quorum)
                .sentinel_option("down-after-milliseconds", &self.down_after.as_millis().to_string())
                .sentinel_option("failover-timeout", &self.failover_timeout.as_millis().to_string())
                .start()?;
            sentinels.push(s);
        }
        let group = SentinelGroup {
            name: self.name,
            nodes,
            sentinels,
        };
        let (replicas, others) = (self.replicas, self.sentinels - 1);
        wait(deadline, "the sentinels to see the group", || {
            group
                .sentinels
                .iter()
                .all(|s| {
                    sentinel_view(s.port()).is_some_and(|v| {
                        v.ok && v.master == master_port && v.replicas == replicas && v.sentinels == others + 1
                    })
                })
                .then_some(())
        })?;
        Ok(group)
    }
}

/// Polls `check` every 50 ms until it answers or `deadline` passes.
fn wait<T>(deadline: Instant, what: &str, mut check: impl FnMut() -> Option<T>) -> Result<T, ServerError> {
    loop {
        if let Some(v) = check() {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(ServerError::NotReady(format!("timed out waiting for {what}")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `INFO section` of the server on `port`, or `None` if it does not answer.
fn info(port: u16, section: &str) -> Option<String> {
    let replies = roundtrips(port, &[resp(&["INFO", section])], Duration::from_millis(500)).ok()?;
    Some(String::from_utf8_lossy(&replies[0]).into_owned())
}

/// The role (`master`, `slave`) of the server on `port`, per `INFO replication`.
fn role(port: u16) -> Option<String> {
    info_field(info(port, "replication")?.as_bytes(), "role")
}

/// What a sentinel says about its (only) master.
#[derive(Debug)]
struct View {
    ok: bool,
    master: u16,
    replicas: usize,
    sentinels: usize,
}

/// Reads `master0:name=..,status=ok,address=127.0.0.1:P,slaves=N,sentinels=M`
/// from the sentinel on `port`.
fn sentinel_view(port: u16) -> Option<View> {
    let line = info_field(info(port, "sentinel")?.as_bytes(), "master0")?;
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
    };
    Some(View {
        ok: field("status")? == "ok",
        master: field("address")?.rsplit_once(':')?.1.parse().ok()?,
        replicas: field("slaves")?.parse().ok()?,
        sentinels: field("sentinels")?.parse().ok()?,
    })
}
