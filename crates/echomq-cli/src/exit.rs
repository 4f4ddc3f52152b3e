//! Exit codes, the error a command ends with, and keeping passwords out
//! of what the command prints.

use echomq::Error;
use echomq::redis::ErrorKind;

/// The command did what it was asked.
pub const OK: u8 = 0;
/// The operation failed or was refused: a job or queue not found, an id
/// the call left alone, obliterate while jobs are active, a missing
/// `--yes`, a server error.
pub const FAILED: u8 = 1;
/// A usage error (clap's own code): an unknown command or flag, a bad
/// value, a missing queue.
pub const USAGE: u8 = 2;
/// The server cannot be reached: a bad URL, a refused or lost connection,
/// a failed login, a timeout.
pub const CONNECT: u8 = 3;
/// `doctor` found problems (or, `--strict`, warnings).
pub const PROBLEMS: u8 = 4;

/// The exit codes, as `--help` shows them.
pub const HELP: &str = "\
Exit codes:
  0  ok
  1  the operation failed or was refused (job or queue not found, an id left alone,
     obliterate while jobs are active without --force, --yes missing, a server error)
  2  usage error
  3  cannot connect to the server (bad URL, refused, lost, login failed, timed out)
  4  doctor found problems (or, with --strict, warnings)";

/// Why a command ended without doing what it was asked, and its exit code.
#[derive(Debug)]
pub struct Failure {
    /// One of the codes above.
    pub code: u8,
    /// What to tell the operator (no password in it).
    pub message: String,
}

impl Failure {
    /// A refusal or failure of the operation itself (exit 1).
    pub fn failed(message: impl Into<String>) -> Failure {
        Failure {
            code: FAILED,
            message: message.into(),
        }
    }

    /// An error from connecting to `url` (exit 3 whatever it is: nothing
    /// else was tried).
    pub fn connect(url: &Url, e: &Error) -> Failure {
        let message = match e {
            Error::Redis(r) if r.kind() == ErrorKind::InvalidClientConfig => {
                format!("bad server URL {}: {}", url.shown(), url.scrub(&r.to_string()))
            }
            // The library says which URL and why (password already hidden).
            Error::InvalidOption { name: "url", reason } => {
                format!("bad server URL {}: {}", url.shown(), url.scrub(reason))
            }
            other => format!("cannot connect to {}: {}", url.shown(), url.scrub(&other.to_string())),
        };
        Failure { code: CONNECT, message }
    }

    /// An error from a call on a connected client: exit 3 when the
    /// connection was lost or timed out, else 1.
    pub fn from_error(url: &Url, e: &Error) -> Failure {
        let lost = match e {
            Error::Redis(r) => r.is_io_error() || r.is_timeout() || r.is_connection_dropped(),
            _ => false,
        };
        if lost {
            return Failure {
                code: CONNECT,
                message: format!("lost the connection to {}: {}", url.shown(), url.scrub(&e.to_string())),
            };
        }
        Failure::failed(url.scrub(&e.to_string()))
    }
}

/// The server URL as given, and as it may be shown.
#[derive(Debug, Clone)]
pub struct Url {
    /// The URL to connect to, password and all.
    pub raw: String,
    /// The password in it, if any, to scrub from messages.
    secret: Option<String>,
}

impl Url {
    /// Wraps `raw`, finding its password: the one in `user:password@`, or
    /// a `pass=`/`password=` query parameter (`redis+unix:` URLs).
    pub fn new(raw: &str) -> Url {
        let (_, secret) = redact(raw);
        Url {
            raw: raw.to_owned(),
            secret,
        }
    }

    /// The URL with its password replaced by `***`.
    pub fn shown(&self) -> String {
        redact(&self.raw).0
    }

    /// `text` with any occurrence of the password replaced by `***` (a
    /// safety net for messages of other libraries; passwords shorter than
    /// 4 characters are left, since they would mangle unrelated words).
    pub fn scrub(&self, text: &str) -> String {
        match &self.secret {
            Some(s) if s.chars().count() >= 4 => text.replace(s.as_str(), "***"),
            _ => text.to_owned(),
        }
    }
}

/// `url` with its password replaced by `***`, and the password.
fn redact(url: &str) -> (String, Option<String>) {
    let mut out = url.to_owned();
    let mut secret = None;
    if let Some(scheme_end) = url.find("://") {
        let start = scheme_end + 3;
        let rest = &url[start..];
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        if let Some(at) = authority.rfind('@')
            && let Some(colon) = authority[..at].find(':')
        {
            let pass = &authority[colon + 1..at];
            if !pass.is_empty() {
                secret = Some(pass.to_owned());
                out = format!("{}***{}", &url[..start + colon + 1], &url[start + at..]);
            }
        }
    }
    // Query parameters that carry a password.
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let mut parts = Vec::new();
        for pair in query.split('&') {
            match pair.split_once('=') {
                Some((k, v)) if matches!(k, "pass" | "password") && !v.is_empty() => {
                    secret.get_or_insert_with(|| v.to_owned());
                    parts.push(format!("{k}=***"));
                }
                _ => parts.push(pair.to_owned()),
            }
        }
        out = format!("{head}{}", parts.join("&"));
    }
    (out, secret)
}

#[cfg(test)]
mod tests {
    use super::Url;

    // Passwords never appear in a URL as shown, wherever the URL puts them.
    #[test]
    fn passwords_are_redacted() {
        let cases = [
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("redis://:hunter22@h:6379/0", "redis://:***@h:6379/0"),
            ("rediss://app:p@ss:w@h/1", "rediss://app:***@h/1"),
            ("redis://user@h", "redis://user@h"),
            (
                "redis+unix:///run/v.sock?db=1&pass=hunter22",
                "redis+unix:///run/v.sock?db=1&pass=***",
            ),
            ("not a url", "not a url"),
        ];
        for (raw, shown) in cases {
            assert_eq!(Url::new(raw).shown(), shown, "{raw}");
        }
        let url = Url::new("redis://:hunter22@h");
        assert_eq!(url.scrub("auth hunter22 failed"), "auth *** failed");
    }
}
