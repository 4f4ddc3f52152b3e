//! `--name=value` arguments of the fault binaries (no dependency needed).

use std::collections::HashMap;
use std::str::FromStr;

/// Parsed arguments.
#[derive(Debug, Clone, Default)]
pub struct Args {
    map: HashMap<String, String>,
}

impl Args {
    /// Parses `std::env::args()`; `--flag` alone means `--flag=true`.
    pub fn from_env() -> Args {
        Self::parse(std::env::args().skip(1))
    }

    /// Parses an argument list.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Args {
        let mut map = HashMap::new();
        for a in args {
            let Some(a) = a.strip_prefix("--") else {
                panic!("unexpected argument {a:?} (use --name=value)");
            };
            match a.split_once('=') {
                Some((k, v)) => map.insert(k.to_owned(), v.to_owned()),
                None => map.insert(a.to_owned(), "true".to_owned()),
            };
        }
        Args { map }
    }

    /// A required argument.
    pub fn req(&self, name: &str) -> String {
        self.map
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("missing --{name}=..."))
    }

    /// An optional argument.
    pub fn opt(&self, name: &str) -> Option<String> {
        self.map.get(name).cloned()
    }

    /// A parsed argument with a default.
    pub fn get<T: FromStr>(&self, name: &str, default: T) -> T {
        match self.map.get(name) {
            Some(v) => v.parse().unwrap_or_else(|_| panic!("bad value for --{name}: {v:?}")),
            None => default,
        }
    }
}

impl Args {
    /// The client options every fault process uses: `--response-timeout-ms`
    /// (default 1,000) for both the response and the connection timeout.
    pub fn client_options(&self) -> echomq::ClientOptions {
        let timeout = self.response_timeout();
        echomq::ClientOptions::new()
            .response_timeout(timeout)
            .connection_timeout(timeout)
    }

    /// The queue options every fault process uses: keep every record (the
    /// checker reads them), and the limits of the jobs this handle
    /// enqueues (they are fixed at enqueue): `--max-attempts` (default
    /// 1,000), `--max-stalls` (default 1,000) and a fixed `--backoff-ms`
    /// (default 20), so a fault run ends with every job completed rather
    /// than failed for running out of attempts or stalls.
    pub fn queue_options(&self) -> echomq::QueueOptions {
        echomq::QueueOptions::new()
            .keep_completed(echomq::Retention::All)
            .keep_failed(echomq::Retention::All)
            .max_attempts(self.get("max-attempts", 1000u32))
            .max_stalls(self.get("max-stalls", 1000u32))
            .backoff(echomq::Backoff::Fixed(std::time::Duration::from_millis(
                self.get("backoff-ms", 20u64),
            )))
            .durability(self.durability())
    }

    /// `--wait-replicas=N` (default 0): enqueues and settlements wait for
    /// N replicas' acknowledgements (`WAIT N`, up to `--wait-ms`, default
    /// 500, under the response timeout); an enqueue short of them answers `NotDurable`, a transient
    /// error the producer retries with the same id.
    pub fn durability(&self) -> echomq::Durability {
        match self.get("wait-replicas", 0u32) {
            0 => echomq::Durability::Primary,
            count => echomq::Durability::Replicas {
                count,
                timeout: std::time::Duration::from_millis(self.get("wait-ms", 500u64)),
            },
        }
    }

    /// `--response-timeout-ms` (default 1,000).
    pub fn response_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.get("response-timeout-ms", 1000u64))
    }

    /// Connects a queue handle (`--url`, `--queue`, the options above;
    /// a comma-separated `--url` is a cluster's seeds),
    /// retrying for up to a minute while the server is down (a restart may
    /// be under way).
    pub async fn connect(&self, url: &str) -> echomq::Queue {
        let mut queues = self.connect_all(url, &[self.req("queue")]).await;
        queues.remove(0)
    }

    /// Handles of the queues `names`, all of one client (as a flow's steps
    /// or a batch's members on another queue need), connected as
    /// [`connect`](Self::connect) connects one.
    pub async fn connect_all(&self, url: &str, names: &[String]) -> Vec<echomq::Queue> {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let seeds = crate::state::seeds(url);
            let client = if seeds.len() > 1 {
                echomq::Client::connect_cluster(&seeds, self.client_options()).await
            } else {
                echomq::Client::connect_with(url, self.client_options()).await
            };
            let res: echomq::Result<Vec<echomq::Queue>> = async {
                let c = client?;
                let mut queues = Vec::new();
                for name in names {
                    queues.push(c.queue_with(name, self.queue_options()).await?);
                }
                Ok(queues)
            }
            .await;
            match res {
                Ok(q) => return q,
                Err(e) if std::time::Instant::now() < until => {
                    eprintln!("connect: {e}; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => panic!("cannot connect to {url}: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Values, flags and defaults parse as the binaries expect.
    #[test]
    fn parses_values_flags_and_defaults() {
        let a = Args::parse(["--lease-ms=700", "--guarded", "--src=w1"].map(String::from));
        assert_eq!(a.get("lease-ms", 0u64), 700);
        assert!(a.get("guarded", false));
        assert_eq!(a.req("src"), "w1");
        assert_eq!(a.get("concurrency", 4usize), 4);
        assert_eq!(a.opt("nope"), None);
    }
}
