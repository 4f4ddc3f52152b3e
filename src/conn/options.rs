//! [`ClientOptions`]: how a [`Link`](super::Link) connects (timeouts,
//! TLS, the master Sentinel names), checked when it connects.

use std::time::Duration;

use crate::error::Result;
use crate::validate;

/// Default time a server call may take before it fails with a timeout.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time to establish a connection.
pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest response or connection timeout accepted.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3_600);

/// Connection settings of a [`Client`](crate::Client), checked when it connects.
///
/// ```
/// use std::time::Duration;
/// let opts = echomq::ClientOptions::new().response_timeout(Duration::from_secs(2));
/// ```
///
/// Its `Debug` output shows no password and no key.
#[derive(Clone)]
#[must_use]
pub struct ClientOptions {
    pub(crate) response_timeout: Duration,
    pub(crate) connection_timeout: Duration,
    pub(crate) allow_eviction: bool,
    /// PEM certificates of the CA to trust instead of the system's roots.
    #[cfg(feature = "tls")]
    pub(crate) tls_ca: Option<Vec<u8>>,
    /// PEM certificate chain and private key presented to the server.
    #[cfg(feature = "tls")]
    pub(crate) tls_client: Option<(Vec<u8>, Vec<u8>)>,
    /// User and password on the master Sentinel names.
    pub(crate) master_auth: Option<(Option<String>, String)>,
    /// Database on the master Sentinel names.
    pub(crate) master_db: i64,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connection_timeout: DEFAULT_CONNECTION_TIMEOUT,
            allow_eviction: false,
            #[cfg(feature = "tls")]
            tls_ca: None,
            #[cfg(feature = "tls")]
            tls_client: None,
            master_auth: None,
            master_db: 0,
        }
    }
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("ClientOptions");
        d.field("response_timeout", &self.response_timeout)
            .field("connection_timeout", &self.connection_timeout)
            .field("allow_eviction", &self.allow_eviction);
        #[cfg(feature = "tls")]
        d.field("tls_ca", &self.tls_ca.as_ref().map(|_| "<set>"))
            .field("tls_client_cert", &self.tls_client.as_ref().map(|_| "<redacted>"));
        d.field(
            "master_auth",
            &self.master_auth.as_ref().map(|(user, _)| (user, "<redacted>")),
        )
        .field("master_db", &self.master_db);
        d.finish()
    }
}

impl ClientOptions {
    /// The defaults (see each setter).
    pub fn new() -> Self {
        Self::default()
    }
    /// How long a server call may take (default
    /// [`DEFAULT_RESPONSE_TIMEOUT`]; 1 ms to [`MAX_TIMEOUT`]).
    pub fn response_timeout(mut self, d: Duration) -> Self {
        self.response_timeout = d;
        self
    }
    /// How long connecting may take (default
    /// [`DEFAULT_CONNECTION_TIMEOUT`]; 1 ms to [`MAX_TIMEOUT`]).
    pub fn connection_timeout(mut self, d: Duration) -> Self {
        self.connection_timeout = d;
        self
    }
    /// Connect even when the server's `maxmemory-policy` may evict keys
    /// (default false: connecting refuses with [`Error::UnsafeServer`](crate::Error::UnsafeServer),
    /// since an evicted job record is a lost job).
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// Trusts only the CA certificates in `pem` (one or more PEM
    /// certificates) for the server's certificate, instead of the system's
    /// roots: for a server whose certificate a private CA signed. Only
    /// with a `rediss://` URL (else connecting refuses with
    /// [`Error::InvalidOption`](crate::Error::InvalidOption)); a server whose certificate this CA did not
    /// sign is refused with [`Error::Tls`](crate::Error::Tls). Feature `tls`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let opts = echomq::ClientOptions::new()
    ///     .tls_ca(std::fs::read("ca.crt")?)
    ///     .tls_client_cert(std::fs::read("client.crt")?, std::fs::read("client.key")?);
    /// let client = echomq::Client::connect_with("rediss://queue.internal:6380", opts).await?;
    /// # let _ = client; Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_ca = Some(pem.into());
        self
    }

    /// Presents this client certificate (a PEM chain, the client's own
    /// first) and its PEM private key to the server: mutual TLS, for a
    /// server with `tls-auth-clients yes`. Only with a `rediss://` URL.
    /// Feature `tls`. The key is kept in memory and never shown by `Debug`.
    #[cfg(feature = "tls")]
    pub fn tls_client_cert(mut self, cert_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        self.tls_client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// The user (`None` for the `default` user) and password with which
    /// [`Client::connect_sentinel`](crate::Client::connect_sentinel) logs in to the master the sentinels
    /// name (the sentinels' own user and password go in their URLs).
    pub fn master_auth(mut self, username: Option<&str>, password: &str) -> Self {
        self.master_auth = Some((username.map(str::to_owned), password.to_owned()));
        self
    }

    /// The database [`Client::connect_sentinel`](crate::Client::connect_sentinel) selects on the master
    /// (default 0).
    pub fn master_db(mut self, db: i64) -> Self {
        self.master_db = db;
        self
    }

    /// The certificates for the redis crate, if any were given.
    #[cfg(feature = "tls")]
    pub(crate) fn certificates(&self) -> Option<redis::TlsCertificates> {
        if self.tls_ca.is_none() && self.tls_client.is_none() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self.tls_client.as_ref().map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.tls_ca.clone(),
        })
    }

    pub(crate) fn check(&self) -> Result<()> {
        let min = Duration::from_millis(1);
        validate::duration("response_timeout", self.response_timeout, min, MAX_TIMEOUT)?;
        validate::duration("connection_timeout", self.connection_timeout, min, MAX_TIMEOUT)?;
        Ok(())
    }
}
