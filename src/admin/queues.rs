//! Finding the queues on a server: what an operator's tool (a CLI, a
//! dashboard) lists when it is not told which queue to look at, and how it
//! tells a queue from a typo without creating it.

use std::collections::BTreeSet;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::{Keys, validate_queue_name};

/// Keys one step of [`Client::queue_names`] asks the server to look at (a
/// `SCAN` `COUNT` hint).
pub const DISCOVERY_STEP: usize = 1_000;

impl Client {
    /// The names of the queues under key prefix `prefix`
    /// ([`DEFAULT_PREFIX`](crate::keys::DEFAULT_PREFIX) unless the queues
    /// were opened with [`QueueOptions::prefix`](crate::QueueOptions::prefix)),
    /// sorted, each once.
    ///
    /// A queue is known by its meta hash (`PREFIX:{NAME}:meta`), which any
    /// handle writes when it opens the queue ([`Client::queue`]): every
    /// queue opened by echomq 0.2 or later is listed, with jobs or without,
    /// until it is [obliterated](crate::Queue::obliterate). A queue whose
    /// keys were obliterated while a producer went on enqueueing holds jobs
    /// without a meta hash and is not listed
    /// ([`queue_exists`](Self::queue_exists) still finds it).
    ///
    /// The server has no index of queues, so this walks the database's
    /// keyspace with `SCAN ... MATCH PREFIX:{*}:meta TYPE hash`, about
    /// [`DISCOVERY_STEP`] keys per round trip: the server is never held
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
    /// [`Error::InvalidId`] for a bad prefix; server errors.
    pub async fn queue_names(&self, prefix: &str) -> Result<Vec<String>> {
        // Checks the prefix as a queue handle would.
        Keys::new(prefix, "q")?;
        let head = format!("{prefix}:{{");
        let pattern = format!("{}:{{*}}:meta", crate::keys::glob_escape(prefix));
        let mut names = BTreeSet::new();
        // A cluster's keyspace is split over its masters: walk each one's.
        let conn = self.conn();
        let nodes = conn.each_node(&redis::cmd("TIME")).await.map_err(Error::from_redis)?;
        for (node, _) in nodes {
            let mut cursor = 0u64;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(DISCOVERY_STEP)
                    .arg("TYPE")
                    .arg("hash");
                let v = conn.at_node(&scan, &node).await.map_err(Error::from_redis)?;
                let (next, keys): (u64, Vec<Vec<u8>>) =
                    redis::from_redis_value(v).map_err(|e| Error::from_redis(e.into()))?;
                for key in keys {
                    // `*` also matches a job id or user key holding braces
                    // (`PREFIX:{Q}:job:x}:meta`); queue names hold none.
                    let name = std::str::from_utf8(&key)
                        .ok()
                        .and_then(|k| k.strip_prefix(&head)?.strip_suffix("}:meta"))
                        .filter(|name| validate_queue_name(name).is_ok());
                    if let Some(name) = name {
                        names.insert(name.to_owned());
                    }
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(names.into_iter().collect())
    }

    /// Whether queue `name` under key prefix `prefix` has any key on the
    /// server (its meta hash, a set of jobs, a counter, its schedules), in
    /// one `EXISTS` call and without creating anything, as opening it with
    /// [`Client::queue`] would (opening stamps a new queue's meta hash).
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
    /// [`Error::InvalidQueueName`], [`Error::InvalidId`] for a bad prefix;
    /// server errors.
    pub async fn queue_exists(&self, prefix: &str, name: &str) -> Result<bool> {
        let keys = Keys::new(prefix, name)?;
        let mut cmd = redis::cmd("EXISTS");
        for key in keys.own() {
            cmd.arg(key);
        }
        let n: u64 = cmd.query_async(&mut self.conn()).await.map_err(Error::from_redis)?;
        Ok(n > 0)
    }
}

#[cfg(test)]
mod tests {
    use crate::keys::glob_escape;

    // A prefix with glob characters matches itself only.
    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("emq"), "emq");
        assert_eq!(glob_escape("a*b?c[d]e\\f"), "a\\*b\\?c\\[d\\]e\\\\f");
    }
}

#[cfg(all(test, feature = "local-server"))]
mod server_tests {
    use crate::server::LocalServer;
    use crate::{Client, QueueOptions};

    // Discovery lists each opened queue of the prefix once, across many
    // SCAN steps, and nothing else: not another prefix's queues, not a job
    // or user key whose name ends like a meta key, not a queue obliterated.
    #[tokio::test]
    async fn queue_names_finds_the_opened_queues() {
        let server = LocalServer::start().unwrap();
        let client = Client::connect(&server.url()).await.unwrap();
        assert!(client.queue_names("emq").await.unwrap().is_empty());
        let mail = client.queue("mail").await.unwrap();
        client.queue("billing:eu").await.unwrap();
        client
            .queue_with("other", QueueOptions::new().prefix("x*y"))
            .await
            .unwrap();
        // Enough keys for several steps; a job id and a user key that end
        // like a meta key.
        mail.enqueue_bulk(&(0..2_500u32).collect::<Vec<_>>()).await.unwrap();
        mail.enqueue_with(&0, &crate::EnqueueOptions::new().id("x}:meta"))
            .await
            .unwrap();
        let mut raw = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg("emq:{mail}:user:a}:meta")
            .arg("f")
            .arg(1)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(client.queue_names("emq").await.unwrap(), ["billing:eu", "mail"]);
        assert_eq!(client.queue_names("x*y").await.unwrap(), ["other"]);
        assert!(client.queue_names("x").await.unwrap().is_empty());
        mail.obliterate(true).await.unwrap();
        assert_eq!(client.queue_names("emq").await.unwrap(), ["billing:eu"]);
        assert!(client.queue_names("a{b").await.is_err());
    }

    // A queue exists once it has any of its own keys, and asking creates
    // nothing.
    #[tokio::test]
    async fn queue_exists_creates_nothing() {
        let server = LocalServer::start().unwrap();
        let client = Client::connect(&server.url()).await.unwrap();
        let mut raw = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        assert!(!client.queue_exists("emq", "mail").await.unwrap());
        let size: u64 = redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap();
        assert_eq!(size, 0);
        let mail = client.queue("mail").await.unwrap();
        assert!(client.queue_exists("emq", "mail").await.unwrap());
        assert!(!client.queue_exists("other", "mail").await.unwrap());
        mail.enqueue(&1).await.unwrap();
        // Without its meta hash (obliterated under a running producer) a
        // queue with jobs still exists.
        let _: () = redis::cmd("DEL")
            .arg("emq:{mail}:meta")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(client.queue_exists("emq", "mail").await.unwrap());
        assert!(client.queue_names("emq").await.unwrap().is_empty());
        assert!(client.queue_exists("emq", "a{b").await.is_err());
    }
}
