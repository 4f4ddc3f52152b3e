//! The little RESP client the helper needs before any redis connection
//! exists: readiness probes and raw requests.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// The outcome of one readiness probe.
pub(super) enum Probe {
    /// `+PONG`, with the answering server's `process_id` if INFO told it.
    Pong(Option<u32>),
    /// Refused, `-LOADING`, a timeout or anything else: ask again.
    NotYet,
}

pub(super) fn probe(port: u16, password: Option<&str>) -> Probe {
    let timeout = Duration::from_millis(500);
    let mut requests = Vec::new();
    if let Some(pw) = password {
        requests.push(resp(&["AUTH", pw]));
    }
    requests.push(resp(&["PING"]));
    requests.push(resp(&["INFO", "server"]));
    let Ok(replies) = roundtrips(port, &requests, timeout) else {
        return Probe::NotYet;
    };
    let (info, pong) = (&replies[replies.len() - 1], &replies[replies.len() - 2]);
    if !pong.starts_with(b"+PONG") {
        return Probe::NotYet;
    }
    Probe::Pong(info_field(info, "process_id").and_then(|v| v.parse().ok()))
}

/// `args` as one RESP request.
pub(super) fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Sends raw RESP requests one after the other on one new connection and
/// reads one reply to each (simple string, error, integer or bulk string).
pub(super) fn roundtrips(port: u16, requests: &[Vec<u8>], timeout: Duration) -> io::Result<Vec<Vec<u8>>> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    requests.iter().map(|r| request(&mut stream, r)).collect()
}

/// Sends one raw RESP request on a new connection and reads one reply.
#[cfg(test)]
pub(super) fn roundtrip(port: u16, request: &[u8], timeout: Duration) -> io::Result<Vec<u8>> {
    Ok(roundtrips(port, &[request.to_vec()], timeout)?.remove(0))
}

/// Sends `request` to `server` and returns its reply as text (tests).
#[cfg(test)]
pub(super) fn send(server: &super::LocalServer, request: &[u8]) -> String {
    let reply = roundtrip(server.port(), request, Duration::from_secs(5)).unwrap();
    String::from_utf8(reply).unwrap()
}

/// `PING`'s reply from `server` (tests).
#[cfg(test)]
pub(super) fn ping(server: &super::LocalServer) -> String {
    send(server, b"*1\r\n$4\r\nPING\r\n")
}

pub(super) fn request(stream: &mut TcpStream, request: &[u8]) -> io::Result<Vec<u8>> {
    stream.write_all(request)?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while !reply_complete(&reply) {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before a full reply",
            ));
        }
        reply.extend_from_slice(&chunk[..n]);
    }
    Ok(reply)
}

pub(super) fn reply_complete(buf: &[u8]) -> bool {
    let Some(line_end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return false;
    };
    if buf[0] != b'$' {
        return true;
    }
    let len: i64 = match std::str::from_utf8(&buf[1..line_end]).ok().and_then(|s| s.parse().ok()) {
        Some(len) => len,
        None => return true, // malformed: let the caller look at it
    };
    len < 0 || buf.len() >= line_end + 2 + len as usize + 2
}

/// Reads `name:value` out of an `INFO` reply.
pub(super) fn info_field(reply: &[u8], name: &str) -> Option<String> {
    let text = String::from_utf8_lossy(reply);
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}
