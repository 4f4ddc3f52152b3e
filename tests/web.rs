//! The web example (examples/web.rs) driven over real HTTP: an idempotent
//! signup, a job's state as JSON, an error as a status, and a graceful
//! shutdown that stops the consumer.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One HTTP/1.1 request; returns the status and the body.
fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, serde_json::Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp[9..12].parse().unwrap();
    let body = resp.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(serde_json::Value::Null))
}

// POST /signup twice with one Idempotency-Key makes one job (202 and its
// id both times); GET /jobs/{id} shows it completed with its progress; an
// unknown job is a 404; SIGINT stops the server and the consumer cleanly.
#[test]
fn the_web_example_over_http() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            // As scripts/test's `cargo test --workspace`: the same features,
            // so the example it built is reused, not rebuilt.
            "--workspace",
            "--example",
            "web",
            "--all-features",
            "--message-format=json",
        ])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .unwrap();
    assert!(build.status.success(), "{}", String::from_utf8_lossy(&build.stderr));
    let exe = String::from_utf8_lossy(&build.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["target"]["name"] == "web")
        .find_map(|m| m["executable"].as_str().map(str::to_owned))
        .expect("the web example's executable");
    let mut child = Command::new(exe)
        .env("PORT", "0")
        .env_remove("ECHOMQ_URL")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the example exited early");
        if let Some(a) = line.trim().strip_prefix("listening on ") {
            break a.to_owned();
        }
    };

    let signup = |key: &str| {
        http(
            &addr,
            "POST",
            "/signup",
            &[("Idempotency-Key", key), ("Content-Type", "application/json")],
            r#"{"email":"ada@example.com"}"#,
        )
    };
    let (s1, b1) = signup("k-1");
    let (s2, b2) = signup("k-1");
    assert_eq!((s1, s2), (202, 202));
    assert_eq!(b1["id"], b2["id"], "one key, one job");
    let id = b1["id"].as_str().unwrap().to_owned();

    let deadline = Instant::now() + Duration::from_secs(10);
    let job = loop {
        let (status, job) = http(&addr, "GET", &format!("/jobs/{id}"), &[], "");
        assert_eq!(status, 200, "{job}");
        if job["state"] == "completed" || Instant::now() > deadline {
            break job;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(job["progress"]["step"], "sent", "{job}");
    assert_eq!(job["result"]["to"], "ada@example.com", "{job}");
    let (status, body) = http(&addr, "GET", "/jobs/no-such-job", &[], "");
    assert_eq!(status, 404, "{body}");
    assert!(body["error"].as_str().unwrap().contains("not found"));

    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}: {rest}");
    assert!(rest.contains("stopped"), "{rest}");
}
