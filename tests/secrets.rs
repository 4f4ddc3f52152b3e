//! Passwords never appear in `Debug` output, error messages or logs.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::server::LocalServer;
use echomq::{Client, ClientOptions, Consumer, Error, Job};

const PASSWORD: &str = "pw-Secret-7f3a";
const WRONG: &str = "pw-Wrong-91c2";

/// Everything the library logs (every level) while the guard lives.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Panics if `text` shows either password.
fn assert_clean(what: &str, text: &str) {
    for secret in [PASSWORD, WRONG] {
        assert!(!text.contains(secret), "{what} shows a password: {text}");
    }
}

/// The display and debug forms of an error, checked.
fn assert_clean_error(what: &str, e: &Error) {
    assert_clean(what, &e.to_string());
    assert_clean(what, &format!("{e:?}"));
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        assert_clean(what, &s.to_string());
        source = s.source();
    }
}

// A server with requirepass (and masterauth among its arguments): the Debug output of its builder and of the server hides
// every password, though its URL carries it; the client, its options, a
// queue and a consumer handle show none; a wrong password, a refused
// connection and a URL that does not parse fail with errors that show
// none; and nothing logged while all this ran shows one.
#[tokio::test]
async fn passwords_never_show() {
    let (logs, _guard) = Logs::capture();
    let builder = LocalServer::builder().password(PASSWORD).arg("masterauth", PASSWORD);
    assert_clean("LocalServerBuilder", &format!("{builder:?}"));
    let server = builder.start().unwrap();
    assert_clean("LocalServer", &format!("{server:?}"));
    assert!(format!("{server:?}").contains("<redacted>"));
    assert!(server.url().contains(PASSWORD), "the URL is how tests log in");
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let () = redis::cmd("ACL")
        .arg(&["SETUSER", "ops", "on", &format!(">{PASSWORD}"), "~*", "+@all"])
        .query_async(&mut raw)
        .await
        .unwrap();

    // Logged in with the password: nothing shows it.
    let opts = ClientOptions::new().master_auth(Some("echomq"), PASSWORD);
    assert_clean("ClientOptions", &format!("{opts:?}"));
    let client = Client::connect_with(&server.url(), opts).await.unwrap();
    let q = client.queue(&common::unique("secrets")).await.unwrap();
    let consumer = Consumer::new(q.clone(), |_job: Job<u32>| async { Ok(()) })
        .spawn()
        .unwrap();
    let id = q.enqueue(&1u32).await.unwrap();
    assert!(common::completes(&q, &id).await);
    for (what, text) in [
        ("Client", format!("{client:?}")),
        ("Queue", format!("{q:?}")),
        ("ConsumerHandle", format!("{consumer:?}")),
    ] {
        assert_clean(what, &text);
    }
    consumer.shutdown().await.unwrap();

    // A wrong password, as the default user and as a named one.
    let port = server.port();
    for url in [
        format!("redis://:{WRONG}@127.0.0.1:{port}/"),
        format!("redis://ops:{WRONG}@127.0.0.1:{port}/"),
    ] {
        let e = Client::connect(&url).await.unwrap_err();
        assert!(e.to_string().contains("authentication failed"), "{e}");
        assert_clean_error("a refused login", &e);
    }
    // Nothing listening there.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let opts = ClientOptions::new().connection_timeout(Duration::from_millis(500));
    let e = Client::connect_with(&format!("redis://ops:{WRONG}@127.0.0.1:{closed}/"), opts)
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert_clean_error("a refused connection", &e);
    // Sentinels that do not answer.
    let opts = ClientOptions::new()
        .connection_timeout(Duration::from_millis(500))
        .master_auth(Some("ops"), WRONG);
    let sentinel = format!("redis://ops:{WRONG}@127.0.0.1:{closed}/");
    let e = Client::connect_sentinel(&[&sentinel], "mymaster", opts)
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert_clean_error("unreachable sentinels", &e);
    // A URL that does not parse: the message shows it, redacted.
    let e = Client::connect(&format!("redis://ops:{WRONG}@127.0.0.1:notaport/"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidOption { name: "url", .. }), "{e:?}");
    assert!(
        e.to_string().contains("redis://ops:<redacted>@127.0.0.1:notaport/"),
        "{e}"
    );
    assert_clean_error("a bad URL", &e);

    let logged = logs.text();
    assert!(!logged.is_empty(), "nothing was logged");
    assert_clean("the logs", &logged);
}

// With TLS, the client's private key never shows either.
#[cfg(feature = "tls")]
#[test]
fn tls_key_never_shows() {
    let opts = ClientOptions::new()
        .tls_ca("-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n")
        .tls_client_cert("cert", format!("-----BEGIN PRIVATE KEY-----\n{PASSWORD}\n"));
    assert_clean("ClientOptions", &format!("{opts:?}"));
}
