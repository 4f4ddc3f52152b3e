//! What the outbox tests share: private servers, a migrated pool, waits on
//! conditions, and a TCP proxy whose link a test can cut.

#![allow(dead_code)]

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::server::LocalServer;
use echomq_outbox::Outbox;
use echomq_outbox::testing::LocalPostgres;
use sqlx::PgPool;
use tokio::net::{TcpListener, TcpStream};

/// A Postgres and a Valkey of the test's own, the outbox migrated.
pub struct Servers {
    pub pg: LocalPostgres,
    pub valkey: LocalServer,
    pub pool: PgPool,
    pub client: echomq::Client,
}

pub async fn servers() -> Servers {
    servers_with(LocalServer::builder()).await
}

pub async fn servers_with(valkey: echomq::server::LocalServerBuilder) -> Servers {
    let pg = LocalPostgres::start().expect("start a private Postgres (Debian's postgresql)");
    let valkey = valkey
        .start()
        .expect("start a private valkey-server (set ECHOMQ_SERVER_BIN or run scripts/find-server)");
    let pool = pool(&pg.url()).await;
    Outbox::new().migrate(&pool).await.expect("migrate");
    let client = echomq::Client::connect(&valkey.url()).await.expect("connect to valkey");
    Servers {
        pg,
        valkey,
        pool,
        client,
    }
}

pub async fn pool(url: &str) -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .expect("connect to postgres")
}

/// Polls `cond` until it holds, failing the test with `what` at the deadline.
pub async fn wait_until<F, Fut>(what: &str, within: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !cond().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Rows still in the outbox (failed or not).
pub async fn rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM echomq_outbox")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Every job the queue holds, in any state (asked again while Valkey
/// restarts, for up to 20 s).
pub async fn jobs(queue: &echomq::Queue) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match queue.counts().await {
            Ok(c) => return c.pending + c.delayed + c.active + c.completed + c.failed + c.cancelled + c.expired,
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("counting jobs: {e}"),
        }
    }
}

/// A TCP proxy on a loopback port in front of `upstream`: `cut` closes
/// every connection through it and refuses new ones until `restore`;
/// `stall` keeps every connection open but forwards nothing (a blackhole:
/// no reset, no reply) until `unstall`, which delivers what was held back,
/// as TCP does once a partition heals.
pub struct Proxy {
    pub port: u16,
    state: Arc<Mutex<ProxyState>>,
    stalled: tokio::sync::watch::Sender<bool>,
}

#[derive(Default)]
struct ProxyState {
    up: bool,
    links: Vec<tokio::task::JoinHandle<()>>,
}

/// Copies `from` to `to`, holding bytes back while `stalled` says so.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut stalled: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while *stalled.borrow_and_update() {
            if stalled.changed().await.is_err() {
                return;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Proxy {
    pub async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(ProxyState {
            up: true,
            links: Vec::new(),
        }));
        let (stalled, gate) = tokio::sync::watch::channel(false);
        let st = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    return;
                };
                let mut s = st.lock().unwrap();
                if !s.up {
                    drop(inbound);
                    continue;
                }
                s.links.retain(|l| !l.is_finished());
                let gate = gate.clone();
                s.links.push(tokio::spawn(async move {
                    if let Ok(outbound) = TcpStream::connect(("127.0.0.1", upstream)).await {
                        let (ir, iw) = inbound.into_split();
                        let (or, ow) = outbound.into_split();
                        tokio::join!(pump(ir, ow, gate.clone()), pump(or, iw, gate));
                    }
                }));
            }
        });
        Proxy { port, state, stalled }
    }

    pub fn cut(&self) {
        let mut s = self.state.lock().unwrap();
        s.up = false;
        for l in s.links.drain(..) {
            l.abort();
        }
    }

    pub fn restore(&self) {
        self.state.lock().unwrap().up = true;
    }

    pub fn stall(&self) {
        self.stalled.send_replace(true);
    }

    pub fn unstall(&self) {
        self.stalled.send_replace(false);
    }
}
