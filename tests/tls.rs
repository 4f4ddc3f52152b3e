//! `rediss://` against a private server with a test CA: jobs run over
//! TLS, a server the CA did not sign is refused, and mutual TLS works with
//! a client certificate and refuses a client without one (feature `tls`).
#![cfg(feature = "tls")]

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use echomq::server::LocalServer;
use echomq::{Client, ClientOptions, Consumer, Error, Job, JobState};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};

/// A CA, and certificates it signed, as PEM files in a directory removed on drop.
struct Pki {
    dir: PathBuf,
    /// The CA's certificate (PEM).
    ca: String,
    /// The client's certificate and key (PEM), signed by the CA.
    client_cert: String,
    client_key: String,
}

impl Pki {
    /// A new CA named `name`, a server certificate for 127.0.0.1 and
    /// localhost, and a client certificate, all signed by it.
    fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(common::unique(&format!("echomq-pki-{name}")));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("echomq test CA {name}"));
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf = |purpose: ExtendedKeyUsagePurpose, cn: &str| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
            p.subject_alt_names
                .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
            p.distinguished_name.push(DnType::CommonName, cn);
            p.extended_key_usages = vec![purpose];
            let cert = p.signed_by(&key, &issuer).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf(ExtendedKeyUsagePurpose::ServerAuth, "echomq test server");
        let (client_cert, client_key) = leaf(ExtendedKeyUsagePurpose::ClientAuth, "echomq test client");
        let pki = Pki {
            dir,
            ca: ca.pem(),
            client_cert,
            client_key,
        };
        std::fs::write(pki.file("ca.crt"), &pki.ca).unwrap();
        std::fs::write(pki.file("server.crt"), server_cert).unwrap();
        std::fs::write(pki.file("server.key"), server_key).unwrap();
        pki
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A private server listening for TLS with this CA's server certificate.
    fn server(&self, require_client_cert: bool) -> LocalServer {
        LocalServer::builder()
            .tls(self.file("server.crt"), self.file("server.key"), self.file("ca.crt"))
            .tls_auth_clients(require_client_cert)
            .start()
            .expect("start a server with TLS")
    }

    /// Options that trust this CA.
    fn trust(&self) -> ClientOptions {
        ClientOptions::new()
            .tls_ca(self.ca.as_bytes())
            .connection_timeout(Duration::from_secs(2))
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Connections the server has on `port`, per `CLIENT LIST` (asked on its plain port).
async fn clients_on(server: &LocalServer, port: u16) -> usize {
    let mut raw = common::raw(server).await;
    let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut raw).await.unwrap();
    list.lines()
        .filter(|l| l.contains(&format!("laddr=127.0.0.1:{port} ")))
        .count()
}

/// Runs one job on `client` through a consumer that waits in `BLPOP`
/// (its poll interval, 60 s, is far longer than the job may take, so only
/// the wake-up on its blocking connection can start it). `connected`
/// returns once the consumer's blocking connection is up.
async fn run_job<F, Fut>(client: &Client, connected: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    let q = client.queue(&common::unique("tls")).await.unwrap();
    let consumer = Consumer::new(q.clone(), |job: Job<String>| async move { Ok(job.payload().len()) })
        .poll_interval(Duration::from_secs(60))
        .spawn()
        .unwrap();
    connected().await;
    let id = q.enqueue("over tls").await.unwrap();
    let info = q.wait(&id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(info.state, JobState::Completed);
    assert_eq!(info.result_as::<usize>().unwrap(), Some(8));
    consumer.shutdown().await.unwrap();
}

// Jobs run over TLS: enqueue, a consumer woken through its blocking
// connection, complete; the shared and the blocking connection are both
// on the TLS port (the plain port only answers the test's own questions).
#[tokio::test]
async fn enqueue_consume_complete_over_tls() {
    let pki = Pki::new("ok");
    let server = pki.server(false);
    let url = server.tls_url().unwrap();
    assert!(url.starts_with("rediss://127.0.0.1:"), "{url}");
    let tls_port = server.tls_port().unwrap();
    let client = Client::connect_with(&url, pki.trust()).await.unwrap();
    assert_eq!(clients_on(&server, tls_port).await, 1, "the shared connection");
    run_job(&client, || async {
        // The consumer's blocking connection comes up on the TLS port too.
        let up = common::eventually(Duration::from_secs(10), || async {
            clients_on(&server, tls_port).await == 2
        });
        assert!(up.await, "no blocking connection on the TLS port");
    })
    .await;
}

// A server whose certificate another CA signed is refused with Error::Tls
// (not retried as transient), whether the client trusts another private CA
// or the system's roots; TLS certificates with a plain URL are refused.
#[tokio::test]
async fn a_server_signed_by_another_ca_is_refused() {
    let (pki, other) = (Pki::new("server"), Pki::new("other"));
    let server = pki.server(false);
    let url = server.tls_url().unwrap();
    for opts in [other.trust(), ClientOptions::new()] {
        let e = Client::connect_with(&url, opts).await.unwrap_err();
        match &e {
            Error::Tls { detail, .. } => assert!(detail.contains("UnknownIssuer"), "{e}"),
            other => panic!("expected Error::Tls, got {other:?}"),
        }
        assert!(!e.is_transient(), "{e}");
        assert!(
            e.to_string()
                .starts_with("TLS handshake failed: invalid peer certificate"),
            "{e}"
        );
    }
    let e = Client::connect_with(&server.url(), pki.trust()).await.unwrap_err();
    assert!(matches!(e, Error::InvalidOption { name: "tls_ca", .. }), "{e:?}");
}

// With tls-auth-clients, a client presenting a certificate the CA signed
// runs jobs (its blocking connection presents it too); one without a
// certificate, or with one another CA signed, is refused with Error::Tls.
#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let (pki, other) = (Pki::new("mtls"), Pki::new("mtls-other"));
    let server = pki.server(true);
    let url = server.tls_url().unwrap();
    let tls_port = server.tls_port().unwrap();
    let with_cert = pki
        .trust()
        .tls_client_cert(pki.client_cert.as_bytes(), pki.client_key.as_bytes());
    let client = Client::connect_with(&url, with_cert).await.unwrap();
    run_job(&client, || async {
        let up = common::eventually(Duration::from_secs(10), || async {
            clients_on(&server, tls_port).await == 2
        });
        assert!(up.await, "no blocking connection on the TLS port");
    })
    .await;

    let foreign = pki
        .trust()
        .tls_client_cert(other.client_cert.as_bytes(), other.client_key.as_bytes());
    for (alert, opts) in [("CertificateRequired", pki.trust()), ("UnknownCA", foreign)] {
        let e = Client::connect_with(&url, opts).await.unwrap_err();
        match &e {
            Error::Tls { detail, .. } => assert_eq!(detail, &format!("received fatal alert: {alert}")),
            other => panic!("expected Error::Tls ({alert}), got {other:?}"),
        }
        assert!(!e.is_transient(), "{e}");
    }
}
