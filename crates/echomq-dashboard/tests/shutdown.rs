//! The demo app (examples/demo.rs) shuts down on SIGINT while a dashboard
//! page holds its live stream open: the stream ends, the server stops and
//! the workers finish or release their running jobs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use echomq::server::LocalServer;

fn demo_exe() -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            // As scripts/test's `cargo test --workspace --all-features`: the
            // same features, so the example it built is reused.
            "--workspace",
            "--example",
            "demo",
            "--all-features",
            "--message-format=json",
        ])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml"))
        .output()
        .unwrap();
    assert!(build.status.success(), "{}", String::from_utf8_lossy(&build.stderr));
    String::from_utf8_lossy(&build.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["target"]["name"] == "demo")
        .find_map(|m| m["executable"].as_str().map(str::to_owned))
        .expect("the demo example's executable")
}

#[test]
fn sigint_ends_the_live_stream_and_the_app() {
    let server = LocalServer::start().unwrap();
    let mut child = Command::new(demo_exe())
        .env("PORT", "0")
        .env("ECHOMQ_URL", server.url())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the demo exited early");
        if let Some(a) = line.trim().strip_prefix("dashboard at http://") {
            break a.trim_end_matches("/admin/queues").to_owned();
        }
    };

    // A page's live stream, held open: read until its first sample.
    let mut sse = TcpStream::connect(&addr).unwrap();
    sse.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        sse,
        "GET /admin/queues/events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("event: counts") {
        let n = sse.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended before its first sample");
        seen.extend_from_slice(&buf[..n]);
    }

    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // The stream ends (the server closes it; keep-alive comments would
    // otherwise come every 15 s, so the wait has a deadline of its own) ...
    let deadline = Instant::now() + Duration::from_secs(10);
    sse.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    loop {
        match sse.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading the live stream: {e}"),
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the live stream still runs 10 s after SIGINT");
        }
    }
    // ... and the process exits, having stopped its workers.
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the demo still runs 10 s after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut printed = String::new();
    out.read_to_string(&mut printed).unwrap();
    assert!(status.success(), "{status:?}: {printed}");
    assert!(printed.contains("stopped"), "{printed}");

    // No job was left leased: each finished or went back to pending.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = echomq::Client::connect(&server.url()).await.unwrap();
        for name in ["emails", "reports"] {
            let counts = client.queue(name).await.unwrap().counts().await.unwrap();
            assert_eq!(counts.active, 0, "{name}: {counts:?}");
            assert!(counts.completed + counts.failed > 0, "{name}: {counts:?}");
        }
    });
}
