//! A TCP proxy on loopback between clients and the server, for network
//! faults that need neither root nor a namespace:
//!
//! - [`Proxy::drop_connections`]: closes every proxied connection at once
//!   (both sides), as a crashed middlebox or `ss -K` would;
//! - [`Proxy::arm_cut`]: the next client request containing a byte pattern
//!   is forwarded (or not) and then the connection is closed before the
//!   reply can travel back: an acknowledgement lost in flight;
//! - [`Proxy::blackhole`]: stops moving bytes (and accepting new upstream
//!   connections) until healed; held bytes are delivered afterwards, as
//!   TCP retransmission would.
//!
//! It runs on its own small Tokio runtime, so blocking test code can drive it.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy. Dropping it stops it and closes every connection.
pub struct Proxy {
    port: u16,
    ctl: Arc<Ctl>,
    rt: Option<tokio::runtime::Runtime>,
}

struct Ctl {
    /// Bumped to close every connection.
    generation: watch::Sender<u64>,
    /// True while blackholed.
    blackhole: watch::Sender<bool>,
    cut: Mutex<Option<Cut>>,
    cuts_done: AtomicUsize,
    connections: AtomicUsize,
}

#[derive(Clone)]
struct Cut {
    pattern: Vec<u8>,
    forward: bool,
    then_blackhole: bool,
}

impl Proxy {
    /// Starts a proxy on a free loopback port forwarding to `upstream`.
    pub fn start(upstream: SocketAddr) -> io::Result<Proxy> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fault-proxy")
            .enable_all()
            .build()?;
        let listener = rt.block_on(TcpListener::bind("127.0.0.1:0"))?;
        let port = listener.local_addr()?.port();
        let ctl = Arc::new(Ctl {
            generation: watch::channel(0).0,
            blackhole: watch::channel(false).0,
            cut: Mutex::new(None),
            cuts_done: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
        });
        let c = ctl.clone();
        rt.spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                c.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(serve(client, upstream, c.clone()));
            }
        });
        Ok(Proxy {
            port,
            ctl,
            rt: Some(rt),
        })
    }

    /// The URL clients use: `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Closes every connection now (clients reconnect through the proxy).
    pub fn drop_connections(&self) {
        self.ctl.generation.send_modify(|g| *g += 1);
    }

    /// Blackholes (true) or heals (false) the proxy.
    pub fn blackhole(&self, on: bool) {
        self.ctl.blackhole.send_replace(on);
    }

    /// Arms a one-shot cut: the next client→server chunk containing
    /// `pattern` is forwarded (`forward`) or dropped, then its connection
    /// is closed without passing the reply back. With `then_blackhole` the
    /// proxy blackholes at that same instant (until [`blackhole`](Self::blackhole)`(false)`).
    pub fn arm_cut(&self, pattern: &[u8], forward: bool, then_blackhole: bool) {
        *self.ctl.cut.lock().unwrap() = Some(Cut {
            pattern: pattern.to_vec(),
            forward,
            then_blackhole,
        });
    }

    /// How many armed cuts have fired.
    pub fn cuts_done(&self) -> usize {
        self.ctl.cuts_done.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.ctl.connections.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.drop_connections();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

async fn wait_open(ctl: &Ctl) {
    let mut rx = ctl.blackhole.subscribe();
    while *rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

async fn serve(client: TcpStream, upstream: SocketAddr, ctl: Arc<Ctl>) {
    let mut gen_rx = ctl.generation.subscribe();
    gen_rx.borrow_and_update();
    // A blackholed link answers no SYN either: connect once healed.
    tokio::select! {
        _ = wait_open(&ctl) => {}
        _ = gen_rx.changed() => return,
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    // Set when a cut fires: the server's replies are not passed back any more.
    let mute = AtomicBool::new(false);
    tokio::select! {
        _ = pump(cr, sw, &ctl, true, &mute) => {}
        _ = pump(sr, cw, &ctl, false, &mute) => {}
        _ = gen_rx.changed() => {}
    }
    // Dropping the halves closes both connections.
}

async fn pump<R, W>(mut from: R, mut to: W, ctl: &Ctl, to_server: bool, mute: &AtomicBool) -> io::Result<()>
where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        wait_open(ctl).await;
        if mute.load(Ordering::SeqCst) {
            return Ok(());
        }
        let chunk = &buf[..n];
        if to_server {
            let fire = {
                let mut cut = ctl.cut.lock().unwrap();
                match cut.as_ref() {
                    Some(c) if contains(chunk, &c.pattern) => cut.take(),
                    _ => None,
                }
            };
            if let Some(c) = fire {
                mute.store(true, Ordering::SeqCst);
                ctl.cuts_done.fetch_add(1, Ordering::SeqCst);
                if c.then_blackhole {
                    ctl.blackhole.send_replace(true);
                }
                if c.forward {
                    to.write_all(chunk).await?;
                    to.flush().await?;
                    // Let the server run it; its reply dies with the connection.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                return Ok(());
            }
        }
        to.write_all(chunk).await?;
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn echo_server() -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                std::thread::spawn(move || {
                    let mut b = [0u8; 1024];
                    while let Ok(n) = s.read(&mut b) {
                        if n == 0 || s.write_all(&b[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn roundtrip(s: &mut std::net::TcpStream, msg: &[u8]) -> io::Result<Vec<u8>> {
        s.write_all(msg)?;
        let mut b = vec![0u8; msg.len()];
        s.read_exact(&mut b)?;
        Ok(b)
    }

    // Bytes pass; an armed cut closes the connection before the reply; drops close all.
    #[test]
    fn passes_cuts_and_drops() {
        let p = Proxy::start(echo_server()).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", p.port).parse().unwrap();
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert_eq!(roundtrip(&mut s, b"hello").unwrap(), b"hello");
        p.arm_cut(b"secret", true, false);
        assert!(roundtrip(&mut s, b"a secret").is_err());
        assert_eq!(p.cuts_done(), 1);
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert_eq!(roundtrip(&mut s, b"again").unwrap(), b"again");
        p.drop_connections();
        std::thread::sleep(Duration::from_millis(50));
        assert!(roundtrip(&mut s, b"gone").is_err());
    }

    // A blackhole holds bytes until healed, then delivers them.
    #[test]
    fn blackhole_holds_until_healed() {
        let p = Proxy::start(echo_server()).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", p.port).parse().unwrap();
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        assert_eq!(roundtrip(&mut s, b"x").unwrap(), b"x");
        p.blackhole(true);
        assert!(roundtrip(&mut s, b"held").is_err());
        p.blackhole(false);
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"held");
    }
}
