//! Cross-site request forgery: every POST carries the dashboard's token in
//! a hidden field, and a browser's own word on where the request came from
//! (`Sec-Fetch-Site`, `Origin`) must agree that it came from this site.
//!
//! The token is a secret of the router (random per process unless the
//! user sets one, as a deployment of several processes must): a page from
//! another site cannot read it, so it cannot forge a form that carries it.
//! It says nothing about *who* posts: that is the mounting app's auth.

use axum::http::HeaderMap;
use axum::http::header::{HOST, ORIGIN};

/// Why a POST was refused (logged; the client gets a bare 403).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// No token, or not ours.
    Token,
    /// `Sec-Fetch-Site` says another site (or a user-typed URL) sent it.
    FetchSite,
    /// `Origin` names a site other than this one.
    Origin,
}

/// The checks, with the router's token and the extra origins it allows.
#[derive(Debug, Clone)]
pub(crate) struct Csrf {
    token: String,
    allowed_origins: Vec<String>,
}

impl Csrf {
    pub(crate) fn new(secret: Option<String>, allowed_origins: Vec<String>) -> Self {
        let token = secret.unwrap_or_else(|| {
            // Two v4 UUIDs: 244 random bits from the OS's generator.
            format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
        });
        Csrf { token, allowed_origins }
    }

    /// The token forms carry.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Whether a POST with these headers and this form token may act.
    pub(crate) fn check(&self, headers: &HeaderMap, token: Option<&str>) -> Result<(), Refused> {
        if let Some(site) = headers.get("sec-fetch-site") {
            // Sent by every current browser: only our own pages may post.
            if site.as_bytes() != b"same-origin" {
                return Err(Refused::FetchSite);
            }
        }
        if let Some(origin) = headers.get(ORIGIN) {
            let origin = origin.to_str().map_err(|_| Refused::Origin)?;
            let host = headers.get(HOST).and_then(|h| h.to_str().ok());
            let same_host = host.is_some_and(|host| {
                origin
                    .strip_prefix("http://")
                    .or_else(|| origin.strip_prefix("https://"))
                    .is_some_and(|o| o.eq_ignore_ascii_case(host))
            });
            if !same_host && !self.allowed_origins.iter().any(|a| a.eq_ignore_ascii_case(origin)) {
                return Err(Refused::Origin);
            }
        }
        match token {
            Some(t) if same(t.as_bytes(), self.token.as_bytes()) => Ok(()),
            _ => Err(Refused::Token),
        }
    }
}

/// Compares without stopping at the first difference, so response times do
/// not tell how much of a guess was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    // Only the router's own token passes; a missing, empty or wrong one is refused.
    #[test]
    fn the_token_must_match() {
        let c = Csrf::new(Some("s3cret".into()), vec![]);
        let h = headers(&[("host", "app.test")]);
        assert_eq!(c.check(&h, Some("s3cret")), Ok(()));
        assert_eq!(c.check(&h, None), Err(Refused::Token));
        assert_eq!(c.check(&h, Some("")), Err(Refused::Token));
        assert_eq!(c.check(&h, Some("s3creT")), Err(Refused::Token));
        assert_eq!(c.check(&h, Some("s3cret2")), Err(Refused::Token));
    }

    // A good token from another site is still refused, by either header.
    #[test]
    fn cross_site_posts_are_refused() {
        let c = Csrf::new(Some("t".into()), vec!["https://admin.test".into()]);
        let same = headers(&[("host", "app.test:8080"), ("origin", "http://app.test:8080")]);
        assert_eq!(c.check(&same, Some("t")), Ok(()));
        let fetch = headers(&[("host", "app.test"), ("sec-fetch-site", "cross-site")]);
        assert_eq!(c.check(&fetch, Some("t")), Err(Refused::FetchSite));
        let sibling = headers(&[("host", "app.test"), ("sec-fetch-site", "same-site")]);
        assert_eq!(c.check(&sibling, Some("t")), Err(Refused::FetchSite));
        let origin = headers(&[("host", "app.test"), ("origin", "https://evil.test")]);
        assert_eq!(c.check(&origin, Some("t")), Err(Refused::Origin));
        let null = headers(&[("host", "app.test"), ("origin", "null")]);
        assert_eq!(c.check(&null, Some("t")), Err(Refused::Origin));
        let allowed = headers(&[("host", "internal:80"), ("origin", "https://admin.test")]);
        assert_eq!(c.check(&allowed, Some("t")), Ok(()));
    }

    // Without a secret given, each router draws its own, long and unguessable.
    #[test]
    fn random_tokens_differ() {
        let (a, b) = (Csrf::new(None, vec![]), Csrf::new(None, vec![]));
        assert_ne!(a.token(), b.token());
        assert_eq!(a.token().len(), 64);
    }
}
