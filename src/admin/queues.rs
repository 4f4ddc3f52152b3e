//! Finding the queues on a server: what an operator's tool (a CLI, a
//! dashboard) lists when it is not told which queue to look at, and how it
//! tells a queue from a typo without creating it.

use std::collections::BTreeSet;

use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::{Keys, validate_queue_name};

/// Keys one step of [`Client::queue_names`](crate::Client::queue_names) asks the server to look at (a
/// `SCAN` `COUNT` hint).
pub const DISCOVERY_STEP: usize = 1_000;

/// The names of the queues under key prefix `prefix`, sorted, each once
/// ([`Client::queue_names`](crate::Client::queue_names)).
pub(crate) async fn queue_names(conn: Conn, prefix: &str) -> Result<Vec<String>> {
    // Checks the prefix as a queue handle would.
    Keys::new(prefix, "q")?;
    let head = format!("{prefix}:{{");
    let pattern = format!("{}:{{*}}:meta", crate::keys::glob_escape(prefix));
    let mut names = BTreeSet::new();
    // A cluster's keyspace is split over its masters: walk each one's.
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

/// Whether queue `name` under `prefix` has any key on the server
/// ([`Client::queue_exists`](crate::Client::queue_exists)).
pub(crate) async fn queue_exists(mut conn: Conn, prefix: &str, name: &str) -> Result<bool> {
    let keys = Keys::new(prefix, name)?;
    let mut cmd = redis::cmd("EXISTS");
    for key in keys.own() {
        cmd.arg(key);
    }
    let n: u64 = cmd.query_async(&mut conn).await.map_err(Error::from_redis)?;
    Ok(n > 0)
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
